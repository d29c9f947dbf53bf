"""ctl.cloud.k8s: the JobSet manifest ctl-k8s writes, checked offline, and its pods.

The pods' environment is made the way Kubernetes makes it: each `fieldRef` of
the manifest is read from the labels and annotations JobSet and the Job
controller put on that pod, so the trainer sees what it would see on GKE.
"""

import copy
import hashlib
import json
import os
import re
import signal
import sys

import pytest
import yaml

from ctl import errors
from ctl.cloud import k8s
from ctl.distributed import cluster
from ctl.launch import launcher
from ctl.telemetry import ledger_reader
from tests.conftest import FAST_FLAGS
from tests.conftest import REPO
from tests.conftest import run_trainer
from tests.conftest import trainer_env
from trainer.testing import RESUME_FLAGS
from trainer.testing import finish
from trainer.testing import run_command
from trainer.testing import start_until_step
from trainer.testing import train_to_summary

_IMAGE = "us-docker.pkg.dev/project/ctl/trainer:latest"
_EXAMPLE = os.path.join(REPO, "configs", "k8s", "cassava_a100x4.yaml")
# The options configs/k8s/cassava_a100x4.yaml was written with.
_EXAMPLE_OPTIONS = k8s.JobSetOptions(
  name="cassava",
  image="us-docker.pkg.dev/PROJECT/ctl/trainer:latest",
  num_workers=4,
  gpus_per_node=1,
  accelerator="nvidia-tesla-a100",
  gcsfuse_bucket="my-bucket",
  service_account="ctl-trainer",
  trainer_args=(
    "--flagfile=configs/cassava_resnet50.cfg",
    "--strategy=multi_worker",
    "--model_dir=/gcs/my-bucket/cassava",
  ),
)


def _pod_env(manifest, replicated_job, job_index, pod_index, attempt=0):
  """The container env of one pod, with the downward API resolved."""
  [rjob] = [
    r for r in manifest["spec"]["replicatedJobs"] if r["name"] == replicated_job
  ]
  fields = {
    "metadata.labels['jobset.sigs.k8s.io/jobset-name']": manifest["metadata"][
      "name"
    ],
    "metadata.labels['jobset.sigs.k8s.io/replicatedjob-name']": replicated_job,
    "metadata.labels['jobset.sigs.k8s.io/job-index']": str(job_index),
    "metadata.labels['jobset.sigs.k8s.io/restart-attempt']": str(attempt),
    "metadata.annotations['batch.kubernetes.io/job-completion-index']": str(
      pod_index
    ),
  }
  [container] = rjob["template"]["spec"]["template"]["spec"]["containers"]
  return {
    var["name"]: var["value"]
    if "value" in var
    else fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
    for var in container["env"]
  }


def _manifest(**changes):
  return k8s.build_manifest(
    k8s.JobSetOptions(**{"name": "train", "image": _IMAGE, **changes})
  )


@pytest.mark.parametrize(
  "changes",
  [
    {},
    {"num_workers": 4, "gpus_per_node": 8, "accelerator": "nvidia-h100-80gb"},
    {"num_workers": 2, "gcsfuse_bucket": "my-bucket", "namespace": "ml"},
    {"num_workers": 3, "service_account": "sa", "port": 12345},
  ],
)
def test_the_manifest_validates_and_reads_back(changes):
  manifest = _manifest(**changes)
  k8s.validate_manifest(manifest)
  assert yaml.safe_load(yaml.safe_dump(manifest)) == manifest


def test_chief_and_workers_are_two_replicated_jobs_that_fail_fast():
  manifest = _manifest(num_workers=4, gpus_per_node=1, accelerator="nvidia-l4")
  spec = manifest["spec"]
  chief, workers = spec["replicatedJobs"]
  assert (chief["name"], workers["name"]) == ("chief", "worker")
  assert workers["template"]["spec"]["parallelism"] == 3
  assert spec["network"] == {"enableDNSHostnames": True, "subdomain": "train"}
  assert spec["successPolicy"]["targetReplicatedJobs"] == ["chief"]
  pod = workers["template"]["spec"]["template"]["spec"]
  assert pod["restartPolicy"] == "Never"
  assert pod["terminationGracePeriodSeconds"] == k8s.DEFAULT_GRACE_SECS
  assert pod["nodeSelector"] == {
    "cloud.google.com/gke-accelerator": "nvidia-l4"
  }
  [container] = pod["containers"]
  assert container["command"] == list(k8s.TRAINER_COMMAND)
  assert container["resources"] == {"limits": {"nvidia.com/gpu": 1}}


def test_every_pod_builds_the_tf_config_of_the_same_cluster():
  manifest = _manifest(num_workers=3)
  hosts = {
    "chief": ["train-chief-0-0.train:2222"],
    "worker": ["train-worker-0-0.train:2222", "train-worker-0-1.train:2222"],
  }
  pods = [("chief", 0, "chief", 0), ("worker", 0, "worker", 0)]
  pods.append(("worker", 1, "worker", 1))
  for replicated_job, pod_index, task_type, task_index in pods:
    environ = _pod_env(manifest, replicated_job, 0, pod_index)
    tf_config = json.dumps(
      {"cluster": hosts, "task": {"type": task_type, "index": task_index}}
    )
    assert cluster.tf_config_json(
      cluster.resolve(environ=environ)
    ) == cluster.tf_config_json(
      cluster.resolve(environ={"TF_CONFIG": tf_config})
    )


@pytest.mark.processes
def test_the_trainer_in_a_pod_sees_the_cluster(tmp_path):
  manifest = _manifest(num_workers=2)
  args = ["--dataset=synthetic", "--train_steps=5", "--dry_run"]
  from_jobset = run_trainer(
    *args,
    f"--model_dir={tmp_path}",
    env=trainer_env(**_pod_env(manifest, "worker", 0, 0, attempt=1)),
  )
  from_tf_config = run_trainer(
    *args,
    f"--model_dir={tmp_path}",
    env=trainer_env(
      TF_CONFIG=json.dumps(
        {
          "cluster": {
            "chief": ["train-chief-0-0.train:2222"],
            "worker": ["train-worker-0-0.train:2222"],
          },
          "task": {"type": "worker", "index": 0},
        }
      )
    ),
  )
  described = json.loads(from_jobset.stdout)["cluster"]
  assert described == json.loads(from_tf_config.stdout)["cluster"]
  assert described["task_type"] == "worker"


@pytest.mark.processes
def test_the_agent_in_a_pod_runs_the_trainer_with_the_cluster(tmp_path):
  # The container command with --agent_restarts: the node agent (and its
  # warm spare) runs the trainer with the pod's environment, output as is.
  manifest = _manifest(num_workers=2, agent_restarts=2, warm_spare=True)
  k8s.validate_manifest(manifest)
  [container] = _pod(manifest)["containers"]
  command = [
    sys.executable if word == "python" else word
    for word in container["command"]
  ]
  assert command[2:5] == ["ctl.launch", "--agent", "--max_restarts=2"]
  args = ["--dataset=synthetic", "--train_steps=5", "--dry_run"]
  env = trainer_env(**_pod_env(manifest, "worker", 0, 0))
  agent = run_command([*command, *args, f"--model_dir={tmp_path}"], env=env)
  alone = run_trainer(*args, f"--model_dir={tmp_path}", env=env)
  described = json.loads(agent.stdout)["cluster"]
  assert described == json.loads(alone.stdout)["cluster"]
  assert described["task_type"] == "worker"


def _pod_failure_action(job, *, exit_code=None, condition=None):
  """What the Job controller does with a failed trainer pod of `job`.

  The first rule of the Job's podFailurePolicy that matches the trainer's
  exit code or a pod condition (status True) acts, as Kubernetes documents;
  without one the failure counts against backoffLimit ("Count").
  """
  for rule in job.get("podFailurePolicy", {}).get("rules", []):
    codes = rule.get("onExitCodes")
    if codes and exit_code is not None:
      if codes.get("containerName", k8s.CONTAINER) != k8s.CONTAINER:
        continue
      if (exit_code in codes["values"]) == (codes["operator"] == "In"):
        return rule["action"]
    for pod_condition in rule.get("onPodConditions", []):
      if (pod_condition["type"], pod_condition["status"]) == (
        condition,
        "True",
      ):
        return rule["action"]
  return "Count"


def _jobset_action(manifest, reason):
  """What JobSet does when a child Job fails for `reason`: its first matching
  failurePolicy rule, else RestartJobSet (which uses up maxRestarts)."""
  for rule in manifest["spec"]["failurePolicy"].get("rules", []):
    if reason in rule.get("onJobFailureReasons", [reason]):
      return rule["action"]
  return "RestartJobSet"


def _failure_outcome(manifest, job, **failure):
  """The JobSet's answer to one failed pod of `job` (backoffLimit 0)."""
  action = _pod_failure_action(job, **failure)
  if action == "Ignore":
    return "the Job replaces the pod"
  reason = {"FailJob": "PodFailurePolicy", "Count": "BackoffLimitExceeded"}
  return _jobset_action(manifest, reason[action])


@pytest.mark.parametrize("agent_restarts", [0, 2])
@pytest.mark.processes
def test_a_user_error_in_a_pod_fails_the_jobset_at_once(agent_restarts):
  # The container's real command with a bad trainer flag exits 2; JobSet
  # must fail the set, not recreate it maxRestarts times to repeat it.
  manifest = _manifest(num_workers=2, agent_restarts=agent_restarts)
  k8s.validate_manifest(manifest)
  for rjob in manifest["spec"]["replicatedJobs"]:
    job = rjob["template"]["spec"]
    [container] = job["template"]["spec"]["containers"]
    command = [
      sys.executable if w == "python" else w for w in container["command"]
    ]
    env = trainer_env(**_pod_env(manifest, rjob["name"], 0, 0))
    result = run_command([*command, "--nosuchflag"], env=env, check=False)
    assert result.returncode == errors.USER_ERROR_EXIT_CODE, result.stderr
    outcome = _failure_outcome(manifest, job, exit_code=result.returncode)
    assert outcome == "FailJobSet", rjob["name"]


def test_a_node_disruption_restarts_without_using_max_restarts():
  manifest = _manifest(num_workers=3)
  for rjob in manifest["spec"]["replicatedJobs"]:
    job = rjob["template"]["spec"]
    assert job["template"]["spec"]["restartPolicy"] == "Never"
    # The disrupted pod (preempted, evicted, drained) and its peers, which
    # stop at the agreed save (exit 143): each Job replaces its pods.
    for failure in (
      {"condition": "DisruptionTarget", "exit_code": 137},
      {"exit_code": errors.PREEMPTED_EXIT_CODE},
    ):
      assert _failure_outcome(manifest, job, **failure) == (
        "the Job replaces the pod"
      ), failure
    # A crash or a stall still restarts the whole set, within maxRestarts.
    for code in (1, 137, errors.STALL_EXIT_CODE):
      assert _failure_outcome(manifest, job, exit_code=code) == "RestartJobSet"


def _pod(manifest, index=1):
  return manifest["spec"]["replicatedJobs"][index]["template"]["spec"][
    "template"
  ]["spec"]


def _set(path, value):
  """An edit that sets manifest[path...] (ints index lists); None deletes."""

  def edit(manifest):
    *parents, last = path
    node = manifest
    for key in parents:
      node = node[key]
    if value is None:
      del node[last]
    else:
      node[last] = value

  return edit


_RJOB1 = ["spec", "replicatedJobs", 1]
_JOB1 = [*_RJOB1, "template", "spec"]
_POD1 = [*_JOB1, "template", "spec"]
_CONTAINER1 = [*_POD1, "containers", 0]
_EXIT_CODES1 = [*_JOB1, "podFailurePolicy", "rules", 0, "onExitCodes"]


@pytest.mark.parametrize(
  "edit, words",
  [
    (_set(["spec", "successPolicy", "operator"], "Some"), "not one of ['All'"),
    (
      _set(["spec", "failurePolicy", "restartStrategy"], "Now"),
      "'Now' is not one of ['Recreate'",
    ),
    (_set([*_CONTAINER1, "image"], None), "containers[0].image is missing"),
    (_set([*_CONTAINER1, "image"], " "), "containers[0].image is missing"),
    (_set([*_JOB1, "parallelism"], 0), "has 0 pods"),
    (_set([*_RJOB1, "replicas"], 0), "has 0 pods"),
    (_set(["spec", "replicatedJobs", 0, "replicas"], 2), "must have 1 pod"),
    (_set(["spec", "replicatedJobs"], []), "has no 'chief' job"),
    (_set([*_RJOB1, "replica"], 2), "('replica' was unexpected)"),
    (_set([*_CONTAINER1, "imag"], "x"), "('imag' was unexpected)"),
    (_set(["metadata", "nam"], "x"), "('nam' was unexpected)"),
    (_set([*_RJOB1, "replicas"], "two"), "'two' is not of type 'integer'"),
    (_set([*_POD1, "restartPolicy"], "OnFailure"), "restartPolicy must be"),
    (_set([*_CONTAINER1, "imagePullPolicy"], "Sometimes"), "is not one of"),
    (
      _set([*_JOB1, "completionMode"], "NonIndexed"),
      "completionMode must be 'Indexed'",
    ),
    (
      _set([*_CONTAINER1, "resources", "limits", "nvidia.com/gpu"], "lots"),
      "'lots' does not match",
    ),
    (
      _set(["spec", "failurePolicy", "rules", 0, "action"], "Explode"),
      "'Explode' is not one of ['FailJobSet'",
    ),
    (
      _set([*_EXIT_CODES1, "operator"], "Maybe"),
      "operator 'Maybe' is not one of In, NotIn.",
    ),
    (
      _set([*_EXIT_CODES1, "containerName"], "trainr"),
      "containerName 'trainr' is not one of trainer.",
    ),
    (_set(["kind"], "Job"), "kind must be 'JobSet'"),
    (_set(["metadata", "name"], "Train"), "must be lowercase letters"),
  ],
)
def test_a_broken_manifest_is_refused_in_one_sentence(edit, words):
  manifest = copy.deepcopy(_manifest(num_workers=3, gpus_per_node=1))
  edit(manifest)
  with pytest.raises(errors.UserError) as e:
    k8s.validate_manifest(manifest)
  message = str(e.value)
  assert words in message, message
  assert message.endswith(".") and "\n" not in message


@pytest.mark.parametrize(
  "changes, words",
  [
    ({"num_workers": 0}, "at least 1, not 0"),
    ({"image": ""}, "image is missing"),
    ({"accelerator": "nvidia-tesla-k9000"}, "is not a GKE accelerator"),
    ({"accelerator": "nvidia-l4"}, "gpus_per_node is 0"),
    ({"grace_secs": 5}, "too short for the agreed save"),
    (
      {"spot": True, "grace_secs": 300},
      "a Spot node gives its pods at most 120 s",
    ),
    ({"gcsfuse_bucket": "gs://b/x"}, "is not a bucket name"),
    ({"name": "x" * 60}, "63 characters or fewer"),
    ({"port": 0}, "port must be a port"),
    ({"max_restarts": -1}, "max_restarts must be 0 or more"),
    ({"agent_restarts": -1}, "agent_restarts must be 0 or more"),
    ({"warm_spare": True}, "give agent_restarts=N too"),
  ],
)
def test_bad_options_are_refused(changes, words):
  with pytest.raises(errors.UserError, match=re.escape(words)):
    _manifest(**changes)


def test_an_unknown_kubernetes_version_is_refused():
  with pytest.raises(errors.UserError, match="is not a version"):
    k8s.validate_manifest(_manifest(), kubernetes_version="9.99")


def test_the_example_is_what_ctl_k8s_writes():
  with open(_EXAMPLE) as f:
    example = yaml.safe_load(f)
  assert example == k8s.build_manifest(_EXAMPLE_OPTIONS)
  k8s.validate_manifest(example)


def test_the_cli_writes_the_example(capsys):
  options = _EXAMPLE_OPTIONS
  exit_code = k8s.main(
    [
      f"--name={options.name}",
      f"--image={options.image}",
      f"--num_workers={options.num_workers}",
      f"--gpus_per_node={options.gpus_per_node}",
      f"--accelerator={options.accelerator}",
      f"--gcsfuse_bucket={options.gcsfuse_bucket}",
      f"--service_account={options.service_account}",
      "--",
      *options.trainer_args,
    ]
  )
  assert exit_code == 0
  assert yaml.safe_load(capsys.readouterr().out) == k8s.build_manifest(options)


def test_the_vendored_schema_is_the_pinned_release():
  with open(os.path.join(REPO, "ctl", "cloud", "schemas", "README.md")) as f:
    readme = f.read()
  with open(k8s.SCHEMA_FILE, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  assert f"sha256: `{digest}`" in readme
  assert "v0.12.0" in readme


def test_a_spot_job_runs_on_spot_nodes_within_their_grace():
  manifest = _manifest(
    num_workers=2,
    gpus_per_node=1,
    accelerator="nvidia-l4",
    agent_restarts=2,
    spot=True,
  )
  k8s.validate_manifest(manifest)

  for index in (0, 1):
    pod = _pod(manifest, index)
    assert pod["nodeSelector"] == {
      "cloud.google.com/gke-accelerator": "nvidia-l4",
      "cloud.google.com/gke-spot": "true",
    }
    assert pod["tolerations"] == [
      {
        "key": "cloud.google.com/gke-spot",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
      }
    ]
    # GKE gives a Spot node's pods 15 s of its 30 s notice.
    assert pod["terminationGracePeriodSeconds"] == 15
    [container] = pod["containers"]
    assert container["command"][:6] == [
      "python",
      "-m",
      "ctl.launch",
      "--agent",
      "--max_restarts=2",
      f"--grace_secs={15 - k8s.AGENT_GRACE_MARGIN_SECS}",
    ]


@pytest.mark.parametrize(
  "spot, grace_secs, pod_grace",
  [(False, None, 300), (True, None, 15), (True, 60, 60), (False, 45, 45)],
)
def test_the_agent_stops_its_trainer_within_the_pod_grace(
  spot, grace_secs, pod_grace
):
  manifest = _manifest(
    agent_restarts=1,
    spot=spot,
    **({"grace_secs": grace_secs} if grace_secs else {}),
  )
  k8s.validate_manifest(manifest)
  pod = _pod(manifest, 0)
  [container] = pod["containers"]
  command = container["command"]

  # The agent's own command line, as it reads it: it sends SIGKILL this long
  # after it forwards SIGTERM, and the kubelet kills the pod at pod_grace.
  agent = launcher._parse_args(command[3:])
  assert pod["terminationGracePeriodSeconds"] == pod_grace
  assert agent.grace_secs == pod_grace - k8s.AGENT_GRACE_MARGIN_SECS
  on_spot = "cloud.google.com/gke-spot" in pod.get("nodeSelector", {})
  assert on_spot == spot


def test_the_cli_writes_a_spot_job(capsys):
  exit_code = k8s.main(
    [
      "--name=train",
      f"--image={_IMAGE}",
      "--spot",
      "--grace_secs=25",
      "--agent_restarts=3",
    ]
  )

  assert exit_code == 0
  assert yaml.safe_load(capsys.readouterr().out) == _manifest(
    spot=True, grace_secs=25, agent_restarts=3
  )


def _ledger(model_dir, *phases):
  """A run's ledger of one attempt: (phase, seconds, loops) phase events."""
  os.makedirs(model_dir / "ledger")
  events = [{"event": "start", "time": 1000.0, "sequence": 1}]
  m = 0.0
  for phase, secs, loops in phases:
    event = {"event": "phase", "phase": phase, "t0": 1000.0 + m}
    event |= {"t1": 1000.0 + m + secs, "m0": m, "m1": m + secs}
    event |= {"step0": 0, "step": 10, "ok": True}
    if loops:
      event |= {"loops": loops, "busy": secs}
    events.append(event)
    m += secs
  (model_dir / "ledger" / "attempt-1.jsonl").write_text(
    "".join(json.dumps(event) + "\n" for event in events)
  )
  return str(model_dir)


@pytest.mark.parametrize(
  "phases, flags, warned",
  [
    # A loop of 2 s and a save of 9 s: 11 s, over the agent's 10 s on Spot.
    (
      [("train_loop", 8.0, 4), ("checkpoint_save", 9.0, 0)],
      ["--spot"],
      (11.0, 2.0, 9.0),
    ),
    ([("train_loop", 8.0, 4), ("checkpoint_save", 9.0, 0)], [], None),
    (
      [("train_loop", 8.0, 4), ("checkpoint_save", 7.0, 0)],
      ["--spot"],
      None,
    ),
    # With the local tier the agreed save is written locally and then
    # waited for in the bucket (the node's RAM goes with a Spot VM): its
    # checkpoint_save and checkpoint_upload, not the cheap local-only saves.
    (
      [
        ("train_loop", 8.0, 4),
        ("local_checkpoint_save", 0.5, 0),
        ("checkpoint_save", 1.0, 0),
        ("checkpoint_upload", 8.5, 0),
      ],
      ["--spot"],
      (11.5, 2.0, 9.5),
    ),
    (
      [
        ("train_loop", 8.0, 4),
        ("local_checkpoint_save", 0.5, 0),
        ("checkpoint_save", 1.0, 0),
        ("checkpoint_upload", 2.0, 0),
      ],
      ["--spot"],
      None,
    ),
  ],
)
def test_a_measured_agreed_save_that_does_not_fit_the_grace_is_a_warning(
  tmp_path, capsys, phases, flags, warned
):
  run = _ledger(tmp_path / "run", *phases)

  exit_code = k8s.main(
    [
      "--name=train",
      f"--image={_IMAGE}",
      "--agent_restarts=1",
      f"--measured_run={run}",
      *flags,
    ]
  )

  out, err = capsys.readouterr()
  assert exit_code == 0, err
  assert yaml.safe_load(out)["kind"] == "JobSet"
  if warned:
    total, loop, save = warned
    assert err == (
      f"warning: an agreed save in {run} takes up to {total} s (a loop of "
      f"{loop} s and a save of {save} s), more than the 10 s the trainer gets "
      "after SIGTERM; save locally (the local tier), take fewer "
      "--steps_per_loop (a SIGTERM is answered at the loop's end), or give "
      "--grace_secs where the nodes give more.\n"
    )
  else:
    assert err == ""


def test_a_run_without_a_measured_save_is_said(tmp_path, capsys):
  run = _ledger(tmp_path / "run", ("train_loop", 8.0, 4))

  exit_code = k8s.main(
    ["--name=train", f"--image={_IMAGE}", f"--measured_run={run}"]
  )

  assert exit_code == 0
  assert capsys.readouterr().err == (
    f"warning: the ledger of {run} has no checkpoint save to measure the "
    "agreed save by.\n"
  )


_RESUME_FLAGS = (*FAST_FLAGS, *RESUME_FLAGS, "--train_steps=60")


@pytest.mark.processes
def test_a_spot_preemption_ends_in_the_agreed_save_and_the_same_weights(
  tmp_path,
):
  # The pod command of a Spot job (the agent's grace 10 s inside the pod's
  # 15 s), SIGTERMed as the kubelet does on a preemption: the trainer must
  # commit its agreed save before the agent's SIGKILL. The agent exits 143
  # either way; the trainer's ledger says it ended Preempted (after the
  # save), and the next run restores that very step.
  manifest = _manifest(spot=True, agent_restarts=1)
  [container] = _pod(manifest, 0)["containers"]
  command = [
    sys.executable if word == "python" else word
    for word in container["command"]
  ]
  reference = train_to_summary(
    *_RESUME_FLAGS, model_dir=str(tmp_path / "reference")
  )
  model_dir = str(tmp_path / "run")

  pod = start_until_step(
    [*command, *_RESUME_FLAGS, f"--model_dir={model_dir}"],
    events=f"{model_dir}.events.jsonl",
    step=20,
  )
  pod.send_signal(signal.SIGTERM)
  code, output = finish(pod)
  summary = train_to_summary(*_RESUME_FLAGS, model_dir=model_dir)

  assert code == errors.PREEMPTED_EXIT_CODE, output[-3000:]
  preempted, resumed = ledger_reader.read(ledger_reader.ledger_dir(model_dir))
  [end] = [e for e in preempted if e["event"] == "end"]
  assert end["outcome"] == "Preempted"
  [restore] = [e for e in resumed if e.get("phase") == "restore"]
  assert restore["step"] == end["step"] >= 20
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"]


@pytest.mark.parametrize(
  "flags, warned",
  [
    (["--spot", "--grace_secs=60"], True),
    (["--spot"], False),
    (["--spot", "--grace_secs=15"], False),
    (["--grace_secs=60"], False),
  ],
)
def test_a_spot_grace_above_gkes_default_is_said_once(capsys, flags, warned):
  # GKE gives a Spot node's pods 15 s unless its node pool is set up for
  # more: a longer grace is kept in the manifest, and said.
  assert k8s.main(["--name=train", f"--image={_IMAGE}", *flags]) == 0
  err = capsys.readouterr().err
  if warned:
    assert err.count("\n") == 1 and err.startswith("warning: ")
    assert "--grace_secs=60" in err and "15 s" in err and "node pool" in err
  else:
    assert err == ""
