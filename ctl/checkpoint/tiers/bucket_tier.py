"""The bucket tier: the checkpoint directory behind every node's local tier.

The bucket gets a committed local checkpoint at its own, slower cadence:
the chief's copy thread (ctl.checkpoint.tiers.checkpoint_tiers) and, when a
worker dies, its node agent (`persist_newest`, ctl.checkpoint.tiers.peer_tier)
copy a step's files in, then name the step in the bucket's state file
through the one fenced commit (`checkpointing.commit_state`). The bucket
also keeps the run's id (`run_id`), which binds each local tier to its run.
"""

import contextlib
import os
import posixpath
import secrets
import shutil

from ctl.checkpoint.tiers import local_tier
from ctl.io import fencing
from ctl.io import mirror
from ctl.io import storage
from ctl.platform import vertex_ai
from ctl.resilience import lease


class BucketUnreachable(OSError):
  """The bucket did not answer a node agent within `storage.ANSWER_SECS`."""


class BucketTier:
  """The bucket as ctl.checkpoint.tiers.tier_restore asks a tier: the
  steps it holds (its newest, as every worker found it) and `get`."""

  name = "bucket"

  def __init__(self, directory: str, steps: list[int]):
    self._directory = directory
    self._steps = steps

  def steps(self) -> list[int]:
    return self._steps

  def get(self, step: int) -> str | None:
    """The prefix of `step` in the bucket; None when it does not hold it."""
    held = step in self._steps
    return os.path.join(self._directory, f"ckpt-{step}") if held else None


class _Route:
  """How this process reaches the bucket (`storage.read_route`): through
  TensorFlow's filesystem (a local or FUSE directory, gs:// on the tf
  route: what a trainer's checkpoint directory always is) or through gcsfs
  (gs:// on the gcsfs route: a node agent given the user's url), where the
  state file's commit is conditioned on its object generation."""

  def __init__(self, bucket_dir: str, *, storage_route: str, fuse_root: str):
    self.root, self.fs = storage.read_route(
      bucket_dir, storage=storage_route, fuse_root=fuse_root
    )

  def listed(self) -> list[str]:
    """The checkpoint prefixes the state file lists, the latest last."""
    from ctl.checkpoint import checkpointing  # pylint: disable=g-import-not-at-top

    return checkpointing.listed(self.root, self.fs)

  def put(self, source: str, name: str) -> None:
    """Copies local file `source` in as `name`, never seen half written:
    an object appears whole; a file is written under a temporary name and
    renamed (a second agent persisting the same step may read it)."""
    target = posixpath.join(self.root, name)
    if self.fs is not None:
      self.fs.put_file(source, target)
      return
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    tf.io.gfile.makedirs(self.root)
    temporary = f"{target}.tmp-{os.getpid()}"
    tf.io.gfile.copy(source, temporary, overwrite=True)
    tf.io.gfile.rename(temporary, target, overwrite=True)

  def remove(self, prefix: str) -> None:
    """Removes the files of the checkpoint at `prefix`."""
    if self.fs is not None:
      for path in self.fs.glob(prefix + ".*"):
        self.fs.rm_file(path)
      return
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    for path in tf.io.gfile.glob(prefix + ".*"):
      tf.io.gfile.remove(path)


def _step(prefix: str) -> int | None:
  return local_tier.step_of(posixpath.basename(prefix) + ".index")


def newest_in_bucket(
  bucket_dir: str,
  *,
  storage_route: str = "tf",
  fuse_root: str = vertex_ai.FUSE_ROOT,
) -> int | None:
  """The step of the newest checkpoint the bucket's state file names.

  Args:
    bucket_dir: the checkpoint directory.
    storage_route, fuse_root: how to reach it (ctl.io.storage); "tf": as
      TensorFlow does (a trainer's checkpoint directory).
  """
  steps = [
    _step(p)
    for p in _Route(
      bucket_dir, storage_route=storage_route, fuse_root=fuse_root
    ).listed()
  ]
  steps = [s for s in steps if s is not None]
  return max(steps) if steps else None


def copy_to_bucket(
  source: str,
  *,
  step: int,
  bucket_dir: str,
  keep: int,
  fence: fencing.Fence = fencing.OPEN,
  storage_route: str = "tf",
  fuse_root: str = vertex_ai.FUSE_ROOT,
) -> str:
  """Copies the checkpoint of `step` from directory `source` into the
  bucket, its state file last, and keeps the newest `keep` there.

  The state file names the step only once all its files are in place,
  through the one fenced commit (`checkpointing.commit_state`), which on
  gcsfs is conditioned on the state object's generation and merges by step
  with whatever another writer committed meanwhile.

  Args:
    source: the directory holding the step's files (a tier's snapshot).
    step: the step.
    bucket_dir: the checkpoint directory.
    keep: how many checkpoints the bucket keeps.
    fence: checked before the files and at the commit: the chief's lease,
      or the node agent's job (`lease.job_fence`).
    storage_route, fuse_root: how to reach the bucket (`newest_in_bucket`).

  Returns:
    The checkpoint's prefix in the bucket.

  Raises:
    LeaseLost: the fence failed; the state file was not written.
  """
  # TensorFlow loads here, not on import: a node agent imports this module
  # and needs it only to persist a step.
  from ctl.checkpoint import checkpointing  # pylint: disable=g-import-not-at-top

  fence.check(f"the checkpoint of step {step} in {bucket_dir}")
  route = _Route(bucket_dir, storage_route=storage_route, fuse_root=fuse_root)
  names = [n for n in os.listdir(source) if local_tier.step_of(n) == step]
  for name in sorted(names, key=lambda n: (n.endswith(".index"), n)):
    route.put(os.path.join(source, name), name)
  prefix = posixpath.join(route.root, f"ckpt-{step}")

  def with_step(listed: list[str]) -> list[str]:
    """The newest `keep` of the listed steps and `step`, by step."""
    by_step = {_step(p): p for p in listed}
    by_step[step] = prefix
    return [by_step[s] for s in sorted(s for s in by_step if s is not None)][
      -keep:
    ]

  dropped = checkpointing.commit_state(
    route.root, with_step, fence=fence, fs=route.fs
  )
  for old in dropped:
    if _step(old) is not None:
      route.remove(old)
  return prefix


def persist_newest(pointer: dict) -> int | None:
  """Copies the tier's newest complete step to the bucket when it is newer
  than the bucket's newest (a node agent, after its worker died), reaching
  the bucket as the run does (the pointer's `lease` place: its url's route).

  Returns:
    The step copied, or None when the bucket was as new.

  Raises:
    BucketUnreachable: the bucket did not answer within
      `storage.ANSWER_SECS` (an agent cut off from it would otherwise ride
      gcsfs's retries after every failure, its exit waiting for the copy);
      the step stays in the tier.
  """
  tier = local_tier.LocalTier(pointer["directory"])
  place = pointer.get("lease", {})
  route = {
    "storage_route": place.get("storage_route", "auto"),
    "fuse_root": place.get("fuse_root", vertex_ai.FUSE_ROOT),
  }
  steps = tier.steps()
  if not steps:
    return None
  try:
    storage.check_answers(
      pointer["bucket_dir"],
      storage=route["storage_route"],
      fuse_root=route["fuse_root"],
    )
  except OSError as e:
    raise BucketUnreachable(
      f"the bucket did not answer within {storage.ANSWER_SECS:g} s "
      f"({pointer['bucket_dir']}); the local checkpoint of step {steps[-1]} "
      "stays in this node's tier."
    ) from e
  fence = lease.job_fence(**place) if place else fencing.OPEN
  in_bucket = newest_in_bucket(pointer["bucket_dir"], **route)
  if in_bucket is not None and in_bucket >= steps[-1]:
    return None
  snapshot = tier.snapshot(steps[-1])
  try:
    copy_to_bucket(
      snapshot,
      step=steps[-1],
      bucket_dir=pointer["bucket_dir"],
      keep=pointer["keep"],
      fence=fence,
      **route,
    )
  finally:
    shutil.rmtree(snapshot, ignore_errors=True)
  return steps[-1]


def run_id(checkpoint_dir: str) -> int:
  """The id of the run whose checkpoints `checkpoint_dir` holds (a number
  under 2**40, exact in `worker_exchange`), made with the directory: one
  deleted and made again is another run's (`LocalTier.bind`).

  Kept in the file `local_tier.RUN_FILE` there, made by the chief (the
  lease holder) when missing: on Cloud Storage with the generation
  precondition 0 (only if still missing); elsewhere whole or not at all.
  """
  root, fs = storage.read_route(checkpoint_dir)
  made = str(secrets.randbits(40) or 1)
  if fs is not None:
    path = posixpath.join(root, local_tier.RUN_FILE)
    with contextlib.suppress(FileExistsError):
      mirror.put_if_generation(fs, path, made.encode(), generation="0")
    return int(fs.cat_file(path))
  path = os.path.join(root, local_tier.RUN_FILE)
  with contextlib.suppress(FileNotFoundError, ValueError):
    with open(path) as f:
      return int(f.read())
  os.makedirs(root, exist_ok=True)
  temporary = f"{path}.{os.getpid()}.tmp"
  with open(temporary, "w") as f:
    f.write(made)
  os.replace(temporary, path)
  return int(made)
