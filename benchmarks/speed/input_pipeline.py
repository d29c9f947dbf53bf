"""App: images/s of the cassava preprocessing alone (see `input_pipeline_lib`).

  python -m benchmarks.speed.input_pipeline --num_jpegs=256 --image_size=300
  python -m benchmarks.speed.input_pipeline --model_images_per_second=4.2 \
      --model_label="ResNet50 engine (224x224)" --model_image_size=224
"""

from benchmarks.harness import cli
from benchmarks.speed import input_pipeline_lib

cli.define_flags(input_pipeline_lib.Config)

if __name__ == "__main__":
  cli.run_app(input_pipeline_lib.run, input_pipeline_lib.Config)
