"""SavedModel export with the task's serving signature.

The `serving_default` signature is made from the model's own inputs (a dict
of named inputs where the model takes a dict) and returns its outputs, or is
the task's own (a function and its input signature).

Every worker exports (saving may read synchronized variables collectively),
but only the chief writes to the real directory; the others write to a
temporary directory that is removed at once.

What a reader finds in the export directory is always a whole SavedModel that
says which step it holds (`MARKER`, read by `exported_step`), or no marker:

- A local directory is written beside the target (`<dir>.partial-<pid>`),
  marker included, and swapped into place with one atomic rename (Linux
  `renameat2(RENAME_EXCHANGE)`; elsewhere the old one is moved aside first,
  so a reader finds the old model, none, or the new one).
- A directory on Cloud Storage (gcsfs or FUSE, staged by ctl.io.storage) cannot
  be renamed atomically: the remote marker is removed before any file of the
  new model is uploaded and written after the last one, so the marker is the
  commit point. TensorFlow's own gs:// route (`storage=tf`) keeps the same
  order in place.

Only the lease holder commits (ctl.io.fencing: checked before the swap or the
marker) and removes what killed exports left beside the target: a half-written
new model, or, after a kill between the swap and its cleanup, the old one
(`remove_leftovers`, also when the run has nothing to export).
"""

from collections.abc import Callable
import ctypes
import glob
import json
import os
import shutil
import tempfile
import uuid

from absl import logging
import keras
import tensorflow as tf

from ctl.checkpoint.serving import FROM_MODEL
from ctl.errors import UserError
from ctl.errors import error_sentence
from ctl.io import fencing
from ctl.io import storage

# The file in an export directory that names the step the SavedModel holds.
MARKER = "ctl_export.json"
_PARTIAL = ".partial-"
_RENAME_EXCHANGE = 2  # <linux/fs.h>
_AT_FDCWD = -100


def export_saved_model(
  *,
  model: keras.Model,
  location: storage.Location | None,
  serving,
  step: int,
  fence: fencing.Fence = fencing.OPEN,
  write_beside: Callable[[str], None] | None = None,
) -> None:
  """Exports `model` with a `serving_default` signature, then commits it.

  Args:
    model: the trained model.
    location: where the chief's SavedModel goes (published to Cloud Storage
      when it lives there); None on the other workers, which write to a
      temporary directory that is removed.
    serving: "model" (the model's own inputs and outputs) or an object with
      `fn(model, inputs) -> {name: tensor}` and its `input_signature`
      (ctl.Serving).
    step: the global step of `model`, recorded in `MARKER`.
    fence: checked right before the commit (ctl.io.fencing).
    write_beside: called with the directory being written, after the
      SavedModel and before the commit, to add files that the same commit
      makes whole (ctl.KeepBest's checkpoint); on every worker.

  Raises:
    LeaseLost: another trainer took the lease; nothing was committed.
  """
  archive = serving_archive(model, serving)

  def write_out(directory: str) -> None:
    archive.write_out(directory, verbose=False)
    if write_beside is not None:
      write_beside(directory)

  if location is None:
    _write_and_discard(write_out)
    return
  target = location.local_path
  what = f"the SavedModel of step {step}"
  if "://" in target:  # TensorFlow's own filesystem: no rename, commit last.
    fence.check(what)
    _remove_marker(target)
    write_out(target)
    fence.check(what)
    _write_marker(target, step)
    _log_exported(what, location)
    return
  remove_leftovers(location, fence=fence)
  partial = f"{target}{_PARTIAL}{os.getpid()}-{uuid.uuid4().hex[:8]}"
  try:
    write_out(partial)
    _write_marker(partial, step)
    fence.check(what)
    _swap_into_place(partial, target)
  finally:
    shutil.rmtree(partial, ignore_errors=True)
  location.publish(commit_file=MARKER, replaces=True)
  _log_exported(what, location)


def _log_exported(what: str, location: storage.Location) -> None:
  """Says where the committed SavedModel is (the log's only line of it)."""
  logging.info("Exported %s to %s.", what, location.url)


def _write_and_discard(write_out: Callable[[str], None]) -> None:
  """A worker that is not the chief writes its export to a temporary
  directory (saving may read synchronized variables collectively) and
  removes it."""
  scratch = tempfile.mkdtemp(prefix="ctl_export_")
  try:
    write_out(scratch)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


def serving_archive(model: keras.Model, serving) -> keras.export.ExportArchive:
  """`model` with its `serving_default` endpoint, ready to write out.

  Raises:
    UserError: the model has no declared inputs to serve from (a subclassed
      model not built from `keras.Input`) and no serving function is given.
  """
  fn, signature = _serving_fn(model, serving)
  archive = keras.export.ExportArchive()
  archive.track(model)

  def serving_default(inputs):
    return fn(model, inputs)

  archive.add_endpoint(
    name="serving_default", fn=serving_default, input_signature=[signature]
  )
  return archive


def _serving_fn(model: keras.Model, serving):
  """(fn(model, inputs) -> outputs, input_signature) of `serving`."""
  if serving == FROM_MODEL:
    return _from_model(model)
  return serving.fn, serving.input_signature


def check_serving(model: keras.Model, serving) -> None:
  """UserError when `serving` cannot work for `model`, found before
  training rather than at the export after the last step: a model with no
  declared inputs and no serving function, a signature whose structure is
  not the model's inputs', or one the model cannot take (another width,
  another dtype) or whose outputs are not tensors by name. A `ctl.Serving`
  function is traced on the built model and called once on a request of one
  example (zeros; about 1 s for ResNet50 on 2 CPU cores)."""
  if serving is None:
    return
  if serving == FROM_MODEL:
    # Made from the model's own inputs and outputs: nothing of the user's
    # to try, and a trace at every start (restarts too) costs time.
    _from_model(model)
    return
  _check_structure(model, serving)
  fn, signature = _serving_fn(model, serving)
  try:
    traced = tf.function(
      lambda inputs: fn(model, inputs), autograph=False
    ).get_concrete_function(signature)
    traced(_example(signature))  # What only running shows (a cast).
  except (
    TypeError, ValueError, AttributeError, NotImplementedError,
    tf.errors.OpError,
  ) as e:  # fmt: skip
    raise UserError(
      f"Task.serving cannot serve the model with its input_signature "
      f"{_spec_text(signature)}: {error_sentence(e)}"
    ) from None
  outputs = traced.structured_outputs
  if not isinstance(outputs, tf.Tensor) and not (
    isinstance(outputs, dict)
    and all(isinstance(v, tf.Tensor) for v in outputs.values())
  ):
    raise UserError(
      "Task.serving cannot serve the model: its function must return a "
      f"tensor or a dict of tensors by name, not {_spec_text(outputs)}."
    )


def _example(signature):
  """A request of one example for `signature`: zeros (empty strings), a
  dimension of unknown size 1."""

  def zeros(spec: tf.TensorSpec) -> tf.Tensor:
    shape = [1 if d is None else d for d in spec.shape]
    if spec.dtype == tf.string:
      return tf.fill(shape, "")
    return tf.zeros(shape, spec.dtype)

  return tf.nest.map_structure(zeros, signature)


def _check_structure(model: keras.Model, serving) -> None:
  """UserError when `serving`'s signature is not the model's inputs'
  structure (a model with declared inputs)."""
  inputs = _model_inputs(model)
  if inputs is None:
    return  # Nothing to compare with: the user's function decides.
  try:
    tf.nest.assert_same_structure(
      inputs, serving.input_signature, check_types=False
    )
  except (ValueError, TypeError) as e:
    raise UserError(
      "Task.serving's input_signature does not have the structure of the "
      f"model's inputs ({error_sentence(e)})."
    ) from None


def _spec_text(structure) -> str:
  """A structure of tensors or specs as `dtype[shape]` text."""
  return str(
    tf.nest.map_structure(
      lambda t: (
        f"{t.dtype.name}{list(t.shape)}"
        if hasattr(t, "dtype")
        else type(t).__name__
      ),
      structure,
    )
  ).replace("None", "?")


def _model_inputs(model: keras.Model):
  """The model's declared inputs (a KerasTensor or a structure of them), or
  None for a model with none (subclassed)."""
  try:
    return model.input  # A functional model's structure (a dict, ...).
  except (AttributeError, ValueError):
    pass
  inputs = getattr(model, "inputs", None)  # A Sequential's list.
  if not inputs:
    return None
  return inputs[0] if len(inputs) == 1 else list(inputs)


def _from_model(model: keras.Model):
  """(fn, input_signature) serving the model's own inputs and outputs."""
  inputs = _model_inputs(model)
  if inputs is None:
    raise UserError(
      "The model declares no inputs (a subclassed model), so no serving "
      "signature can be made from them: give Task.serving=ctl.Serving(fn, "
      "input_signature), or Task.serving=None for no export."
    )
  signature = tf.nest.map_structure(
    lambda t: tf.TensorSpec(t.shape, t.dtype, name=_input_name(t)), inputs
  )

  def serve(model, inputs):
    outputs = model(inputs, training=False)
    if isinstance(outputs, (list, tuple)):  # By the output layers' names.
      outputs = dict(zip(model.output_names, outputs))
    elif not isinstance(outputs, dict):
      outputs = {"outputs": outputs}
    return {
      name: tf.cast(value, tf.float32) if value.dtype.is_floating else value
      for name, value in outputs.items()
    }

  return serve, signature


def _input_name(tensor) -> str:
  """An input's name for the signature (Keras names inputs by layer)."""
  return tensor.name.split(":")[0].split("/")[0]


def remove_leftovers(
  location: storage.Location | None, *, fence: fencing.Fence = fencing.OPEN
) -> None:
  """Removes what killed exports left beside the export directory.

  `<dir>.partial-<pid>-<id>` (and `.old`) hold a half-written model, or the
  old one when a kill came after the swap and before its cleanup. Never the
  export directory itself, and only by the lease holder (`fence`).

  Args:
    location: the chief's export location, or None (nothing to do).
    fence: checked first (ctl.io.fencing).

  Raises:
    LeaseLost: another trainer took the lease; nothing was removed.
  """
  if location is None or "://" in location.local_path:
    return
  leftovers = glob.glob(glob.escape(location.local_path) + _PARTIAL + "*")
  if leftovers:
    fence.check("the removal of leftover exports")
  for leftover in leftovers:
    shutil.rmtree(leftover, ignore_errors=True)


def exported_step(location: storage.Location | None) -> int | None:
  """The step of the committed SavedModel at `location`, or None.

  None when there is none, it has no marker (an export that never finished
  committing, or one written before markers existed), or the location is
  mirrored to Cloud Storage: a restarted process does not trust a staging
  copy that may not have reached the bucket, so it exports again.
  """
  if location is None or location.mirrored:
    return None
  path = os.path.join(location.local_path, MARKER)
  try:
    with tf.io.gfile.GFile(path) as f:
      return int(json.load(f)["step"])
  except (tf.errors.NotFoundError, ValueError, KeyError, TypeError):
    return None


def _write_marker(directory: str, step: int) -> None:
  with tf.io.gfile.GFile(os.path.join(directory, MARKER), "w") as f:
    json.dump({"step": step}, f)


def _remove_marker(directory: str) -> None:
  path = os.path.join(directory, MARKER)
  if tf.io.gfile.exists(path):
    tf.io.gfile.remove(path)


def _swap_into_place(partial: str, target: str) -> None:
  """Puts directory `partial` at `target`; the old target ends at `partial`.

  A reader of `target` sees the old directory or the new one, never a mix:
  an atomic exchange where the kernel offers one, else two renames (between
  them `target` is briefly absent).
  """
  if not os.path.lexists(target):
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    os.rename(partial, target)
    return
  libc = ctypes.CDLL(None, use_errno=True)
  renameat2 = getattr(libc, "renameat2", None)
  if renameat2 and (
    renameat2(
      _AT_FDCWD,
      os.fsencode(partial),
      _AT_FDCWD,
      os.fsencode(target),
      _RENAME_EXCHANGE,
    )
    == 0
  ):
    return
  aside = partial + ".old"
  os.rename(target, aside)
  os.rename(partial, target)
  os.rename(aside, partial)
