"""The training loop itself: options, state, the step and compiled loops,
evaluation, the controller.

Modules (lowest first):
  options: What to train and how: the frozen options
    `ctl.train.controller.run` takes.
  state: What a run trains and checkpoints, built one way for every user of
    it.
  optimizers: Keras's Adam and SGD, each variable's update one fused kernel.
  loop: The training step and the compiled loops that run it.
  metrics_window: The training metrics between two log lines, and the log line
    itself.
  evaluation: Evaluation during a run: when, the eval loop, and where its
    metrics go.
  actions: Loop actions: the user's own duties after each train loop.
  evaluator: Side-car evaluation: an `evaluator` task follows the chief's
    checkpoints.
  parts: What a run is made of (outputs, state, loops, duties), built once
    at start-up.
  controller: The outer loop: bookkeeping between calls of the compiled train
    loop.
"""
