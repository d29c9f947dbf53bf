"""Worker output relayed to the launcher's own, each line whole and prefixed.

Every worker writes to two pipes; a thread per pipe copies its lines to the
launcher's stdout or stderr, each prefixed with who wrote it (`[worker 1] `).
One lock keeps lines from different workers, and the launcher's own lines
(`log`), from mixing within a line.
"""

import sys
import threading
from typing import IO, TextIO

_LOCK = threading.Lock()


def start(stream: IO[bytes], out: TextIO, prefix: bytes) -> threading.Thread:
  """Starts a daemon thread copying `stream`'s lines to `out` until its end."""
  thread = threading.Thread(
    target=_relay, args=(stream, out, prefix), daemon=True
  )
  thread.start()
  return thread


def _relay(stream: IO[bytes], out: TextIO, prefix: bytes) -> None:
  """Copies lines from `stream` to `out`, each prefixed with `prefix`."""
  with stream:
    for line in stream:
      with _LOCK:
        out.buffer.write(prefix + line.rstrip(b"\n") + b"\n")
        out.flush()


def log(message: str) -> None:
  """Writes one line of the launcher's own to stderr: `[launcher] message`."""
  with _LOCK:
    print(f"[launcher] {message}", file=sys.stderr, flush=True)
