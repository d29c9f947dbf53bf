"""A process's exit without the final garbage collections (ctl.teardown):
what was alive at the end is left to the system, unfinalized, and the exit
handlers still run."""

import subprocess
import sys

import pytest

from trainer.testing import REPO

# Each test starts a Python process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

_SCRIPT = """
import atexit, sys
from ctl import teardown

class InACycle:
  def __init__(self):
    self.itself = self
  def __del__(self):
    print("collected at exit", flush=True)

if sys.argv[1] == "skip":
  teardown.skip_final_collections()
  teardown.skip_final_collections()  # Once is enough; twice is harmless.
alive_at_exit = InACycle()
unclosed = open(sys.argv[2], "w")  # Buffered, never closed or flushed.
unclosed.write("written")
atexit.register(print, "exit handler ran")
"""


@pytest.mark.parametrize("mode", ["skip", "normal"])
def test_only_the_final_collections_are_skipped(tmp_path, mode):
  written = tmp_path / "unclosed.txt"
  result = subprocess.run(
    [sys.executable, "-c", _SCRIPT, mode, str(written)],
    capture_output=True,
    text=True,
    cwd=REPO,
    check=True,
  )
  lines = result.stdout.splitlines()
  assert "exit handler ran" in lines
  # Only a normal exit finalizes what was alive at the end: the cycle, and
  # the file left open, which its buffer is written from. So ctl's own
  # entry points alone skip it, never a user's script.
  normal = mode == "normal"
  assert ("collected at exit" in lines) == normal
  assert written.read_text() == ("written" if normal else "")
