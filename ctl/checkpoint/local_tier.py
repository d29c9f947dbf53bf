"""The local checkpoint tier: each worker's newest saves on its own node.

Every worker takes part in every save (a save may read mirrored or
sync-on-read variables collectively), and under MultiWorkerMirroredStrategy
each worker's save is a whole copy of the checkpoint. The local tier keeps
those saves instead of throwing them away: a node-local directory (a RAM
disk such as /dev/shm when it has room for two checkpoints, else local
disk), private to the run, where each worker keeps its newest `keep` saves.
Local saves are cheap and frequent; the bucket (the checkpoint directory)
gets a copy of a committed local checkpoint at its own, slower cadence
(`copy_to_bucket`), so a restart usually restores from the node it runs on,
or from a peer that has the step (ctl.checkpoint.tier_restore).

Layout: `<root>/ctl-tier-<uid>/<run>/worker-<rank>/` holds `ckpt-<step>.*`
(the files `tf.train.Checkpoint.write` makes) and `tier_state.json`, the
commit point: it lists the committed steps and the size of each of their
files. A step is complete when its every file is there at its committed
size, so a checkpoint cut short after its commit (a full disk, a node that
lost power) is skipped, and one cut short before it was never listed.
Beside them, `run_id` says which run the tier belongs to (`LocalTier.bind`)
and `owner.json` which processes it lives for (`remove_stale`).

A node agent that outlives its worker learns where the worker keeps its
tier from a small pointer file (`write_pointer`), to serve it to peers and
to persist its newest step to the bucket when the worker dies.
"""

import contextlib
import dataclasses
import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from typing import TYPE_CHECKING

from absl import logging

from ctl import env
from ctl.io import fencing
from ctl.io import tempdirs
from ctl.resilience import lease

if TYPE_CHECKING:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

STATE_FILE = "tier_state.json"
RUN_FILE = "run_id"  # The id of the run the tier belongs to (`bind`).
OWNER_FILE = "owner.json"  # The processes the tier lives for (`remove_stale`).
# A tier with no owner recorded is removed once untouched for this long.
_UNOWNED_SECS = 24 * 3600
RAM_ROOT = "/dev/shm"
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


def run_name(*, job_id: str, checkpoint_dir: str) -> str:
  """The run-private directory name: the job and its checkpoint directory.

  A job id stays the same over every restart of a job (ctl.launch, Vertex
  AI), so a restarted worker finds its tier; without one the name carries
  this process's pid, so nothing is found again and the next start removes
  the directory of a process that is gone (`remove_stale`); "auto" then
  makes no tier (`setting_for_job`).
  """
  digest = hashlib.sha256(checkpoint_dir.encode()).hexdigest()[:12]
  owner = re.sub(r"[^A-Za-z0-9_.-]", "_", job_id)[:64] if job_id else None
  return f"{owner or f'pid{os.getpid()}'}-{digest}"


def setting_for_job(setting: str, *, job_id: str) -> str:
  """The `--local_checkpoints` setting a run uses: "auto" is "off" without
  a job id, with one line saying why.

  Without a job id the tier is named after this process (`run_name`): no
  restart finds it again and the next start removes it, so its saves would
  cost every loop for nothing. An explicit setting still makes one.
  """
  if setting != "auto" or job_id:
    return setting
  logging.info(
    "No local checkpoint tier: no job id to find it again after a restart "
    "(run under ctl.launch or a platform that sets a job id, or choose "
    "where it lives: ram, disk or a directory); checkpoints go to the "
    "bucket only."
  )
  return "off"


def choose_root(setting: str, *, need_bytes: int) -> str | None:
  """The directory the tier lives in for `--local_checkpoints=setting`.

  Args:
    setting: "auto" (RAM disk when it has room for two checkpoints, else
      local disk), "ram", "disk", "off", or a directory.
    need_bytes: the size of one checkpoint.

  Returns:
    `<root>/ctl-tier-<uid>`, made private to this user; None for "off".
  """
  if setting == "off":
    return None
  if setting == "auto":
    room = _free_bytes(RAM_ROOT) >= 2 * need_bytes + (64 << 20)
    if not room and os.path.isdir(RAM_ROOT):
      logging.warning(
        "%s has no room for two checkpoints of %.0f MB: the local "
        "checkpoint tier is on local disk (%s).",
        RAM_ROOT,
        need_bytes / 1e6,
        tempfile.gettempdir(),
      )
    setting = "ram" if room else "disk"
  root = {"ram": RAM_ROOT, "disk": tempfile.gettempdir()}.get(setting, setting)
  path = os.path.join(root, f"ctl-tier-{os.getuid()}")
  os.makedirs(path, mode=0o700, exist_ok=True)
  return path


def _free_bytes(path: str) -> int:
  try:
    status = os.statvfs(path)
  except OSError:
    return 0
  return status.f_bavail * status.f_frsize


def remove_stale(root: str, *, keep: str = "") -> None:
  """Removes the tiers under `root` whose run is gone, but run `keep`'s.

  A tier outlives its worker on purpose (a restart of the job finds it), so
  nothing removes it when its job ends badly (Ctrl-C on ctl-launch, a job
  given up) and its RAM stays taken; the next start on the node removes it
  here. A job-less run's tier is gone with its process (`run_name`); a job's
  with the processes its workers named as owners (`OWNER_FILE`: the worker
  and the launcher or node agent that restarts it), and one without owners
  (made before they were named) once untouched for `_UNOWNED_SECS`.
  """
  for name in os.listdir(root):
    path = os.path.join(root, name)
    match = re.fullmatch(r"pid(\d+)-[0-9a-f]+", name)
    if match:
      gone = not tempdirs.pid_alive(int(match.group(1)))
    else:
      gone = name != keep and _owners_gone(path)
    if gone:
      shutil.rmtree(path, ignore_errors=True)


def _owners_gone(run: str) -> bool:
  """Whether no owner of the run directory `run`'s tiers is alive."""
  owners = []
  for owner in glob.glob(os.path.join(run, "worker-*", OWNER_FILE)):
    with contextlib.suppress(OSError, ValueError):
      with open(owner) as f:
        owners += [int(pid) for pid in json.load(f)["pids"]]
  if owners:
    return not any(tempdirs.pid_alive(pid) for pid in owners)
  with contextlib.suppress(OSError):
    return time.time() - os.stat(run).st_mtime > _UNOWNED_SECS
  return False


def _claim(tier: "LocalTier") -> None:
  """Names this worker and its parent (the launcher or node agent that
  restarts it, or the container's entry) as the tier's owners."""
  pids = [pid for pid in (os.getpid(), os.getppid()) if pid > 1]
  _write_whole(
    os.path.join(tier.directory, OWNER_FILE), json.dumps({"pids": pids})
  )


@dataclasses.dataclass(frozen=True)
class Entry:
  """One committed step: its number and {file name: size in bytes}."""

  step: int
  files: dict[str, int]


class LocalTier:
  """One worker's local checkpoints, committed by `tier_state.json`."""

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
    _write_whole(path, str(run))

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
      if _step_of(name) == step
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
      step = _step_of(name)
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

  def remove(self) -> None:
    """Removes the tier (the run has ended), and the run's directory
    (`<root>/<run>`) once no worker's is left in it."""
    shutil.rmtree(self.directory, ignore_errors=True)
    if re.fullmatch(r"worker-\d+", os.path.basename(self.directory)):
      try:
        os.rmdir(os.path.dirname(self.directory))
      except OSError:  # Another worker's tier is still there, or it is gone.
        pass


def _step_of(name: str) -> int | None:
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


def newest_in_bucket(bucket_dir: str) -> int | None:
  """The step of the newest checkpoint the bucket's state file names."""
  from ctl.checkpoint import checkpointing  # pylint: disable=g-import-not-at-top

  candidates, _ = checkpointing._candidates(bucket_dir)  # pylint: disable=protected-access
  steps = [_step_of(os.path.basename(p) + ".index") for p in candidates]
  steps = [s for s in steps if s is not None]
  return max(steps) if steps else None


def copy_to_bucket(
  source: str,
  *,
  step: int,
  bucket_dir: str,
  keep: int,
  fence: fencing.Fence = fencing.OPEN,
):
  """Copies the checkpoint of `step` from directory `source` into the
  bucket, its state file last, and keeps the newest `keep` there.

  Each file is written under a temporary name and renamed, so a reader (or
  a second agent persisting the same step) never sees half a file; the
  state file names the step only once all its files are in place, through
  the one fenced commit (`checkpointing.commit_state`).

  Args:
    source: the directory holding the step's files (a tier's snapshot).
    step: the step.
    bucket_dir: the checkpoint directory.
    keep: how many checkpoints the bucket keeps.
    fence: checked before the files and at the commit: the chief's lease,
      or the node agent's job (`lease.job_fence`).

  Returns:
    The checkpoint's prefix in the bucket.

  Raises:
    LeaseLost: the fence failed; the state file was not written.
  """
  # TensorFlow (gfile reaches gs:// too) loads here, not on import: a node
  # agent imports this module and needs it only to persist a step.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from ctl.checkpoint import checkpointing  # pylint: disable=g-import-not-at-top

  fence.check(f"the checkpoint of step {step} in {bucket_dir}")
  tf.io.gfile.makedirs(bucket_dir)
  names = sorted(n for n in os.listdir(source) if _step_of(n) == step)
  for name in sorted(names, key=lambda n: n.endswith(".index")):
    target = os.path.join(bucket_dir, name)
    temporary = f"{target}.tmp-{os.getpid()}"
    tf.io.gfile.copy(os.path.join(source, name), temporary, overwrite=True)
    tf.io.gfile.rename(temporary, target, overwrite=True)
  prefix = os.path.join(bucket_dir, f"ckpt-{step}")

  def with_step(listed: list[str]) -> list[str]:
    """The newest `keep` of the listed steps and `step`, by step."""
    by_step = {_step_of(os.path.basename(p) + ".index"): p for p in listed}
    by_step[step] = prefix
    return [by_step[s] for s in sorted(s for s in by_step if s is not None)][
      -keep:
    ]

  for dropped in checkpointing.commit_state(bucket_dir, with_step, fence=fence):
    if _step_of(os.path.basename(dropped) + ".index") is not None:
      for path in tf.io.gfile.glob(dropped + ".*"):
        tf.io.gfile.remove(path)
  return prefix


def write_pointer(path: str, **fields) -> None:
  """Tells the node agent (file `path`) where this worker's tier is:
  `directory`, `bucket_dir` and `keep`."""
  _write_whole(path, json.dumps(fields))


def _write_whole(path: str, text: str) -> None:
  """Writes `text` to `path` under a temporary name, then renames it, so a
  reader finds the old text or the new, never half of it."""
  temporary = f"{path}.tmp"
  with open(temporary, "w") as f:
    f.write(text)
  os.replace(temporary, path)


def read_pointer(path: str) -> dict | None:
  """What `write_pointer` wrote at `path`; None before the worker wrote."""
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def persist_newest(pointer: dict) -> int | None:
  """Copies the tier's newest complete step to the bucket when it is newer
  than the bucket's newest (a node agent, after its worker died).

  Returns:
    The step copied, or None when the bucket was as new.
  """
  tier = LocalTier(pointer["directory"])
  fence = (
    lease.job_fence(**pointer["lease"]) if "lease" in pointer else fencing.OPEN
  )
  steps = tier.steps()
  in_bucket = newest_in_bucket(pointer["bucket_dir"])
  if not steps or (in_bucket is not None and in_bucket >= steps[-1]):
    return None
  snapshot = tier.snapshot(steps[-1])
  try:
    copy_to_bucket(
      snapshot,
      step=steps[-1],
      bucket_dir=pointer["bucket_dir"],
      keep=pointer["keep"],
      fence=fence,
    )
  finally:
    shutil.rmtree(snapshot, ignore_errors=True)
  return steps[-1]


def open_tier(
  setting: str,
  *,
  job_id: str,
  checkpoint_dir: str,
  rank: int,
  need_bytes: int,
  keep_in_bucket: int,
  lease_place: dict | None = None,
  environ=os.environ,
) -> LocalTier | None:
  """This worker's tier for `--local_checkpoints=setting`, or None.

  Tells a node agent where it is (`env.TIER_POINTER`). A tier that cannot be
  made is None, with one warning line: the run uses the bucket alone.

  Args:
    setting: see `choose_root`.
    job_id: the job's id ("" for none: see `run_name`).
    checkpoint_dir: the bucket's checkpoint directory, as the user gave it.
    rank: this worker's rank (its directory in the run's).
    need_bytes: the size of one checkpoint.
    keep_in_bucket: how many checkpoints the bucket keeps (for an agent
      that persists a step).
    lease_place: the run directory's lease as `lease.job_fence` takes it
      (`model_dir`, `job`, `storage_route`, `fuse_root`): an agent persists
      a step only while this job holds the run directory; None: unfenced.
    environ: where `env.TIER_POINTER` is read.
  """
  try:
    root = choose_root(setting, need_bytes=need_bytes)
    if root is None:
      return None
    name = run_name(job_id=job_id, checkpoint_dir=checkpoint_dir)
    remove_stale(root, keep=name)
    tier = LocalTier(os.path.join(root, name, f"worker-{rank}"))
    _claim(tier)
    # Snapshots a killed copy left (hard links: they hold the space).
    shutil.rmtree(os.path.join(tier.directory, _UPLOADS), ignore_errors=True)
  except OSError as e:
    logging.warning(
      "No local checkpoint tier (%s); checkpoints go to the bucket only.", e
    )
    return None
  if environ.get(env.TIER_POINTER):
    write_pointer(
      environ[env.TIER_POINTER],
      directory=tier.directory,
      bucket_dir=checkpoint_dir,
      keep=keep_in_bucket,
      **({"lease": lease_place} if lease_place else {}),
    )
  return tier


def service_port(environ=os.environ) -> int:
  """The port of this node's tier service (`env.TIER_PORT`); 0 without one."""
  text = environ.get(env.TIER_PORT, "")
  return int(text) if text.isdigit() else 0
