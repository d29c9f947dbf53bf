"""The exceptions a run can end with, and the exit code each one maps to.

Entry points (`trainer/task.py`, `ctl.launch`, `ctl.cloud.vertex`) catch these and
exit with the code given here; a supervisor (Vertex AI, `ctl.launch`) reads
the code to decide whether to restart. Also the argument parser of ctl's own
command lines, whose mistakes are reported the same way: one `error: ...`
line, exit 2.
"""

import argparse
import errno
import os
import re
import signal
import sys

# A mistake the user can fix: never worth a restart.
USER_ERROR_EXIT_CODE = 2
# 128 + SIGTERM, the conventional status of a process stopped by SIGTERM.
# ctl exits with it only after the checkpoint at the agreed step is written;
# a non-zero code tells the platform the job is not done. Ctrl-C (SIGINT)
# gives 130 the same way.
PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM
# EX_TEMPFAIL: a stall (ctl.resilience.watchdog) or a peer that never came; not done,
# and worth a restart: the same command continues from the last checkpoint.
STALL_EXIT_CODE = 75
# EX_IOERR: an output could not be written (disk full, write permission lost
# mid-run, the run's lease file vanished under it); what was saved before is
# intact, and the same command continues once the space, the permission or
# the lease is back.
CANNOT_WRITE_EXIT_CODE = 74
# EX_NOPERM: this trainer lost the run directory's lease (ctl.resilience.lease) to
# another trainer, which now owns it (paused past the lease's staleness, or
# taken over with --take_over_lease); it stopped without committing anything
# more. Not worth a restart: the other trainer goes on with the run.
LEASE_LOST_EXIT_CODE = 77
# What a failed write says when the storage, not the data, is at fault.
_WRITE_ERRNOS = (
  errno.ENOSPC,
  errno.EDQUOT,
  errno.EFBIG,
  errno.EACCES,
  errno.EPERM,
  errno.EROFS,
)


class UserError(Exception):
  """A mistake in flags, environment or files that the user can act on.

  The message is one sentence that says what is wrong and what to do. Entry
  points print it (no traceback) and exit with `USER_ERROR_EXIT_CODE`.
  """


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Keras's bold in its messages.
# A line that opens a raised error's text: "ValueError: ...".
_RAISED = re.compile(r"(?:[\w.]+\.)?\w*(?:Error|Exception): ")
# Keras's wrapper around a layer's error; the error is on the next line.
_KERAS_CALL = "Exception encountered when calling"


def error_sentence(error: BaseException) -> str:
  """What a one-sentence report quotes of an error from TensorFlow or the
  operating system (at most 300 characters), or its type's name when it has
  no message.

  TensorFlow puts frames in front of the error that names the op and the
  shapes: AutoGraph's "in user code:", the frames, then the raised error; a
  running graph's "Graph execution error:", the frames where the node was
  defined, then the error and `[[{{node NAME}}]]`; Keras's "Exception
  encountered when calling LAYER.call()." the layer's error next. The
  sentence is that error (with the node's name), never the line that opens
  the frames.
  """
  lines = [line.strip() for line in str(error).strip().splitlines()]
  lines = [_ANSI.sub("", line) for line in lines if line]
  if not lines:
    return type(error).__name__
  first = 0
  if lines[0] == "in user code:":  # The raised error's line, last of all.
    raised = [i for i, line in enumerate(lines) if _RAISED.match(line)]
    first = raised[-1] if raised else len(lines) - 1
    for prefix in ("ctl.errors.UserError: ", "UserError: "):
      lines[first] = lines[first].removeprefix(prefix)
  sentence = lines[first]
  if _KERAS_CALL in sentence and first + 1 < len(lines):
    sentence = lines[first + 1]  # The layer's own error comes next.
  elif sentence == "Graph execution error:":
    nodes = [i for i, line in enumerate(lines) if line.startswith("[[{{node ")]
    sentence = lines[nodes[0] - 1] if nodes else lines[-1]
    if nodes:
      node = lines[nodes[0]].removeprefix("[[{{node ").split("}}", 1)[0]
      sentence = f"{sentence} (node {node})"
  return sentence[:300]


def cannot_write(url: str, error: Exception) -> UserError:
  """The one sentence for a Cloud Storage directory this job cannot write.

  Args:
    url: the directory the user named (e.g. --model_dir).
    error: what the storage client raised (named in the sentence).
  """
  reason = " ".join(f"{type(error).__name__}: {error}".split())
  return UserError(
    f"Cannot write to {url} ({reason}); check that the bucket exists and "
    "that this job may write to it."
  )


class CannotWrite(Exception):
  """An output could not be written; exit with CANNOT_WRITE_EXIT_CODE."""


def write_failure(what: str, path: str, error: Exception) -> CannotWrite | None:
  """The one sentence for a write the storage refused, or None.

  Args:
    what: what was being written ("the checkpoint of step 40").
    path: the directory it was written to.
    error: what the write raised: an OSError, or a TensorFlow error whose
      message names the operating system's reason.

  Returns:
    A CannotWrite saying where, what and why, and that what was saved before
    is intact; None when `error` is not one of a full disk, a quota, a file
    size limit or a missing permission (so the caller re-raises it).
  """
  reason = refused_write(error)
  if reason is None:
    return None
  return CannotWrite(
    f"Cannot write {what} in {path}: {reason}; "
    "the checkpoints saved before are intact: free space or restore "
    "write permission, then run the same command to continue."
  )


def refused_write(error: Exception) -> str | None:
  """Why the storage refused a write ("no space left on device"), or None.

  Args:
    error: what the write raised: an OSError, or a TensorFlow error whose
      message names the operating system's reason.

  Returns:
    The reason, for a full disk, a quota, a file size limit or a missing
    permission; None for any other error.
  """
  text = str(getattr(error, "message", error))
  code = getattr(error, "errno", None)
  for known in _WRITE_ERRNOS:
    if code == known or os.strerror(known) in text:
      return os.strerror(known).lower()
  return None


class LeaseLost(Exception):
  """This trainer no longer holds the lease; exit with `exit_code`.

  Raised at a commit point (ctl.io.fencing) before anything is written, so
  nothing the new holder wrote is touched. `exit_code` is
  LEASE_LOST_EXIT_CODE: another trainer took the lease over.
  """

  exit_code = LEASE_LOST_EXIT_CODE


class LeaseVanished(LeaseLost):
  """The lease record vanished, and no other trainer was seen taking it.

  The lease file was deleted (by hand, or released by a trainer that took it
  over unseen and has since ended), or the run directory itself was moved
  or deleted. Like a lost lease, nothing more is written; unlike it, no
  other trainer is known to own the run, so the exit code says what a
  restart does: CANNOT_WRITE_EXIT_CODE when the run directory is there (a
  restart takes the lease again and continues from the last checkpoint),
  USER_ERROR_EXIT_CODE when it is gone (a restart would start over from
  step 0 in a new, empty directory: the user decides where the run is).
  """

  def __init__(self, message: str, *, directory_gone: bool):
    super().__init__(message)
    self.exit_code = (
      USER_ERROR_EXIT_CODE if directory_gone else CANNOT_WRITE_EXIT_CODE
    )


class Preempted(Exception):
  """Training stopped on request after saving at the agreed step.

  Entry points exit with `exit_code` (128 + the signal: `PREEMPTED_EXIT_CODE`
  for SIGTERM, 130 for SIGINT); the same command continues.
  """

  def __init__(self, step: int, signum: int | None = None):
    """Records where training stopped and why.

    Args:
      step: the step of the checkpoint written before stopping.
      signum: the signal this process got; None when another worker asked
        (reported as SIGTERM).
    """
    super().__init__(
      f"Stopped on request after saving the checkpoint at "
      f"step {step}; run the same command again to continue."
    )
    self.step = step
    self.exit_code = 128 + (signum or signal.SIGTERM)


class TrainingDiverged(Exception):
  """The loss stayed non-finite after every allowed rollback."""


class Stalled(Exception):
  """Start-up gave up waiting (e.g. for a peer); exit with STALL_EXIT_CODE."""


class PeerLost(Exception):
  """A peer's node was lost or cut off mid-run (ctl.distributed.peer_loss):
  the message names it; exit with `exit_code`, worth a restart once the
  node is back or replaced."""

  exit_code = STALL_EXIT_CODE


def exit_code(error: BaseException) -> int | None:
  """The exit status an entry point ends with when `ctl.run` raised
  `error`, one of the exceptions above; None for any other (a bug: let its
  traceback show).

  The trainer and a user's script share it, so a script under `ctl-launch`
  ends as the trainer does: 77 for a lost lease, which an agent never
  restarts (exit 1 would be restarted), 75 for a lost peer or a start-up
  that gave up, 2 for a mistake to fix.
  """
  if isinstance(error, UserError):
    return USER_ERROR_EXIT_CODE
  if isinstance(error, (LeaseLost, Preempted, PeerLost)):
    return error.exit_code
  if isinstance(error, Stalled):
    return STALL_EXIT_CODE
  if isinstance(error, CannotWrite):
    return CANNOT_WRITE_EXIT_CODE
  if isinstance(error, TrainingDiverged):
    return 1
  return None


class ArgumentParser(argparse.ArgumentParser):
  """argparse, with a bad command line reported as one line (no usage).

  It takes absl's `--helpfull` as `--help` (all flags, exit 0), so the five
  console scripts answer the same help flags.
  """

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.add_argument(
      "--helpfull", action="help", help="the same as --help, as in ctl-train"
    )

  def error(self, message):
    print(f"error: {message}; see {self.prog} --help.", file=sys.stderr)
    sys.exit(USER_ERROR_EXIT_CODE)
