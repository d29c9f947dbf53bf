"""App: records read per worker and resume cost (see `input_scale_lib`).

python -m benchmarks.input_scale --num_records=50000
python -m benchmarks.input_scale --num_records=2000 --repeats=1   # quick
"""

from absl import flags

from benchmarks import cli
from benchmarks import input_scale_lib

flags.DEFINE_integer("num_records", 50_000, "Training JPEGs to generate.")
flags.DEFINE_integer("jpeg_size", 32, "Side of the generated JPEGs.")
flags.DEFINE_integer("image_size", 32, "Side the images are resized to.")
flags.DEFINE_integer("global_batch", 64, "Global batch size.")
flags.DEFINE_list("pipelines", ["1", "2", "4"], "Input pipeline counts N.")
flags.DEFINE_integer("decode_batches", 40, "Batches timed for decode speed.")
flags.DEFINE_integer(
  "entry_records", 4096, "Records read by each way into tf.data."
)
flags.DEFINE_string(
  "cache_dir",
  "",
  "Where the generated datasets are kept "
  "between runs (default: <tmp>/ctl_bench_cache).",
)


if __name__ == "__main__":
  cli.run_app(input_scale_lib.run, input_scale_lib.Config)
