"""ctl.distributed.environment: the platform's environment in one call.

The environment is faked as the platforms write it (Vertex AI's and a
JobSet's through this one call in test_vertex_ai.py and test_jobset.py, the
directories in test_outputs.py); one real run starts a user's script on two
workers with ctl-launch.
"""

import json
import sys
import types

import pytest
import tensorflow as tf

import ctl
from ctl import env as ctl_env
from ctl.distributed import environment
from ctl.errors import UserError
from ctl.io import outputs
from ctl.platform import jobset
from tests.conftest import REPO
from tests.conftest import read_summary
from trainer.testing import run_command

_TWO_WORKERS = {"worker": ["localhost:2001", "localhost:2002"]}


def _tf_config(cluster_spec, task_type, index):
  return json.dumps(
    {"cluster": cluster_spec, "task": {"type": task_type, "index": index}}
  )


def _assert_one_sentence(message, words):
  assert words in message, message
  assert message.endswith(".") and "\n" not in message, message


def test_tf_config_and_the_launcher_give_rank_chief_job_and_restarts():
  found = environment.resolve(
    model_dir="runs/x",
    environ={
      "TF_CONFIG": _tf_config(_TWO_WORKERS, "worker", 1),
      ctl_env.JOB_ID: "job-7",
      ctl_env.RESTART_COUNT: "2",
    },
  )
  assert (found.rank, found.num_workers, found.is_chief) == (1, 2, False)
  assert found.strategy is None  # Not built without TensorFlow.
  values = found.option_values()
  assert values == {
    "dirs": outputs.OutputDirs(
      "runs/x", "runs/x/checkpoints", "runs/x/tensorboard", "runs/x/saved_model"
    ),
    "is_chief": False,
    "job_id": "job-7",
    "restarts": 2,
    "evaluator_writes_validation": False,
  }
  options = ctl.RunOptions(**values, train_steps=0)  # Each key is a field.
  assert (options.is_chief, options.job_id) == (False, "job-7")


def test_no_environment_trains_alone_and_builds_its_strategy(tmp_path):
  found = ctl.environment(model_dir=str(tmp_path), environ={})
  assert (found.rank, found.num_workers, found.is_chief) == (0, 1, True)
  assert isinstance(found.strategy, tf.distribute.Strategy)
  environment.check_chief(found.strategy, found.is_chief)


@pytest.mark.parametrize(
  "environ, words",
  [
    ({"TF_CONFIG": "{"}, "TF_CONFIG is not valid JSON"),
    ({"TF_CONFIG": _tf_config(_TWO_WORKERS, "worker", 2)}, "out of range"),
    ({ctl_env.RESTART_COUNT: "x"}, "CTL_RESTART_COUNT must be"),
    ({jobset.NAME_ENV: "train"}, "The JobSet environment lacks"),
  ],
)
def test_a_bad_environment_is_one_sentence(environ, words):
  with pytest.raises(UserError) as e:
    environment.resolve(model_dir="runs/x", environ=environ)
  _assert_one_sentence(str(e.value), words)


def test_no_output_directory_is_one_sentence():
  with pytest.raises(UserError) as e:
    ctl.environment(environ={})
  _assert_one_sentence(str(e.value), "No output directory is set")


def _strategy_of(spec, task_type, task_id):
  """A stand-in strategy whose cluster resolver is TensorFlow's own."""
  resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
    tf.train.ClusterSpec(spec), task_type=task_type, task_id=task_id
  )
  return types.SimpleNamespace(cluster_resolver=resolver)


@pytest.mark.parametrize(
  "strategy, chief",
  [
    (tf.distribute.get_strategy(), True),
    (_strategy_of(_TWO_WORKERS, "worker", 0), True),
    (_strategy_of(_TWO_WORKERS, "worker", 1), False),
    (_strategy_of({"chief": ["c:1"], **_TWO_WORKERS}, "chief", 0), True),
    (_strategy_of({"chief": ["c:1"], **_TWO_WORKERS}, "worker", 0), False),
  ],
  ids=["one-device", "worker-0", "worker-1", "chief", "worker-0-of-chief"],
)
def test_check_chief_agrees_with_the_strategy(strategy, chief):
  environment.check_chief(strategy, chief)
  with pytest.raises(UserError) as e:
    environment.check_chief(strategy, not chief)
  _assert_one_sentence(str(e.value), f"is_chief={not chief}, but")


@pytest.mark.processes
def test_a_user_script_runs_on_two_workers_from_the_environment(tmp_path):
  model_dir = tmp_path / "run"
  result = run_command(
    [
      *(sys.executable, "-m", "ctl.launch", "--num_workers=2", "--"),
      *(sys.executable, f"{REPO}/tests/environment_user.py"),
      f"--model_dir={model_dir}",
    ],
    check=False,
  )
  assert result.returncode == 0, result.stderr[-4000:]
  assert sorted(
    line for line in result.stdout.splitlines() if "rank" in line
  ) == [
    "[worker 0] rank 0 of 2, chief True",
    "[worker 1] rank 1 of 2, chief False",
  ]
  assert read_summary(str(model_dir))["final_step"] == 20
