"""What keeps a run alive and honest: stop requests, the run lease, the stall
watchdog and its backstop, stragglers, injected faults.

Modules (lowest first):
  preemption: Stop requests: SIGTERM (preemption, maintenance, `docker stop`)
    and SIGINT
  lease_store: Where the run lease's record is kept and what it holds
    (ctl.resilience.lease).
  lease: One writer per run directory: the chief's lease on `model_dir`.
  worker_start: A script's worker start (`ctl.environment`): the
    environment, the peers, the run lease's watch, then the strategy.
  backstop: The stall watchdog's last resort: a small process that ends a
    frozen one.
  watchdog: Stall watchdog: a worker that is alive but stuck ends itself, and
    says where.
  stragglers: Straggler detection: which worker the others keep waiting for.
  faults: Fault injection for tests and benchmarks: one switch, nothing when
    off.
"""
