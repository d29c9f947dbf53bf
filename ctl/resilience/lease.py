"""One writer per run directory: the chief's lease on `model_dir`.

While it trains, the chief holds `<model_dir>/run.lease`, a small JSON
record of who holds it (host, pid, job id, when it was taken and last
renewed). A second process that finds a live lease there is refused at once
with a `LeaseHeld` error (a `UserError`: exit 2) that names the holder and
says how to take over; it never restores, trains or writes beside the first.

How it is made exclusive:
  local directories and the Cloud Storage FUSE mount: the file is created
    with O_CREAT|O_EXCL; renewals replace it after checking that it still
    holds this process's last record; a take-over first renames the old
    record away (one rename wins) and checks it was the one judged. A
    check and the write it decides hold an flock on the run directory, so
    a renewal paused between the two cannot overwrite a take-over's record
    (the taker waits, then judges again; FUSE without flock goes unlocked).
  gs:// (gcsfs and tf routes): an object written with the generation
    precondition `ifGenerationMatch` (0 to create, the generation read to
    renew, take over or delete), so of two writers exactly one succeeds.

A lease may be taken over when it belongs to the same job (a restart by
`ctl.launch`, which sets `CTL_JOB_ID`, or by Vertex AI, `CLOUD_ML_JOB_ID`),
when its pid on this same host is gone (a SIGKILLed run on a laptop is
reclaimed at once; "this host" is the host name and, where the record
names its process, `ctl.processes.identity`, the same boot and pid and
time namespaces: a container beside this one or a node replaced under its
name is another host), with `take_over=True` (`--take_over_lease`: an operator
who knows the holder is dead), or when it is stale. Stale is judged by the
holder's own terms, recorded in the lease: not renewed for the holder's
`stale_secs` (on the wall clock of the record, the only clock two hosts
share), so a taker with a shorter `stale_secs` cannot take a lease its
holder renews at a slower pace; and a holder whose pid is alive on this
host is never stale (paused, it may go on). A renewal thread rewrites the
record every quarter of `stale_secs`, at most `RENEW_SECS` apart, on a
monotonic clock. A holder that finds its lease taken over says so and stops
renewing; it never deletes another's lease. A blank job id is no job id.

A lease of the same job is taken at once, but one read cannot tell a
restart's dead predecessor from a live chief of the same job that replaced
this one (an old chief behind a partition that healed: same job id, same
host name). So the start-up check (`check_free`) that lets such a lease pass
watches it until this process takes it (`acquire`): a dead predecessor never
renews its record, a live holder does within its renewal period. Should the
record change first (renewed, taken or released), this process was
replaced: it says so in one line and ends itself with the lease-lost exit
code (77), from the watch's thread. TensorFlow holds the GIL while its
cluster forms and waits for a missing worker, so no thread runs then: the
command line waits, right before its cluster forms, until the watch has
seen one renewal period and a half pass (`await_watch`), most of it spent
loading TensorFlow; the take-over stops the watch. A record whose process
has ended for certain (this host, boot and pid namespace, and its pid runs
no process of its start time: a restart in place by `ctl-launch` or a node
agent) is no live chief's: its renewal is not awaited, so that restart
waits for nothing (the watch still ends it should the record change before
its take-over). "No longer running" counts a pid that now runs another
process (the kernel reused it).

A record left half-written (empty, or JSON cut short: a trainer killed
between creating the file and writing it) names no holder and is taken over
as a stale one. A whole record that is not a holder's (not a JSON object, a
field missing or of the wrong type: a hand's edit, another program) is
damaged: it is refused in one sentence (`LeaseDamaged`) until an operator
passes `--take_over_lease`, whose take over replaces it as conditionally
as any other.
"""

from collections.abc import Iterator
import contextlib
import dataclasses
import os
import socket
import sys
import threading
import time

from absl import logging

from ctl import errors
from ctl import processes
from ctl.errors import Stalled
from ctl.errors import UserError
from ctl.io import fencing
from ctl.io import storage
from ctl.resilience import lease_store
from ctl.resilience.lease_store import LEASE_FILE
from ctl.resilience.lease_store import Damaged
from ctl.resilience.lease_store import Holder

_ATTEMPTS = 3
# A holder not renewed for this long may be taken over, unless a run says
# otherwise (`ctl.RunOptions.lease_stale_secs`, `--lease_stale_secs`).
DEFAULT_STALE_SECS = 120.0
# The most seconds between a holder's renewals: a restarted chief on another
# host waits one renewal period and a half before its cluster forms
# (`await_watch`), so the period is short whatever the staleness (one small
# write of the lease record every 5 s).
RENEW_SECS = 5.0
# The start-up check's watch of a same-job lease reads it twice per renewal
# period of its holder, at least every `_WATCH_SECS`; each read is one small
# request.
_WATCH_SECS = 2.0
# A live holder's renewal is awaited for this many of its renewal periods
# (a renewal may come late: a busy host, a slow write).
_PERIODS_AWAITED = 1.5
# The longest a start waits for its watch (`await_watch`): a store that does
# not answer, or a holder of a slow pace (a record written before the period
# was recorded renews every quarter of its staleness, 30 s by default), must
# not hold a start longer.
_AWAIT_SECS = 60.0
# The longest a start asks a store that does not answer for the lease's
# record (`_read_at_start`): a restart behind a partition meets the cut
# bucket first, and the partition may heal (a start waits for its peers up
# to its start-up limit, 900 s by default).
_READ_SECS = 120.0


@dataclasses.dataclass(frozen=True)
class _Watch:
  """The start-up check's watch of one run directory's lease."""

  stop: threading.Event  # Set when this process takes the lease.
  spanned: threading.Event  # Set once the holder's renewal was awaited.
  gives_up_at: float  # When `await_watch` stops waiting (monotonic).
  # Held from the moment the watch found the record changed until the
  # process ends, so this process's own take-over cannot land in between.
  lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


# The start-up checks' watches by run directory.
_watches: dict[str, _Watch] = {}


class LeaseHeld(UserError):
  """Another live process holds the run directory."""


class LeaseDamaged(UserError):
  """The run directory's lease file holds no holder's record."""


@dataclasses.dataclass(frozen=True)
class Terms:
  """What taking a run directory's lease needs, as plain values.

  `RunOptions.lease_terms()` makes them; the lease knows nothing else of a
  run's options (docs/design.md, "Layers").

  Attributes:
    model_dir: the run directory (local, FUSE path or gs://).
    job: this process's job id ("" or blank for none); a lease of the same
      job is taken over at once (a supervised restart).
    stale_secs: this holder renews its lease every quarter of it, at
      most `RENEW_SECS` apart, and its lease is stale once not renewed for
      that long; another's is judged
      by the staleness recorded in it.
    take_over: take the lease whoever holds it (the operator knows the
      holder is dead).
    storage_route: how gs:// is reached (ctl.io.storage.ROUTES).
    fuse_root: where Cloud Storage FUSE mounts buckets.
  """

  model_dir: str
  job: str
  stale_secs: float
  take_over: bool = False
  storage_route: str = "auto"
  fuse_root: str = "/gcs"


@contextlib.contextmanager
def hold(terms: Terms | None) -> Iterator["Lease | None"]:
  """Holds the run directory's lease for the block (the chief only).

  Released when the block ends however it ends (a caller with a stall
  watchdog also releases it when a stall ends the process).

  Args:
    terms: the lease's terms; None on a worker that is not the chief.

  Yields:
    The held lease, or None on a worker that is not the chief.

  Raises:
    LeaseHeld: another live process holds it.
  """
  if terms is None:
    yield None
    return
  held = acquire(**dataclasses.asdict(terms))
  try:
    yield held
  finally:
    held.release()


def check_free(terms: Terms | None) -> None:
  """Refuses now, writing nothing, if a live process holds the run directory.

  A command line calls it before it loads TensorFlow, so a second trainer is
  refused within a second or two; `hold` still decides when it takes the
  lease. A lease of this same job passes, and is watched until `hold` takes
  it: should its record change first, a live trainer of this job holds it,
  and this process ends with the lease-lost exit code (`_watch`).

  Args:
    terms: the lease's terms; None on a worker that is not the chief.

  Raises:
    LeaseHeld: another live process holds it.
  """
  if terms is None:
    return
  _check(terms, judge=True)


def watch_own_job(terms: Terms | None) -> None:
  """Watches the run directory's lease as `check_free` does when its record
  names this job, and refuses nothing.

  For a start whose lease terms come later, where a refusal now could be
  wrong (a script's `ctl.environment`: `ctl.run`'s options may take the
  lease over or judge staleness otherwise, and its `hold` judges the
  lease): a chief replaced by a live one of its own job still ends with the
  lease-lost exit code before its cluster forms (`await_watch`). Reads
  only.

  Args:
    terms: the lease's terms; None on a worker that is not the chief.
  """
  if terms is not None:
    _check(terms, judge=False)


def _check(terms: Terms, *, judge: bool) -> None:
  """Reads the lease on `terms.model_dir`, judges it if `judge` (raising
  as `check_free` says), and watches it if its record is this job's."""
  _stop_watch(terms.model_dir)  # A check made again watches anew.
  store = lease_store.open_store(
    terms.model_dir,
    storage_route=terms.storage_route,
    fuse_root=terms.fuse_root,
  )
  found = _read_at_start(store, terms.model_dir)
  if found is None:
    return
  mine = _me(terms.job, terms.stale_secs)
  if judge:
    _judge(found[0], mine, **dataclasses.asdict(terms))
  if _same_job(found[0], mine) and not terms.take_over:
    _watches[terms.model_dir] = _watch(
      store, found, terms, ended=_ended_here(found[0], mine)
    )


def _read_at_start(store, model_dir: str) -> tuple | None:
  """The lease's record as a start reads it (`store.read()`).

  A store that does not answer (a bucket cut off by a partition, which a
  restart behind it meets first) is asked again, each time for at most
  `storage.ANSWER_SECS`, until `_READ_SECS` have passed, as a start waits
  for its peers: the partition may heal. A missing or forbidden object is
  an answer.

  Raises:
    Stalled: it never answered; one sentence.
  """
  gives_up_at = time.monotonic() + _READ_SECS
  while True:
    try:
      return store.read(timeout=storage.ANSWER_SECS)
    except (FileNotFoundError, PermissionError):
      raise
    except OSError as e:  # TimeoutError and aiohttp's connection errors.
      if time.monotonic() >= gives_up_at:
        raise Stalled(
          f"Could not read the lease on {model_dir}: its storage did not "
          f"answer for {_READ_SECS:g} s ({e}); this start writes nothing."
        ) from None
      logging.warning(
        "The lease on %s could not be read (%s); asking again.", model_dir, e
      )
      time.sleep(1)


def _watch(store, found: tuple, terms: Terms, *, ended: bool) -> _Watch:
  """Watches the same-job lease `found` that `check_free` let pass, from a
  thread, until `_stop_watch`.

  A restart's predecessor is dead and never renews its record; a live
  holder renews it every renewal period. So a record renewed, taken or
  released before this process takes the lease (which stops the watch
  before it writes) was another live trainer's of this job, and this
  process was replaced as its chief: the thread says so and ends the
  process (`_replaced`). Once a read finds the record unchanged
  `_PERIODS_AWAITED` renewal periods after the check, the watch is
  `spanned` (what `await_watch` waits for). A read that fails tells
  nothing: it neither ends the process nor spans the watch. Nothing is
  written. A record whose holder has `ended` for certain (`_ended_here`)
  needs no renewal awaited: the watch is spanned at once, and still ends
  this process should the record change before the take-over (another
  chief of this job took the run meanwhile).
  """
  holder, token = found
  period = max(holder.renewal_period(terms.stale_secs), 0.1)
  every = min(period / 2, _WATCH_SECS)
  started = time.monotonic()
  spans_at = started + (0 if ended else _PERIODS_AWAITED * period)
  watching = _Watch(
    stop=threading.Event(),
    spanned=threading.Event(),
    gives_up_at=started + min(_AWAIT_SECS, 3 * period + _WATCH_SECS),
  )
  if ended:
    watching.spanned.set()

  def watch() -> None:
    while not watching.stop.wait(every):
      try:
        now = store.read()
      except Exception:  # pylint: disable=broad-except
        continue  # No answer (a bucket cut off, however gcsfs says so).
      if now and (now[1] == token or isinstance(now[0], Damaged)):
        if time.monotonic() >= spans_at:
          watching.spanned.set()  # Unchanged, or no holder's: read again.
        continue
      with watching.lock:  # Kept until the process ends (`_replaced`).
        if watching.stop.is_set():  # This process's take-over came first.
          return
        _replaced(terms.model_dir, holder, now and now[0])

  threading.Thread(target=watch, daemon=True, name="ctl-lease-watch").start()
  return watching


def await_watch(model_dir: str) -> None:
  """Waits until the start-up check's watch of `model_dir`'s lease, if
  any, has seen its holder's renewal period pass one and a half times with
  no renewal (a restart's dead predecessor): called right before the
  cluster forms, as TensorFlow then holds the GIL and the watch's thread
  could not end a replaced chief (a live holder's renewal ends this process
  from the watch, and this never returns). No watch: returns at once.

  A watch that could not read the record meanwhile (the bucket cut off) or
  whose holder renews at a slow pace confirms nothing by its deadline
  (three renewal periods, `_AWAIT_SECS` at most): this logs so and goes
  on, as a restart does.
  """
  watching = _watches.get(model_dir)
  if watching is None:
    return
  if not watching.spanned.wait(watching.gives_up_at - time.monotonic()):
    logging.warning(
      "The lease on %s belongs to this job, and its holder was neither "
      "seen renewing it nor confirmed gone by now (the record could not be "
      "read, or its holder renews at a slow pace); going on as a restart.",
      model_dir,
    )


def _stop_watch(model_dir: str) -> None:
  """Stops the start-up check's watch of `model_dir`'s lease, if any, and
  lets anyone awaiting it go on; waits while the watch ends the process."""
  watching = _watches.pop(model_dir, None)
  if watching:
    with watching.lock:
      watching.stop.set()
    watching.spanned.set()


def _replaced(model_dir: str, judged: Holder, now: Holder | None) -> None:
  """Says that another live trainer of this job holds the lease `judged`
  was (`now`: its record now, None: released), and ends this process with
  the lease-lost exit code; never returns.

  As the stall watchdog ends a stuck process: the line straight to the
  standard error's descriptor, then `os._exit`, which needs nothing of the
  main thread (it may wait in TensorFlow's cluster formation).
  """
  if now is None:
    change = f"released by {judged.describe()}"
  elif judged.same_holding(now):
    change = f"renewed by {now.describe()}"
  else:
    change = f"taken by {now.describe()}"
  try:
    sys.stderr.flush()  # What was logged before, first.
    os.write(
      2,  # The descriptor: sys.stderr may be a wrapper (pytest, notebooks).
      f"error: This trainer (pid {os.getpid()}) was replaced as the chief "
      f"of job {judged.job}: since its start-up check, the lease on "
      f"{model_dir} was {change}, another live trainer of this job; it "
      "stops and writes nothing.\n".encode(),
    )
  finally:  # Even where the line cannot be written (a closed descriptor).
    os._exit(errors.LEASE_LOST_EXIT_CODE)  # pylint: disable=protected-access


def acquire(
  *,
  model_dir: str,
  job: str,
  stale_secs: float,
  take_over: bool = False,
  storage_route: str = "auto",
  fuse_root: str = "/gcs",
) -> "Lease":
  """Takes the lease on `model_dir` and starts renewing it.

  Args:
    The fields of `Terms`, which says what each one means.

  Returns:
    The held lease; `release()` it (or use it as a context manager).

  Raises:
    LeaseHeld: a live process holds it.
  """
  _stop_watch(model_dir)  # Before this process's own write changes it.
  store = lease_store.open_store(
    model_dir, storage_route=storage_route, fuse_root=fuse_root
  )
  for _ in range(_ATTEMPTS):
    found = store.read()
    mine = _me(
      job, stale_secs, generation=found[0].generation + 1 if found else 1
    )
    try:
      if found is None:
        token = store.create(lease_store.encode(mine))
      else:
        holder, token = found
        why = _judge(
          holder,
          mine,
          model_dir=model_dir,
          stale_secs=stale_secs,
          take_over=take_over,
        )
        logging.warning(
          "Taking over the lease on %s from %s: %s.",
          model_dir,
          holder.describe(),
          why,
        )
        token = store.take_over(lease_store.encode(mine), token)
    except FileExistsError:
      continue  # Someone else moved first: judge the new holder.
    return Lease(store, mine, token, model_dir)
  raise LeaseHeld(
    f"The lease on {model_dir} changed hands {_ATTEMPTS} times while this "
    "trainer tried to take it; another trainer is starting there."
  )


class Lease:
  """A held lease, renewed by a thread until `release()`."""

  def __init__(self, store, holder: Holder, token, model_dir: str):
    self._store = store
    self._holder = holder
    self._token = token
    self._model_dir = model_dir
    self._lock = threading.Lock()
    self._released = threading.Event()
    self._lost = threading.Event()
    self._taker = None  # The record the renewal thread found instead.
    self._thread = threading.Thread(
      target=self._renew_until_released,
      args=(holder.renew_secs,),
      daemon=True,
      name="ctl-lease",
    )
    self._thread.start()

  @property
  def holder(self) -> Holder:
    return self._holder

  def release(self) -> None:
    """Stops renewing and removes the lease if it is still this process's.

    Safe to call more than once and from any thread (a stall callback).
    """
    self._released.set()
    with self._lock:
      if self._token is not None:
        with contextlib.suppress(OSError):
          self._store.delete(self._token)
        self._token = None

  def fence(self) -> fencing.Fence:
    """The fence of this holding (ctl.io.fencing): `check_held` at each commit."""
    return _HeldFence(self)

  def check_held(self, what: str) -> None:
    """Returns if this process still holds the lease; else stops it.

    Held when the renewal thread has not found it lost and a fresh read
    finds this holding's record (generation, host, pid, start): after a
    pause the thread may not have run yet. A read that fails (a hiccup)
    leaves the thread's finding.

    Args:
      what: what is about to be written, for the sentence.

    Raises:
      LeaseLost: another trainer took the lease over (it may have ended
        and released it since).
      LeaseVanished: the lease record is gone and no taker was seen: the
        lease file was deleted, or the run directory moved away.
    """
    try:
      found = self._store.read()
      current = found and found[0]
    except OSError as e:
      logging.warning("Could not read the run lease: %s", e)
      current = self._holder
    if current and self._holder.same_holding(current):
      if not self._lost.is_set():
        return
      current = None  # A hiccup's stand-in: the thread's finding holds.
    with self._lock:
      self._lost.set()
      self._token = None  # Nothing of the new holder's is ever deleted.
    raise self._loss(what, current)

  def _loss(self, what: str, current: Holder | None) -> errors.LeaseLost:
    """The sentence of a lease found lost before `what`, as its error.

    Args:
      what: what was about to be written.
      current: the record found in the lease now, another's; None if none.
    """
    me = (
      f"This trainer (pid {os.getpid()}, lease generation "
      f"{self._holder.generation})"
    )
    if current or self._taker:
      taker = (
        current.describe()
        if current
        else f"{self._taker.describe()}, which has since released it"
      )
      return errors.LeaseLost(
        f"{me} lost the lease on {self._model_dir} to {taker}; it stopped "
        f"before writing {what} and leaves the run directory to that trainer."
      )
    if not self._store.has_directory():
      return errors.LeaseVanished(
        f"The run directory {self._model_dir} vanished (moved or deleted) "
        f"while this trainer (pid {os.getpid()}) held its lease; it stopped "
        f"before writing {what}: to continue the run, point --model_dir "
        "at where the directory is now (the same command would start over "
        "from step 0).",
        directory_gone=True,
      )
    return errors.LeaseVanished(
      f"{me} found its lease file {LEASE_FILE} gone from {self._model_dir} "
      "(deleted, or released by a trainer that took the lease over unseen "
      f"and has since ended); it stopped before writing {what}: the "
      "checkpoints saved before are intact, run the same command to "
      "continue.",
      directory_gone=False,
    )

  def __enter__(self) -> "Lease":
    return self

  def __exit__(self, *exc_info) -> None:
    self.release()

  def _renew_until_released(self, interval: float) -> None:
    while not self._released.wait(interval):
      with self._lock:
        if self._token is None:
          return
        self._holder = dataclasses.replace(self._holder, renewed=time.time())
        try:
          self._token = self._store.replace(
            lease_store.encode(self._holder), self._token
          )
        except FileExistsError:
          self._lost_in_renewal()
          return
        except OSError as e:  # A hiccup: the next renewal tries again.
          logging.warning("Could not renew the run lease: %s", e)

  def _lost_in_renewal(self) -> None:
    """Records, under the lock, that a renewal found another's record or
    none, and says which."""
    with contextlib.suppress(OSError):
      found = self._store.read()
      self._taker = found and found[0]
    if self._taker:
      logging.error(
        "The lease on the run directory was taken over by %s; this process "
        "no longer owns it and writes nothing more.",
        self._taker.describe(),
      )
    else:
      logging.error(
        "The lease file of the run directory vanished (deleted, or the "
        "directory moved away); this process no longer owns it and writes "
        "nothing more."
      )
    self._lost.set()
    self._token = None


class _HeldFence(fencing.Fence):
  """A held lease's fence: passes while this process holds the lease."""

  def __init__(self, held: Lease):
    self._held = held

  def check(self, what: str) -> None:
    self._held.check_held(what)


def fence_of(held: Lease | None) -> fencing.Fence:
  """The fence of `held`, or one that always passes (no lease: not chief)."""
  return held.fence() if held else fencing.OPEN


def job_fence(
  *,
  model_dir: str,
  job: str,
  storage_route: str = "auto",
  fuse_root: str = "/gcs",
) -> fencing.Fence:
  """The fence of a process that commits for job `job` without holding the
  lease: a node agent persisting its dead worker's newest local step.

  It passes while the run directory's lease is free or held by `job` (the
  job's restarted chief takes the lease over, at the next generation, and
  both merge the state file by step), and fails once another job's trainer
  holds it: that job's lease generation moved past every holding of `job`.

  Args:
    model_dir, job, storage_route, fuse_root: as in `Terms`.
  """
  store = lease_store.open_store(
    model_dir, storage_route=storage_route, fuse_root=fuse_root
  )
  return _JobFence(store, job=job.strip(), model_dir=model_dir)


class _JobFence(fencing.Fence):
  """Passes while the lease is free or held by one job (`job_fence`)."""

  def __init__(self, store, *, job: str, model_dir: str):
    self._store = store
    self._job = job
    self._model_dir = model_dir

  def check(self, what: str) -> None:
    found = self._store.read()
    if found is None or (self._job and found[0].job == self._job):
      return
    raise errors.LeaseLost(
      f"This process (pid {os.getpid()}) writes for job {self._job or '(none)'}"
      f", but {found[0].describe()} holds the lease on {self._model_dir} "
      f"now; it stopped before writing {what}."
    )


def _me(job: str, stale_secs: float, generation: int = 0) -> Holder:
  """This process's record (a blank `job` is none: ""): it renews every
  quarter of its staleness, at most `RENEW_SECS` apart."""
  now = time.time()
  return Holder(
    socket.gethostname(),
    os.getpid(),
    job.strip(),
    now,
    now,
    generation,
    stale_secs,
    min(stale_secs / 4, RENEW_SECS),
    processes.identity(os.getpid()),
  )


def _judge(
  holder: Holder | Damaged,
  mine: Holder,
  *,
  model_dir: str,
  stale_secs: float,
  take_over: bool,
  **unused,
) -> str:
  """Why `holder`'s lease may be taken over by `mine`.

  Raises:
    LeaseHeld: it may not.
    LeaseDamaged: it is damaged (and `take_over` is not set).
  """
  del unused  # The other terms.
  if take_over:
    return "--take_over_lease"
  if isinstance(holder, Damaged) and holder.half_written:
    return f"it was left half-written ({holder.what})"
  if isinstance(holder, Damaged):
    raise LeaseDamaged(
      f"The lease file {os.path.join(model_dir, LEASE_FILE)} is damaged "
      f"({holder.what}) and names no holder: if no trainer runs on "
      f"{model_dir}, pass --take_over_lease to replace it."
    )
  stale_secs = holder.stale_secs or stale_secs  # The holder's own terms.
  why = _reclaimable(holder, mine, stale_secs)
  if why is None:
    live = (
      "alive on this host"
      if _on_this_host(holder, mine)
      else f"stale after {stale_secs:g} s without renewal"
    )
    raise LeaseHeld(
      f"{model_dir} is in use by another trainer ({holder.describe()}; "
      f"{live}): wait for it to end, use another --model_dir, or pass "
      "--take_over_lease if you know that process is dead."
    )
  return why


def _reclaimable(holder: Holder, mine: Holder, stale_secs: float) -> str | None:
  """Why `holder`'s lease may be taken over, or None when it may not.

  `stale_secs` is the holder's. A holder on this host (its host name, and,
  where recorded, this boot and pid namespace) is judged by its process
  alone: alive, it is never stale (a paused one may go on and commit). One
  of the same host name in another pid namespace or boot (a container
  beside this one, a node replaced under its name) is judged as another
  host's: its pid means nothing here.
  """
  if _same_job(holder, mine):
    return f"it belongs to this job ({holder.job}), restarted"
  if _on_this_host(holder, mine):
    if _alive(holder.pid) and not processes.ended(holder.pid, holder.process):
      return None
    return f"pid {holder.pid} is no longer running on this host"
  age = mine.renewed - holder.renewed
  if age > stale_secs:
    return f"not renewed for {age:.0f} s (stale after {stale_secs:g} s)"
  return None


def _on_this_host(holder: Holder, mine: Holder) -> bool:
  """Whether `holder`'s pid means what it means here: this host name, and,
  where its record says, this boot and pid namespace."""
  return holder.host == mine.host and processes.comparable(holder.process)


def _ended_here(holder: Holder | Damaged, mine: Holder) -> bool:
  """Whether `holder` was a process of this host that has ended for
  certain (`ctl.processes.ended`: this boot and these namespaces, and
  no process of its start time runs its pid): a supervised restart in
  place, whose predecessor can renew nothing, so no renewal is awaited."""
  return (
    isinstance(holder, Holder)
    and holder.host == mine.host
    and processes.ended(holder.pid, holder.process)
  )


def _same_job(holder: Holder | Damaged, mine: Holder) -> bool:
  """Whether `holder` is of this process's job (a damaged record is none's)."""
  return bool(holder.job) and holder.job == mine.job


def _alive(pid: int) -> bool:
  if pid == os.getpid():
    return False  # A lease this process left behind (an earlier run call).
  return processes.pid_alive(pid)
