"""A node's local tiers: where they live, whose they are, how an agent
finds them.

Layout: `<root>/ctl-tier-<uid>/<run>/worker-<rank>/` is one worker's tier
(ctl.checkpoint.tiers.local_tier), `<root>` a RAM disk (/dev/shm) when it
has room for two checkpoints, else local disk. `<run>` is private to the job
and its checkpoint directory (`run_name`), so a restarted worker finds its
tier. Beside each tier, `owner.json` says which processes it lives for, so
the next start on the node removes the tiers of runs that are gone
(`remove_stale`): a tier outlives its worker on purpose, and nothing else
frees its RAM when its job ends badly.

A node agent that outlives its worker learns where the worker keeps its
tier from a small pointer file (`write_pointer`), to serve it to peers and
to persist its newest step to the bucket when the worker dies
(ctl.checkpoint.tiers.peer_tier).
"""

import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
import time

from absl import logging

from ctl import env
from ctl import processes
from ctl.checkpoint.tiers import local_tier

OWNER_FILE = "owner.json"  # The processes the tier lives for (`remove_stale`).
# A tier with no owner recorded is removed once untouched for this long.
_UNOWNED_SECS = 24 * 3600
RAM_ROOT = "/dev/shm"


def run_name(*, job_id: str, checkpoint_dir: str) -> str:
  """The run-private directory name: the job and its checkpoint directory.

  A job id stays the same over every restart of a job (ctl.launch, Vertex
  AI), so a restarted worker finds its tier; without one the name carries
  this process's pid, so nothing is found again and the next start removes
  the directory of a process that is gone (`remove_stale`); "auto" then
  makes no tier (`setting_for_job`). The directory is named resolved (a
  URL as it is): one relative path typed in two working directories is two
  runs' directories, and two spellings of one directory are one.
  """
  if "://" not in checkpoint_dir:
    checkpoint_dir = os.path.realpath(checkpoint_dir)
  digest = hashlib.sha256(checkpoint_dir.encode()).hexdigest()[:12]
  job_id = job_id.strip()  # A blank job id is none.
  owner = re.sub(r"[^A-Za-z0-9_.-]", "_", job_id)[:64] if job_id else None
  return f"{owner or f'pid{os.getpid()}'}-{digest}"


def setting_for_job(setting: str, *, job_id: str) -> str:
  """The `--local_checkpoints` setting a run uses: "auto" is "off" without
  a job id, with one line saying why.

  Without a job id the tier is named after this process (`run_name`): no
  restart finds it again and the next start removes it, so its saves would
  cost every loop for nothing. An explicit setting still makes one.
  """
  if setting != "auto" or job_id.strip():  # A blank job id is none.
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
      gone = not processes.pid_alive(int(match.group(1)))
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
    return not any(processes.pid_alive(pid) for pid in owners)
  with contextlib.suppress(OSError):
    return time.time() - os.stat(run).st_mtime > _UNOWNED_SECS
  return False


def _claim(tier: local_tier.LocalTier) -> None:
  """Names this worker and its parent (the launcher or node agent that
  restarts it, or the container's entry) as the tier's owners."""
  pids = [pid for pid in (os.getpid(), os.getppid()) if pid > 1]
  local_tier.write_whole(
    os.path.join(tier.directory, OWNER_FILE), json.dumps({"pids": pids})
  )


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
) -> local_tier.LocalTier | None:
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
    tier = local_tier.LocalTier(os.path.join(root, name, f"worker-{rank}"))
    _claim(tier)
    tier.remove_snapshots()
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


def write_pointer(path: str, **fields) -> None:
  """Tells the node agent (file `path`) where this worker's tier is:
  `directory`, `bucket_dir` and `keep`."""
  local_tier.write_whole(path, json.dumps(fields))


def read_pointer(path: str) -> dict | None:
  """What `write_pointer` wrote at `path`; None before the worker wrote."""
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None
