"""The exceptions a run can end with, and the exit code each one maps to.

Entry points (`trainer/task.py`, `ctl.launch`, `ctl.vertex`) catch these and
exit with the code given here; a supervisor (Vertex AI, `ctl.launch`) reads
the code to decide whether to restart.
"""

# A mistake the user can fix: never worth a restart.
USER_ERROR_EXIT_CODE = 2
# 128 + SIGTERM, the conventional status of a process stopped by SIGTERM.
# ctl exits with it only after the checkpoint at the agreed step is written;
# a non-zero code tells the platform the job is not done.
PREEMPTED_EXIT_CODE = 143
# EX_TEMPFAIL: a stall (ctl.watchdog) or a peer that never came; not done,
# and worth a restart: the same command continues from the last checkpoint.
STALL_EXIT_CODE = 75


class UserError(Exception):
  """A mistake in flags, environment or files that the user can act on.

  The message is one sentence that says what is wrong and what to do. Entry
  points print it (no traceback) and exit with `USER_ERROR_EXIT_CODE`.
  """


class Preempted(Exception):
  """Training stopped on request after saving at the agreed step.

  Entry points exit with `PREEMPTED_EXIT_CODE`; the same command continues.
  """

  def __init__(self, step: int):
    super().__init__(f"Stopped on request after saving the checkpoint at "
                     f"step {step}; run the same command again to continue.")
    self.step = step


class TrainingDiverged(Exception):
  """The loss stayed non-finite after every allowed rollback."""


class Stalled(Exception):
  """Start-up gave up waiting (e.g. for a peer); exit with STALL_EXIT_CODE."""
