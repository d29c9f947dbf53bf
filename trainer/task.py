"""The trainer: absl flags -> ctl.Task + ctl.RunOptions -> ctl.train.controller.run.

The only module that reads FLAGS (`trainer.flags` defines them): it checks
them, runs the job and maps how it ended to an exit code. The same command
runs on a laptop, in the container (`python -m trainer.task --flagfile=...`)
and as a Vertex AI job:

  python -m trainer.task --flagfile=configs/quickstart.cfg --model_dir=runs/q

Exit codes: 0 done; 2 a user error (one sentence on stderr); 143 (SIGTERM) or
130 (Ctrl-C) stopped on request after saving, re-run to continue; 75 stalled
(the stall watchdog, or start-up gave up waiting for a peer), re-run to
continue; 74 an output could not be written (disk full, permission lost),
re-run once there is space; 77 another trainer took the run directory's
lease over, which now owns the run (not worth a re-run); 1 anything else.
`--help` and `--helpfull` list the flags and exit 0.
"""

import atexit
import contextlib
import ctypes
import gc
import json
import logging as python_logging
import os
import platform
import sys
import threading
import traceback
import types

from absl import app
from absl import flags
from absl import logging

import ctl
from ctl.distributed import cluster as cluster_lib

from . import flags as trainer_flags

FLAGS = flags.FLAGS
# --help lists the main module's flags: the trainer's are defined next door.
flags.adopt_module_key_flags(trainer_flags)


def _fail(message: str, code: int) -> None:
  print(f"error: {message}", file=sys.stderr)
  # The error stays the last line: no warnings logged while the process
  # shuts down (e.g. TensorFlow's about a restore the error interrupted).
  python_logging.disable(python_logging.CRITICAL)
  sys.exit(code)


# Packages Keras imports whenever they are installed (matplotlib with the
# report and bench extras; scikit-learn in many a user's environment), for
# what the trainer never uses (plot galleries, scikit-learn estimator
# wrappers): about 1.2 s of CPU at every start of a worker, a third of
# importing Keras and TensorFlow.
# And SciPy, which TensorFlow's own Keras 1 engine imports (if installed) for
# the sparse inputs only that engine takes; tf.keras is Keras 3: 0.15 s more.
_UNUSED_KERAS_EXTRAS = ("matplotlib", "scipy", "sklearn")


@contextlib.contextmanager
def _hidden_from_imports(names):
  """Within it, importing one of `names` fails as if it were not installed.

  Only names not imported yet are hidden, and only while the block runs:
  after it they import as usual.
  """
  hidden = [name for name in names if name not in sys.modules]
  sys.modules.update(dict.fromkeys(hidden))  # None: "not installed".
  try:
    yield
  finally:
    for name in hidden:
      if sys.modules.get(name, ...) is None:  # Still hidden: unhide it.
        del sys.modules[name]


@contextlib.contextmanager
def _collector_paused():
  """Within it, Python's cyclic garbage collector does not run; after it,
  everything allocated so far is frozen out of its reach (`gc.freeze`).

  Importing TensorFlow and Keras allocates half a million objects that live as
  long as the process, and the collector, set off by the allocations, walks
  them again and again: about 1,000 collections and 0.5 s of CPU in a short
  digits run, at every start of a worker. Frozen, the imports are skipped by
  the run's own collections too (then about 260, 0.06 s in all). A collector
  that was off stays off.
  """
  enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    gc.freeze()
    if enabled:
      gc.enable()


# glibc's malloc returns freed memory to the system as soon as 128 KiB lie
# free at the top of a heap, and a worker's start (tracing, graph
# optimisation, the first loops) frees and takes back more than that again
# and again: each time the pages fault in anew. Kept instead (64 MiB at a
# heap's top; the mmap threshold fixed at the 32 MiB glibc's own rule stops
# at), a 40-step digits run made 110,000 page faults, not 300,000, and spent
# 0.8 s less CPU, 0.6 s of it in the kernel; its peak memory was 35 MB more
# on 2 cores. What it saves depends on the kernel: on another machine of
# ours (Linux 6.18, 2026-12-07) the same run made 88,000 faults, not
# 112,000, for about the same CPU. Each of malloc's arenas (about one per
# busy thread) may keep that much, so a host of many cores may keep more:
# set MALLOC_ARENA_MAX or malloc's own terms there. (mallopt's parameters: M_TRIM_THRESHOLD,
# M_TOP_PAD, M_MMAP_THRESHOLD.)
_MALLOC_TERMS = ((-1, 64 << 20), (-2, 64 << 20), (-3, 32 << 20))


def _malloc_keeps_freed_memory() -> None:
  """Sets glibc's malloc to keep the memory a worker frees for its next
  allocations (`_MALLOC_TERMS`), on Linux with glibc, unless the environment
  sets any of malloc's terms (a `MALLOC_*` variable, or `glibc.malloc.` in
  `GLIBC_TUNABLES`): the user's stand."""
  if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
    return
  if any(name.startswith("MALLOC_") for name in os.environ) or (
    "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", "")
  ):
    return
  try:
    mallopt = ctypes.CDLL(None).mallopt  # This process's C library.
  except (OSError, AttributeError):
    return
  for parameter, value in _MALLOC_TERMS:
    mallopt(parameter, value)


def main(argv):
  if len(argv) > 1:
    _fail(f"unexpected arguments {argv[1:]}; all options are --flags.", 2)
  # Imported here so `--help` and bad flags answer before TensorFlow loads.
  from . import checks  # pylint: disable=g-import-not-at-top

  config = types.SimpleNamespace(**FLAGS.flag_values_dict())
  try:
    checks.check(config, os.environ)
  except ctl.UserError as e:
    _fail(str(e), ctl.USER_ERROR_EXIT_CODE)
  if FLAGS.dry_run:  # What a run would do needs no TensorFlow.
    print(json.dumps(checks.describe(config, os.environ), indent=2))
    return
  _use_xla_cache(checks.xla_cache_dir(config))
  _malloc_keeps_freed_memory()
  with _hidden_from_imports(_UNUSED_KERAS_EXTRAS), _collector_paused():
    from . import job  # pylint: disable=g-import-not-at-top  (loads TF)
  _quiet_tensorflow_info()

  try:
    job.build_job(config).run()
  except ctl.Preempted as e:  # Not an error: the same command continues.
    logging.warning("%s", e)
    sys.exit(e.exit_code)
  except KeyboardInterrupt:  # Ctrl-C outside the train loop.
    _fail("interrupted; nothing was saved since the last checkpoint.", 130)
  except Exception as e:  # pylint: disable=broad-except
    code = ctl.exit_code(e)
    if code is None:
      raise
    _fail(str(e), code)


class _NoInfoFrom(python_logging.Filter):
  """Drops the records below WARNING logged by modules under a folder."""

  def __init__(self, folder: str):
    super().__init__()
    self._folder = os.path.join(folder, "")

  def filter(self, record: python_logging.LogRecord) -> bool:
    return record.levelno >= python_logging.WARNING or not (
      record.pathname.startswith(self._folder)
    )


def _quiet_tensorflow_info() -> None:
  """Keeps TensorFlow's own INFO lines out of the log at the default
  verbosity: they would outnumber the run's own (a "Sharding callback
  duration" at every checkpoint save, the export's asset, fingerprint and
  renamed-input lines). TensorFlow logs them through absl as ctl does, so
  they are told apart by the module that logged them. Its warnings and
  errors still print, and `--verbosity=1` (debug) shows everything."""
  if logging.get_verbosity() < logging.DEBUG:
    folder = os.path.dirname(sys.modules["tensorflow"].__file__)
    logging.get_absl_handler().addFilter(_NoInfoFrom(folder))


def _use_xla_cache(directory: str | None) -> None:
  """Points TensorFlow's persistent XLA cache at `directory` (None: leaves
  it as it is). XLA reads TF_XLA_FLAGS once, when TensorFlow first makes
  its devices, so this runs before TensorFlow loads; a directory that cannot
  be made is one warning, and the start compiles as without a cache."""
  if directory is None:
    return
  try:
    os.makedirs(directory, mode=0o700, exist_ok=True)
  except OSError as e:
    logging.warning("No XLA cache in %s (%s); XLA compiles anew.", directory, e)
    return
  given = os.environ.get("TF_XLA_FLAGS", "")
  if "--tf_xla_persistent_cache_directory" not in given:
    os.environ["TF_XLA_FLAGS"] = (
      f"{given} --tf_xla_persistent_cache_directory={directory}".strip()
    )


def _parse_flags(argv):
  """absl's flag parsing, with a bad flag reported as a user error (exit 2).

  absl's --help, --helpshort, --helpfull and --helpxml print and exit 1, the
  only exits of parsing; a help that was asked for is a success here (exit
  0), as for the other console scripts. --helpfull lists the trainer's flags
  by topic (`trainer.flags.TOPICS`).
  """
  if {"--helpfull", "-helpfull"} & set(argv[1:]):
    print(f"{__doc__}\nflags:\n{trainer_flags.help_by_topic(FLAGS)}")
    sys.exit(0)
  try:
    return FLAGS(argv)
  except flags.Error as e:
    _fail(f"{' '.join(str(e).split())}; see --helpshort.", 2)
  except SystemExit:
    sys.exit(0)


def _describe_as_main() -> None:
  """Makes absl's --help describe the trainer when it runs as `ctl-train`.

  absl's --help prints __main__'s docstring and the key flags of the module
  named sys.argv[0]; under the console script __main__ is pip's wrapper (no
  docstring) and sys.argv[0] its path, so without this the help is a bare
  usage line.
  """
  main_module = sys.modules["__main__"]
  if not main_module.__doc__:
    main_module.__doc__ = __doc__
  for flag in FLAGS.get_key_flags_for_module(__name__):
    FLAGS.register_key_flag_for_module(sys.argv[0], flag)


def run():
  """Console-script entry point (`ctl-train`)."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  _describe_as_main()
  try:
    app.run(main, flags_parser=_parse_flags)
  except SystemExit as e:
    if _ends_at_once(e.code):
      _exit_at_once(e.code or 0)
    raise
  except Exception:  # pylint: disable=broad-except
    traceback.print_exc()  # As the interpreter would, then exit 1.
    _exit_at_once(1)


def _ends_at_once(code) -> bool:
  """Whether the process with exit `code` skips the interpreter's teardown:
  a failed run, and a clean end of a one-process job (`_exit_at_once`)."""
  if code is None or code == 0:
    try:
      return cluster_lib.resolve().num_workers == 1
    except ctl.UserError:
      return False
  return isinstance(code, int) and 0 < code < 128  # Not a preemption.


def _exit_at_once(code: int) -> None:
  """Ends the process now, without the interpreter's teardown.

  A worker that failed (a peer died under it, a stall, a user error) is
  restarted as soon as its process has exited, and the interpreter's exit
  tears TensorFlow's runtime down first: seconds on a restart's critical
  path (about 7 s for the small CNN's chief after its peer's SIGKILL, on 2
  busy cores; benchmarks/recovery/restart.py). A one-process job that ended
  cleanly pays the same teardown for nothing (2 to 4 s after its "Done" line on 2
  busy cores, 8 to 17 s with fp16). What the run keeps is written, closed
  and fenced before it gets here, so this does what matters of a normal
  exit (threads that are not daemons are joined, exit handlers run, which
  flushes the logs, and the standard streams are flushed) and skips the
  rest. A clean end of a multi-worker job and a stop on request (a
  preemption's 128 + signal) keep the normal exit: their peers may still be
  ending with them.
  """
  for thread in threading.enumerate():
    if thread is not threading.current_thread() and not thread.daemon:
      thread.join()
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


if __name__ == "__main__":
  run()
