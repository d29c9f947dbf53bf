"""The training loop itself: options, state, the step and compiled loops,
evaluation, the controller.

Modules (lowest first):
  optimizers: Keras's Adam and SGD, each variable's update one fused kernel.
  step: The user's step: how a batch becomes per-example losses and metric
    inputs.
  metric_set: A task's metrics by name, summed correctly over replicas and
    workers.
  options: What to train and how: the frozen options
    `ctl.train.controller.run` takes.
  state: What a run trains and checkpoints, built one way for every user of
    it.
  loop: The compiled loops that run the task's step.
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
