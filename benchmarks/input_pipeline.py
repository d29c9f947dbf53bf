"""App: images/s of the cassava preprocessing alone (see `input_pipeline_lib`).

  python -m benchmarks.input_pipeline --num_jpegs=256 --image_size=300
  python -m benchmarks.input_pipeline --model_images_per_second=4.2 \
      --model_label="ResNet50 engine (224x224)" --model_image_size=224
"""

from absl import flags

from benchmarks import cli
from benchmarks import input_pipeline_lib

flags.DEFINE_integer("num_jpegs", 256, "JPEG files to generate.")
flags.DEFINE_integer("jpeg_width", 500, "Width of the generated JPEGs.")
flags.DEFINE_integer("jpeg_height", 400, "Height of the generated JPEGs.")
flags.DEFINE_integer(
  "image_size",
  300,
  "Side the images are resized to (the cassava trainer's input size).",
)
flags.DEFINE_integer("batch_size", 16, "Global batch size.")
flags.DEFINE_integer("batches", 40, "Batches timed per round.")
flags.DEFINE_float(
  "model_images_per_second",
  0.0,
  "What the model consumes, to compare with; 0 skips the comparison.",
)
flags.DEFINE_string("model_label", "the model", "Names that rate.")
flags.DEFINE_integer(
  "model_image_size",
  0,
  "Image side the model rate was "
  "measured at; when it differs from --image_size, a "
  "pixel-scaled estimate is noted.",
)


if __name__ == "__main__":
  cli.run_app(input_pipeline_lib.run, input_pipeline_lib.Config)
