"""The container contract, run the way Vertex AI runs it, on loopback.

Vertex AI starts the image's entry point with the job config's args on every
replica, with TF_CONFIG (chief + worker pools, extra fields), CLUSTER_SPEC and
AIP_* directories ending in a slash; under hyperparameter tuning it also sets
CLOUD_ML_TRIAL_ID and CLOUD_ML_HP_METRIC_FILE. Only the dataset and model are
swapped for offline ones (later flags win over the flagfile).
"""

import glob
import json
import os
import subprocess
import sys

from dockerfile_parse import DockerfileParser
import pytest
import yaml

from tests.conftest import REPO
from tests.conftest import free_ports
from tests.conftest import read_scalars
from tests.conftest import run_trainer
from tests.conftest import trainer_env
from trainer.testing import OFFLINE_FLAGS
from trainer.testing import run_command
from trainer.testing import vertex_output_env

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes


def _entrypoint() -> list[str]:
  """The Dockerfile's ENTRYPOINT, with this test's Python as `python`."""
  parser = DockerfileParser(os.path.join(REPO, "Dockerfile"))
  entrypoint = json.loads(
    [i["value"] for i in parser.structure if i["instruction"] == "ENTRYPOINT"][
      -1
    ]
  )
  assert entrypoint[0] == "python"
  return [sys.executable, *entrypoint[1:]]


def test_two_replicas_write_where_vertex_expects(tmp_path):
  with open(os.path.join(REPO, "configs/vertex/multiworker_v100.yaml")) as f:
    spec = yaml.safe_load(f)
  pools = spec["workerPoolSpecs"]
  bucket = tmp_path / "bucket"
  aip = vertex_output_env(str(bucket))
  ports = free_ports(2)
  cluster = {
    "chief": [f"localhost:{ports[0]}"],
    "worker": [f"localhost:{ports[1]}"],
  }
  processes = []
  for pool, (task_type, index) in zip(pools, (("chief", 0), ("worker", 0))):
    tf_config = {
      "cluster": cluster,
      "task": {"type": task_type, "index": index},
      "environment": "cloud",
      "job": json.dumps(spec),
    }
    env = trainer_env(
      TF_CONFIG=json.dumps(tf_config), CLUSTER_SPEC=json.dumps(tf_config), **aip
    )
    processes.append(
      subprocess.Popen(
        [*_entrypoint(), *pool["containerSpec"]["args"], *OFFLINE_FLAGS],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
      )
    )
  for process in processes:
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output[-3000:]

  # AIP_MODEL_DIR's parent is the job's base output directory, where the
  # run record and summary go beside Vertex AI's three directories.
  assert sorted(os.listdir(bucket)) == [
    "checkpoints",
    "ledger",
    "logs",
    "model",
    "train_summary.json",
  ]
  assert "checkpoint" in os.listdir(bucket / "checkpoints")
  assert "saved_model.pb" in os.listdir(bucket / "model")
  assert "loss" in read_scalars(str(bucket / "logs" / "train"))
  assert (
    len([f for f in os.listdir(bucket / "logs" / "train") if "tfevents" in f])
    == 1
  )


def test_hypertune_metric_is_reported_after_each_evaluation(tmp_path):
  metric_file = tmp_path / "hypertune" / "output.metrics"
  model_dir = tmp_path / "run"
  run_trainer(
    *OFFLINE_FLAGS,
    "--epochs=2",
    "--eval_every_steps=22",
    "--hypertune_metric=accuracy",
    f"--model_dir={model_dir}",
    env=trainer_env(
      CLOUD_ML_HP_METRIC_FILE=str(metric_file), CLOUD_ML_TRIAL_ID="7"
    ),
  )
  trial_dir = model_dir / "trial_7"  # The trial id keeps trials apart.
  evals = dict(
    read_scalars(str(trial_dir / "tensorboard" / "validation"))["accuracy"]
  )
  lines = [json.loads(line) for line in metric_file.read_text().splitlines()]
  reported = {
    int(line["global_step"]): float(line["accuracy"]) for line in lines
  }
  # 1437 training digits / 16 = 89 steps per epoch: evaluations at 22, 44,
  # 66, 88, 110, 132, 154, 176 and the final one at 178.
  assert sorted(reported) == [22, 44, 66, 88, 110, 132, 154, 176, 178]
  for step, value in reported.items():
    assert abs(value - evals[step]) < 1e-6, step
  assert all(line["trial"] == "7" for line in lines)


@pytest.mark.parametrize(
  "config",
  sorted(
    os.path.basename(p) for p in glob.glob(f"{REPO}/configs/vertex/*.yaml")
  ),
)
def test_shipped_config_passes_dry_run(config, tmp_path):
  """Each distinct pool args list, with its AIP_* dirs, as README says to check.

  The bucket is mounted where Cloud Storage FUSE would put it, as on Vertex
  AI, so the check needs no network; --dry_run writes nothing there.
  """
  with open(os.path.join(REPO, "configs/vertex", config)) as f:
    spec = yaml.safe_load(f)
  base = spec["baseOutputDirectory"]["outputUriPrefix"].rstrip("/")
  bucket = base.removeprefix("gs://").split("/")[0]
  (tmp_path / bucket).mkdir()
  env = trainer_env(**vertex_output_env(base))
  pools = {tuple(p["containerSpec"]["args"]) for p in spec["workerPoolSpecs"]}
  for args in sorted(pools):
    result = run_command(
      [*_entrypoint(), *args, "--dry_run", f"--fuse_root={tmp_path}"], env=env
    )
    dirs = json.loads(result.stdout)["output_dirs"]
    assert dirs["export_dir"] == f"{base}/model"
  assert not any((tmp_path / bucket).iterdir())
