"""The six checks of the trainer image, each in its own container(s).

scripts/container_check.py runs them in order on the image that
podman_sandbox.py built, and prints what each returns (PASS) or raises
(FAIL). Each check is a function of a Context that returns one line saying
what it saw, or raises CheckFailed saying how the image misbehaved:
  1. check_quickstart: the quickstart trains (to README's 95% accuracy, the
     suite's proof of `make demo`'s claim) as a non-root user passed with
     --user (as `docker run --user $(id -u):$(id -g)`), into a mounted
     directory; every output is owned by that host user;
  2. check_stop_and_resume: `podman stop` during training exits 143 after a
     checkpoint at the agreed step, and the same `podman run` resumes from
     it to the end (followed through its progress events, not log wording);
  3. check_cluster: two containers (chief + worker, host network) with
     Vertex AI's TF_CONFIG, CLUSTER_SPEC and AIP_* directories train
     together and write only where Vertex AI expects;
  4. check_vertex_args: every configs/vertex/*.yaml pool's
     containerSpec.args pass the entry point's --dry_run, with
     gs://your-bucket served by a mounted local directory at
     /gcs/your-bucket as Cloud Storage FUSE does on Vertex AI;
  5. check_help_and_bad_flag: --help and a bad flag answer as outside the
     container (a bad flag: exit 2, one line on stderr);
  6. check_writable: the image's default user is not root and can write
     nothing outside its own directories and the world-writable scratch
     directories.

Standard library only (and Debian's python3-yaml, installed by the entry
before the checks run), so the system Python runs it (`python3 -S`); what it
takes from the project (trainer.testing, ctl.testing.events) is standard
library only too.
"""

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import podman_sandbox
from podman_sandbox import REPO
from podman_sandbox import CheckFailed

sys.path.insert(0, str(REPO))
# Standard library only, like this module, so the system Python can import it.
from ctl import env as ctl_env  # noqa: E402  # pylint: disable=g-import-not-at-top
from ctl.distributed.ports import free_ports  # noqa: E402  # pylint: disable=g-import-not-at-top
from ctl.testing import events as events_lib  # noqa: E402  # pylint: disable=g-import-not-at-top
from trainer import testing  # noqa: E402  # pylint: disable=g-import-not-at-top

# Writable by the image's user by design: its home, the image's relative
# output directory, and the world-writable sticky scratch directories.
ALLOWED_WRITABLE = ("/tmp", "/var/tmp", "/run/lock", "/var/lock", "/app/runs")
# The shipped Vertex AI configs' placeholder bucket, served at /gcs/BUCKET.
BUCKET = "your-bucket"
EVENTS_ENV = ctl_env.EVENTS


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


def check_quickstart(ctx: Context) -> str:
  """Check 1: `configs/quickstart.cfg` as the host user, into a mount."""
  _expect(ctx.host_uid != 0, "the host user for --user must not be root")
  out = _owned_dir(ctx.work / "quickstart", ctx.host_uid, ctx.host_gid)
  result = podman_sandbox.run_container(
    "quickstart",
    ["--flagfile=configs/quickstart.cfg", "--model_dir=/out/quickstart"],
    user=f"{ctx.host_uid}:{ctx.host_gid}",
    volumes=[(out, "/out")],
  )
  _expect(
    result.returncode == 0,
    f"exit {result.returncode}: {podman_sandbox.tail(result)}",
  )
  model_dir = out / "quickstart"
  steps = _train_steps("configs/quickstart.cfg")
  summary = _summary(model_dir)
  _expect(
    summary["final_step"] == steps,
    f"train_summary.json does not end at step {steps}",
  )
  # What README promises of `make demo` (the same flagfile, real digits).
  _expect(
    summary["eval_accuracy"] >= 0.95,
    f"eval_accuracy {summary['eval_accuracy']:.3f} is below 0.95",
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
    f"uid {ctx.host_uid} trained to step {steps} (eval accuracy "
    f"{summary['eval_accuracy']:.3f}); every output owned by "
    f"{ctx.host_uid}:{ctx.host_gid}"
  )


def check_stop_and_resume(ctx: Context) -> str:
  """Check 2: `podman stop` mid-training, then the same `podman run`.

  The run is followed through its progress events (`CTL_EVENTS`, written
  into the mount), not its log wording.
  """
  out = _owned_dir(ctx.work / "stop", ctx.image_uid, ctx.image_gid)
  command = podman_sandbox.container_command(
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
    podman_sandbox.stop_container("stop", seconds=120)
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
  resumed = podman_sandbox.run(command, check=False)
  _expect(
    resumed.returncode == 0,
    f"the same podman run: exit {resumed.returncode}: "
    f"{podman_sandbox.tail(resumed)}",
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
  ports = free_ports(2)
  processes = []
  for index, pool in enumerate(spec["workerPoolSpecs"]):
    env = _vertex_env(spec, index, f"gs://{BUCKET}/", ports)
    command = podman_sandbox.container_command(
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
  ports = free_ports(2)
  runs = 0
  for name, spec in _vertex_specs().items():
    for index, pool in enumerate(spec["workerPoolSpecs"]):
      env = _vertex_env(spec, index, f"gs://{BUCKET}/", ports)
      result = podman_sandbox.run_container(
        "dry-run",
        [*pool["containerSpec"]["args"], "--dry_run"],
        volumes=[(bucket, f"/gcs/{BUCKET}")],
        env=env,
      )
      _expect(
        result.returncode == 0,
        f"{name} pool {index}: exit {result.returncode}: "
        f"{podman_sandbox.tail(result)}",
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
  return podman_sandbox.run(
    [python, "-m", "trainer.task", *args],
    check=False,
    cwd=REPO,
    env=dict(os.environ, PYTHONPATH=str(REPO)),
  )


def check_help_and_bad_flag(ctx: Context) -> str:
  """Check 5: --help and a bad flag, compared with outside when possible."""
  del ctx  # Nothing is mounted or written.
  bad = podman_sandbox.run_container("bad-flag", ["--no_such_flag=1"])
  lines = bad.stderr.strip().splitlines()
  _expect(
    bad.returncode == 2
    and len(lines) == 1
    and not bad.stdout
    and lines[0].startswith("error: "),
    f"a bad flag: exit {bad.returncode}, stderr {lines}",
  )
  usage = podman_sandbox.run_container("help", ["--help"])
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
  result = podman_sandbox.run_container(
    "writable", ["-c", find], entrypoint="sh"
  )
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
