"""The local checkpoint tier: each worker's newest saves on its own node.

Every worker takes part in every save (a save may read mirrored or
sync-on-read variables collectively), and under MultiWorkerMirroredStrategy
each worker's save is a whole copy of the checkpoint. The local tier keeps
those saves instead of throwing them away: a node-local directory (a RAM
disk when it has room, else local disk: ctl.checkpoint.tiers.node_tiers),
private to the run, where each worker keeps its newest `keep` saves. Local
saves are cheap and frequent; the bucket gets a copy of a committed local
checkpoint at its own, slower cadence (ctl.checkpoint.tiers.bucket_tier),
so a restart usually restores from the node it runs on, or from a peer
that has the step (ctl.checkpoint.tiers.peer_tier).

A worker's directory holds `ckpt-<step>.*` (the files
`tf.train.Checkpoint.write` makes) and `tier_state.json`, the commit point:
it lists the committed steps and the size of each of their files. A step is
complete when its every file is there at its committed size, so a
checkpoint cut short after its commit (a full disk, a node that lost power)
is skipped, and one cut short before it was never listed. Beside them,
`run_id` says which run the tier belongs to (`LocalTier.bind`).
"""

import dataclasses
import json
import os
import re
import shutil
import tempfile
from typing import TYPE_CHECKING

from absl import logging

if TYPE_CHECKING:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

STATE_FILE = "tier_state.json"
RUN_FILE = "run_id"  # The id of the run the tier belongs to (`bind`).
_STEP_FILE = re.compile(r"ckpt-(?P<step>\d+)\.(index|data-\d+-of-\d+)")
_UPLOADS = ".uploads"  # Hard-linked snapshots being copied to the bucket.


def _count_save(checkpoint, options) -> None:
  """Counts a save as `Checkpoint.save` does (a `write` does not), so a
  tier checkpoint's `save_counter` is its saves, as a bucket save's is.

  An asynchronous write goes through TensorFlow's helper, whose own
  `Checkpoint` (built from the constructor's keyword arguments,
  ctl.checkpoint.checkpointing) holds the count it writes: it is set too.
  """
  checkpoint.save_counter.assign_add(1, read_value=False)
  if options is not None and options.experimental_enable_async_checkpoint:
    helper = checkpoint._async_checkpointer()  # pylint: disable=protected-access
    helper.checkpointer().save_counter.assign(checkpoint.save_counter)


@dataclasses.dataclass(frozen=True)
class Entry:
  """One committed step: its number and {file name: size in bytes}."""

  step: int
  files: dict[str, int]


class LocalTier:
  """One worker's local checkpoints, committed by `tier_state.json`.

  A tier as ctl.checkpoint.tiers.tier_restore asks every tier: `name`, the
  complete `steps()` it holds and `get(step)`, the prefix to restore.
  """

  name = "local"

  def __init__(self, directory: str, *, keep: int = 2):
    """Initializes the tier (the directory is made if missing).

    Args:
      directory: this worker's private directory.
      keep: how many committed steps to keep (the newest).
    """
    self.directory = directory
    self._keep = keep
    os.makedirs(directory, mode=0o700, exist_ok=True)

  def bind(self, run: int) -> None:
    """Makes this the tier of run `run` (the id its run directory keeps).

    A job id names a tier, and a user may delete a run directory and start
    the same job again: the tier then holds another run's steps, which a
    restore would resume into the new directory. A tier of another run, or
    of no recorded run, is emptied with one line instead.
    """
    path = os.path.join(self.directory, RUN_FILE)
    try:
      with open(path) as f:
        found = f.read().strip()
    except FileNotFoundError:
      found = None
    if found == str(run):
      return
    if found is not None or self.entries():
      logging.warning(
        "The local checkpoint tier %s belongs to another run (run id %s, "
        "not the run directory's %d: the directory was made again); its "
        "checkpoints are removed, not restored.",
        self.directory,
        found,
        run,
      )
      self._commit([])  # No step listed: every checkpoint file removed.
    write_whole(path, str(run))

  def prefix(self, step: int) -> str:
    """The checkpoint prefix of `step` (for a restore)."""
    return os.path.join(self.directory, f"ckpt-{step}")

  def entries(self) -> list[Entry]:
    """The committed steps, oldest first; [] with no or a damaged state."""
    try:
      with open(os.path.join(self.directory, STATE_FILE)) as f:
        listed = json.load(f)["steps"]
      return [Entry(int(e["step"]), dict(e["files"])) for e in listed]
    except FileNotFoundError:
      return []
    except (OSError, ValueError, KeyError, TypeError) as e:
      logging.warning(
        "The local checkpoint state in %s is unreadable (%s); its "
        "checkpoints are not used.",
        self.directory,
        type(e).__name__,
      )
      return []

  def steps(self) -> list[int]:
    """The complete committed steps, oldest first (cut-short ones skipped)."""
    return [e.step for e in self.entries() if self._complete(e)]

  def get(self, step: int) -> str | None:
    """The prefix of complete `step` to restore; None when not held."""
    return self.prefix(step) if step in self.steps() else None

  def _complete(self, entry: Entry) -> bool:
    for name, size in entry.files.items():
      path = os.path.join(self.directory, name)
      try:  # Not exists-then-getsize: the worker may remove it between.
        found = os.path.getsize(path)
      except FileNotFoundError:
        found = None
      if found != size:
        logging.warning(
          "The local checkpoint of step %d in %s is cut short (%s: %s of "
          "%d bytes); it is skipped.",
          entry.step,
          self.directory,
          name,
          "missing" if found is None else found,
          size,
        )
        return False
    return bool(entry.files)

  def save(self, checkpoint: "tf.train.Checkpoint", step: int) -> str:
    """Writes `checkpoint` as `step` and commits it; returns its prefix."""
    self.write(checkpoint, step)
    self.adopt(step)
    return self.prefix(step)

  def write(
    self,
    checkpoint: "tf.train.Checkpoint",
    step: int,
    *,
    options: "tf.train.CheckpointOptions | None" = None,
  ) -> str:
    """Writes the files of `step` without committing them; its prefix.

    `adopt(step)` commits them once they are written: at once, or, for an
    asynchronous write (`options`), after `checkpoint.sync()`. A committed
    step of the same number (a rollback saves it again) is taken out of the
    state before its files are overwritten.
    """
    kept = [e for e in self.entries() if e.step != step]
    if len(kept) != len(self.entries()):
      self._commit(kept)
    _count_save(checkpoint, options)
    checkpoint.write(self.prefix(step), options=options)
    return self.prefix(step)

  def adopt(self, step: int) -> None:
    """Commits the files of `step` already in the directory, and keeps
    only the newest `keep` steps (the others' files are removed)."""
    files = {
      name: os.path.getsize(os.path.join(self.directory, name))
      for name in os.listdir(self.directory)
      if step_of(name) == step
    }
    entries = [e for e in self.entries() if e.step != step]
    entries = sorted([*entries, Entry(step, files)], key=lambda e: e.step)
    self._commit(entries[-self._keep :])

  def _commit(self, entries: list[Entry]) -> None:
    """Writes the state file (the commit point), then removes the files
    of every step it no longer lists."""
    state = {"steps": [dataclasses.asdict(e) for e in entries]}
    temporary = os.path.join(self.directory, f".{STATE_FILE}.tmp")
    with open(temporary, "w") as f:
      json.dump(state, f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(temporary, os.path.join(self.directory, STATE_FILE))
    listed = {e.step for e in entries}
    for name in os.listdir(self.directory):
      step = step_of(name)
      stray = name.startswith("ckpt-") and name.endswith("_temp")
      if (step is not None and step not in listed) or stray:
        _remove(os.path.join(self.directory, name))

  def snapshot(self, step: int) -> str:
    """Hard-links the files of committed `step` into a new directory, so a
    copy can read them while newer saves replace the step; returns it."""
    (entry,) = [e for e in self.entries() if e.step == step]
    uploads = os.path.join(self.directory, _UPLOADS)
    os.makedirs(uploads, exist_ok=True)
    target = tempfile.mkdtemp(prefix=f"ckpt-{step}-", dir=uploads)
    for name in entry.files:
      os.link(os.path.join(self.directory, name), os.path.join(target, name))
    return target

  def remove_snapshots(self) -> None:
    """Removes the snapshots a killed copy left (hard links hold space)."""
    shutil.rmtree(os.path.join(self.directory, _UPLOADS), ignore_errors=True)

  def remove(self) -> None:
    """Removes the tier (the run has ended), and the run's directory
    (`<root>/<run>`) once no worker's is left in it."""
    shutil.rmtree(self.directory, ignore_errors=True)
    if re.fullmatch(r"worker-\d+", os.path.basename(self.directory)):
      try:
        os.rmdir(os.path.dirname(self.directory))
      except OSError:  # Another worker's tier is still there, or it is gone.
        pass


def step_of(name: str) -> int | None:
  """The step of checkpoint file `name` (`ckpt-<step>.index` or a data
  shard); None for any other name."""
  match = _STEP_FILE.fullmatch(name)
  return int(match.group("step")) if match else None


def _remove(path: str) -> None:
  if os.path.isdir(path):
    shutil.rmtree(path, ignore_errors=True)
  else:
    try:
      os.remove(path)
    except FileNotFoundError:
      pass


def write_whole(path: str, text: str) -> None:
  """Writes `text` to `path` under a temporary name, then renames it, so a
  reader finds the old text or the new, never half of it."""
  temporary = f"{path}.tmp"
  with open(temporary, "w") as f:
    f.write(text)
  os.replace(temporary, path)
