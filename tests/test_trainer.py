"""End to end through the command line: train, resume, log, export, summarize."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types
import urllib.request

import numpy as np
import pytest

from ctl import report
from ctl.telemetry import ledger_reader
from ctl.testing import events as events_lib
from tests.conftest import FAST_FLAGS
from tests.conftest import free_ports
from tests.conftest import read_scalars
from tests.conftest import read_summary
from tests.conftest import run_trainer
from tests.conftest import trained_model_dir
from tests.conftest import trainer_env
from trainer import checks
from trainer.testing import REPO
from trainer.testing import RESUME_FLAGS
from trainer.testing import launch_command
from trainer.testing import run_command
from trainer.testing import share_few_cores


@pytest.fixture(scope="module")
def continued_run(tmp_path_factory):
  """Trained to 40 (steps 15-25 profiled), re-run, then continued to 60."""
  model_dir = str(tmp_path_factory.mktemp("continued") / "run")
  first = run_trainer(
    *FAST_FLAGS,
    "--train_steps=40",
    "--profile_steps=15,25",
    f"--model_dir={model_dir}",
  )
  summary = read_summary(model_dir)
  again = f"{model_dir}.again.jsonl"
  run_trainer(
    *FAST_FLAGS, "--train_steps=40", f"--model_dir={model_dir}", events=again
  )
  rerun_summary = read_summary(model_dir)
  more = f"{model_dir}.more.jsonl"
  run_trainer(
    *FAST_FLAGS, "--train_steps=60", f"--model_dir={model_dir}", events=more
  )
  return model_dir, (first, summary), (again, rerun_summary), more


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
  """20 steps with the default options (no --profile_steps)."""
  return trained_model_dir(
    tmp_path_factory, "short", *FAST_FLAGS, "--train_steps=20"
  )


@pytest.mark.processes
def test_each_start_keeps_its_flags_and_the_report_says_what_changed(
  continued_run, tmp_path, capsys
):
  """The three starts of `continued_run`: each start's effective flags are
  a flagfile beside its ledger file, ctl-report names what changed between
  starts, and the newest flagfile passed back with --flagfile starts the
  same run (a copy of it: at its target, nothing to train)."""
  model_dir = continued_run[0]
  files = sorted(glob.glob(os.path.join(model_dir, "ledger", "*.flags")))
  assert len(files) == 3
  with open(files[-1]) as f:
    newest = f.read().splitlines()
  assert "--train_steps=60" in newest and "--dataset=digits" in newest
  report.main([model_dir, "--png="])
  out = capsys.readouterr().out
  assert "start 2: --profile_steps: '15,25' -> ''" in out, out
  assert "start 3: --train_steps: '40' -> '60'" in out, out
  copy = str(tmp_path / "run")
  shutil.copytree(model_dir, copy)
  flagfile = tmp_path / "again.flags"
  flagfile.write_text(
    "\n".join(
      f"--model_dir={copy}" if line.startswith("--model_dir=") else line
      for line in newest
    )
  )
  again = run_trainer(f"--flagfile={flagfile}")
  assert "nothing to train" in again.stderr, again.stderr[-2000:]
  assert read_summary(copy)["final_step"] == 60


@pytest.mark.processes
def test_train_rerun_continue_and_outputs(continued_run):
  model_dir, (first, summary), (again, rerun_summary), more = continued_run
  assert summary["final_step"] == 40
  assert summary["restores"] == 0
  for key in (
    "train_loss",
    "train_accuracy",
    "eval_accuracy",
    "eval_loss",
    "examples_per_second",
    "wall_seconds",
    "weights_fingerprint",
  ):
    assert summary[key] is not None, key
  assert "step 40/40" in first.stderr

  # Same command again: steps are targets, so nothing more is trained.
  assert events_lib.restored_steps(again) == [40]
  assert not [
    e for e in events_lib.read_events(again) if e["phase"] == "train_loop"
  ]
  assert (
    rerun_summary["weights_fingerprint"] == (summary["weights_fingerprint"])
  )

  # A larger target continues from the checkpoint.
  assert events_lib.restored_steps(more) == [40]
  assert events_lib.read_events(more)[-1]["step"] == 60
  continued = read_summary(model_dir)
  assert continued["final_step"] == 60
  assert continued["restores"] >= 1


@pytest.mark.processes
def test_the_start_up_checks_run_once_per_start(continued_run):
  """The cluster lookup, bucket probe and writability check: not twice."""
  _, (first, _), _, _ = continued_run
  assert first.stderr.count(checks.PASSED) == 1, first.stderr[-3000:]


@pytest.mark.processes
def test_a_runs_log_holds_no_python_warning(continued_run):
  """A trained, evaluated and exported run prints no `warnings.warn` line:
  TensorFlow's own iterators ask a dataset for its options while ctl's loops
  are traced, and the warning that call prints is about TensorFlow's
  internals, not the user's run."""
  _, (first, _), _, _ = continued_run
  warned = re.findall(r"^\S+:\d+: \w*Warning: .*$", first.stderr, re.M)
  assert not warned, warned


@pytest.mark.processes
def test_a_runs_info_lines_are_its_own(continued_run):
  """The log's INFO lines from Python are ctl's and the trainer's: not
  TensorFlow's own (a "Sharding callback duration" at every save, the
  export's asset and fingerprint paths), which would outnumber them.
  TensorFlow's warnings and errors still print."""
  _, (first, _), _, _ = continued_run
  ours = {
    os.path.basename(path)
    for folder in ("ctl", "trainer")
    for path in glob.glob(
      os.path.join(REPO, folder, "**", "*.py"), recursive=True
    )
  }
  sources = re.findall(
    r"^I\d{4} [\d:.]+ +\d+ (\S+\.py):\d+\]", first.stderr, re.M
  )
  assert sources and set(sources) <= ours, sorted(set(sources) - ours)
  assert "Exported the SavedModel of step 40 to " in first.stderr


@pytest.mark.processes
def test_train_and_validation_run_dirs_share_tag_names(continued_run):
  """TensorBoard overlays train and validation: same tags, two run dirs."""
  model_dir = continued_run[0]
  board = os.path.join(model_dir, "tensorboard")
  train = read_scalars(os.path.join(board, "train"))
  validation = read_scalars(os.path.join(board, "validation"))
  assert set(train) == {
    "loss",
    "accuracy",
    "learning_rate",
    "examples_per_second",
    "steps_per_second",
    "goodput/percent",
  }
  assert set(validation) == {"loss", "accuracy"}
  assert {d for d in os.listdir(board) if "tfevents" not in d} == {
    "train",
    "validation",
  }
  assert [step for step, _ in train["loss"]] == [10, 20, 30, 40, 50, 60]
  assert {20, 40, 60} <= {step for step, _ in validation["accuracy"]}
  assert np.isfinite([v for _, v in train["loss"]]).all()
  # The last values are the run's final numbers in train_summary.json.
  summary = read_summary(model_dir)
  for tag, key, scalars in (
    ("loss", "train_loss", train),
    ("accuracy", "train_accuracy", train),
    ("loss", "eval_loss", validation),
    ("accuracy", "eval_accuracy", validation),
  ):
    step, value = max(scalars[tag])
    assert step == 60 and value == pytest.approx(summary[key], abs=1e-6), key


class _TensorBoard:
  """A TensorBoard server process, asked over HTTP as its web app asks."""

  def __init__(self, logdir):
    (self.port,) = free_ports(1)
    self.process = subprocess.Popen(
      [
        sys.executable,
        "-m",
        "tensorboard.main",
        f"--logdir={logdir}",
        "--host=127.0.0.1",
        f"--port={self.port}",
        "--reload_interval=1",
      ],
      env=trainer_env(),
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
    )

  def post(self, path, body, *, until, timeout=180):
    """POSTs `body` as JSON until `until(answer)` holds; returns the answer."""
    deadline, answer = time.time() + timeout, None
    while time.time() < deadline:
      assert self.process.poll() is None, "TensorBoard exited"
      request = urllib.request.Request(
        f"http://127.0.0.1:{self.port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
      )
      try:
        with urllib.request.urlopen(request, timeout=30) as response:
          answer = json.load(response)
        if until(answer):
          return answer
      except OSError:
        pass  # Not listening yet.
      time.sleep(1)
    raise AssertionError(f"TensorBoard never answered as expected: {answer}")


@pytest.fixture
def tensorboard_server():
  servers = []

  def start(logdir):
    servers.append(_TensorBoard(logdir))
    return servers[-1]

  yield start
  for server in servers:
    server.process.terminate()
    server.process.wait(timeout=30)


def _traces(model_dir) -> list[str]:
  return glob.glob(
    os.path.join(
      model_dir,
      "tensorboard",
      "train",
      "plugins",
      "profile",
      "*",
      "*.xplane.pb",
    )
  )


@pytest.mark.processes
def test_profile_steps_trace_the_loop_calls_over_the_range(continued_run):
  traces = _traces(continued_run[0])
  assert len(traces) == 1, traces  # The re-runs past step 25 traced nothing.
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top

  space = xplane_pb2.XSpace()
  with open(traces[0], "rb") as f:
    space.ParseFromString(f.read())
  steps = []
  for plane in space.planes:
    names = {i: m.name for i, m in plane.event_metadata.items()}
    stats = {i: m.name for i, m in plane.stat_metadata.items()}
    steps += [
      s.int64_value
      for line in plane.lines
      for e in line.events
      if names[e.metadata_id] == "train"
      for s in e.stats
      if stats[s.metadata_id] == "step_num"
    ]
  # steps_per_loop=10: steps 15-25 run inside the calls ending at 20 and 30.
  assert sorted(steps) == [20, 30]


@pytest.mark.processes
def test_no_profile_trace_without_profile_steps(short_run):
  assert os.path.isdir(os.path.join(short_run, "tensorboard", "train"))
  assert not _traces(short_run)
  assert not os.path.exists(
    os.path.join(short_run, "tensorboard", "train", "plugins")
  )


@pytest.mark.processes
def test_hparams_dashboard_lists_the_run_with_its_final_metric(
  continued_run, tensorboard_server
):
  """A real TensorBoard on the runs' parent dir, asked as its dashboard asks."""
  model_dir = continued_run[0]
  summary = read_summary(model_dir)
  metrics = [
    {"metric": {"group": group, "tag": tag}}
    for group, tag in (("validation", "accuracy"), ("train", "loss"))
  ]
  groups = tensorboard_server(os.path.dirname(model_dir)).post(
    "/data/plugin/hparams/session_groups",
    {
      "experimentName": "",
      "allowedStatuses": ["STATUS_UNKNOWN"],
      "colParams": metrics,
      "startIndex": 0,
      "sliceSize": 10,
    },
    until=lambda answer: answer.get("sessionGroups"),
  )["sessionGroups"]
  assert len(groups) == 1
  assert groups[0]["sessions"][0]["name"] == "run/tensorboard"
  hparams = groups[0]["hparams"]
  assert hparams["learning_rate"] == pytest.approx(0.003)
  assert hparams["model"] == "small_cnn"
  assert hparams["optimizer"] == "adam"
  assert hparams["global_batch_size"] == 32
  # A session keeps the options it started with (TensorBoard reads the
  # first start record of a run dir): the first command's target.
  assert hparams["train_steps"] == 40
  values = {
    (v["name"]["group"], v["name"]["tag"]): v for v in groups[0]["metricValues"]
  }
  assert values["validation", "accuracy"]["value"] == pytest.approx(
    summary["eval_accuracy"], abs=1e-6
  )
  assert values["validation", "accuracy"]["trainingStep"] == 60
  assert values["train", "loss"]["value"] == pytest.approx(
    summary["train_loss"], abs=1e-6
  )


@pytest.mark.browser
@pytest.mark.skipif(
  not all(map(shutil.which, ("chromium", "chromedriver"))),
  reason="needs a browser: apt-get install -y chromium chromium-driver",
)
@pytest.mark.processes
def test_a_browser_draws_train_and_validation_in_one_chart(
  continued_run, tmp_path
):
  """Headless Chromium on TensorBoard's time-series page (docs/tensorboard.png)."""
  out = tmp_path / "tensorboard.png"
  run_command(
    [
      sys.executable,
      "scripts/tensorboard_screenshot.py",
      f"--logdir={os.path.join(continued_run[0], 'tensorboard')}",
      f"--out={out}",
    ],
    timeout=600,
  )
  cards = json.loads(out.with_suffix(".json").read_text())["cards"]
  assert sorted(card["title"] for card in cards) == ["accuracy", "loss"]
  for card in cards:  # One chart per tag, a line of each run in it.
    assert card["runs"] == ["train", "validation"], card
    assert card["colors"] == 2, card
  assert out.read_bytes().startswith(b"\x89PNG")


@pytest.mark.processes
def test_saved_model_predicts_what_the_model_predicts(short_run):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from ctl.data import input as input_lib  # pylint: disable=g-import-not-at-top
  from trainer import data  # pylint: disable=g-import-not-at-top
  from trainer import model  # pylint: disable=g-import-not-at-top

  model_dir = short_run

  source = data.load("digits", image_size=16)
  images, _ = next(
    iter(
      input_lib.eval_dataset(
        records=source.eval_records,
        decode_fn=source.decode_fn,
        input_context=tf.distribute.InputContext(),
        global_batch_size=8,
      )
    )
  )
  images = images.numpy()
  trained = model.build_model(
    name="small_cnn", num_classes=10, image_shape=(16, 16, 3), dropout=0.1
  )
  tf.train.Checkpoint(model=trained).restore(
    tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
  ).assert_existing_objects_matched()
  expected = trained(images, training=False).numpy()

  serving = tf.saved_model.load(os.path.join(model_dir, "saved_model"))
  outputs = serving.signatures["serving_default"](images=tf.constant(images))
  np.testing.assert_allclose(
    outputs["logits"].numpy(), expected, rtol=1e-5, atol=1e-5
  )
  np.testing.assert_allclose(
    outputs["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5
  )
  assert not np.allclose(expected, expected[:1])  # Inputs really differ.


@pytest.mark.processes
def test_resnet50_trains_from_a_local_weights_file(tmp_path, model_dir):
  import keras  # pylint: disable=g-import-not-at-top

  backbone = keras.applications.ResNet50(
    include_top=False, weights=None, input_shape=(32, 32, 3)
  )
  weights = str(tmp_path / "backbone.weights.h5")
  backbone.save_weights(weights)
  run_trainer(
    "--model=resnet50",
    f"--weights={weights}",
    "--dataset=synthetic",
    "--image_size=32",
    "--per_replica_batch_size=4",
    "--train_steps=3",
    "--steps_per_loop=1",
    "--log_every_steps=1",
    "--checkpoint_every_steps=0",
    "--noexport",  # The export's tracing: 11 s of ResNet50's 80 s alone.
    f"--model_dir={model_dir}",
    # ResNet50 on 2 cores beside three other test workers took 268-317 s.
    timeout=900,
  )
  summary = read_summary(model_dir)
  assert summary["final_step"] == 3
  assert np.isfinite(summary["train_loss"])
  assert not os.path.exists(os.path.join(model_dir, "saved_model"))


def test_resnet50_loads_the_weights_file(tmp_path):
  import keras  # pylint: disable=g-import-not-at-top

  from trainer import model  # pylint: disable=g-import-not-at-top

  backbone = keras.applications.ResNet50(
    include_top=False, weights=None, input_shape=(32, 32, 3)
  )
  weights = str(tmp_path / "backbone.weights.h5")
  backbone.save_weights(weights)
  built = model.build_model(
    name="resnet50", num_classes=5, image_shape=(32, 32, 3), weights=weights
  )
  np.testing.assert_array_equal(
    built.get_layer("conv1_conv").kernel.numpy(),
    backbone.get_layer("conv1_conv").kernel.numpy(),
  )
  assert built.output.shape[-1] == 5
  assert built.layers[-2].units == 1016  # The codelab's head.


@pytest.mark.parametrize(
  "extra",
  [
    ("--mixed_precision=bf16",),
    ("--xla",),
    ("--mixed_precision=bf16", "--xla"),
  ],
)
@pytest.mark.processes
def test_mixed_precision_and_xla_train_and_export(extra, model_dir):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  run_trainer(
    *FAST_FLAGS, "--train_steps=20", *extra, f"--model_dir={model_dir}"
  )
  assert np.isfinite(read_summary(model_dir)["train_loss"])
  serving = tf.saved_model.load(os.path.join(model_dir, "saved_model"))
  logits = serving.signatures["serving_default"](
    images=tf.zeros([2, 16, 16, 3])
  )["logits"]
  assert logits.dtype == tf.float32  # Float32 out, whatever the policy.


@pytest.mark.processes
def test_fp16_resume_restores_the_loss_scale(tmp_path):
  """Stopped at step 5 and resumed to 10, an fp16 run ends as the straight
  one: the same weights and the same loss scale state (the scale, and the
  steps counted towards growing it: 10, not the 5 since the restart). Small
  batches: fp16 runs slowly on a CPU, and no step needs a large one."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  flags = (
    *FAST_FLAGS,
    *RESUME_FLAGS,
    "--mixed_precision=fp16",
    "--per_replica_batch_size=8",
  )
  straight, stopped = str(tmp_path / "straight"), str(tmp_path / "stopped")
  run_trainer(*flags, "--train_steps=10", f"--model_dir={straight}")
  run_trainer(*flags, "--train_steps=5", f"--model_dir={stopped}")
  run_trainer(*flags, "--train_steps=10", f"--model_dir={stopped}")
  assert (
    read_summary(stopped)["weights_fingerprint"]
    == (read_summary(straight)["weights_fingerprint"])
  )

  def loss_scale(model_dir):
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints"))
    return [
      reader.get_tensor(f"optimizer/{name}/.ATTRIBUTES/VARIABLE_VALUE")
      for name in ("dynamic_scale", "step_counter")
    ]

  assert loss_scale(stopped) == loss_scale(straight)
  assert loss_scale(straight)[1] == 10


@pytest.mark.processes
def test_a_restart_with_xla_compiles_nothing_a_restart_compiled_before(
  tmp_path,
):
  """--xla with the node's XLA cache: a job killed at steps 10 and 20. The
  first start and the first restart each leave their compiled train loop in
  --xla_cache_dir (a restored start traces other functions first, so its
  program has another key); the second restart loads the first restart's
  instead of compiling again: nothing is added or rewritten after it
  begins. The run ends as one without kills would."""
  cache, model_dir = tmp_path / "xla-cache", tmp_path / "run"
  flags = (
    *FAST_FLAGS,
    "--eval_every_steps=0",
    "--checkpoint_every_steps=10",
    "--train_steps=30",
    "--xla",
    f"--xla_cache_dir={cache}",
    f"--model_dir={model_dir}",
  )
  result = run_command(
    launch_command("--num_workers=1", "--max_restarts=2", trainer_flags=flags),
    env=trainer_env(faults="crash@10:attempt=0,crash@20:attempt=1"),
  )
  summary = read_summary(str(model_dir))
  assert summary["final_step"] == 30 and summary["restarts"] == 2
  written = sorted(p.stat().st_mtime_ns / 1e9 for p in cache.iterdir())
  starts = [
    attempt[0]["time"]
    for attempt in ledger_reader.read(str(model_dir / "ledger"))
  ]
  assert len(starts) == 3 and len(written) == 2, result.stderr[-3000:]
  assert written[0] < starts[1] < written[1] < starts[2], (written, starts)


@pytest.mark.parametrize(
  ("xla", "setting", "expected"),
  [
    (False, "auto", None),
    (True, "off", None),
    (True, "/nodes/cache", "/nodes/cache"),
  ],
)
def test_the_xla_cache_is_only_for_xla_runs_and_can_be_off(
  xla, setting, expected
):
  config = types.SimpleNamespace(xla=xla, xla_cache_dir=setting)
  assert checks.xla_cache_dir(config) == expected


def test_checks_on_few_cores_start_each_tensorflow_with_one_inter_op_thread(
  monkeypatch,
):
  """The suite and the cluster check (`share_few_cores`): the trainers they
  start inherit one inter-op thread; a value set by the user is kept."""
  monkeypatch.delenv("TF_NUM_INTEROP_THREADS", raising=False)
  share_few_cores()
  assert trainer_env()["TF_NUM_INTEROP_THREADS"] == "1"
  monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "4")
  share_few_cores()
  assert trainer_env()["TF_NUM_INTEROP_THREADS"] == "4"
