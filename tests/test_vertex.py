"""Tests for ctl.cloud.vertex and configs/vertex/ against the library's protos."""

import copy
import http.server
import json
import os
import pathlib
import subprocess
import sys
import threading
import urllib.parse

from google.auth import credentials
from google.cloud import aiplatform_v1
import pytest
import yaml

from ctl import errors
from ctl.cloud import vertex
from ctl.cloud import vertex_check
from tests.conftest import REPO
from tests.conftest import trainer_env
from trainer.testing import run_command
from trainer.testing import trainer_command_reporting_tf
from trainer.testing import vertex_output_env

_ROOT = pathlib.Path(REPO)
_CONFIGS = sorted((_ROOT / "configs" / "vertex").glob("*.yaml"))
_IMAGE = "us-docker.pkg.dev/PROJECT/ctl/trainer:latest"


def _run_cli(*args, env=None):
  return subprocess.run(
    [sys.executable, "-m", "ctl.cloud.vertex", *args],
    cwd=_ROOT,
    capture_output=True,
    text=True,
    check=False,
    env=env,
  )


def test_configs_exist():
  assert len(_CONFIGS) >= 5


@pytest.mark.parametrize("path", _CONFIGS, ids=lambda path: path.name)
def test_config_is_a_valid_job_for_the_trainer_image(path):
  spec = vertex_check.validate_job_spec(yaml.safe_load(path.read_text()))

  chief, *workers = [
    pool for pool in spec.worker_pool_specs if pool.replica_count
  ]
  # Chief and workers must run the same program on the same kind of machine.
  for pool in workers:
    assert pool.machine_spec == chief.machine_spec
    assert pool.container_spec == chief.container_spec
  assert chief.container_spec.args[0] == (
    "--flagfile=configs/cassava_resnet50.cfg"
  )
  assert spec.base_output_directory.output_uri_prefix.startswith("gs://")
  assert spec.scheduling.restart_job_on_worker_restart == bool(workers)


def _trainer_command_lines():
  """The distinct containerSpec.args of all configs."""
  command_lines = set()
  for path in _CONFIGS:
    with open(path) as f:
      for pool in yaml.safe_load(f)["workerPoolSpecs"]:
        command_lines.add(tuple(pool["containerSpec"]["args"]))
  return sorted(command_lines)


@pytest.mark.parametrize("args", _trainer_command_lines(), ids=" ".join)
@pytest.mark.processes
def test_config_args_are_accepted_by_the_trainer_before_tensorflow_loads(
  args, tmp_path
):
  # As in the image, whose WORKDIR holds the repository root, and with the
  # directories Vertex AI derives from baseOutputDirectory. What a run would
  # do needs no TensorFlow: the dry run answers in a second.
  result = run_command(
    trainer_command_reporting_tf(*args, "--dry_run"),
    check=False,
    env=trainer_env(**vertex_output_env(str(tmp_path))),
  )

  assert result.returncode == 0, result.stderr
  *described, reported = result.stdout.splitlines()
  assert json.loads("\n".join(described))["output_dirs"]["model_dir"]
  assert reported == "TF_IMPORTED False"


def test_one_worker_is_a_chief_only_job():
  spec = vertex.build_job_spec(image=_IMAGE, trainer_args=["--train_steps=5"])

  job_spec = vertex_check.validate_job_spec(spec)

  (chief,) = job_spec.worker_pool_specs
  assert chief.replica_count == 1
  assert chief.machine_spec.machine_type == "n1-standard-8"
  assert not chief.machine_spec.accelerator_count
  assert list(chief.container_spec.args) == ["--train_steps=5"]
  assert not job_spec.scheduling.restart_job_on_worker_restart


def test_three_workers_are_a_chief_and_a_pool_of_two():
  spec = vertex.build_job_spec(
    image=_IMAGE,
    num_workers=3,
    accelerator_type="NVIDIA_TESLA_V100",
    base_output_dir="gs://bucket/run",
  )

  job_spec = vertex_check.validate_job_spec(spec)

  chief, workers = job_spec.worker_pool_specs
  assert (chief.replica_count, workers.replica_count) == (1, 2)
  for pool in (chief, workers):
    assert pool.machine_spec.accelerator_type == (
      aiplatform_v1.AcceleratorType.NVIDIA_TESLA_V100
    )
    assert pool.machine_spec.accelerator_count == 1
    assert pool.container_spec.image_uri == _IMAGE
    assert not pool.container_spec.args  # The image's default CMD runs.
  assert job_spec.base_output_directory.output_uri_prefix == "gs://bucket/run"
  assert job_spec.scheduling.restart_job_on_worker_restart


def test_accelerator_count_defaults_to_what_the_machine_comes_with():
  spec = vertex.build_job_spec(
    image=_IMAGE,
    machine_type="a3-highgpu-8g",
    accelerator_type="NVIDIA_H100_80GB",
  )

  (chief,) = vertex_check.validate_job_spec(spec).worker_pool_specs
  assert chief.machine_spec.accelerator_count == 8


def test_zero_workers_is_a_user_error():
  with pytest.raises(errors.UserError, match="at least 1, not 0"):
    vertex.build_job_spec(image=_IMAGE, num_workers=0)


@pytest.mark.processes
def test_bad_accelerator_exits_2_with_one_sentence():
  result = _run_cli(
    f"--image={_IMAGE}", "--accelerator_type=NVIDIA_TESLA_V1000"
  )

  assert result.returncode == errors.USER_ERROR_EXIT_CODE
  assert result.stdout == ""
  assert result.stderr.startswith(
    "error: workerPoolSpecs[0].machineSpec.acceleratorType "
    "'NVIDIA_TESLA_V1000' is not a Vertex AI AcceleratorType; use one of "
  )
  assert "NVIDIA_TESLA_V100," in result.stderr
  assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
  "flags, words",
  [
    (["--num_workers=1000000"], "at most 1000 machines, not 1000000"),
    (
      ["--accelerator_type=NVIDIA_TESLA_V100", "--accelerator_count=9"],
      "NVIDIA_TESLA_V100 comes 1, 2, 4 or 8 to a machine, not 9",
    ),
    (["--machine_type=banana-9000"], "'banana-9000' is not a machine type"),
    (
      ["--machine_type=e2-standard-8", "--accelerator_type=NVIDIA_TESLA_V100"],
      "NVIDIA_TESLA_V100 attaches to n1 machine types, not e2-standard-8",
    ),
    (
      ["--machine_type=n1-standard-8", "--accelerator_type=NVIDIA_TESLA_A100"],
      "NVIDIA_TESLA_A100 attaches to a2-highgpu, a2-megagpu machine types, "
      "not n1-standard-8",
    ),
    (
      ["--machine_type=n1-standard-32", "--accelerator_type=NVIDIA_TESLA_V100"],
      "1 NVIDIA_TESLA_V100 fits machines of at most 12 vCPUs",
    ),
    (
      ["--machine_type=g2-standard-24", "--accelerator_type=NVIDIA_L4"],
      None,  # g2-standard-24 comes with 2 L4s, the default count.
    ),
  ],
)
def test_machines_vertex_does_not_offer_are_one_sentence(flags, words, capsys):
  exit_code = vertex.main([f"--image={_IMAGE}", *flags])

  out, err = capsys.readouterr()
  if words is None:
    assert exit_code == 0, err
    return
  assert (exit_code, out) == (errors.USER_ERROR_EXIT_CODE, ""), out
  assert words in err, err
  assert len(err.splitlines()) == 1


def test_cli_prints_yaml_that_loads_back_as_a_config(tmp_path, capsys):
  exit_code = vertex.main(
    [
      f"--image={_IMAGE}",
      "--num_workers=2",
      "--accelerator_type=NVIDIA_TESLA_A100",
      "--machine_type=a2-highgpu-1g",
      "--base_output_dir=gs://bucket/run",
      "--",
      "--flagfile=configs/cassava_resnet50.cfg",
      "--strategy=multi_worker",
    ]
  )
  config = tmp_path / "job.yaml"
  config.write_text(capsys.readouterr().out)

  assert exit_code == 0
  spec = vertex_check.validate_job_spec(yaml.safe_load(config.read_text()))
  chief, workers = spec.worker_pool_specs
  assert list(workers.container_spec.args) == [
    "--flagfile=configs/cassava_resnet50.cfg",
    "--strategy=multi_worker",
  ]
  assert chief.replica_count == workers.replica_count == 1


def test_cli_prints_json(capsys):
  exit_code = vertex.main(
    [
      f"--image={_IMAGE}",
      "--format=json",
      "--norestart_job_on_worker_restart",
      "--num_workers=2",
    ]
  )

  assert exit_code == 0
  assert json.loads(capsys.readouterr().out) == vertex.build_job_spec(
    image=_IMAGE, num_workers=2, restart_job_on_worker_restart=False
  )


def _v100_config():
  with open(_ROOT / "configs" / "vertex" / "multiworker_v100.yaml") as f:
    return yaml.safe_load(f)


def _edit(spec, path, value):
  """Sets spec[path[0]][path[1]]... = value in a copy; None deletes."""
  spec = copy.deepcopy(spec)
  node = spec
  for key in path[:-1]:
    node = node[key]
  if value is None:
    del node[path[-1]]
  else:
    node[path[-1]] = value
  return spec


@pytest.mark.parametrize(
  "path, value, message",
  [
    (
      ("workerPoolSpecs", 0, "machineSpec", "machineTyp"),
      "n1-standard-8",
      "workerPoolSpecs[0].machineSpec has no field 'machineTyp'; "
      "did you mean 'machineType'?",
    ),
    (
      ("workerPoolSpecs", 1, "replica_count"),
      2,
      "workerPoolSpecs[1] spells 'replica_count' in snake_case; gcloud only "
      "accepts 'replicaCount'.",
    ),
    (
      ("workerPoolSpecs", 0, "replicaCount"),
      2,
      "workerPoolSpecs[0] is the chief and must have replicaCount 1, not 2",
    ),
    (
      ("workerPoolSpecs", 1, "replicaCount"),
      0,
      "workerPoolSpecs[1].replicaCount must be at least 1, not 0.",
    ),
    (
      ("workerPoolSpecs", 1, "machineSpec", "acceleratorType"),
      None,
      "workerPoolSpecs[1].machineSpec asks for 1 accelerators but has no "
      "acceleratorType.",
    ),
    (
      ("workerPoolSpecs", 1, "machineSpec", "acceleratorCount"),
      None,
      "workerPoolSpecs[1].machineSpec has acceleratorType NVIDIA_TESLA_V100 "
      "but acceleratorCount 0",
    ),
    (
      ("workerPoolSpecs", 1, "machineSpec"),
      {
        "machineType": "a2-highgpu-2g",
        "acceleratorType": "NVIDIA_TESLA_A100",
        "acceleratorCount": 1,
      },
      "a2-highgpu-2g comes with 2 GPUs, so acceleratorCount must be 2, not 1.",
    ),
    (
      ("workerPoolSpecs", 1, "replicaCount"),
      5000,
      "The job asks for 5001 machines; a job gets at most 1000",
    ),
    (
      ("workerPoolSpecs", 1, "machineSpec", "machineType"),
      "n2-standard-8",
      "workerPoolSpecs[1].machineSpec: NVIDIA_TESLA_V100 attaches to n1 "
      "machine types, not n2-standard-8.",
    ),
    (
      ("workerPoolSpecs", 0, "containerSpec", "imageUri"),
      None,
      "workerPoolSpecs[0].containerSpec.imageUri is missing.",
    ),
    (
      ("workerPoolSpecs",),
      {"replicaCount": 1},
      "workerPoolSpecs must be a list, not a mapping.",
    ),
    (
      ("baseOutputDirectory", "outputUriPrefix"),
      "/gcs/bucket/run",
      "baseOutputDirectory.outputUriPrefix must be a gs:// URI, not "
      "'/gcs/bucket/run'.",
    ),
    (
      ("scheduling", "timeout"),
      "1h",
      'scheduling.timeout is invalid: Duration must end with letter "s"',
    ),
  ],
)
def test_config_mistake_is_one_clear_sentence(path, value, message):
  with pytest.raises(errors.UserError) as raised:
    vertex_check.validate_job_spec(_edit(_v100_config(), path, value))

  assert message in str(raised.value)


class _FakeVertex(http.server.BaseHTTPRequestHandler):
  """Vertex AI's custom jobs over REST, as the library's transport sees them:
  CreateCustomJob (or a refusal), GetCustomJob answering the next of
  `states` on each read (the last one for good), CancelCustomJob."""

  requests = []
  refuse = False
  states = ["JOB_STATE_QUEUED"]
  error = {}
  web_access_uris = {}

  def do_POST(self):  # pylint: disable=invalid-name
    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
    path = urllib.parse.urlsplit(self.path).path
    self.requests.append((path, body))
    if path.endswith(":cancel"):
      self.states[:] = ["JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"]
      self._answer(200, {})
    elif self.refuse:
      self._answer(
        403,
        {
          "error": {
            "code": 403,
            "message": "Permission denied on project p.",
            "status": "PERMISSION_DENIED",
          }
        },
      )
    else:
      self._answer(200, dict(body, name=_JOB, state="JOB_STATE_QUEUED"))

  def do_GET(self):  # pylint: disable=invalid-name
    path = urllib.parse.urlsplit(self.path).path
    self.requests.append((path, None))
    if path != f"/v1/{_JOB}":
      self._answer(404, {"error": {"code": 404, "message": "No such job."}})
      return
    state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
    if state == "UNAVAILABLE":
      self._answer(503, {"error": {"code": 503, "message": "Try later."}})
      return
    job = {"name": _JOB, "displayName": "cassava", "state": state}
    if state != "JOB_STATE_QUEUED" and self.web_access_uris:
      job["webAccessUris"] = self.web_access_uris
    if state == "JOB_STATE_FAILED":
      job["error"] = self.error
    self._answer(200, job)

  def _answer(self, status, answer):
    payload = json.dumps(answer).encode()
    self.send_response(status)
    self.send_header("Content-Type", "application/json")
    self.send_header("Content-Length", str(len(payload)))
    self.end_headers()
    self.wfile.write(payload)

  def log_message(self, *args):
    del args  # Quiet test output.


_JOB = "projects/p/locations/r/customJobs/123"


@pytest.fixture(name="fake_vertex")
def fixture_fake_vertex(monkeypatch):
  """A JobServiceClient talking REST to a local fake of Vertex AI."""
  monkeypatch.setattr(_FakeVertex, "requests", [])
  monkeypatch.setattr(_FakeVertex, "states", ["JOB_STATE_QUEUED"])
  server = http.server.HTTPServer(("127.0.0.1", 0), _FakeVertex)
  thread = threading.Thread(
    target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
  )
  thread.start()
  client = aiplatform_v1.JobServiceClient(
    credentials=credentials.AnonymousCredentials(),
    transport="rest",
    client_options={"api_endpoint": f"http://127.0.0.1:{server.server_port}"},
  )
  yield client
  server.shutdown()
  thread.join()
  server.server_close()


def test_submit_sends_the_validated_spec(fake_vertex):
  spec = vertex.build_job_spec(
    image=_IMAGE,
    num_workers=2,
    accelerator_type="NVIDIA_TESLA_V100",
    base_output_dir="gs://bucket/run",
  )

  name = vertex.submit(
    spec, project="p", region="r", display_name="cassava", client=fake_vertex
  )

  assert name == "projects/p/locations/r/customJobs/123"
  ((path, body),) = _FakeVertex.requests
  assert path.startswith("/v1/projects/p/locations/r/customJobs")
  assert body["displayName"] == "cassava"
  assert aiplatform_v1.CustomJobSpec.from_json(
    json.dumps(body["jobSpec"])
  ) == vertex_check.validate_job_spec(spec)


def test_submit_refused_by_vertex_is_a_user_error(fake_vertex, monkeypatch):
  monkeypatch.setattr(_FakeVertex, "refuse", True)
  spec = vertex.build_job_spec(image=_IMAGE)

  with pytest.raises(errors.UserError) as raised:
    vertex.submit(
      spec, project="p", region="r", display_name="cassava", client=fake_vertex
    )

  assert str(raised.value).startswith("Vertex AI refused the job: ")
  assert str(raised.value).endswith(": Permission denied on project p.")


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_submit_without_a_network_is_one_sentence(transport):
  # Nothing listens on port 9 (discard): what a machine without a route to
  # Vertex AI, or with a refused connection, gets from the client.
  scheme = "http://" if transport == "rest" else ""
  client = aiplatform_v1.JobServiceClient(
    credentials=credentials.AnonymousCredentials(),
    transport=transport,
    client_options={"api_endpoint": f"{scheme}127.0.0.1:9"},
  )

  with pytest.raises(errors.UserError) as raised:
    vertex.submit(
      vertex.build_job_spec(image=_IMAGE),
      project="p",
      region="r",
      display_name="cassava",
      client=client,
    )

  sentence = str(raised.value)
  assert sentence.startswith("Could not reach Vertex AI (")
  assert sentence.endswith("; check the network, then submit again.")
  assert "\n" not in sentence


@pytest.mark.processes
def test_submit_without_credentials_exits_2(tmp_path):
  env = dict(
    os.environ, GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "missing.json")
  )

  result = _run_cli(
    f"--image={_IMAGE}",
    "--submit",
    "--project=p",
    "--region=us-central1",
    env=env,
  )

  assert result.returncode == errors.USER_ERROR_EXIT_CODE
  assert result.stderr.startswith(
    "error: Google Cloud credentials are missing ("
  )
  assert "Traceback" not in result.stderr


def test_missing_aiplatform_says_how_to_install(monkeypatch, capsys):
  monkeypatch.delattr(sys.modules["google.cloud"], "aiplatform_v1")
  monkeypatch.setitem(sys.modules, "google.cloud.aiplatform_v1", None)

  exit_code = vertex.main([f"--image={_IMAGE}"])

  assert exit_code == errors.USER_ERROR_EXIT_CODE
  assert capsys.readouterr().err == (
    "error: Vertex AI support needs google-cloud-aiplatform; install the "
    "vertex extra: pip install '.[vertex]'.\n"
  )


_SPOT_FLAGS = [
  f"--image={_IMAGE}",
  "--num_workers=2",
  "--machine_type=a2-highgpu-1g",
  "--accelerator_type=NVIDIA_TESLA_A100",
  "--base_output_dir=gs://bucket/run",
  "--scheduling_strategy=spot",
  "--timeout=36h",
  "--service_account=trainer@my-project.iam.gserviceaccount.com",
  "--network=projects/12345/global/networks/my-vpc",
  "--reserved_ip_ranges=range-a,range-b",
  "--boot_disk_type=pd-standard",
  "--boot_disk_size_gb=200",
  "--tensorboard=projects/my-project/locations/us-central1/tensorboards/42",
  "--persistent_resource_id=my-cluster",
  "--enable_web_access",
]


def test_every_job_setting_reaches_the_spec_and_its_proto(capsys):
  exit_code = vertex.main(_SPOT_FLAGS)

  out, err = capsys.readouterr()
  assert exit_code == 0, err
  spec = vertex_check.validate_job_spec(yaml.safe_load(out))
  assert spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
  assert spec.scheduling.timeout.total_seconds() == 36 * 3600
  assert spec.scheduling.restart_job_on_worker_restart
  assert not spec.scheduling.disable_retries
  assert spec.service_account == "trainer@my-project.iam.gserviceaccount.com"
  assert spec.network == "projects/12345/global/networks/my-vpc"
  assert list(spec.reserved_ip_ranges) == ["range-a", "range-b"]
  assert spec.tensorboard.endswith("/tensorboards/42")
  assert spec.persistent_resource_id == "my-cluster"
  assert spec.enable_web_access
  for pool in spec.worker_pool_specs:
    assert pool.disk_spec.boot_disk_type == "pd-standard"
    assert pool.disk_spec.boot_disk_size_gb == 200


def test_flex_start_waits_as_long_as_asked():
  settings = vertex.JobSettings(
    scheduling_strategy="FLEX_START", max_wait_duration="0", timeout="7d"
  )
  spec = vertex.build_job_spec(
    image=_IMAGE,
    machine_type="g2-standard-8",
    accelerator_type="NVIDIA_L4",
    settings=settings,
  )

  scheduling = vertex_check.validate_job_spec(spec).scheduling
  assert scheduling.strategy == aiplatform_v1.Scheduling.Strategy.FLEX_START
  assert spec["scheduling"]["maxWaitDuration"] == "0s"
  assert scheduling.timeout.total_seconds() == 7 * 86400


def test_disabled_retries_do_not_restart_the_job_on_a_worker_restart():
  spec = vertex.build_job_spec(
    image=_IMAGE,
    num_workers=2,
    settings=vertex.JobSettings(disable_retries=True),
  )

  scheduling = vertex_check.validate_job_spec(spec).scheduling
  assert scheduling.disable_retries
  assert not scheduling.restart_job_on_worker_restart


def test_a_spec_without_settings_has_none_of_their_fields():
  spec = vertex.build_job_spec(image=_IMAGE, num_workers=2)

  assert spec["scheduling"] == {"restartJobOnWorkerRestart": True}
  assert set(spec) == {"workerPoolSpecs", "scheduling"}
  assert all("diskSpec" not in pool for pool in spec["workerPoolSpecs"])


_TENSORBOARD = "--tensorboard=projects/p/locations/us-central1/tensorboards/1"
_SA = "--service_account=sa@p.iam.gserviceaccount.com"
_A100 = ["--machine_type=a2-highgpu-1g", "--accelerator_type=NVIDIA_TESLA_A100"]


@pytest.mark.parametrize(
  "flags, words",
  [
    (
      ["--scheduling_strategy=cheap"],
      "scheduling.strategy 'CHEAP' is not a Vertex AI Strategy; use one of ",
    ),
    (
      ["--scheduling_strategy=LOW_COST"],
      "scheduling.strategy LOW_COST is deprecated; use SPOT",
    ),
    (["--timeout=soon"], "timeout 'soon' is not a duration"),
    (["--timeout=0"], "scheduling.timeout must be more than 0s, not 0s."),
    (
      ["--max_wait_duration=1h"],
      "scheduling.maxWaitDuration applies to FLEX_START only",
    ),
    (
      [
        "--scheduling_strategy=FLEX_START",
        "--accelerator_type=NVIDIA_TESLA_V100",
      ],
      "FLEX_START needs workers with NVIDIA_L4, NVIDIA_TESLA_A100",
    ),
    (
      ["--scheduling_strategy=FLEX_START", *_A100, "--timeout=8d"],
      "scheduling.timeout must be at most 604800s (7 days) with FLEX_START",
    ),
    (
      [
        "--scheduling_strategy=FLEX_START",
        *_A100,
        "--num_workers=2",
        "--reduction_server_count=1",
      ],
      "FLEX_START needs the same machineSpec in every worker pool",
    ),
    (
      ["--disable_retries", "--restart_job_on_worker_restart"],
      "scheduling.disableRetries turns restartJobOnWorkerRestart off",
    ),
    (
      ["--service_account=trainer"],
      "serviceAccount 'trainer' is not a service account email",
    ),
    (
      ["--network=my-vpc"],
      "network 'my-vpc' is not projects/PROJECT_NUMBER/global/networks/NAME",
    ),
    (["--reserved_ip_ranges=r1"], "reservedIpRanges need a network"),
    (
      ["--network=projects/1/global/networks/n", "--reserved_ip_ranges=R_1"],
      "reservedIpRanges[0] 'R_1' is not a range name",
    ),
    (
      ["--boot_disk_type=ssd"],
      "workerPoolSpecs[0].diskSpec.bootDiskType 'ssd' is not one of pd-ssd,",
    ),
    (
      ["--boot_disk_size_gb=50"],
      "workerPoolSpecs[0].diskSpec.bootDiskSizeGb must be 100 to 64000, not 50",
    ),
    (
      ["--tensorboard=tb", _SA, "--base_output_dir=gs://bucket/r"],
      "tensorboard 'tb' is not projects/PROJECT/locations/REGION/tensorboards",
    ),
    (
      [_TENSORBOARD, _SA],
      "tensorboard shows what the trainer writes under baseOutputDirectory",
    ),
    (
      [_TENSORBOARD, "--base_output_dir=gs://bucket/r"],
      "tensorboard needs a serviceAccount",
    ),
    (
      ["--persistent_resource_id=My_Cluster"],
      "persistentResourceId 'My_Cluster' must be 5 to 63 lowercase letters",
    ),
  ],
)
def test_a_bad_job_setting_is_one_sentence_before_anything_is_sent(
  flags, words, capsys
):
  exit_code = vertex.main([f"--image={_IMAGE}", *flags])

  out, err = capsys.readouterr()
  assert (exit_code, out) == (errors.USER_ERROR_EXIT_CODE, ""), out
  assert words in err, err
  assert len(err.splitlines()) == 1


def test_a_tensorboard_of_another_region_is_refused_before_submitting(
  fake_vertex,
):
  spec = vertex.build_job_spec(
    image=_IMAGE,
    base_output_dir="gs://bucket/run",
    settings=vertex.JobSettings(
      service_account="sa@p.iam.gserviceaccount.com",
      tensorboard="projects/p/locations/europe-west4/tensorboards/1",
    ),
  )

  with pytest.raises(
    errors.UserError, match="in europe-west4, not us-central1"
  ):
    vertex.submit(
      spec,
      project="p",
      region="us-central1",
      display_name="cassava",
      client=fake_vertex,
    )
  assert not _FakeVertex.requests


def test_wait_without_submit_is_refused(capsys):
  exit_code = vertex.main([f"--image={_IMAGE}", "--wait"])

  assert exit_code == errors.USER_ERROR_EXIT_CODE
  assert capsys.readouterr().err == (
    "error: --wait follows the job --submit creates; give --submit too.\n"
  )
