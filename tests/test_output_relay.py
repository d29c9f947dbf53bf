"""ctl.launch.output_relay: workers' lines reach the launcher's output whole."""

import os
import threading

from ctl.launch import output_relay


def test_lines_of_two_workers_arrive_whole_and_prefixed(tmp_path):
  lines_each = 2000
  with open(tmp_path / "out.txt", "w+") as out:
    relays, writers = [], []
    for rank in (0, 1):
      read_end, write_end = os.pipe()
      relays.append(
        output_relay.start(
          os.fdopen(read_end, "rb"), out, f"[worker {rank}] ".encode()
        )
      )

      def write(fd=write_end, rank=rank):
        with os.fdopen(fd, "wb", buffering=0) as pipe:
          for i in range(lines_each):
            pipe.write(f"line {i} of {rank} {'x' * (i % 97)}\n".encode())
          pipe.write(b"no newline at the end")

      writers.append(threading.Thread(target=write))
    for thread in writers:  # The relays started with output_relay.start.
      thread.start()
    for thread in writers + relays:
      thread.join(timeout=60)
    out.seek(0)
    got = out.read().splitlines()
  assert len(got) == 2 * (lines_each + 1)
  for rank in (0, 1):
    mine = [line for line in got if line.startswith(f"[worker {rank}] ")]
    assert mine[:-1] == [
      f"[worker {rank}] line {i} of {rank} {'x' * (i % 97)}"
      for i in range(lines_each)
    ]
    assert mine[-1] == f"[worker {rank}] no newline at the end"


def test_the_launchers_own_line(capsys):
  output_relay.log("restarting worker 1")
  assert capsys.readouterr().err == "[launcher] restarting worker 1\n"
