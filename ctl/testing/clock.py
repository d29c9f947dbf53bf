"""A wall clock a test can step, for whole process trees (`clock_jump.c`).

`WallClock(tmp_dir)` compiles the LD_PRELOAD library with the system's C
compiler; `env()` is what to add to a process's environment (children
inherit it), and `jump(seconds)` moves that tree's wall clock by `seconds`
from the true time, at once, while its monotonic clock runs on: what an NTP
step or a VM migration does to a real machine.
"""

import os
import shutil
import subprocess

_SOURCE = os.path.join(
  os.path.dirname(os.path.abspath(__file__)), "clock_jump.c"
)


class WallClock:
  """A steppable wall clock for the processes started with `env()`."""

  def __init__(self, directory: str):
    compiler = shutil.which("gcc") or shutil.which("cc")
    if not compiler:
      raise RuntimeError("a C compiler (gcc) is needed to step the wall clock")
    self._library = os.path.join(directory, "libclock_jump.so")
    self._offset_file = os.path.join(directory, "clock_offset")
    subprocess.run(
      [
        compiler,
        "-shared",
        "-fPIC",
        "-O2",
        "-o",
        self._library,
        _SOURCE,
        "-ldl",
      ],
      check=True,
    )
    self.jump(0)

  def env(self) -> dict[str, str]:
    """The environment variables that put a process on this clock."""
    return {"LD_PRELOAD": self._library, "CLOCK_JUMP_FILE": self._offset_file}

  def jump(self, seconds: int) -> None:
    """Sets the wall clock to the true time plus `seconds` (atomically)."""
    temporary = self._offset_file + ".tmp"
    with open(temporary, "w") as f:
      f.write(f"{int(seconds)}\n")
    os.replace(temporary, self._offset_file)
