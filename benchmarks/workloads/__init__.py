"""What the sections run and measure: ways to train, models' costs, data.

Imports only benchmarks.harness (docs/design.md, "Layers"). Its modules,
lowest first:

  flops: floating-point operations of a Keras model, counted from its layers.
  variants: variant specs, how the throughput flags name a way to train.
  runners: the three ways to train (engine, bare step, model.fit) compared.
  save_cost: what a local-tier save costs the training around it.
  tfds_jpegs: a generated TFDS image dataset of small JPEGs, built offline.
  goodput_keras: the goodput section's Keras side, one `model.fit` attempt
    (an app that goodput_lib starts).
"""
