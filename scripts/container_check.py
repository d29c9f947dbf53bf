"""Builds the trainer image and checks it in real containers (podman).

No Docker engine and no Docker Hub here, so, as root on Debian bookworm:
  1. installs buildah, podman, debootstrap and runc with apt (when missing);
  2. configures podman for this sandbox in a private directory (runc,
     cgroupfs, explicit ulimits, overlay storage), leaving the host's
     /etc/containers and any other image store alone;
  3. makes a stand-in base image, `debootstrap --variant=minbase bookworm`
     plus Python 3.11 and pip (the TensorFlow GPU image's Python), committed
     with buildah;
  4. builds the project's own Dockerfile with only BASE_IMAGE changed, then
     rebuilds it after a code-only change to show the dependency layer (with
     TensorFlow) is reused;
  5. runs the checks below in containers, prints each result, and removes
     its containers, images and storage unless --keep is given.

Checks:
  1. the quickstart trains as a non-root user passed with --user (as `docker
     run --user $(id -u):$(id -g)`), into a mounted directory; every output
     is owned by that host user;
  2. `podman stop` during training exits 143 after a checkpoint at the
     agreed step, and the same `podman run` resumes from it to the end;
  3. two containers (chief + worker, host network) with Vertex AI's
     TF_CONFIG, CLUSTER_SPEC and AIP_* directories train together and write
     only where Vertex AI expects;
  4. every configs/vertex/*.yaml pool's containerSpec.args pass the entry
     point's --dry_run, with gs://your-bucket served by a mounted local
     directory at /gcs/your-bucket as Cloud Storage FUSE does on Vertex AI;
  5. --help and a bad flag answer as outside the container (a bad flag: exit
     2, one line on stderr);
  6. the image's default user is not root and can write nothing outside its
     own directories and the world-writable scratch directories.

Usage: make container-check   (or: python3 scripts/container_check.py
[--keep] [--workdir=DIR] [--mirror=URL] [--host_user=UID:GID]).
It uses only Python's standard library and Debian's python3-yaml, so it runs
with the system Python before the project is installed anywhere.
"""

import argparse
import contextlib
import dataclasses
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
# Standard library only, like this script, so the system Python can import it.
from ctl.testing import events as events_lib  # noqa: E402  # pylint: disable=g-import-not-at-top
from trainer import testing  # noqa: E402  # pylint: disable=g-import-not-at-top

APT_PACKAGES = ("buildah", "podman", "debootstrap", "runc", "python3-yaml")
BASE_PACKAGES = "python3,python3-pip,python3-venv,python-is-python3"
BASE_IMAGE = "localhost/ctl-standin-base:bookworm"
IMAGE = "localhost/ctl-trainer:check"
REBUILT_IMAGE = "localhost/ctl-trainer:rebuild"
CONTAINER_PREFIX = "ctl-check-"
# The host's CA bundle: the stand-in base trusts what the host trusts (a
# sandbox may reach PyPI only through a TLS-inspecting proxy).
CA_BUNDLE = pathlib.Path("/etc/ssl/certs/ca-certificates.crt")
# Writable by the image's user by design: its home, the image's relative
# output directory, and the world-writable sticky scratch directories.
ALLOWED_WRITABLE = ("/tmp", "/var/tmp", "/run/lock", "/var/lock", "/app/runs")
# The shipped Vertex AI configs' placeholder bucket, served at /gcs/BUCKET.
BUCKET = "your-bucket"
# `ctl.progress.EVENTS_ENV`, which imports absl: not on the system Python.
EVENTS_ENV = "CTL_EVENTS"

CONTAINERS_CONF = """\
# Written by scripts/container_check.py for a sandbox where raising
# RLIMIT_NOFILE is not permitted and crun refuses hybrid cgroups.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "{workdir}/libpod"
"""

STORAGE_CONF = """\
# Written by scripts/container_check.py: a private image store.
[storage]
driver = "overlay"
graphroot = "{workdir}/storage"
runroot = "{workdir}/run"
"""


class CheckFailed(Exception):
  """A check saw the image misbehave; the message says how."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Context:
  """What every check gets.

  Attributes:
    work: A directory for the check's mounted host directories.
    host_uid: The host user that check 1 runs the trainer as (--user).
    host_gid: Its group.
    image_uid: The image's default user, as Vertex AI runs it.
    image_gid: Its group.
  """

  work: pathlib.Path
  host_uid: int
  host_gid: int
  image_uid: int
  image_gid: int


def _run(cmd, *, check=True, timeout=900, **kwargs):
  """Runs `cmd`, capturing text output; raises CheckFailed if it fails."""
  result = subprocess.run(
    [str(c) for c in cmd],
    capture_output=True,
    text=True,
    timeout=timeout,
    check=False,
    **kwargs,
  )
  if check and result.returncode != 0:
    raise CheckFailed(
      f"{' '.join(map(str, cmd[:3]))} ... exited "
      f"{result.returncode}: {_tail(result)}"
    )
  return result


def _tail(result, lines=15) -> str:
  text = (result.stdout or "") + (result.stderr or "")
  return "\n".join(text.strip().splitlines()[-lines:])


def _install_packages() -> None:
  """Installs the apt packages this script needs, only those missing."""
  missing = [
    package
    for package in APT_PACKAGES
    if "install ok installed"
    not in _run(
      ["dpkg-query", "-W", "-f=${Status}", package], check=False
    ).stdout
  ]
  if not missing:
    return
  print(f"apt-get install {' '.join(missing)}", flush=True)
  env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
  _run(["apt-get", "update", "-qq"], env=env)
  _run(
    ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    env=env,
  )


def _configure(workdir: pathlib.Path) -> None:
  """Points podman and buildah at this run's own configuration and store."""
  workdir.mkdir(parents=True, exist_ok=True)
  containers_conf = workdir / "containers.conf"
  storage_conf = workdir / "storage.conf"
  containers_conf.write_text(CONTAINERS_CONF.format(workdir=workdir))
  storage_conf.write_text(STORAGE_CONF.format(workdir=workdir))
  os.environ["CONTAINERS_CONF"] = str(containers_conf)
  os.environ["CONTAINERS_STORAGE_CONF"] = str(storage_conf)


def _image_exists(image: str) -> bool:
  return _run(["podman", "image", "exists", image], check=False).returncode == 0


def _image_size(image: str) -> int:
  return int(
    _run(["podman", "image", "inspect", "--format", "{{.Size}}", image]).stdout
  )


def _make_base(mirror: str) -> None:
  """Commits debootstrap's minimal bookworm with Python as BASE_IMAGE."""
  container = _run(["buildah", "from", "scratch"]).stdout.strip()
  try:
    root = pathlib.Path(_run(["buildah", "mount", container]).stdout.strip())
    _run(
      [
        "debootstrap",
        "--variant=minbase",
        f"--include={BASE_PACKAGES}",
        "bookworm",
        root,
        mirror,
      ],
      timeout=1800,
    )
    for cache in ("var/lib/apt/lists", "var/cache/apt/archives"):
      shutil.rmtree(root / cache, ignore_errors=True)
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    config = ["--env", f"PATH={path}", "--cmd", "/bin/bash"]
    if CA_BUNDLE.is_file():
      shutil.copyfile(CA_BUNDLE, root / CA_BUNDLE.relative_to("/"))
      config += [
        "--env",
        f"PIP_CERT={CA_BUNDLE}",
        "--env",
        f"SSL_CERT_FILE={CA_BUNDLE}",
      ]
    _run(["buildah", "umount", container])
    _run(["buildah", "config", *config, container])
    _run(["buildah", "commit", "--rm", container, BASE_IMAGE])
  except BaseException:
    _run(["buildah", "rm", container], check=False)
    raise


def _build(context: pathlib.Path, tag: str) -> str:
  """Builds the Dockerfile in `context` with the stand-in base; the log."""
  result = _run(
    [
      "podman",
      "build",
      "--layers",
      "--build-arg",
      f"BASE_IMAGE={BASE_IMAGE}",
      "-t",
      tag,
      context,
    ],
    timeout=3600,
  )
  return result.stdout + result.stderr


def _dependency_layer_reused(build_log: str) -> bool:
  """Whether the step that installs the pins came from the layer cache."""
  lines = build_log.splitlines()
  for i, line in enumerate(lines):
    if line.startswith("STEP") and "pip install -r" in line:
      return i + 1 < len(lines) and lines[i + 1].startswith("--> Using cache")
  raise CheckFailed("the build log has no `pip install -r` step")


def _code_change_context(workdir: pathlib.Path) -> pathlib.Path:
  """A copy of the build context with one Python file changed."""
  context = workdir / "context"
  files = _run(
    ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
    cwd=REPO,
  ).stdout.split("\0")
  for name in filter(None, files):
    source = REPO / name
    if source.is_file() and not source.is_symlink():
      target = context / name
      target.parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(source, target)
  with open(context / "trainer" / "task.py", "a") as f:
    f.write("# A code-only change for scripts/container_check.py.\n")
  return context


def _podman_run(name, args, *, timeout=900, **options):
  """`podman run --rm` of the image to its end; returns the process."""
  return _run(
    _podman_run_command(name, args, **options), check=False, timeout=timeout
  )


def _podman_run_command(
  name,
  args,
  *,
  user=None,
  volumes=(),
  env=None,
  network="none",
  entrypoint=None,
) -> list[str]:
  """The `podman run --rm` command line; no network unless asked for."""
  command = [
    "podman",
    "run",
    "--rm",
    f"--name={CONTAINER_PREFIX}{name}",
    f"--network={network}",
  ]
  if user:
    command.append(f"--user={user}")
  if entrypoint:
    command.append(f"--entrypoint={entrypoint}")
  command += [f"--volume={host}:{inside}" for host, inside in volumes]
  command += [f"--env={key}={value}" for key, value in (env or {}).items()]
  return [*command, IMAGE, *args]


def _owned_dir(path: pathlib.Path, uid: int, gid: int) -> pathlib.Path:
  path.mkdir(parents=True)
  os.chown(path, uid, gid)
  return path


def _owners(root: pathlib.Path) -> set[tuple[int, int]]:
  return {(p.stat().st_uid, p.stat().st_gid) for p in root.rglob("*")}


def _train_steps(flagfile: str) -> int:
  text = (REPO / flagfile).read_text()
  return int(re.search(r"^--train_steps=(\d+)$", text, re.MULTILINE).group(1))


def _summary(model_dir: pathlib.Path) -> dict:
  return json.loads((model_dir / "train_summary.json").read_text())


def _expect(condition: bool, message: str) -> None:
  if not condition:
    raise CheckFailed(message)


def _image_user_ids() -> tuple[int, int]:
  """The uid and gid of the image's default user."""
  ids = _podman_run("id", ["-c", "id -u; id -g"], entrypoint="sh").stdout
  uid, gid = map(int, ids.split())
  return uid, gid


def check_quickstart(ctx: Context) -> str:
  """Check 1: `configs/quickstart.cfg` as the host user, into a mount."""
  _expect(ctx.host_uid != 0, "the host user for --user must not be root")
  out = _owned_dir(ctx.work / "quickstart", ctx.host_uid, ctx.host_gid)
  result = _podman_run(
    "quickstart",
    ["--flagfile=configs/quickstart.cfg", "--model_dir=/out/quickstart"],
    user=f"{ctx.host_uid}:{ctx.host_gid}",
    volumes=[(out, "/out")],
  )
  _expect(result.returncode == 0, f"exit {result.returncode}: {_tail(result)}")
  model_dir = out / "quickstart"
  steps = _train_steps("configs/quickstart.cfg")
  _expect(
    _summary(model_dir)["final_step"] == steps,
    f"train_summary.json does not end at step {steps}",
  )
  missing = sorted(set(testing.RUN_DIR_OUTPUTS) - set(os.listdir(model_dir)))
  _expect(
    not missing, f"{missing} missing from {sorted(os.listdir(model_dir))}"
  )
  owners = _owners(out)
  _expect(
    owners == {(ctx.host_uid, ctx.host_gid)},
    f"outputs owned by {owners}, not {ctx.host_uid}:{ctx.host_gid}",
  )
  return (
    f"uid {ctx.host_uid} trained to step {steps}; every output owned by "
    f"{ctx.host_uid}:{ctx.host_gid}"
  )


def check_stop_and_resume(ctx: Context) -> str:
  """Check 2: `podman stop` mid-training, then the same `podman run`.

  The run is followed through its progress events (`CTL_EVENTS`, written
  into the mount), not its log wording.
  """
  out = _owned_dir(ctx.work / "stop", ctx.image_uid, ctx.image_gid)
  command = _podman_run_command(
    "stop",
    ["--flagfile=configs/quickstart.cfg", "--model_dir=/out/run"],
    volumes=[(out, "/out")],
    env={EVENTS_ENV: "/out/events.jsonl"},
  )
  events = str(out / "events.jsonl")
  steps = _train_steps("configs/quickstart.cfg")
  with tempfile.TemporaryFile("w+") as log:
    process = subprocess.Popen(
      command, stdout=log, stderr=subprocess.STDOUT, text=True
    )
    events_lib.wait_for_step(events, 1, process=process)
    _run(
      ["podman", "stop", "--time=120", f"{CONTAINER_PREFIX}stop"], check=False
    )
    code = process.wait(timeout=300)
    log.seek(0)
    tail = "".join(log.readlines()[-10:])
  _expect(code == 143, f"podman stop: exit {code}, not 143: {tail}")
  step = events_lib.ended_step(events)
  _expect(step is not None, "the stopped run marked no end")
  state = (out / "run" / "checkpoints" / "checkpoint").read_text()
  _expect(
    f'model_checkpoint_path: "ckpt-{step}"' in state,
    f"the newest checkpoint is not ckpt-{step}: {state!r}",
  )
  resumed = _run(command, check=False)
  _expect(
    resumed.returncode == 0,
    f"the same podman run: exit {resumed.returncode}: {_tail(resumed)}",
  )
  restored = events_lib.restored_steps(events)
  _expect(
    restored[-1:] == [step],
    f"the second run did not restore step {step} (restored {restored})",
  )
  _expect(
    _summary(out / "run")["final_step"] == steps,
    f"the resumed run did not reach step {steps}",
  )
  return (
    f"exit 143 with ckpt-{step} saved; the same podman run restored "
    f"step {step} and finished at {steps}"
  )


def _free_ports(count: int) -> list[int]:
  with contextlib.ExitStack() as stack:
    sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
    for s in sockets:
      s.bind(("127.0.0.1", 0))
    return [s.getsockname()[1] for s in sockets]


def _vertex_env(spec, pool_index, bucket_prefix, ports) -> dict:
  """What Vertex AI sets in the container of pool `pool_index`, replica 0."""
  prefix = spec["baseOutputDirectory"]["outputUriPrefix"].rstrip("/")
  env = testing.vertex_output_env(prefix)
  _expect(
    prefix.startswith(bucket_prefix), f"{prefix} is not in {bucket_prefix}"
  )
  pools = spec["workerPoolSpecs"]
  if len(pools) > 1:
    hosts = [f"localhost:{port}" for port in ports[: len(pools)]]
    task_type = "chief" if pool_index == 0 else "worker"
    tf_config = {
      "cluster": {"chief": hosts[:1], "worker": hosts[1:]},
      "task": {"type": task_type, "index": 0},
      "environment": "cloud",
      "job": json.dumps(spec),
    }
    cluster_spec = {
      "cluster": {f"workerpool{i}": [host] for i, host in enumerate(hosts)},
      "task": {"type": f"workerpool{pool_index}", "index": 0},
      "environment": "cloud",
      "job": spec,
    }
    env.update(
      TF_CONFIG=json.dumps(tf_config), CLUSTER_SPEC=json.dumps(cluster_spec)
    )
  return env


def _vertex_specs() -> dict:
  import yaml  # pylint: disable=g-import-not-at-top  # python3-yaml, step 1.

  return {
    path.name: yaml.safe_load(path.read_text())
    for path in sorted((REPO / "configs" / "vertex").glob("*.yaml"))
  }


def check_cluster(ctx: Context) -> str:
  """Check 3: multiworker_v100.yaml's two pools as two containers."""
  name = "multiworker_v100.yaml"
  spec = _vertex_specs()[name]
  bucket = _owned_dir(ctx.work / "bucket", ctx.image_uid, ctx.image_gid)
  ports = _free_ports(2)
  processes = []
  for index, pool in enumerate(spec["workerPoolSpecs"]):
    env = _vertex_env(spec, index, f"gs://{BUCKET}/", ports)
    command = _podman_run_command(
      f"pool{index}",
      [*pool["containerSpec"]["args"], *testing.OFFLINE_FLAGS],
      volumes=[(bucket, f"/gcs/{BUCKET}")],
      env=env,
      network="host",
    )
    processes.append(
      subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
      )
    )
  for index, process in enumerate(processes):
    output, _ = process.communicate(timeout=900)
    _expect(
      process.returncode == 0,
      f"pool {index} exited {process.returncode}: {output.strip()[-1500:]}",
    )
  base = spec["baseOutputDirectory"]["outputUriPrefix"].replace(
    f"gs://{BUCKET}/", ""
  )
  everything = sorted(
    str(p.relative_to(bucket)) for p in bucket.rglob("*") if p.is_file()
  )
  outside = [p for p in everything if not p.startswith(base + "/")]
  _expect(not outside, f"files outside {base}/: {outside}")
  job_dir = bucket / base
  missing = sorted(set(testing.VERTEX_JOB_OUTPUTS) - set(os.listdir(job_dir)))
  _expect(not missing, f"{missing} missing from {base}/")
  _expect(
    "checkpoint" in os.listdir(job_dir / "checkpoints"),
    "no checkpoint state file",
  )
  _expect(
    "saved_model.pb" in os.listdir(job_dir / "model"),
    "no SavedModel in AIP_MODEL_DIR",
  )
  _expect(
    any("tfevents" in f for f in os.listdir(job_dir / "logs")),
    "no TensorBoard events in AIP_TENSORBOARD_LOG_DIR",
  )
  return (
    f"{name}: chief + worker finished; {len(everything)} files, all "
    f"in gs://{BUCKET}/{base}/ with {', '.join(testing.VERTEX_JOB_OUTPUTS)}"
  )


def check_vertex_args(ctx: Context) -> str:
  """Check 4: every Vertex AI config's args, with --dry_run."""
  bucket = _owned_dir(ctx.work / "dry_run_bucket", ctx.image_uid, ctx.image_gid)
  ports = _free_ports(2)
  runs = 0
  for name, spec in _vertex_specs().items():
    for index, pool in enumerate(spec["workerPoolSpecs"]):
      env = _vertex_env(spec, index, f"gs://{BUCKET}/", ports)
      result = _podman_run(
        "dry-run",
        [*pool["containerSpec"]["args"], "--dry_run"],
        volumes=[(bucket, f"/gcs/{BUCKET}")],
        env=env,
      )
      _expect(
        result.returncode == 0,
        f"{name} pool {index}: exit {result.returncode}: {_tail(result)}",
      )
      described = json.loads(result.stdout)
      _expect(
        described["output_dirs"]["export_dir"] + "/" == env["AIP_MODEL_DIR"],
        f"{name} pool {index}: export_dir is not AIP_MODEL_DIR",
      )
      runs += 1
  _expect(not any(bucket.iterdir()), "a --dry_run wrote to the bucket")
  return (
    f"{runs} pools in {len(_vertex_specs())} configs accepted; output "
    "dirs resolved to the AIP_* directories; nothing written"
  )


def _outside(args) -> subprocess.CompletedProcess | None:
  """The same command line outside the container, if the venv exists."""
  python = REPO / ".venv" / "bin" / "python"
  if not python.exists():
    return None
  return _run(
    [python, "-m", "trainer.task", *args],
    check=False,
    cwd=REPO,
    env=dict(os.environ, PYTHONPATH=str(REPO)),
  )


def check_help_and_bad_flag(ctx: Context) -> str:
  """Check 5: --help and a bad flag, compared with outside when possible."""
  del ctx  # Nothing is mounted or written.
  bad = _podman_run("bad-flag", ["--no_such_flag=1"])
  lines = bad.stderr.strip().splitlines()
  _expect(
    bad.returncode == 2
    and len(lines) == 1
    and not bad.stdout
    and lines[0].startswith("error: "),
    f"a bad flag: exit {bad.returncode}, stderr {lines}",
  )
  usage = _podman_run("help", ["--help"])
  _expect(
    "--model_dir" in usage.stdout and not usage.stderr,
    f"--help: exit {usage.returncode}, no usage on stdout",
  )
  compared = "outside: not run (no .venv)"
  outside_bad, outside_usage = (
    _outside(["--no_such_flag=1"]),
    _outside(["--help"]),
  )
  if outside_bad and outside_usage:
    _expect(
      (outside_bad.returncode, outside_bad.stderr)
      == (bad.returncode, bad.stderr),
      "a bad flag answers differently",
    )
    _expect(
      outside_usage.returncode == usage.returncode
      and outside_usage.stdout.replace(str(REPO), "/app") == usage.stdout,
      "--help answers differently",
    )
    compared = "identical to outside"
  return (
    f"bad flag: exit 2, {lines[0]!r}; --help: usage on stdout, exit "
    f"{usage.returncode}; {compared}"
  )


def check_writable(ctx: Context) -> str:
  """Check 6: what the image's default user can write."""
  uid = ctx.image_uid
  _expect(uid != 0, "the image's default user is root")
  find = (
    "find / -xdev \\( -path /proc -o -path /sys -o -path /dev \\) "
    "-prune -o -writable -print 2>/dev/null; echo HOME=$HOME"
  )
  result = _podman_run("writable", ["-c", find], entrypoint="sh")
  lines = result.stdout.split()
  home = lines.pop()[len("HOME=") :]
  allowed = (*ALLOWED_WRITABLE, home)
  extra = [
    p
    for p in lines
    if not any(p == a or p.startswith(a + "/") for a in allowed)
  ]
  _expect(not extra, f"writable by uid {uid}: {extra[:20]}")
  return f"default user uid {uid}; writable only: {', '.join(allowed)}"


CHECKS = (
  (
    "quickstart as a non-root user, outputs owned by the host user",
    check_quickstart,
  ),
  (
    "podman stop -> 143 at the agreed step; the same run resumes",
    check_stop_and_resume,
  ),
  (
    "2-worker Vertex-shaped cluster writes only to AIP_* directories",
    check_cluster,
  ),
  ("configs/vertex/*.yaml args accepted (--dry_run)", check_vertex_args),
  ("--help and a bad flag as outside", check_help_and_bad_flag),
  (
    "no file outside the app's directories writable by its user",
    check_writable,
  ),
)


def _cleanup(workdir: pathlib.Path) -> None:
  """Removes this run's containers, images, store and outputs."""
  names = _run(
    ["podman", "ps", "-a", "--format", "{{.Names}}"], check=False
  ).stdout.split()
  ours = [n for n in names if n.startswith(CONTAINER_PREFIX)]
  if ours:
    _run(["podman", "rm", "--force", *ours], check=False)
  _run(["buildah", "rm", "--all"], check=False)
  # Unmounts and deletes the private store named in CONTAINERS_STORAGE_CONF.
  _run(["podman", "system", "reset", "--force"], check=False)
  shutil.rmtree(workdir)


def _parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument(
    "--keep",
    action="store_true",
    help="keep the images, the store and the outputs",
  )
  parser.add_argument(
    "--workdir",
    type=pathlib.Path,
    default=pathlib.Path("/var/tmp/ctl-container-check"),
    help="configuration, image store and outputs",
  )
  parser.add_argument(
    "--mirror",
    default="http://deb.debian.org/debian",
    help="Debian mirror for the stand-in base",
  )
  parser.add_argument(
    "--host_user",
    type=_uid_gid,
    default=None,
    help="UID:GID that owns check 1's outputs (default: the sudo user, "
    "else 1234:1234, a uid the image does not know)",
  )
  return parser.parse_args(argv)


def _uid_gid(value: str) -> tuple[int, int]:
  match = re.fullmatch(r"(\d+):(\d+)", value)
  if not match:
    raise argparse.ArgumentTypeError(f"{value!r} is not UID:GID")
  return int(match.group(1)), int(match.group(2))


def _host_user(value: tuple[int, int] | None) -> tuple[int, int]:
  """The host user that check 1 runs the trainer as (--user)."""
  if value is not None:
    return value
  uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
  if uid and gid and uid != "0":
    return int(uid), int(gid)
  # Run by root itself: a host uid the image does not know (no passwd entry,
  # HOME=/), the harder case for the trainer.
  return 1234, 1234


def _seconds(start: float) -> str:
  return f"{time.monotonic() - start:.0f} s"


def main(argv=None) -> int:
  args = _parse_args(argv)
  if os.geteuid() != 0:
    print(
      "error: run as root (podman and buildah without a daemon, as root"
      "); e.g. sudo make container-check.",
      file=sys.stderr,
    )
    return 2
  host_uid, host_gid = _host_user(args.host_user)
  started = time.monotonic()
  _install_packages()
  _configure(args.workdir)
  versions = "; ".join(
    _run([tool, "--version"]).stdout.strip() for tool in ("podman", "buildah")
  )
  print(
    f"{versions}; runc, cgroupfs, overlay store in {args.workdir}", flush=True
  )
  work = args.workdir / "checks"
  shutil.rmtree(work, ignore_errors=True)
  work.mkdir()
  failures = 0
  try:
    start = time.monotonic()
    kept = _image_exists(BASE_IMAGE)
    if not kept:
      _make_base(args.mirror)
    print(
      f"stand-in base {BASE_IMAGE}: "
      f"{'kept from a --keep run' if kept else _seconds(start)}, "
      f"{_image_size(BASE_IMAGE) / 1e6:.0f} MB",
      flush=True,
    )
    start = time.monotonic()
    _build(REPO, IMAGE)
    print(
      f"image build {IMAGE} (only BASE_IMAGE differs): "
      f"{_seconds(start)}, {_image_size(IMAGE) / 1e9:.2f} GB",
      flush=True,
    )
    context = _code_change_context(args.workdir)
    start = time.monotonic()
    log = _build(context, REBUILT_IMAGE)
    reused = _dependency_layer_reused(log)
    print(
      f"rebuild after a code-only change: {_seconds(start)}, dependency "
      f"layer {'reused' if reused else 'REINSTALLED'}",
      flush=True,
    )
    _run(["podman", "rmi", REBUILT_IMAGE])
    shutil.rmtree(context)
    failures += not reused
    image_uid, image_gid = _image_user_ids()
    ctx = Context(
      work=work,
      host_uid=host_uid,
      host_gid=host_gid,
      image_uid=image_uid,
      image_gid=image_gid,
    )
    for number, (title, check) in enumerate(CHECKS, start=1):
      start = time.monotonic()
      try:
        detail = check(ctx)
        print(
          f"PASS {number}. {title} ({_seconds(start)}): {detail}", flush=True
        )
      except (
        CheckFailed,
        subprocess.TimeoutExpired,
        OSError,
        KeyError,
        ValueError,
      ) as e:
        failures += 1
        print(f"FAIL {number}. {title} ({_seconds(start)}): {e}", flush=True)
  except CheckFailed as e:
    failures += 1
    print(f"FAIL: {e}", flush=True)
  finally:
    if args.keep:
      print(
        f"kept: images {BASE_IMAGE} and {IMAGE}, store and outputs in "
        f"{args.workdir} (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF "
        "there)"
      )
    else:
      _cleanup(args.workdir)
  verdict = "all checks passed" if not failures else f"{failures} failed"
  print(f"container-check: {verdict} in {_seconds(started)}")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
