"""Checkpoints: what they hold, how they are saved, and which one is restored.

A checkpoint holds everything that decides the next step: model, optimizer
(including a loss-scale state), the global step, the data seed, and the
state of every Keras `SeedGenerator` (Dropout and random layers keep it in a
variable that `tf.train.Checkpoint(model=...)` does not save). The data
position is not saved: it is derived from the global step (see ctl.data.input).

Integrity: `tf.train.CheckpointManager` writes the data and index files first
and its state file ("checkpoint") last, so the state file is the commit point.
On start the newest checkpoint that actually reads back is restored; a
truncated or unreadable one is reported and skipped. A checkpoint written by a
different model, or for another input shape (saved with it), is a user
error, not something to skip past. A damaged state
file (garbage, binary, empty), or one whose latest checkpoint is not there
(e.g. `ckpt-999` beside an intact `ckpt-100`), never means "no checkpoint":
the checkpoints are then found from their own files (`ckpt-N.index`), the
newest readable one is restored, and only then is the state file rewritten. A state file that names
a checkpoint outside its own directory is a user error too.
"""

from collections.abc import Callable
import hashlib
import os
import posixpath
import re
import shutil

from absl import logging
import keras
import tensorflow as tf

# A whole-file write (a temporary file renamed) on every TensorFlow
# filesystem, the way the CheckpointManager writes its state file.
from tensorflow.python.lib.io import file_io  # pylint: disable=g-direct-tensorflow-import

from ctl.errors import UserError
from ctl.errors import error_sentence
from ctl.errors import write_failure
from ctl.io import checkpoint_state
from ctl.io import fencing
from ctl.io import mirror
from ctl.io import tempdirs

# Errors that mean "these files are damaged", as opposed to "wrong model"
# (ValueError / AssertionError). The reader raises IndexError ("Read less
# bytes than requested") for a truncated file.
_DAMAGED = (tf.errors.OpError, IndexError)

STATE_FILE = checkpoint_state.STATE_FILE
# What a checkpoint was trained on: the structure, dtypes and per-example
# shapes of the training batches (ctl.train.state.element_spec_record), as
# text (a model whose weights fit any input size, e.g. one that pools
# globally, restores either way: this record refuses it).
_ELEMENT_SPEC = "element_spec"
# The global batch size a checkpoint was trained with, and the first step
# from which the run's data order differs from an uninterrupted run's (-1:
# none), because a resume changed the global batch (ctl.data.input: the examples
# of step s are a function of s and the global batch).
_GLOBAL_BATCH = "global_batch_size"
_DATA_ORDER_CHANGED = "data_order_differs_from_step"
# Tries of a conditional commit of a state file that others keep changing.
_COMMIT_TRIES = 8
_INDEX_FILE = re.compile(r"(?P<prefix>.+-(?P<number>\d+))\.index")


def seed_generator_states(model: keras.Model) -> list:
  """The RNG state variables of the model's random layers, in a fixed order."""
  return [v for v in model.variables if "seed_generator_state" in v.path]


def weights_fingerprint(
  model: keras.Model, optimizer: keras.optimizers.Optimizer
) -> str:
  """SHA-256 over every model and optimizer variable value, in a fixed order.

  Two runs that end with the same fingerprint ended bit-for-bit identical.
  """
  digest = hashlib.sha256()
  for prefix, variables in (
    ("model", model.variables),
    ("optimizer", optimizer.variables),
  ):
    for index, variable in enumerate(variables):
      value = variable.numpy()
      digest.update(f"{prefix}/{index}/{value.dtype}/{value.shape}".encode())
      digest.update(value.tobytes())
  return digest.hexdigest()


class Checkpointer:
  """Saves and restores one run's state through a CheckpointManager.

  Every worker saves (a save may contain collective reads), but only the chief
  saves into `directory`; the others save into a private temporary directory
  that is removed on `close()`, so no `workertemp_*` is left in user outputs.
  """

  def __init__(
    self,
    *,
    checkpoint: tf.train.Checkpoint,
    directory: str,
    is_chief: bool,
    keep: int,
    async_save: bool = False,
    on_saved: Callable[[], None] = lambda: None,
    element_spec: str | None = None,
    global_batch_size: int | None = None,
    partial: bool = False,
  ):
    """Initializes the checkpointer.

    Args:
      checkpoint: the `tf.train.Checkpoint` of everything to save.
      directory: the real checkpoint directory (read by every worker).
      is_chief: whether this worker writes into `directory`.
      keep: how many checkpoints the manager keeps.
      async_save: write in the background; synced before the next save,
        before a restore and on close.
      on_saved: called on the chief once a checkpoint's files are all
        written (e.g. to upload them, state file last).
      element_spec: what the training batches are (their structure, dtypes
        and per-example shapes, as text), saved with every checkpoint; a
        checkpoint of another is not restored.
      global_batch_size: examples per step, saved with every checkpoint; a
        restore of another says once that the data order from there differs
        from an uninterrupted run's (`data_order_differs_from_step`).
      partial: `checkpoint` holds part of what was saved (a side-car
        evaluator's, without the optimizer): the rest is not restored, and
        not warned of.
    """
    self._checkpoint = checkpoint
    # What every checkpoint records beside the state, as {name: this run's
    # value}; a checkpoint from before a record was added restores without.
    self._records = {}
    if element_spec is not None:
      self._records[_ELEMENT_SPEC] = element_spec
    if global_batch_size is not None:
      self._records[_GLOBAL_BATCH] = global_batch_size
      self._records[_DATA_ORDER_CHANGED] = -1
    for name, value in self._records.items():
      _attach(checkpoint, name, _record_variable(value))
    self._directory = directory
    self._is_chief = is_chief
    self._async_save = async_save
    self._on_saved = on_saved if is_chief else lambda: None
    self._unpublished = False
    self._keep = keep
    self._partial = partial
    self._manager = None  # Made on first save (see `_writer`).
    self._scratch = None  # A non-chief's save directory, made with it.
    self._options = tf.train.CheckpointOptions(enable_async=async_save)
    if async_save:
      prepare_async_checkpoints()

  @property
  def directory(self) -> str:
    return self._directory

  @property
  def checkpoint(self) -> tf.train.Checkpoint:
    """What is saved and restored (a local tier saves the same object)."""
    return self._checkpoint

  @property
  def data_order_differs_from_step(self) -> int | None:
    """The first step trained in another data order than an uninterrupted
    run's (a resume with another global batch size); None: none known."""
    if _DATA_ORDER_CHANGED not in self._records:
      return None
    step = int(getattr(self._checkpoint, _DATA_ORDER_CHANGED).numpy())
    return None if step < 0 else step

  def restore_latest(self) -> str | None:
    """Restores the newest readable checkpoint in the real directory.

    Returns:
      The path restored, or None when the directory holds no checkpoint.

    Raises:
      UserError: the checkpoint was written by a different model, or no
        checkpoint in the directory can be read.
    """
    self.sync()
    state_file = os.path.join(self._directory, STATE_FILE)
    candidates, damaged = _candidates(self._directory)
    for path in reversed(candidates):
      if not self.restore(path):
        continue
      self.mend_state(path)
      logging.info("Restored checkpoint %s.", path)
      return path
    if damaged:
      raise UserError(
        f"The checkpoint state file {state_file} {damaged} and no "
        f"checkpoint file beside it can be read; move the directory away to "
        "start over."
      )
    if candidates:
      raise UserError(
        f"No checkpoint in {self._directory} can be read; "
        "move the directory away to start over."
      )
    return None

  def mend_state(self, restored: str) -> None:
    """After `restored` (a checkpoint of this directory) was restored: if
    the state file is damaged or names a checkpoint that is not there, says
    so once and (the chief) rewrites it to end at `restored`.

    Whatever chose `restored` (the newest readable file, or the step the
    workers agreed on in ctl.checkpoint.tiers.tier_restore) calls it, so a state
    file that is no guide is named and mended on every restore path.
    """
    candidates, damaged = _candidates(self._directory)
    if not damaged:
      return
    logging.warning(
      "The checkpoint state file %s %s; restored %s, the newest "
      "readable checkpoint among the files.",
      os.path.join(self._directory, STATE_FILE),
      damaged,
      restored,
    )
    if self._is_chief and restored in candidates:
      kept = candidates[: candidates.index(restored) + 1]
      commit_state(self._directory, lambda listed: kept)

  def restore(self, path: str) -> bool:
    """Restores `path`; False (said why) when it is incomplete or damaged.

    Raises:
      UserError: it was written by a different model.
    """
    if not _files_present(path):
      logging.warning(
        "Checkpoint %s is incomplete (files missing); trying the previous one.",
        path,
      )
      return False
    try:
      self._restore_same_input(path)
    except _DAMAGED as e:
      logging.warning(
        "Checkpoint %s is unreadable (%s); trying the previous one.",
        path,
        type(e).__name__,
      )
      return False
    except (AssertionError, ValueError) as e:
      raise UserError(
        f"The checkpoint {path} was written by a different model or "
        f"configuration ({error_sentence(e)}); use another --checkpoint_dir "
        "or --model_dir."
      ) from None
    return True

  def _restore_same_input(self, path: str) -> None:
    """Restores `path` if it was trained on this run's input shape, then
    notes a change of the global batch.

    A checkpoint written before a record (the shape, the batch) was added is
    restored without it (nothing to compare).

    Raises:
      UserError: the checkpoint holds another input shape.
    """
    stored = {}
    if self._records:
      reader = tf.train.load_checkpoint(path)
      for name in self._records:
        key = f"{name}/.ATTRIBUTES/VARIABLE_VALUE"
        if reader.has_tensor(key):
          stored[name] = _record_value(reader.get_tensor(key))
    spec = stored.get(_ELEMENT_SPEC, self._records.get(_ELEMENT_SPEC))
    if spec != self._records.get(_ELEMENT_SPEC):
      raise UserError(
        f"The checkpoint {path} was trained on batches of {spec}, not this "
        f"run's {self._records[_ELEMENT_SPEC]}; use the inputs it was "
        "trained with (e.g. its --image_size), or another --checkpoint_dir "
        "or --model_dir."
      )
    absent = {
      name: getattr(self._checkpoint, name)
      for name in self._records
      if name not in stored
    }
    for name in absent:
      delattr(self._checkpoint, name)
    try:
      self._read(path)
    finally:
      for name, variable in absent.items():
        setattr(self._checkpoint, name, variable)
    if _GLOBAL_BATCH in self._records:
      self._note_global_batch(path, stored)

  def _note_global_batch(self, path: str, stored: dict) -> None:
    """Says once when `path` was trained with another global batch, and
    records this run's batch and the first step of another data order."""
    (changed,) = stored.get(_DATA_ORDER_CHANGED, (-1,))
    (trained,) = stored.get(_GLOBAL_BATCH, (None,))
    current = self._records[_GLOBAL_BATCH]
    if trained is not None and trained != current:
      # Saves name each checkpoint `ckpt-<step>`; a hand-named one: -1.
      named = _INDEX_FILE.fullmatch(os.path.basename(path) + ".index")
      step = int(named.group("number")) if named else -1
      logging.warning(
        "The checkpoint %s was trained with a global batch of %d, this run "
        "with %d: the data order from here on differs from an "
        "uninterrupted run's.",
        path,
        trained,
        current,
      )
      changed = step if changed < 0 else changed
    getattr(self._checkpoint, _GLOBAL_BATCH).assign(current)
    getattr(self._checkpoint, _DATA_ORDER_CHANGED).assign(changed)

  def _read(self, path: str) -> None:
    """Restores `path` into the checkpoint, every object of it matched."""
    status = self._checkpoint.restore(path).assert_existing_objects_matched()
    if self._partial:
      status.expect_partial()

  def save(self, step: int) -> str:
    """Saves at `step` (all workers must call it at the same step).

    Raises:
      CannotWrite: the directory refused the files (disk full, permission
        lost); the checkpoints saved before are left as they were.
    """
    self.sync()
    try:
      path = self._writer().save(checkpoint_number=step, options=self._options)
    except (OSError, tf.errors.OpError) as e:
      _raise_if_refused(f"the checkpoint of step {step}", self._directory, e)
      raise
    self._unpublished = True
    if not self._async_save:
      self.sync()
    logging.info(
      "Saved checkpoint %s%s.",
      path,
      " (writing in the background)" if self._async_save else "",
    )
    return path

  def _writer(self) -> tf.train.CheckpointManager:
    """The manager that saves; the chief's reads the state file when made,
    so it is made after `restore_latest` could repair a damaged one. A
    non-chief's saves into a scratch directory, made only by a first save
    (a reader that never saves, such as the evaluator, makes none)."""
    if self._manager is None and not self._is_chief:
      self._scratch = tempdirs.scratch_dir("ctl_worker_checkpoint_")
      self._manager = tf.train.CheckpointManager(
        self._checkpoint, self._scratch, max_to_keep=1
      )
    elif self._manager is None:
      self._manager = tf.train.CheckpointManager(
        self._checkpoint, self._directory, max_to_keep=self._keep
      )
    return self._manager

  def sync(self) -> None:
    """Waits until the last save is written, then hands it to `on_saved`."""
    if self._async_save:
      try:
        wait_for_write(self._checkpoint)
      except (OSError, tf.errors.OpError) as e:
        _raise_if_refused("a checkpoint", self._directory, e)
        raise
    if self._unpublished:
      self._unpublished = False
      self._on_saved()

  def close(self) -> None:
    """Finishes pending writes and removes a non-chief's scratch directory."""
    self.sync()
    if self._scratch:
      shutil.rmtree(self._scratch, ignore_errors=True)


def _record_variable(value: tuple[int, ...] | int | str) -> tf.Variable:
  """A record as a variable: text as a string, numbers as int64."""
  dtype = tf.string if isinstance(value, str) else tf.int64
  return tf.Variable(value, dtype=dtype, trainable=False)


def _record_value(value) -> tuple[int, ...] | str:
  """A record as read from a checkpoint: text, or a tuple of numbers."""
  if isinstance(value, bytes):
    return value.decode()
  return tuple(int(n) for n in value.flat)


def _attach(
  checkpoint: tf.train.Checkpoint, name: str, variable: tf.Variable
) -> None:
  """Adds `variable` to `checkpoint` as `name`, for every kind of save.

  TensorFlow's asynchronous save (`CheckpointOptions(enable_async=True)`:
  the local tier's, `--async_checkpoint`) writes a copy of the checkpoint
  that it builds from the `tf.train.Checkpoint` constructor's keyword
  arguments only (`Checkpoint._kwargs`), so an object that is only set as an
  attribute afterwards is left out of every asynchronous save. Each record
  is therefore also added where that copy is built from (before the first
  save builds it).
  """
  setattr(checkpoint, name, variable)
  checkpoint._kwargs[name] = variable  # pylint: disable=protected-access


def wait_for_write(checkpoint: tf.train.Checkpoint) -> None:
  """Waits for the asynchronous write of `checkpoint`; raises its error.

  TensorFlow's `Checkpoint.sync()` waits, but keeps a failed write's error
  until the next asynchronous write, or until the process exits (where it
  prints it as a traceback): a caller that commits or publishes after
  `sync()` would commit files that were never written.

  Raises:
    OSError, tf.errors.OpError: the write failed (a full or read-only disk).
  """
  checkpoint.sync()
  helper = getattr(checkpoint, "_async_checkpointer_impl", None)
  error = helper and helper._async_error  # pylint: disable=protected-access
  if error:
    helper._async_error = None  # pylint: disable=protected-access
    raise error


def prepare_async_checkpoints() -> None:
  """Mends two things in TF's async checkpoints (`enable_async=True`).

  TF copies every saved variable to the host in a `tf.function`
  (`AsyncCheckpointHelper._copy_to_cpu`), through each variable's
  `_copy_trackable_to_cpu`:

  - Keras 3 (3.15) implements that for its variables by creating a new
    `tf.Variable` on every call, which a `tf.function` rejects ("only
    supports singleton tf.Variables"), so the first async save fails. A
    Keras variable only wraps a `tf.Variable` (`.value`) whose host copy TF
    refreshes on every save, so the Keras variable's copy is that same copy.
  - The copy's Python loop runs over a Python list of the saved objects, so
    traced as it is it is the same graph; converted by AutoGraph, it was
    written to a file in the temporary directory that only a normal exit
    removes, and every SIGKILLed or preempted worker with a local tier left
    one there. It is traced without AutoGraph.
  """
  from keras.src.backend.tensorflow import core  # pylint: disable=g-import-not-at-top
  from tensorflow.python.checkpoint import async_checkpoint_helper  # pylint: disable=g-import-not-at-top

  def copy_to_cpu(variable, object_map):
    variable.value._copy_trackable_to_cpu(object_map)  # pylint: disable=protected-access
    object_map[variable] = object_map[variable.value]

  core.Variable._copy_trackable_to_cpu = copy_to_cpu  # pylint: disable=protected-access
  helper = async_checkpoint_helper.AsyncCheckpointHelper
  copy = vars(helper).get("_copy_to_cpu")
  # Not replaced yet, and still the tf.function it was (another TensorFlow
  # may have changed it: then it is left as it is).
  if getattr(copy, "_autograph", False):
    helper._copy_to_cpu = tf.function(copy.python_function, autograph=False)  # pylint: disable=protected-access


def latest_version(directory: str) -> tuple[str, int] | None:
  """The checkpoint a restore of `directory` tries first, and its index
  file's modification time (0 when missing); None when there is none.

  Cheap (no checkpoint is read): a follower such as the side-car evaluator
  restores again only when this changes.
  """
  candidates, _ = _candidates(directory)
  if not candidates:
    return None
  index = candidates[-1] + ".index"
  written = tf.io.gfile.exists(index) and tf.io.gfile.stat(index).mtime_nsec
  return candidates[-1], int(written)


def _candidates(directory: str) -> tuple[list[str], str | None]:
  """(checkpoint paths, oldest first; what is wrong with the state file).

  From the state file; from the files on disk when it is damaged or its
  latest checkpoint is not there (no index file: a state file copied or
  edited by hand, or files deleted), since then it is no guide to them.
  What is wrong is None, "is damaged" or "names ckpt-N, which is not there".
  """
  try:
    listed = _read_state(directory)
  except checkpoint_state.Damaged:
    return _checkpoints_on_disk(directory), "is damaged"
  if listed is None:
    return [], None
  latest = os.path.join(directory, os.path.basename(listed.latest))
  if not tf.io.gfile.exists(latest + ".index"):
    named = os.path.basename(latest)
    return _checkpoints_on_disk(directory), f"names {named}, which is not there"
  return [
    os.path.join(directory, os.path.basename(n)) for n in listed.names
  ], None


def _read_state(directory: str) -> checkpoint_state.Listed | None:
  """What the directory's state file lists; None without a state file.

  Raises:
    checkpoint_state.Damaged: the state file holds no checkpoint state.
    UserError: it names a checkpoint outside `directory`.
  """
  path = os.path.join(directory, STATE_FILE)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path, "rb") as f:
    listed = checkpoint_state.parse(f.read())
  _check_inside(directory, path, listed)
  return listed


def _check_inside(
  directory: str, state_file: str, listed: checkpoint_state.Listed
) -> None:
  """Refuses a state file that names a checkpoint outside `directory`.

  TensorFlow restores any path the state file names (absolute, or `../`
  relative to it); an edited or foreign state file must not make a run
  continue from another run's checkpoint unnoticed.

  Raises:
    UserError: a named checkpoint is not directly in `directory`.
  """
  inside = os.path.normpath(directory)
  for named in listed.names:
    path = named if os.path.isabs(named) else os.path.join(directory, named)
    if os.path.dirname(os.path.normpath(path)) != inside:
      raise UserError(
        f"The checkpoint state file {state_file} names {named}, outside "
        f"{directory}; a run restores only checkpoints in its own directory: "
        "correct that line, or move the directory away to start over."
      )


def _checkpoints_on_disk(directory: str, glob=tf.io.gfile.glob) -> list[str]:
  """The checkpoint prefixes that have an index file, oldest first
  (`glob`: the filesystem's, TensorFlow's by default)."""
  found = []
  for index in glob(os.path.join(directory, "*.index")):
    match = _INDEX_FILE.fullmatch(os.path.basename(index))
    if match:
      found.append(
        (
          int(match.group("number")),
          os.path.join(directory, match.group("prefix")),
        )
      )
  return [prefix for _, prefix in sorted(found)]


def listed(directory: str, fs=None) -> list[str]:
  """The checkpoint prefixes the state file of `directory` lists, oldest
  first, the latest last; found from their index files when it is damaged;
  none without one.

  Args:
    directory: the checkpoint directory (BUCKET/PATH on `fs`).
    fs: a gcsfs filesystem `directory` is on; None: TensorFlow reads it.
  """
  if fs is None:
    return _candidates(directory)[0]
  return _state_on(fs, directory)[0]


def commit_state(
  directory: str,
  update: Callable[[list[str]], list[str]],
  *,
  fence: fencing.Fence = fencing.OPEN,
  fs=None,
) -> list[str]:
  """Rewrites the state file of `directory`, the commit point of its
  checkpoints: the one way a state file is written other than by a
  CheckpointManager's own (fenced) save. Its callers: a copy from the local
  tier (the chief's copy thread, a node agent persisting its dead worker's
  step) and the mend of a damaged state file.

  On Cloud Storage through gcsfs (`fs`) the state object is replaced only if
  its generation is still the one read before `update` (`ifGenerationMatch`):
  two writers never lose each other's update. One that finds the state
  changed checks its fence again (a writer whose lease another job took
  stops there) and merges again from what it reads now.

  Args:
    directory: the checkpoint directory (BUCKET/PATH on `fs`).
    update: `update(listed)`, the prefixes the state file is to list (the
      last one the latest), from those it lists now (`listed`; found from
      the files when it is damaged).
    fence: checked first (ctl.io.fencing): a writer that no longer holds
      the run directory commits nothing.
    fs: a gcsfs filesystem `directory` is on; None: TensorFlow writes it.

  Returns:
    The prefixes listed before and no longer (the caller removes them).

  Raises:
    LeaseLost: the fence failed; nothing was written.
  """
  fence.check(f"the checkpoint state file of {directory}")
  if fs is not None:
    return _commit_state_on(fs, directory, update, fence=fence)
  prefixes, _ = _candidates(directory)
  kept = update(prefixes)
  _rewrite_state(directory, kept)
  return [prefix for prefix in prefixes if prefix not in kept]


def _commit_state_on(fs, directory, update, *, fence) -> list[str]:
  """`commit_state` on Cloud Storage, conditioned on the object generation."""
  path = posixpath.join(directory, STATE_FILE)
  for _ in range(_COMMIT_TRIES):
    # Generation first: the text read after it is at least as new, and a
    # write conditioned on it fails if it changed.
    generation = mirror.object_generation(fs, path)
    prefixes, stamps = (
      _state_on(fs, directory) if generation != "0" else ([], {})
    )
    kept = update(prefixes)
    text = checkpoint_state.text(kept, stamps)
    try:
      mirror.put_if_generation(fs, path, text, generation=generation)
      return [prefix for prefix in prefixes if prefix not in kept]
    except FileExistsError:
      fence.check(f"the checkpoint state file of {directory}")
  raise OSError(
    f"The checkpoint state file of {directory} changed under each of "
    f"{_COMMIT_TRIES} tries to commit it."
  )


def _state_on(fs, directory: str) -> tuple[list[str], dict[str, float]]:
  """(`listed(directory, fs)`, the save time of each listed prefix the state
  file stamps)."""
  try:
    text = fs.cat_file(posixpath.join(directory, STATE_FILE))
  except FileNotFoundError:
    return [], {}
  try:
    listed_now = checkpoint_state.parse(text)
  except checkpoint_state.Damaged:
    return _checkpoints_on_disk(directory, glob=fs.glob), {}

  def prefix(name: str) -> str:
    return posixpath.join(directory, posixpath.basename(name))

  stamps = {prefix(name): stamp for name, stamp in listed_now.stamps.items()}
  return [prefix(name) for name in listed_now.names], stamps


def _rewrite_state(directory: str, prefixes: list[str]) -> None:
  """Writes a state file that lists `prefixes`, the last one the latest,
  each stamped with its index file's time (when it was saved), whole: a
  reader finds the old file or the new one."""
  stamps = {
    prefix: tf.io.gfile.stat(prefix + ".index").mtime_nsec / 1e9
    for prefix in prefixes
  }
  file_io.atomic_write_string_to_file(
    os.path.join(directory, STATE_FILE), checkpoint_state.text(prefixes, stamps)
  )


def _files_present(prefix: str) -> bool:
  """Whether the index and every data shard of a checkpoint exist."""
  if not tf.io.gfile.exists(prefix + ".index"):
    return False
  shards = tf.io.gfile.glob(prefix + ".data-*")
  if not shards:
    return False
  expected = int(shards[0].rsplit("-of-", 1)[1])
  return len(shards) == expected


def _raise_if_refused(what: str, directory: str, error: Exception) -> None:
  """Raises CannotWrite when `error` is a write the storage refused."""
  failure = write_failure(what, directory, error)
  if failure is not None:
    raise failure from error
