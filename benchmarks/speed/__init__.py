"""The sections that measure speed: training, the device, the input, workers.

Each section is an app `X` (its flags; `python -m benchmarks.speed.X`) and
its `X_lib` (its Config and `run`); run_all runs each in its own process.
Imports benchmarks.harness and benchmarks.workloads only (docs/design.md,
"Layers"). Its modules, lowest first:

  peak_lib: the device's dense matmul rate, the ceiling utilisation is read
    against.
  peak: its app (by hand; throughput measures the peak beside its rows).
  throughput_lib: training throughput, our engine against a bare step and
    Keras `model.fit`.
  throughput: its app (sections small_model, resnet50).
  input_pipeline_lib: images/s of the cassava preprocessing alone.
  input_pipeline: its app (section input_pipeline).
  input_scale_lib: what each worker reads, and what a resume costs.
  input_scale: its app (section input_scale).
  scaling_lib: the trainer on 1 vs 2 local workers, same per-replica batch.
  scaling: its app (section scaling).
"""
