"""What a run observes and records: progress, TensorBoard summaries, the run
ledger and goodput, profiles, tuning metrics.

Modules (lowest first):
  progress: Where a run is: the phase it is in and the step it has reached.
  summaries: TensorBoard summaries, written by the chief only, one run dir per
    role.
  ledger_reader: Reads the run ledger back: every attempt's events, each
    line checked.
  goodput_model: Expected goodput under periodic faults: what a fault and a
    save cost.
  goodput: Goodput: where a job's wall time went, from its run ledger
    (ctl.telemetry.ledger).
  restart_phases: Where each start's seconds went on its way to its first
    step.
  spot_cost: What Spot VMs are worth for one run: goodput and cost per useful
    hour.
  ledger: The run ledger: what each start of a job did and when, across
    restarts.
  profiler: A TensorFlow profiler trace of a range of training steps.
  hypertune: Reports the tuning metric to Vertex AI hyperparameter tuning.
"""
