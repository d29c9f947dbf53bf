"""The exit of a process of ctl's own, without its final garbage collections.

A Python process ends with garbage collections that walk every object still
alive: half a million after importing TensorFlow and Keras. They cost about
0.7 s of CPU in a process that only imported TensorFlow (2 cores,
2026-12-07), paid at every exit of a node agent that persisted its dead
worker's step, of a warm spare that was not needed and of every benchmark
section.

`skip_final_collections` freezes the objects alive at exit (`gc.freeze` in
an exit handler), so those collections pass them by: the other exit
handlers still run and the standard streams are flushed, but nothing alive
at the end is finalized, as after `os._exit` (the memory goes back to the
system with the process). A file left open and unflushed at the end loses
what it buffered, so only a process whose every output is closed before it
exits may ask for it: ctl's own entry points (and the test suite's pytest
processes), never a process that runs a user's code: not `ctl.run` in a
user's script, nor a warm spare once it runs the worker's module (a user's
module-level file, closed only by the interpreter's teardown, would be cut
short).
"""

import atexit
import gc

_registered = False


def skip_final_collections() -> None:
  """Makes this process's exit skip the final garbage collections (once,
  however often it is called)."""
  global _registered  # pylint: disable=global-statement
  if not _registered:
    atexit.register(gc.freeze)
    _registered = True
