"""The checkpoint state file ("checkpoint") as text: its one parser and writer.

`tf.train.CheckpointManager` commits a checkpoint by writing this file last:
it lists the checkpoints, oldest first, names the latest and stamps each with
its save time. Everything in ctl that reads it (a restore, the mirror's fetch
and its removal of what a replaced state listed, a conditional commit on
Cloud Storage) parses it here, and everything that writes it other than the
manager writes this module's text, so they agree on what a damaged file is
and carry the save times the manager wrote.
"""

import dataclasses
import posixpath
import time

from google.protobuf import text_format

STATE_FILE = "checkpoint"


class Damaged(ValueError):
  """The text is no checkpoint state: garbage, binary, empty, or naming no
  latest checkpoint."""


@dataclasses.dataclass(frozen=True)
class Listed:
  """What a state file says.

  Attributes:
    names: the checkpoints it lists as written (relative or absolute paths),
      oldest first, the latest last (appended when the list lacks it).
    latest: the checkpoint it names as the latest.
    stamps: each listed name's save time (seconds since the epoch), where the
      file gives one.
  """

  names: tuple[str, ...]
  latest: str
  stamps: dict[str, float]


def parse(text: bytes) -> Listed:
  """The checkpoints state file text `text` lists.

  Raises:
    Damaged: `text` holds no checkpoint state.
  """
  try:
    state = text_format.Parse(text.decode("utf-8"), _proto()())
  except (UnicodeDecodeError, text_format.ParseError) as e:
    raise Damaged() from e
  if not state.model_checkpoint_path:
    raise Damaged()
  names = list(state.all_model_checkpoint_paths)
  stamps = dict(zip(names, state.all_model_checkpoint_timestamps))
  if state.model_checkpoint_path not in names:
    names.append(state.model_checkpoint_path)
  return Listed(tuple(names), state.model_checkpoint_path, stamps)


def text(prefixes: list[str], stamps: dict[str, float]) -> bytes:
  """A state file listing `prefixes` (written relative, as the manager
  writes them), the last one the latest, each stamped with `stamps[prefix]`
  (now where it has none)."""
  now = time.time()
  times = [stamps.get(prefix, now) for prefix in prefixes]
  state = _proto()(
    model_checkpoint_path=posixpath.basename(prefixes[-1]),
    all_model_checkpoint_paths=[posixpath.basename(p) for p in prefixes],
    all_model_checkpoint_timestamps=times,
    last_preserved_timestamp=min(min(times), now) - 1,
  )
  return text_format.MessageToString(state).encode()


def _proto():
  """The CheckpointState message class (TensorFlow's; imported when first
  needed, since importing TensorFlow takes seconds)."""
  from tensorflow.python.checkpoint import checkpoint_management  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import

  return checkpoint_management.CheckpointState
