"""A real Cloud Storage server for tests: gcp-storage-emulator in a process.

TensorFlow's own gs:// filesystem cannot be pointed at an emulator, but gcsfs
can (through `STORAGE_EMULATOR_HOST`), so Cloud Storage behaviour is tested
against this server. It runs as a separate process on a free loopback port and
keeps its objects on disk, so a test can stop it (a network outage), start it
again on the same port, and find the objects it had.

To stop it at an exact moment, `start(exit_on_upload=NAME)` makes the server
process exit, without answering or storing anything, when an upload of an
object whose name ends with NAME arrives: the client's connection drops right
before that object would land. `start(freeze_on_upload=NAME)` instead makes
it freeze itself with SIGSTOP there (the first time only): the client waits
for an answer that does not come until `resume()` sends SIGCONT.

`serve(data_dir=..., bucket=...)` starts the server, creates the bucket, points
`STORAGE_EMULATOR_HOST` at it for this process and its children, and stops it
on leaving; the tests' `gcs_emulator` fixture (tests/conftest.py) and the
checkpointing benchmark use it. The server exits by itself when the process
that started it dies.

Importing this module sets GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false (unless
set): with it on, gcsfs's default class probes each bucket over gRPC, which an
HTTP emulator never answers, and every call waits about 60 s.
"""

import argparse
from collections.abc import Callable, Iterator
import contextlib
import functools
import http
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

from ctl import processes
from ctl.distributed import ports

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

_HOST = "127.0.0.1"
_START_TIMEOUT_S = 30.0


class GcsEmulator:
  """One gcp-storage-emulator server process with its data on disk.

  Attributes:
    BUCKET: The bucket the tests' `gcs_emulator` fixture creates.
    port: The loopback port, the same across restarts.
    endpoint: The value for `STORAGE_EMULATOR_HOST`.
  """

  BUCKET = "test-bucket"

  def __init__(
    self,
    *,
    data_dir: str,
    host: str = _HOST,
    launch: Callable[[list[str]], subprocess.Popen] = subprocess.Popen,
  ):
    """Prepares a server; call `start()` to run it.

    Args:
      data_dir: An absolute directory where the server keeps its objects.
      host: The address it serves on (loopback by default; a node's own
        address on a cluster of namespaces, ctl.testing.netns_cluster).
      launch: Starts its command (e.g. on the bucket host's node).
    """
    self._data_dir = data_dir
    self._host, self._launch = host, launch
    self._process = None
    (self.port,) = ports.free_ports(1)
    self.endpoint = f"http://{host}:{self.port}"

  def start(
    self,
    *,
    exit_on_upload: str | None = None,
    freeze_on_upload: str | None = None,
  ) -> None:
    """Starts the server process and waits until it answers.

    Args:
      exit_on_upload: If given, the process exits when an upload of an object
        whose name ends with this arrives, before storing it.
      freeze_on_upload: If given, the process stops itself (SIGSTOP) the
        first time an upload of an object whose name ends with this arrives,
        before storing it.

    Raises:
      RuntimeError: If the server does not answer within 30 s.
    """
    command = [
      sys.executable,
      "-m",
      "ctl.testing.gcs_emulator",
      "--port",
      str(self.port),
      "--data_dir",
      self._data_dir,
      "--host",
      self._host,
    ]
    if exit_on_upload:
      command += ["--exit_on_upload", exit_on_upload]
    if freeze_on_upload:
      command += ["--freeze_on_upload", freeze_on_upload]
    self._process = self._launch(command)
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not self._answers():
      if self._process.poll() is not None or time.monotonic() > deadline:
        self.stop()
        raise RuntimeError(
          f"gcp-storage-emulator did not start on {self.endpoint}."
        )
      time.sleep(0.05)

  def stop(self) -> None:
    """Kills the server process (a no-op when it has already exited)."""
    if self._process is not None:
      self._process.kill()
      self._process.wait()
      self._process = None

  def wait_until_exited(self, *, timeout_s: float = 60.0) -> None:
    """Waits for a server started with `exit_on_upload` to exit by itself."""
    self._process.wait(timeout=timeout_s)
    self._process = None

  def wait_until_frozen(self, *, timeout_s: float = 60.0) -> None:
    """Waits for a server started with `freeze_on_upload` to freeze."""
    deadline = time.monotonic() + timeout_s
    while processes.state(self._process.pid) != "T":
      if time.monotonic() > deadline:
        raise TimeoutError(
          f"gcp-storage-emulator not frozen after {timeout_s} s."
        )
      time.sleep(0.1)

  def resume(self) -> None:
    """Lets a frozen server go on (SIGCONT)."""
    self._process.send_signal(signal.SIGCONT)

  def restart(
    self,
    *,
    exit_on_upload: str | None = None,
    freeze_on_upload: str | None = None,
  ) -> None:
    """Stops the server and starts it again on the same port and data."""
    self.stop()
    self.start(exit_on_upload=exit_on_upload, freeze_on_upload=freeze_on_upload)

  def create_bucket(self, name: str) -> None:
    """Creates a bucket through the JSON API, as `gsutil mb` would."""
    request = urllib.request.Request(
      f"{self.endpoint}/storage/v1/b?project=test",
      data=json.dumps({"name": name}).encode(),
      headers={"Content-Type": "application/json"},
      method="POST",
    )
    with urllib.request.urlopen(request, timeout=10):
      pass

  def filesystem(self):
    """A gcsfs client of this server, for a test to look at the objects."""
    import gcsfs  # pylint: disable=g-import-not-at-top

    return gcsfs.core.GCSFileSystem(
      endpoint_url=self.endpoint,
      token="anon",
      use_listings_cache=False,
      skip_instance_cache=True,
    )

  def _answers(self) -> bool:
    try:
      with urllib.request.urlopen(f"{self.endpoint}/", timeout=1):
        return True
    except OSError:  # Refused, reset, or an HTTP error (URLError).
      return False


@contextlib.contextmanager
def serve(*, data_dir: str, bucket: str) -> Iterator[GcsEmulator]:
  """Runs a `GcsEmulator` with `bucket` for the `with` block.

  `STORAGE_EMULATOR_HOST` points at it meanwhile (ctl.io.storage and gcsfs read
  it, in this process and in the processes it starts), and is put back after.

  Args:
    data_dir: An absolute directory where the server keeps its objects.
    bucket: The bucket to create.

  Yields:
    The running emulator.
  """
  emulator = GcsEmulator(data_dir=data_dir)
  emulator.start()
  saved = os.environ.get("STORAGE_EMULATOR_HOST")
  try:
    emulator.create_bucket(bucket)
    os.environ["STORAGE_EMULATOR_HOST"] = emulator.endpoint
    yield emulator
  finally:
    emulator.stop()
    if saved is None:
      os.environ.pop("STORAGE_EMULATOR_HOST", None)
    else:
      os.environ["STORAGE_EMULATOR_HOST"] = saved


def _serve(
  *,
  host: str,
  port: int,
  data_dir: str,
  exit_on_upload: str | None,
  freeze_on_upload: str | None,
) -> None:
  """Serves the emulator's JSON API until killed."""
  # pylint: disable=g-import-not-at-top
  from gcp_storage_emulator import server
  from gcp_storage_emulator import storage

  frozen = []

  class Storage(storage.Storage):
    """The emulator's object store, which can die or freeze on an upload."""

    def create_file(self, bucket_name, file_name, *args, **kwargs):
      if exit_on_upload and file_name.endswith(exit_on_upload):
        os._exit(1)  # pylint: disable=protected-access
      if (
        freeze_on_upload and file_name.endswith(freeze_on_upload) and not frozen
      ):
        frozen.append(file_name)
        os.kill(os.getpid(), signal.SIGSTOP)
      return super().create_file(bucket_name, file_name, *args, **kwargs)

  def exit_with_parent(parent_pid):
    # A test process that dies must not leave its server running.
    while os.getppid() == parent_pid:
      time.sleep(1)
    os._exit(0)  # pylint: disable=protected-access

  threading.Thread(
    target=exit_with_parent, args=(os.getppid(),), daemon=True
  ).start()
  _honour_generation_preconditions(server)
  httpd = http.server.HTTPServer(
    (host, port),
    functools.partial(server.RequestHandler, Storage(data_dir=data_dir)),
  )
  httpd.serve_forever()


def _honour_generation_preconditions(server) -> None:
  """Makes uploads and deletes honour `ifGenerationMatch`, as Cloud Storage does.

  gcp-storage-emulator ignores the precondition (ctl.resilience.lease relies on it: 0
  creates only a new object, N replaces or deletes only generation N). The
  server answers one request at a time, so the check and the write are one
  step, as on Cloud Storage.
  """
  # pylint: disable=g-import-not-at-top
  from gcp_storage_emulator.exceptions import NotFound
  from gcp_storage_emulator.handlers import objects

  def guarded(handler):
    def handle(request, response, storage, *args, **kwargs):
      wanted = request.query.get("ifGenerationMatch")
      if wanted:
        name = request.params.get("object_id") or request.query["name"][0]
        try:
          obj = storage.get_file_obj(request.params["bucket_name"], name)
          current = str(obj["generation"])
        except NotFound:
          current = "0"
        if current != wanted[0]:
          response.status = http.HTTPStatus.PRECONDITION_FAILED
          response.json({"error": {"code": 412, "message": "conditionNotMet"}})
          return None
      return handler(request, response, storage, *args, **kwargs)

    return handle

  wrapped = {objects.insert: guarded(objects.insert)}
  wrapped[objects.delete] = guarded(objects.delete)
  server.HANDLERS = tuple(
    (regex, {method: wrapped.get(f, f) for method, f in methods.items()})
    for regex, methods in server.HANDLERS
  )
  objects.insert = wrapped[objects.insert]  # The router's fallback for POST.


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--port", type=int, required=True)
  parser.add_argument("--data_dir", required=True)
  parser.add_argument("--exit_on_upload")
  parser.add_argument("--freeze_on_upload")
  parser.add_argument("--host", default=_HOST)
  args = parser.parse_args()
  _serve(
    host=args.host,
    port=args.port,
    data_dir=args.data_dir,
    exit_on_upload=args.exit_on_upload,
    freeze_on_upload=args.freeze_on_upload,
  )
