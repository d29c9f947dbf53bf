"""Bad input through the command line: one sentence, exit 2, nothing changed.

Every case runs against a copy of a real, finished run directory (checkpoints,
TensorBoard events, SavedModel, summary) and checks that the failed command
left every file in it as it was (a checksum of names, contents and mtimes).
`BAD_INPUT` is the table over the command-line tools; most of its cases must
be refused before TensorFlow is imported, which the trainer cases check.
"""

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

from PIL import Image
import pytest

from ctl.testing import events as events_lib
from tests.conftest import FAST_FLAGS
from tests.conftest import REPO
from tests.conftest import read_scalars
from tests.conftest import read_summary
from tests.conftest import run_trainer
from tests.conftest import trained_model_dir
from tests.conftest import trainer_env
from trainer.testing import run_command
from trainer.testing import trainer_command
from trainer.testing import trainer_command_reporting_tf

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

USER_ERROR_EXIT_CODE = 2


def snapshot(directory) -> dict[str, tuple[int, int]]:
  """{relative path: (size, mtime_ns)} of every file under `directory`."""
  files = {}
  for root, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(root, name)
      stat = os.stat(path)
      files[os.path.relpath(path, directory)] = (stat.st_size, stat.st_mtime_ns)
  return files


@pytest.fixture(scope="module")
def messy_images(tmp_path_factory):
  """12 tiny real PNG/JPEG images in two classes, and one that is not."""
  root = tmp_path_factory.mktemp("messy") / "images"
  for index in range(12):
    directory = root / ("a_red" if index < 6 else "b_blue")
    directory.mkdir(parents=True, exist_ok=True)
    color = (250, 0, 0) if index < 6 else (0, 0, 250)
    Image.new("RGB", (8, 8), color).save(
      directory / f"{index:02d}.{'png' if index % 2 else 'jpg'}"
    )
  (root / "a_red" / "broken.jpg").write_bytes(b"not an image at all" * 10)
  return str(root)


@pytest.fixture(scope="module")
def few_images(tmp_path_factory):
  """9 real images in two classes: too few to hold out every 10th."""
  root = tmp_path_factory.mktemp("few") / "images"
  for index in range(9):
    directory = root / ("a_red" if index < 5 else "b_blue")
    directory.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (index * 20, 0, 0)).save(
      directory / f"{index:02d}.png"
    )
  return str(root)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  """A digits run (10 classes) trained to step 10, with all its outputs."""
  return trained_model_dir(
    tmp_path_factory, "finished", *FAST_FLAGS, "--train_steps=10"
  )


@pytest.fixture
def model_dir(finished_run, tmp_path):
  copy = str(tmp_path / "run")
  shutil.copytree(finished_run, copy)  # copy2: sizes and mtimes preserved.
  assert snapshot(copy) == snapshot(finished_run)
  return copy


def _fails_cleanly(model_dir, *flags) -> str:
  """Runs the trainer on `model_dir` expecting a user error; returns it."""
  before = snapshot(model_dir)
  assert {"train_summary.json", "checkpoint"} <= {
    os.path.basename(path) for path in before
  }
  result = run_trainer(
    *FAST_FLAGS,
    "--train_steps=20",
    *flags,
    f"--model_dir={model_dir}",
    check=False,
  )
  assert result.returncode == USER_ERROR_EXIT_CODE, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  assert snapshot(model_dir) == before
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: "), result.stderr[-3000:]
  assert last.endswith("."), last
  return last


def checksum(directory) -> str:
  """SHA-256 over every file's relative path, contents and mtime."""
  digest = hashlib.sha256()
  for path, (_, mtime_ns) in sorted(snapshot(directory).items()):
    digest.update(f"{path}\0{mtime_ns}\0".encode())
    with open(os.path.join(directory, path), "rb") as f:
      digest.update(f.read())
  return digest.hexdigest()


# (tool, arguments, words the one error line must hold, refused before
# TensorFlow loads). Trainer arguments come after FAST_FLAGS and
# --train_steps=20 --model_dir=MODEL_DIR; {model_dir} and {file} (a regular
# file), {images} (`messy_images`) and {few} (`few_images`) are filled in.
BAD_INPUT = [
  (
    "trainer",
    ["--dataset=mnist"],
    "--dataset=mnist: value should be one of",
    True,
  ),
  ("trainer", ["--model=vgg16"], "--model=vgg16: value should be one of", True),
  ("trainer", ["--storage=s3"], "--storage=s3: value should be one of", True),
  ("trainer", ["--train_steps=abc"], "--train_steps=abc", True),
  ("trainer", ["--no_such_flag"], "no_such_flag", True),
  ("trainer", ["positional"], "unexpected arguments ['positional']", True),
  (
    "trainer",
    ["--per_replica_batch_size=0"],
    "--per_replica_batch_size must be > 0",
    True,
  ),
  ("trainer", ["--learning_rate=0"], "--learning_rate must be > 0", True),
  ("trainer", ["--epochs=2"], "Set --train_steps or --epochs, not both", True),
  (
    "trainer",
    ["--hypertune_metric=f1"],
    "--hypertune_metric must be accuracy or loss",
    True,
  ),
  (
    "trainer",
    ["--model=resnet50", "--weights=/no/such.weights.h5"],
    "Weights file /no/such.weights.h5 not found",
    True,
  ),
  ("trainer", ["--train_steps=-1"], "train_steps must be >= 0", True),
  ("trainer", ["--steps_per_loop=0"], "steps_per_loop must be >= 1", True),
  (
    "trainer",
    ["--checkpoint_every_steps=25"],
    "checkpoint_every_steps must be a multiple of steps_per_loop (10), got 25",
    True,
  ),
  (
    "trainer",
    ["--eval_every_steps=15"],
    "eval_every_steps must be a multiple",
    True,
  ),
  ("trainer", ["--log_every_steps=0"], "log_every_steps must be > 0", True),
  ("trainer", ["--keep_checkpoints=0"], "keep_checkpoints must be >= 1", True),
  (
    "trainer",
    ["--async_checkpoint", "--keep_checkpoints=1"],
    "keep_checkpoints must be >= 2 with async_checkpoint",
    True,
  ),
  (
    "trainer",
    ["--checkpoint_every_secs=-1"],
    "checkpoint_every_secs must be >= 0",
    True,
  ),
  (
    "trainer",
    ["--max_nan_recoveries=-1"],
    "max_nan_recoveries must be >= 0",
    True,
  ),
  (
    "trainer",
    ["--checkpoint_every_secs=often"],
    "--checkpoint_every_secs must be auto or a number of seconds",
    True,
  ),
  ("trainer", ["--profile_steps=5"], "--profile_steps must be START,END", True),
  (
    "trainer",
    ["--stall_timeout_secs=-1"],
    "--stall_timeout_secs=-1: -1.0 is not a number in the range [0, 1000000000.0]",
    True,
  ),
  (
    "trainer",
    ["--startup_timeout_secs=0"],
    "--startup_timeout_secs=0: 0.0 is not a number in the range [1, 1000000000.0]",
    True,
  ),
  ("trainer", ["--lease_stale_secs=0"], "lease_stale_secs must be > 0", True),
  (
    "trainer",
    ["--local_checkpoints=shm"],
    "local_checkpoints must be auto, ram, disk, off or an absolute directory",
    True,
  ),
  (
    "trainer",
    ["--local_checkpoint_every_steps=15"],
    "local_checkpoint_every_steps must be a multiple of steps_per_loop",
    True,
  ),
  # Numeric flags out of range: refused by absl (bounds, validators).
  (
    "trainer",
    ["--seed=-1"],
    "--seed=-1: -1 is not an integer in the range [0, 4294967295]",
    True,
  ),
  (
    "trainer",
    ["--seed=99999999999999999999"],
    "is not an integer in the range [0, 4294967295]",
    True,
  ),
  (
    "trainer",
    ["--image_size=0"],
    "--image_size=0: 0 is not an integer in the range [8, 4096]",
    True,
  ),
  (
    "trainer",
    ["--image_size=100000"],
    "100000 is not an integer in the range [8, 4096]",
    True,
  ),
  (
    "trainer",
    ["--dropout=nan"],
    "--dropout=nan: not a finite number",
    True,
  ),
  (
    "trainer",
    ["--dropout=1.5"],
    "--dropout=1.5: not a rate in [0, 1)",
    True,
  ),
  (
    "trainer",
    ["--learning_rate=inf"],
    "--learning_rate=inf: not a finite number",
    True,
  ),
  (
    "trainer",
    ["--warmup_steps=-5"],
    "-5 is not an integer in the range [0, 1000000000000]",
    True,
  ),
  (
    "trainer",
    ["--train_steps=99999999999999999999"],
    "is not integer <= 1000000000000",
    True,
  ),
  (
    "trainer",
    ["--epochs=99999999999999999999"],
    "is not integer <= 1000000000000",
    True,
  ),
  (
    "trainer",
    ["--per_replica_batch_size=99999999999"],
    "is not integer <= 1048576",
    True,
  ),
  (
    "trainer",
    ["--steps_per_loop=99999999999999"],
    "is not integer <= 1000000000000",
    True,
  ),
  (
    "trainer",
    ["--keep_checkpoints=99999999999999999999"],
    "is not integer <= 1000000000000",
    True,
  ),
  (
    "trainer",
    ["--max_nan_recoveries=99999999999999999999"],
    "is not integer <= 1000000000000",
    True,
  ),
  (
    "trainer",
    ["--stall_timeout_secs=nan"],
    "--stall_timeout_secs=nan: not a finite number",
    True,
  ),
  (
    "trainer",
    ["--stall_timeout_secs=inf"],
    "inf is not a number in the range [0, 1000000000.0]",
    True,
  ),
  (
    "trainer",
    ["--startup_timeout_secs=nan"],
    "--startup_timeout_secs=nan: not a finite number",
    True,
  ),
  (
    "trainer",
    ["--startup_timeout_secs=inf"],
    "inf is not a number in the range [1, 1000000000.0]",
    True,
  ),
  (
    "trainer",
    ["--lease_stale_secs=inf"],
    "inf is not number <= 1000000000.0",
    True,
  ),
  (
    "trainer",
    ["--expected_mtbf_secs=inf"],
    "inf is not number <= 1000000000.0",
    True,
  ),
  (
    "trainer",
    ["--checkpoint_every_secs=nan"],
    "--checkpoint_every_secs must be auto or a number of seconds, got 'nan'",
    True,
  ),
  (
    "trainer",
    ["--checkpoint_every_secs=inf"],
    "--checkpoint_every_secs must be auto or a number of seconds, got 'inf'",
    True,
  ),
  ("trainer", ["--model_dir=gs://"], "gs:// names no bucket", True),
  (
    "trainer",
    ["--model_dir=gs://Bad_Bucket/run"],
    "Bad_Bucket is not a valid bucket name",
    True,
  ),
  (
    "trainer",
    ["--checkpoint_dir=gs://ab/ckpt"],
    "ab is not a valid bucket name",
    True,
  ),
  (
    "trainer",
    ["--dataset=cassava", "--data_dir=gs://-x-/tfds"],
    "-x- is not a valid bucket name",
    False,
  ),
  ("trainer", ["--model_dir={file}"], "is a file, not a directory", True),
  (
    "trainer",
    ["--model_dir={model_dir}/" + "a" * 300],
    "is 300 bytes long, over the 255-byte limit of a file name here",
    True,
  ),
  (
    "trainer",
    ["--model_dir=/proc/ctl_run"],
    "Cannot use /proc/ctl_run as a directory: /proc is a kernel filesystem",
    True,
  ),
  (
    "trainer",
    ["--checkpoint_dir=/sys/ctl_checkpoints"],
    "/sys is a kernel filesystem, not storage",
    True,
  ),
  (
    "trainer",
    ["--tensorboard_dir={file}/tb"],
    "is a file, not a directory",
    True,
  ),
  (
    "trainer",
    ["--dataset=synthetic"],
    "was written by a different model",
    False,
  ),
  (
    "trainer",
    ["--dataset=files", "--data_dir={images}"],
    "a_red/broken.jpg cannot be decoded as an image",
    False,
  ),
  (
    "trainer",
    ["--dataset=files", "--data_dir={few}"],
    "holds 9 images: too few to hold out every 10th for validation",
    False,
  ),
  (
    "launch",
    ["--num_workers=0", "--", "true"],
    "--num_workers must be at least 1",
    True,
  ),
  ("launch", ["--num_workers=2"], "no worker command given", True),
  (
    "launch",
    ["--num_workers=2", "--port_base=65535", "--", "true"],
    "--port_base",
    True,
  ),
  (
    "launch",
    ["--num_workers=1", "--max_restarts=-1", "--", "true"],
    "--max_restarts",
    True,
  ),
  (
    "launch",
    ["--num_workers=1", "--restart_backoff_secs=-1", "--", "true"],
    "--restart_backoff_secs",
    True,
  ),
  (
    "launch",
    ["--num_workers=abc", "--", "true"],
    "--num_workers: invalid int value: 'abc'",
    True,
  ),
  (
    "launch",
    ["--num_workers=1", "--", "/no/such/command"],
    "cannot run worker command '/no/such/command'",
    True,
  ),
  (
    "vertex",
    ["--num_workers=1"],
    "the following arguments are required: --image",
    True,
  ),
  (
    "vertex",
    ["--image=i", "--num_workers=0"],
    "num_workers counts the chief",
    True,
  ),
  ("vertex", ["--image=i", "--base_output_dir=gs://"], "names no bucket", True),
  (
    "vertex",
    ["--image=i", "--base_output_dir=gs://UPPER/x"],
    "UPPER is not a valid bucket name",
    True,
  ),
  (
    "vertex",
    ["--image=i", "--submit"],
    "--submit needs --project and --region",
    True,
  ),
  ("report", ["{file}"], "no run ledger in", True),
  # A benchmark section's app, before it measures (run alone, as a user
  # tries one): a flag every app shares, and one of its own. The other bad
  # values of the shared flags and of throughput's own are refused in-process
  # (test_benchmarks), through the same `run_app` path.
  ("throughput", ["--output={file}/out.json"], "is a file", False),
  ("goodput", ["--kills=50", "--epochs=1"], "kills do not fit", False),
  # The two benchmark apps, before a section or a cluster starts.
  ("bench", ["--only=resnet", "--results_dir={model_dir}/b"], "--only", True),
  ("bench", ["--quick", "--results_dir={file}/b"], "is a file", True),
  ("cluster", ["--results_dir={file}/c"], "is a file", True),
  (
    "cluster",
    ["--train_steps=150", "--results_dir={model_dir}/c"],
    "--train_steps must be at least 200",
    True,
  ),
  ("report", ["{model_dir}/no/such/run"], "no run ledger in", True),
  ("report", [], "the following arguments are required: model_dir", True),
  ("report", ["{model_dir}", "--colour"], "unrecognized arguments", True),
  (
    "vertex",
    ["--image=i", "--num_workers=2", "--reduction_server_count=2"],
    "between GPU workers; set --accelerator_type",
    True,
  ),
  (
    "vertex",
    [
      "--image=i",
      "--num_workers=2",
      "--accelerator_type=NVIDIA_TESLA_V100",
      "--reduction_server_count=1",
      "--",
      "--collective=ring",
    ],
    "runs with --collective=ring",
    True,
  ),
  ("k8s", ["--image=i"], "the following arguments are required: --name", True),
  ("k8s", ["--name=t", "--image="], "image is missing", True),
  (
    "k8s",
    ["--name=t", "--image=i", "--num_workers=0"],
    "counts the chief",
    True,
  ),
  ("k8s", ["--name=T", "--image=i"], "must be lowercase letters", True),
  (
    "k8s",
    ["--name=t", "--image=i", "--gpus_per_node=1", "--accelerator=gpu"],
    "'gpu' is not a GKE accelerator",
    True,
  ),
  ("k8s", ["--name=t", "--image=i", "--grace_secs=5"], "too short", True),
  (
    "k8s",
    ["--name=t", "--image=i", "--gcsfuse_bucket=gs://b/x"],
    "is not a bucket name",
    True,
  ),
  (
    "k8s",
    ["--name=t", "--image=i", "--kubernetes_version=1.10"],
    "Kubernetes 1.10 is not a version",
    True,
  ),
  # "jobset": the trainer in a JobSet pod; the args are its environment.
  (
    "jobset",
    ["CTL_JOBSET_NAME=t", "CTL_JOBSET_REPLICATED_JOB=worker"],
    "The JobSet environment lacks CTL_JOBSET_JOB_INDEX",
    True,
  ),
  (
    "jobset",
    [
      "CTL_JOBSET_NAME=t",
      "CTL_JOBSET_REPLICATED_JOB=worker",
      "CTL_JOBSET_JOB_INDEX=0",
      "CTL_JOBSET_POD_INDEX=5",
      "CTL_JOBSET_SUBDOMAIN=t",
      "CTL_JOBSET_JOBS=chief=1x1,worker=1x2",
      "CTL_JOBSET_PORT=2222",
    ],
    "out of range for its 1x2 pods",
    True,
  ),
  # "env": the trainer with these variables of ctl.launch set (ctl.env).
  ("env", ["CTL_RESTART_COUNT=abc"], "CTL_RESTART_COUNT must be", True),
  ("env", ["CTL_RESTART_COUNT=-5"], "a whole number 0 or more", True),
  ("env", ["CTL_PREVIOUS_EXIT=killed"], "CTL_PREVIOUS_EXIT must be", True),
  ("env", ["CTL_PREVIOUS_EXIT_TIME=nan"], "CTL_PREVIOUS_EXIT_TIME", True),
  # "example": a user's ctl.run script (examples/regression.py) in this
  # environment: ctl.environment's sentence, exit 2, which ctl-launch does
  # not restart (it was a traceback, exit 1, restarted).
  (
    "example",
    ['TF_CONFIG={{"cluster": '],
    "TF_CONFIG is not valid JSON",
    False,
  ),
]


def _command(tool, args, model_dir):
  if tool in ("jobset", "env"):
    return _command("trainer", [], model_dir)
  if tool == "example":
    script = os.path.join(REPO, "examples", "regression.py")
    return [sys.executable, script, f"--model_dir={model_dir}"]
  if tool == "trainer":
    return trainer_command_reporting_tf(
      *FAST_FLAGS, "--train_steps=20", f"--model_dir={model_dir}", *args
    )
  module = {
    "launch": "ctl.launch",
    "vertex": "ctl.cloud.vertex",
    "report": "ctl.report",
    "k8s": "ctl.cloud.k8s",
    "throughput": "benchmarks.speed.throughput",
    "goodput": "benchmarks.recovery.goodput",
    "bench": "benchmarks.run_all",
    "cluster": "benchmarks.cluster.check",
  }[tool]
  return [sys.executable, "-m", module, *args]


@pytest.mark.parametrize(
  "tool,args,words,before_tf",
  BAD_INPUT,
  ids=[f"{case[0]}:{' '.join(case[1])}" for case in BAD_INPUT],
)
def test_bad_input(
  model_dir, tmp_path, messy_images, few_images, tool, args, words, before_tf
):
  a_file = tmp_path / "a_file"
  a_file.write_text("not a directory")
  args = [
    arg.format(
      model_dir=model_dir, file=a_file, images=messy_images, few=few_images
    )
    for arg in args
  ]
  before = checksum(model_dir)
  env = trainer_env()
  if tool in ("jobset", "env", "example"):
    env.update(arg.split("=", 1) for arg in args)
  result = run_command(_command(tool, args, model_dir), env=env, check=False)
  assert result.returncode == USER_ERROR_EXIT_CODE, result.stderr[-3000:]
  assert checksum(model_dir) == before
  assert a_file.read_text() == "not a directory"
  assert not os.path.exists(os.path.join(REPO, "gs:"))
  lines = result.stderr.strip().splitlines()
  errors = [line for line in lines if line.startswith("error: ")]
  assert errors == lines[-1:], result.stderr[-3000:]
  assert words in errors[0] and errors[0].endswith("."), errors[0]
  if before_tf:
    assert lines == errors, result.stderr[-3000:]
    if tool in ("trainer", "jobset", "env"):
      assert "TF_IMPORTED False" in result.stdout, result.stdout[-3000:]


@pytest.mark.parametrize(
  "flag,last",
  [
    (
      "--profile_steps=30,20",
      "error: profile_steps must be START,END with "
      "1 <= START <= END, got 30,20.",
    ),
    (
      "--profile_steps=12",
      "error: --profile_steps must be START,END (two "
      "step numbers, e.g. 100,110), got '12'.",
    ),
  ],
)
def test_bad_profile_range(model_dir, flag, last):
  assert _fails_cleanly(model_dir, flag) == last


def test_checkpoint_interval_not_a_multiple_of_the_loop(model_dir):
  last = _fails_cleanly(
    model_dir, "--steps_per_loop=10", "--checkpoint_every_steps=25"
  )
  assert last == (
    "error: checkpoint_every_steps must be a multiple of "
    "steps_per_loop (10), got 25."
  )


def test_cassava_with_an_empty_data_dir(model_dir, tmp_path):
  empty = tmp_path / "tfds"
  empty.mkdir()
  last = _fails_cleanly(model_dir, "--dataset=cassava", f"--data_dir={empty}")
  assert f"cassava is not prepared in --data_dir={empty}" in last
  assert "tfds build cassava" in last


def test_resnet50_weights_file_not_found(model_dir, tmp_path):
  missing = tmp_path / "no_such_weights.h5"
  last = _fails_cleanly(model_dir, "--model=resnet50", f"--weights={missing}")
  assert f"Weights file {missing} not found" in last


def test_a_run_dir_another_live_trainer_holds_is_refused(
  model_dir, lease_holder
):
  holder = lease_holder(model_dir, stale_secs=3600)
  last = _fails_cleanly(model_dir)
  assert last.startswith(f"error: {model_dir} is in use by another trainer")
  assert f"pid {holder.pid} on " in last and "--take_over_lease" in last


def test_checkpoint_of_a_different_model(model_dir):
  # The run trained 10 digit classes; synthetic data has 5.
  last = _fails_cleanly(model_dir, "--dataset=synthetic")
  checkpoints = os.path.join(model_dir, "checkpoints")
  assert f"The checkpoint {checkpoints}" in last
  assert "was written by a different model" in last


def test_checkpoint_of_another_input_shape(model_dir):
  # The run trained on 16x16 images; the small CNN's weights fit any size,
  # so it continued on 24x24 ones unnoticed.
  last = _fails_cleanly(model_dir, "--image_size=24")
  checkpoints = os.path.join(model_dir, "checkpoints")
  assert last == (
    f"error: The checkpoint {checkpoints}/ckpt-10 was trained on batches of "
    "(float32[16,16,3], int64[]), not this run's (float32[24,24,3], "
    "int64[]); use the inputs it was trained with (e.g. its --image_size), "
    "or another --checkpoint_dir or --model_dir."
  )


def test_damaged_state_file_resumes_from_the_newest_checkpoint(model_dir):
  state_file = os.path.join(model_dir, "checkpoints", "checkpoint")
  with open(state_file, "w") as f:
    f.write("this is not a checkpoint state\n")
  events = f"{model_dir}.events.jsonl"
  result = run_trainer(
    *FAST_FLAGS, "--train_steps=20", f"--model_dir={model_dir}", events=events
  )
  assert events_lib.restored_steps(events) == [10], result.stderr[-3000:]
  damaged = [
    line for line in result.stderr.splitlines() if "is damaged" in line
  ]
  assert len(damaged) == 1 and "ckpt-10" in damaged[0], damaged
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  assert tf.train.latest_checkpoint(os.path.dirname(state_file)).endswith(
    "ckpt-20"
  )


_AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


@pytest.mark.skipif(
  os.geteuid() != 0 or not shutil.which("setpriv"),
  reason="needs root to run the trainer as another user",
)
def test_a_model_dir_the_user_may_not_write(finished_run):
  # A world-readable copy owned by root, then the trainer as user "nobody",
  # which needs to read this checkout and its virtualenv: a checkout in a
  # private directory (e.g. `mktemp -d`, mode 0700) cannot run this test.
  probe = subprocess.run(
    [*_AS_NOBODY, sys.executable, "-c", "import trainer.checks"],
    cwd=REPO,
    env=trainer_env(),
    capture_output=True,
    check=False,
  )
  if probe.returncode != 0:
    pytest.skip("user nobody cannot read this checkout or its virtualenv")
  parent = tempfile.mkdtemp(prefix="ctl_not_writable_")
  try:
    os.chmod(parent, 0o755)
    model_dir = os.path.join(parent, "run")
    shutil.copytree(finished_run, model_dir)
    before = checksum(model_dir)
    result = run_command(
      [*_AS_NOBODY, *_command("trainer", [], model_dir)],
      env=trainer_env(HOME=parent),
      check=False,
    )
    assert result.returncode == USER_ERROR_EXIT_CODE, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
      f"error: Cannot write to {model_dir}: this process (user id 65534) "
      f"may not write in {model_dir}."
    ]
    assert "TF_IMPORTED False" in result.stdout
    assert checksum(model_dir) == before
  finally:
    shutil.rmtree(parent)


@pytest.mark.parametrize(
  "flags",
  [
    ("--lr_schedule=cosine", "--warmup_steps=5"),
    ("--learning_rate=0.001",),
  ],
  ids=["schedule", "rate"],
)
def test_the_learning_rate_is_not_state_a_resume_may_change_it(
  model_dir, flags
):
  result = run_trainer(
    *FAST_FLAGS,
    "--train_steps=20",
    *flags,
    f"--model_dir={model_dir}",
    check=False,
    events=f"{model_dir}.events.jsonl",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert events_lib.restored_steps(f"{model_dir}.events.jsonl") == [10]
  if flags == ("--learning_rate=0.001",):  # Not the restored 0.003.
    rates = read_scalars(os.path.join(model_dir, "tensorboard", "train"))
    assert rates["learning_rate"][-1] == (20, pytest.approx(0.001))


@pytest.mark.parametrize(
  "who,flags,job_id",
  [
    ("trainer", ["--storage=gcsfs"], ""),
    ("trainer", ["--storage=tf"], ""),
    ("script", [], ""),
    ("script", [], "j"),
  ],
)
def test_cloud_storage_that_cannot_be_resolved_stops_at_once(
  tmp_path, who, flags, job_id
):
  """Without the check, gcsfs and the retry policy retried for ten minutes;
  the trainer's tf route ended in a 50 s aiohttp traceback (the lease's
  gcsfs). A user's ctl.run script (examples/regression.py) rode gcsfs's
  retries for 53 s (the lease's first read, in ctl.run), then the same
  traceback, exit 1, which an agent restarts; with a job id its
  ctl.environment reads the lease too (a restart's watch)."""
  model_dir = "--model_dir=gs://test-bucket/run"
  if who == "trainer":
    command = trainer_command(
      *FAST_FLAGS, "--train_steps=20", *flags, model_dir
    )
  else:
    command = [sys.executable, os.path.join(REPO, "examples", "regression.py")]
    command += [*flags, model_dir]
  env = trainer_env(
    STORAGE_EMULATOR_HOST="http://no-such-host.invalid:9",
    GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",
    CTL_JOB_ID=job_id,
  )
  result = run_command(command, cwd=tmp_path, env=env, check=False)
  assert result.returncode == USER_ERROR_EXIT_CODE, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith(
    "error: Cannot reach Cloud Storage for gs://test-bucket/run"
  ), last
  assert os.listdir(tmp_path) == []


def test_zero_train_steps_on_a_fresh_directory_writes_nothing(tmp_path):
  fresh = tmp_path / "fresh"
  result = run_trainer(*FAST_FLAGS, "--train_steps=0", f"--model_dir={fresh}")
  assert "nothing to train, nothing written" in result.stderr
  assert not fresh.exists()


_FILES_FLAGS = (
  "--dataset=files",
  "--per_replica_batch_size=4",
  "--train_steps=10",
)


def test_an_undecodable_image_is_named_before_anything_is_written(
  messy_images, tmp_path
):
  # It was a 51-line traceback naming no file, after ckpt-0 was written.
  fresh = tmp_path / "run"
  result = run_trainer(
    *FAST_FLAGS,
    *_FILES_FLAGS,
    f"--data_dir={messy_images}",
    f"--model_dir={fresh}",
    check=False,
  )
  assert result.returncode == USER_ERROR_EXIT_CODE, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  lines = result.stderr.strip().splitlines()
  assert [line for line in lines if line.startswith("error: ")] == lines[-1:]
  broken = os.path.join(messy_images, "a_red", "broken.jpg")
  assert lines[-1] == (
    f"error: {broken} cannot be decoded as an image (1 of the 13 files); "
    "remove it, or pass --skip_bad_images to train without it."
  )
  assert not fresh.exists() or snapshot(fresh) == {}


def test_skip_bad_images_trains_without_them_and_resumes_exactly(
  messy_images, tmp_path
):
  model_dir = tmp_path / "run"
  first = run_trainer(
    *FAST_FLAGS,
    *_FILES_FLAGS,
    "--skip_bad_images",
    f"--data_dir={messy_images}",
    f"--model_dir={model_dir}",
  )
  skipped = [line for line in first.stderr.splitlines() if "Skipped" in line]
  assert len(skipped) == 1, first.stderr[-3000:]
  assert skipped[0].endswith(
    "Skipped 1 of the 13 files under "
    f"{messy_images}: they cannot be decoded as images: a_red/broken.jpg."
  )
  with open(model_dir / "checkpoints" / "data_manifest.json") as f:
    listed = json.load(f)["files"]
  assert len(listed) == 12 and "a_red/broken.jpg" not in listed
  # The manifest fixes the order: the resume decodes nothing up front.
  again = run_trainer(
    *FAST_FLAGS,
    *_FILES_FLAGS[:-1],
    "--train_steps=20",
    "--skip_bad_images",
    f"--data_dir={messy_images}",
    f"--model_dir={model_dir}",
    events=f"{model_dir}.events.jsonl",
  )
  assert events_lib.restored_steps(f"{model_dir}.events.jsonl") == [10]
  assert "Skipped" not in again.stderr
  assert read_summary(str(model_dir))["final_step"] == 20


def test_a_ledger_line_of_wrong_types_never_fails_a_run(model_dir):
  # It failed the run after its export, and every re-run after it.
  directory = os.path.join(model_dir, "ledger")
  [path] = glob.glob(os.path.join(directory, "*.jsonl"))  # Beside: .flags.
  with open(path, "a") as f:
    f.write('{"event": "end", "time": "late", "step": 10, "outcome": "done"}\n')
  with open(path) as f:
    line = len(f.read().splitlines())
  result = run_trainer(
    *FAST_FLAGS, "--train_steps=20", f"--model_dir={model_dir}"
  )
  assert f"Skipped line {line} of {path}: 'time' is \"late\"" in result.stderr
  assert "Traceback" not in result.stderr
  summary = read_summary(model_dir)
  assert summary["final_step"] == 20
  first, _ = summary["goodput"]["attempts"]  # The second is this run.
  assert first["outcome"] == "done"


@pytest.mark.parametrize("form", ["absolute", "parent"])
def test_a_state_file_naming_a_checkpoint_elsewhere_is_refused(
  model_dir, tmp_path, form
):
  # It restored whatever checkpoint the state file named, silently.
  checkpoints = os.path.join(model_dir, "checkpoints")
  elsewhere = (
    tmp_path / "elsewhere" if form == "absolute" else tmp_path / "run" / ".."
  )
  os.makedirs(elsewhere, exist_ok=True)
  for name in os.listdir(checkpoints):
    if name.startswith("ckpt-10."):
      shutil.copy2(os.path.join(checkpoints, name), elsewhere)
  named = (
    os.path.join(elsewhere, "ckpt-10")
    if form == "absolute"
    else os.path.join("..", "..", "ckpt-10")
  )
  state_file = os.path.join(checkpoints, "checkpoint")
  with open(state_file, "w") as f:
    f.write(f'model_checkpoint_path: "{named}"\n')
  last = _fails_cleanly(model_dir)
  assert last.startswith(
    f"error: The checkpoint state file {state_file} names {named}, outside "
    f"{checkpoints}"
  ), last
