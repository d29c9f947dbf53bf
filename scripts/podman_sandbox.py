"""Podman and buildah, as root, in a private store: the plumbing of the check.

scripts/container_check.py builds the trainer image and runs it in real
containers on a machine with no Docker engine and no Docker Hub (Debian
bookworm). This module is how:
  - installs buildah, podman, debootstrap, runc and python3-yaml with apt,
    only those missing;
  - configures podman and buildah for this sandbox in a private directory
    (runc, cgroupfs, explicit ulimits, overlay storage) through
    CONTAINERS_CONF and CONTAINERS_STORAGE_CONF, leaving the host's
    /etc/containers and any other image store alone; podman's defaults fail
    where raising RLIMIT_NOFILE is not permitted or cgroups are hybrid;
  - makes a stand-in for the TensorFlow GPU base image,
    `debootstrap --variant=minbase bookworm` plus Python 3.11 and pip (that
    image's Python), committed with buildah;
  - builds the project's own Dockerfile with only BASE_IMAGE changed, and
    tells from the build log whether the dependency layer (with TensorFlow)
    came from the cache after a code-only change;
  - runs the image (`podman run --rm`, no network unless asked for) and
    removes every container, image and the store at the end.

Standard library only, so the system Python runs it (`python3 -S`).
"""

import os
import pathlib
import shutil
import subprocess

REPO = pathlib.Path(__file__).resolve().parent.parent
APT_PACKAGES = ("buildah", "podman", "debootstrap", "runc", "python3-yaml")
BASE_PACKAGES = "python3,python3-pip,python3-venv,python-is-python3"
BASE_IMAGE = "localhost/ctl-standin-base:bookworm"
IMAGE = "localhost/ctl-trainer:check"
REBUILT_IMAGE = "localhost/ctl-trainer:rebuild"
CONTAINER_PREFIX = "ctl-check-"
# The host's CA bundle: the stand-in base trusts what the host trusts (a
# sandbox may reach PyPI only through a TLS-inspecting proxy).
CA_BUNDLE = pathlib.Path("/etc/ssl/certs/ca-certificates.crt")

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
  """A command or a check saw the image misbehave; the message says how."""


def run(cmd, *, check=True, timeout=900, **kwargs):
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
      f"{result.returncode}: {tail(result)}"
    )
  return result


def tail(result, lines=15) -> str:
  """The last `lines` lines of a finished process's stdout and stderr."""
  text = (result.stdout or "") + (result.stderr or "")
  return "\n".join(text.strip().splitlines()[-lines:])


def install_packages() -> None:
  """Installs the apt packages this check needs, only those missing."""
  missing = [
    package
    for package in APT_PACKAGES
    if "install ok installed"
    not in run(
      ["dpkg-query", "-W", "-f=${Status}", package], check=False
    ).stdout
  ]
  if not missing:
    return
  print(f"apt-get install {' '.join(missing)}", flush=True)
  env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
  run(["apt-get", "update", "-qq"], env=env)
  run(
    ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    env=env,
  )


def configure(workdir: pathlib.Path) -> None:
  """Points podman and buildah at this run's own configuration and store."""
  workdir.mkdir(parents=True, exist_ok=True)
  containers_conf = workdir / "containers.conf"
  storage_conf = workdir / "storage.conf"
  containers_conf.write_text(CONTAINERS_CONF.format(workdir=workdir))
  storage_conf.write_text(STORAGE_CONF.format(workdir=workdir))
  os.environ["CONTAINERS_CONF"] = str(containers_conf)
  os.environ["CONTAINERS_STORAGE_CONF"] = str(storage_conf)


def image_exists(image: str) -> bool:
  return run(["podman", "image", "exists", image], check=False).returncode == 0


def image_size(image: str) -> int:
  """The image's size in bytes, as podman reports it."""
  return int(
    run(["podman", "image", "inspect", "--format", "{{.Size}}", image]).stdout
  )


def make_base(mirror: str) -> None:
  """Commits debootstrap's minimal bookworm with Python as BASE_IMAGE."""
  container = run(["buildah", "from", "scratch"]).stdout.strip()
  try:
    root = pathlib.Path(run(["buildah", "mount", container]).stdout.strip())
    run(
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
    run(["buildah", "umount", container])
    run(["buildah", "config", *config, container])
    run(["buildah", "commit", "--rm", container, BASE_IMAGE])
  except BaseException:
    run(["buildah", "rm", container], check=False)
    raise


def build(context: pathlib.Path, tag: str) -> str:
  """Builds the Dockerfile in `context` with the stand-in base; the log."""
  result = run(
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


def dependency_layer_reused(build_log: str) -> bool:
  """Whether the step that installs the pins came from the layer cache."""
  lines = build_log.splitlines()
  for i, line in enumerate(lines):
    if line.startswith("STEP") and "pip install" in line and " -r " in line:
      return i + 1 < len(lines) and lines[i + 1].startswith("--> Using cache")
  raise CheckFailed("the build log has no `pip install ... -r` step")


def code_change_context(workdir: pathlib.Path) -> pathlib.Path:
  """A copy of the build context with one Python file changed."""
  context = workdir / "context"
  files = run(
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


def run_container(name, args, *, timeout=900, **options):
  """`podman run --rm` of the image to its end; returns the process."""
  return run(
    container_command(name, args, **options), check=False, timeout=timeout
  )


def container_command(
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


def stop_container(name, *, seconds: int) -> None:
  """`podman stop`: SIGTERM, then SIGKILL after `seconds`; errors ignored."""
  run(
    ["podman", "stop", f"--time={seconds}", f"{CONTAINER_PREFIX}{name}"],
    check=False,
  )


def image_user_ids() -> tuple[int, int]:
  """The uid and gid of the image's default user."""
  ids = run_container("id", ["-c", "id -u; id -g"], entrypoint="sh").stdout
  uid, gid = map(int, ids.split())
  return uid, gid


def remove_all(workdir: pathlib.Path) -> None:
  """Removes this run's containers, images, store and outputs."""
  names = run(
    ["podman", "ps", "-a", "--format", "{{.Names}}"], check=False
  ).stdout.split()
  ours = [n for n in names if n.startswith(CONTAINER_PREFIX)]
  if ours:
    run(["podman", "rm", "--force", *ours], check=False)
  run(["buildah", "rm", "--all"], check=False)
  # Unmounts and deletes the private store named in CONTAINERS_STORAGE_CONF.
  run(["podman", "system", "reset", "--force"], check=False)
  shutil.rmtree(workdir)
