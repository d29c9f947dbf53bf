"""Builds the trainer image and checks it in real containers (podman).

No Docker engine and no Docker Hub here, so, as root on Debian bookworm:
  1. installs buildah, podman, debootstrap and runc with apt (when missing);
  2. configures podman for this sandbox in a private directory, leaving the
     host's /etc/containers and any other image store alone;
  3. makes a stand-in base image (minimal bookworm plus Python 3.11 and pip);
  4. builds the project's own Dockerfile with only BASE_IMAGE changed, then
     rebuilds it after a code-only change to show the dependency layer (with
     TensorFlow) is reused;
  5. runs the checks below in containers, prints each result, and removes
     its containers, images and storage unless --keep is given.
How each step is done: scripts/podman_sandbox.py.

Checks (scripts/image_checks.py says what each proves and how):
  1. the quickstart trains as a non-root host user (--user), into a mount;
  2. `podman stop` exits 143 at a checkpoint; the same run resumes from it;
  3. a chief + worker Vertex AI-shaped cluster writes only to AIP_* dirs;
  4. every configs/vertex/*.yaml pool's args pass --dry_run;
  5. --help and a bad flag answer as outside the container;
  6. the image's default user is not root and can write only its own dirs.

This file is the entry: the flags, the order of the steps, the report and
the cleanup.

Usage: make container-check   (or: python3 scripts/container_check.py
[--keep] [--workdir=DIR] [--mirror=URL] [--host_user=UID:GID]).
It uses only Python's standard library and Debian's python3-yaml, so it runs
with the system Python before the project is installed anywhere; its sibling
modules import because this script's folder is first on sys.path.
"""

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import image_checks
import podman_sandbox
from podman_sandbox import BASE_IMAGE
from podman_sandbox import IMAGE


def _parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument(
    "--keep",
    action="store_true",
    help="keep the images, the store and the outputs",
  )
  parser.add_argument(
    "--build_only",
    action="store_true",
    help="steps 1 to 4's first build only, keeping the images and the store "
    "for the next run, which then builds from its layers (CI builds beside "
    "the wheel check)",
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


def _prepare(workdir: pathlib.Path) -> pathlib.Path:
  """Steps 1 and 2; returns an empty directory for the checks' mounts."""
  podman_sandbox.install_packages()
  podman_sandbox.configure(workdir)
  versions = "; ".join(
    podman_sandbox.run([tool, "--version"]).stdout.strip()
    for tool in ("podman", "buildah")
  )
  print(f"{versions}; runc, cgroupfs, overlay store in {workdir}", flush=True)
  work = workdir / "checks"
  shutil.rmtree(work, ignore_errors=True)
  work.mkdir()
  return work


def _stand_in_base(mirror: str) -> None:
  """Step 3, unless a --keep or --build_only run left the stand-in base."""
  start = time.monotonic()
  kept = podman_sandbox.image_exists(BASE_IMAGE)
  if not kept:
    podman_sandbox.make_base(mirror)
  print(
    f"stand-in base {BASE_IMAGE}: "
    f"{'kept from a --keep or --build_only run' if kept else _seconds(start)}, "
    f"{podman_sandbox.image_size(BASE_IMAGE) / 1e6:.0f} MB",
    flush=True,
  )


def _build() -> None:
  """Step 4's first build, from the layers of a --build_only run if any."""
  start = time.monotonic()
  built = podman_sandbox.image_exists(IMAGE)
  podman_sandbox.build(podman_sandbox.REPO, IMAGE)
  print(
    f"image build {IMAGE} (only BASE_IMAGE differs): {_seconds(start)}"
    f"{' from the layers a --build_only run built' if built else ''}, "
    f"{podman_sandbox.image_size(IMAGE) / 1e9:.2f} GB",
    flush=True,
  )


def _build_and_rebuild(workdir: pathlib.Path) -> bool:
  """Step 4; whether the rebuild reused the dependency layer."""
  _build()
  context = podman_sandbox.code_change_context(workdir)
  start = time.monotonic()
  log = podman_sandbox.build(context, podman_sandbox.REBUILT_IMAGE)
  reused = podman_sandbox.dependency_layer_reused(log)
  print(
    f"rebuild after a code-only change: {_seconds(start)}, dependency "
    f"layer {'reused' if reused else 'REINSTALLED'}",
    flush=True,
  )
  podman_sandbox.run(["podman", "rmi", podman_sandbox.REBUILT_IMAGE])
  shutil.rmtree(context)
  return reused


def _run_checks(ctx: image_checks.Context) -> int:
  """Step 5: every check in order, one PASS or FAIL line each; failures."""
  failures = 0
  for number, (title, check) in enumerate(image_checks.CHECKS, start=1):
    start = time.monotonic()
    try:
      detail = check(ctx)
      print(f"PASS {number}. {title} ({_seconds(start)}): {detail}", flush=True)
    except (
      podman_sandbox.CheckFailed,
      subprocess.TimeoutExpired,
      OSError,
      KeyError,
      ValueError,
    ) as e:
      failures += 1
      print(f"FAIL {number}. {title} ({_seconds(start)}): {e}", flush=True)
  return failures


def _build_and_check(args, work: pathlib.Path, host_user) -> int:
  """Steps 3 to 5; the number of failures."""
  _stand_in_base(args.mirror)
  failures = int(not _build_and_rebuild(args.workdir))
  image_uid, image_gid = podman_sandbox.image_user_ids()
  ctx = image_checks.Context(
    work=work,
    host_uid=host_user[0],
    host_gid=host_user[1],
    image_uid=image_uid,
    image_gid=image_gid,
  )
  return failures + _run_checks(ctx)


def main(argv=None) -> int:
  args = _parse_args(argv)
  if os.geteuid() != 0:
    print(
      "error: run as root (podman and buildah without a daemon, as root"
      "); e.g. sudo make container-check.",
      file=sys.stderr,
    )
    return 2
  host_user = _host_user(args.host_user)
  started = time.monotonic()
  work = _prepare(args.workdir)
  if args.build_only:
    _stand_in_base(args.mirror)
    _build()
    print(
      f"container-check --build_only: built and kept in {_seconds(started)}"
    )
    return 0
  try:
    failures = _build_and_check(args, work, host_user)
  except podman_sandbox.CheckFailed as e:
    failures = 1
    print(f"FAIL: {e}", flush=True)
  finally:
    if args.keep:
      print(
        f"kept: images {BASE_IMAGE} and {IMAGE}, store and outputs in "
        f"{args.workdir} (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF "
        "there)"
      )
    else:
      podman_sandbox.remove_all(args.workdir)
  verdict = "all checks passed" if not failures else f"{failures} failed"
  print(f"container-check: {verdict} in {_seconds(started)}")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
