"""Kubernetes: a JobSet manifest for the trainer image, checked offline.

A JobSet (`jobset.x-k8s.io/v1alpha2`, kubernetes-sigs/jobset) runs the chief
and the workers as two replicated Jobs behind one headless service, so every
pod is reachable as `<jobset>-<replicatedjob>-<jobIndex>-<podIndex>.<subdomain>`.
It writes no TF_CONFIG: the manifest hands each pod its JobSet labels by the
downward API (the `CTL_JOBSET_*` variables of `ctl.platform.jobset`), from which the
trainer builds the cluster itself. A failed pod fails its Job
(`restartPolicy: Never`, `backoffLimit: 0`) and JobSet recreates the whole set
(`failurePolicy.maxRestarts`), which resumes from the last checkpoint; the
JobSet succeeds when the chief does (`successPolicy`). A user error (exit 2)
fails the JobSet at once, and a node disruption replaces pods without using up
`maxRestarts` (`POD_FAILURE_POLICY`, `JOBSET_USER_ERROR_RULE`). With `spot`
the pods run on GKE Spot nodes, whose preemption gives them 15 s: their grace,
and the node agent's a margin inside it, follow what the nodes give.

The manifest is checked before anything is applied: against the JobSet CRD's
OpenAPI schema vendored in `ctl/cloud/schemas/` (made strict: an unknown field is an
error, as with `kubectl apply --validate=strict`), and each replicated Job
against the Kubernetes OpenAPI schema of a pinned Kubernetes version
(`kubernetes-validate`), plus what neither schema says (an image on every
container, a chief of one pod, workers that exist).

Usage:

  ctl-k8s --name=cassava --image=us-docker.pkg.dev/PROJECT/ctl/trainer:latest \
      --num_workers=4 --gpus_per_node=1 --accelerator=nvidia-tesla-a100 \
      --gcsfuse_bucket=BUCKET \
      -- --flagfile=configs/cassava_resnet50.cfg --strategy=multi_worker \
         --model_dir=/gcs/BUCKET/cassava > jobset.yaml
  kubectl apply -f jobset.yaml

Needs the `k8s` extra (jsonschema, kubernetes-validate).
"""

import argparse
from collections.abc import Mapping, Sequence
import copy
import dataclasses
import functools
import importlib
import os
import re
import sys
from typing import Any

import yaml

from ctl import errors
from ctl.cloud import jobspecs
from ctl.io import storage
from ctl.launch import launcher
from ctl.platform import jobset
from ctl.telemetry import ledger_reader
from ctl.telemetry import progress
from ctl.train import options as options_lib

API_VERSION = "jobset.x-k8s.io/v1alpha2"
# The container's command; the trainer flags become its args. With
# `agent_restarts` the node agent (ctl.launch --agent) runs it instead.
TRAINER_COMMAND = ("python", "-m", "trainer.task")
CHIEF, WORKER = "chief", "worker"
CONTAINER = "trainer"
# Values of the GKE node label cloud.google.com/gke-accelerator.
GKE_ACCELERATORS = (
  "nvidia-tesla-t4",
  "nvidia-tesla-p4",
  "nvidia-tesla-p100",
  "nvidia-tesla-v100",
  "nvidia-l4",
  "nvidia-tesla-a100",
  "nvidia-a100-80gb",
  "nvidia-h100-80gb",
  "nvidia-h100-mega-80gb",
  "nvidia-h200-141gb",
  "nvidia-b200",
)
# The Kubernetes version whose core schemas check the pods (kubernetes-validate
# ships 1.25 to 1.37); GKE's regular channel is about here.
KUBERNETES_VERSION = "1.33"
SCHEMA_FILE = os.path.join(
  os.path.dirname(__file__), "schemas", "jobset.x-k8s.io_jobsets.yaml"
)
# The agreed save needs the next loop boundary plus one checkpoint write;
# Kubernetes' default of 30 s is short for a ResNet50 on Cloud Storage.
DEFAULT_GRACE_SECS = 300
# A Spot VM stops 30 s after its preemption notice, and GKE's graceful node
# shutdown gives non-system pods the first 15 s of it, whatever their
# terminationGracePeriodSeconds; a node pool can extend the whole period to
# 120 s (GKE, "Spot VMs" and "graceful node shutdown").
SPOT_GRACE_SECS = 15
SPOT_MAX_GRACE_SECS = 120
SPOT_LABEL = "cloud.google.com/gke-spot"
# The node agent sends SIGKILL this long before the kubelet would, so that it
# reaps its trainer and exits in the pod's grace instead of being killed with
# it.
AGENT_GRACE_MARGIN_SECS = launcher.AGENT_GRACE_MARGIN_SECS
MIN_GRACE_SECS = 10
FUSE_ROOT = "/gcs"  # The trainer's --fuse_root default: /gcs/BUCKET/...
# How a failed pod fails its Job (backoffLimit 0: any counted failure does).
# Rules apply in order, the first match acts (Kubernetes' podFailurePolicy,
# which needs restartPolicy Never): a trainer that exits with a user error
# fails its Job at once (reason PodFailurePolicy, which JOBSET_USER_ERROR_RULE
# turns into a failed JobSet: a restart would repeat the error). A pod taken
# by a node disruption (preemption, eviction, drain: the DisruptionTarget
# condition) and its peers, which stop at the agreed save with exit 143, are
# replaced by their Job without counting, so the set resumes from the
# checkpoint without using up maxRestarts. Anything else (a crash, a stall)
# fails the Job (BackoffLimitExceeded) and JobSet recreates the set.
POD_FAILURE_POLICY = {
  "rules": [
    {
      "action": "FailJob",
      "onExitCodes": {
        "containerName": CONTAINER,
        "operator": "In",
        "values": [errors.USER_ERROR_EXIT_CODE],
      },
    },
    {
      "action": "Ignore",
      "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    },
    {
      "action": "Ignore",
      "onExitCodes": {
        "containerName": CONTAINER,
        "operator": "In",
        "values": [errors.PREEMPTED_EXIT_CODE],
      },
    },
  ]
}
JOBSET_USER_ERROR_RULE = {
  "name": "userError",
  "action": "FailJobSet",
  "onJobFailureReasons": ["PodFailurePolicy"],
}
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_POD_FAILURE_ACTIONS = ("FailJob", "FailIndex", "Ignore", "Count")


@dataclasses.dataclass(frozen=True)
class JobSetOptions:
  """What the manifest runs, and on what.

  Attributes:
    name: The JobSet's name, also its subdomain (a DNS label).
    image: The trainer image URI.
    num_workers: Pods in the job, the chief included (as in ctl-vertex).
    trainer_args: The trainer's command line (the container's args).
    agent_restarts: With N > 0 the container runs the node agent
      (`ctl.launch --agent --max_restarts=N`), which restarts a failed
      trainer in place up to N times before the pod fails and JobSet's
      `max_restarts` recreates every pod; 0 runs the trainer alone.
    warm_spare: The agent keeps a warm spare (`--warm_spare`).
    spot: Run on GKE Spot nodes (their node selector and toleration), whose
      pods get `SPOT_GRACE_SECS` to stop unless the node pool gives more.
    namespace: The namespace, or None for kubectl's current one.
    gpus_per_node: `nvidia.com/gpu` per pod; 0 for none.
    accelerator: A `cloud.google.com/gke-accelerator` node selector, or None.
    max_restarts: How often JobSet recreates all pods after a failure.
    grace_secs: terminationGracePeriodSeconds, SIGTERM to SIGKILL: what the
      platform gives; None: `SPOT_GRACE_SECS` with `spot`, else
      `DEFAULT_GRACE_SECS`. The node agent's own grace is this less
      `AGENT_GRACE_MARGIN_SECS`.
    gcsfuse_bucket: A bucket the Cloud Storage FUSE CSI driver mounts at
      /gcs/<bucket>, or None to write gs:// urls directly.
    service_account: The Kubernetes service account (Workload Identity for
      Cloud Storage), or None.
    port: The gRPC port of every task.
  """

  name: str
  image: str
  num_workers: int = 1
  trainer_args: tuple[str, ...] = ()
  agent_restarts: int = 0
  warm_spare: bool = False
  spot: bool = False
  namespace: str | None = None
  gpus_per_node: int = 0
  accelerator: str | None = None
  max_restarts: int = 3
  grace_secs: int | None = None
  gcsfuse_bucket: str | None = None
  service_account: str | None = None
  port: int = jobset.DEFAULT_PORT


def pod_grace_secs(options: JobSetOptions) -> int:
  """The pods' terminationGracePeriodSeconds: what the platform gives."""
  if options.grace_secs is not None:
    return options.grace_secs
  return SPOT_GRACE_SECS if options.spot else DEFAULT_GRACE_SECS


def container_command(options: JobSetOptions) -> tuple[str, ...]:
  """The trainer, or the node agent that runs and restarts it in place and
  kills it, when stopped, before the kubelet kills the pod."""
  if not options.agent_restarts:
    return TRAINER_COMMAND
  agent = ("python", "-m", "ctl.launch", "--agent")
  flags = (
    f"--max_restarts={options.agent_restarts}",
    f"--grace_secs={pod_grace_secs(options) - AGENT_GRACE_MARGIN_SECS}",
  )
  flags += ("--warm_spare",) * options.warm_spare
  return (*agent, *flags, "--", *TRAINER_COMMAND)


def build_manifest(options: JobSetOptions) -> dict[str, Any]:
  """Builds the JobSet for `options`; check it with `validate_manifest`.

  Raises:
    errors.UserError: For a value no manifest can hold (see `_check_options`).
  """
  _check_options(options)
  jobs = [(CHIEF, 1)] + (
    [(WORKER, options.num_workers - 1)] * (options.num_workers > 1)
  )
  shape = ",".join(f"{name}=1x{pods}" for name, pods in jobs)
  metadata = {"name": options.name}
  if options.namespace:
    metadata["namespace"] = options.namespace
  return {
    "apiVersion": API_VERSION,
    "kind": "JobSet",
    "metadata": metadata,
    "spec": {
      "network": {"enableDNSHostnames": True, "subdomain": options.name},
      "failurePolicy": {
        "maxRestarts": options.max_restarts,
        "rules": [copy.deepcopy(JOBSET_USER_ERROR_RULE)],
      },
      "successPolicy": {"operator": "All", "targetReplicatedJobs": [CHIEF]},
      "replicatedJobs": [
        {
          "name": name,
          "replicas": 1,
          "template": {"spec": _job_spec(options, pods=pods, shape=shape)},
        }
        for name, pods in jobs
      ],
    },
  }


def _job_spec(options: JobSetOptions, *, pods: int, shape: str) -> dict:
  """One replicated Job: `pods` indexed pods that fail it on their first exit."""
  container = {
    "name": CONTAINER,
    "image": options.image,
    "command": list(container_command(options)),
    "args": list(options.trainer_args),
    "ports": [{"name": "tf-grpc", "containerPort": options.port}],
    "env": _env(options, shape=shape),
  }
  pod: dict[str, Any] = {
    "restartPolicy": "Never",
    "terminationGracePeriodSeconds": pod_grace_secs(options),
    "containers": [container],
  }
  metadata = {}
  if options.gpus_per_node:
    container["resources"] = {
      "limits": {"nvidia.com/gpu": options.gpus_per_node}
    }
  _add_node_selection(pod, options)
  if options.service_account:
    pod["serviceAccountName"] = options.service_account
  if options.gcsfuse_bucket:
    metadata["annotations"] = {"gke-gcsfuse/volumes": "true"}
    container["volumeMounts"] = [
      {"name": "gcs", "mountPath": f"{FUSE_ROOT}/{options.gcsfuse_bucket}"}
    ]
    pod["volumes"] = [
      {
        "name": "gcs",
        "csi": {
          "driver": "gcsfuse.csi.storage.gke.io",
          "volumeAttributes": {
            "bucketName": options.gcsfuse_bucket,
            "mountOptions": "implicit-dirs",
          },
        },
      }
    ]
  template: dict[str, Any] = {"spec": pod}
  if metadata:
    template = {"metadata": metadata, "spec": pod}
  return {
    "parallelism": pods,
    "completions": pods,
    "completionMode": "Indexed",
    "backoffLimit": 0,
    "podFailurePolicy": copy.deepcopy(POD_FAILURE_POLICY),
    "template": template,
  }


def _add_node_selection(pod: dict[str, Any], options: JobSetOptions) -> None:
  """Selects GPU nodes of the accelerator, and Spot nodes, which GKE taints
  so that only pods that tolerate preemption run there."""
  selector = {}
  if options.accelerator:
    selector["cloud.google.com/gke-accelerator"] = options.accelerator
  if options.spot:
    selector[SPOT_LABEL] = "true"
    pod["tolerations"] = [
      {
        "key": SPOT_LABEL,
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
      }
    ]
  if selector:
    pod["nodeSelector"] = selector


def _env(options: JobSetOptions, *, shape: str) -> list[dict[str, Any]]:
  """The `CTL_JOBSET_*` variables `ctl.platform.jobset` builds the cluster from."""

  def field(var: str, path: str) -> dict[str, Any]:
    return {"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}}

  label = "metadata.labels['jobset.sigs.k8s.io/{}']".format
  return [
    field(jobset.NAME_ENV, label("jobset-name")),
    field(jobset.REPLICATED_JOB_ENV, label("replicatedjob-name")),
    field(jobset.JOB_INDEX_ENV, label("job-index")),
    field(
      jobset.POD_INDEX_ENV,
      "metadata.annotations['batch.kubernetes.io/job-completion-index']",
    ),
    field(jobset.RESTART_ATTEMPT_ENV, label("restart-attempt")),
    {"name": jobset.SUBDOMAIN_ENV, "value": options.name},
    {"name": jobset.JOBS_ENV, "value": shape},
    {"name": jobset.PORT_ENV, "value": str(options.port)},
  ]


def _check_options(options: JobSetOptions) -> None:
  """Refuses values that no JobSet can hold, in one sentence each."""
  _check_name(options.name, most_pods=options.num_workers - 1)
  if not options.image.strip():
    raise errors.UserError("image is missing; give the trainer image URI.")
  checks = (
    (
      options.num_workers >= 1,
      "num_workers counts the chief too, so it must "
      f"be at least 1, not {options.num_workers}.",
    ),
    (
      options.gpus_per_node >= 0,
      f"gpus_per_node must be 0 or more, not {options.gpus_per_node}.",
    ),
    (
      options.max_restarts >= 0,
      f"max_restarts must be 0 or more, not {options.max_restarts}.",
    ),
    (
      options.agent_restarts >= 0,
      f"agent_restarts must be 0 or more, not {options.agent_restarts}.",
    ),
    (
      options.agent_restarts or not options.warm_spare,
      "warm_spare is kept by the node agent: give agent_restarts=N too.",
    ),
    (
      pod_grace_secs(options) >= MIN_GRACE_SECS,
      f"grace_secs {options.grace_secs} is too short for the agreed save at "
      f"the next loop boundary; give at least {MIN_GRACE_SECS}.",
    ),
    (
      not options.spot or pod_grace_secs(options) <= SPOT_MAX_GRACE_SECS,
      f"grace_secs {options.grace_secs} is more than a Spot node gives: a "
      f"Spot node gives its pods at most {SPOT_MAX_GRACE_SECS} s (GKE's "
      f"default is {SPOT_GRACE_SECS} s).",
    ),
    (0 < options.port < 65536, f"port must be a port, not {options.port}."),
    (
      options.accelerator in (None, *GKE_ACCELERATORS),
      f"accelerator {options.accelerator!r} is not a GKE accelerator; use one "
      f"of {', '.join(GKE_ACCELERATORS)}.",
    ),
    (
      not options.accelerator or options.gpus_per_node,
      f"accelerator {options.accelerator} selects GPU nodes, but "
      "gpus_per_node is 0; ask for at least 1.",
    ),
    (
      not re.search(r"[/:]", options.gcsfuse_bucket or ""),
      f"gcsfuse_bucket {options.gcsfuse_bucket!r} is not a bucket name (no "
      "gs://, no path).",
    ),
  )
  for ok, sentence in checks:
    if not ok:
      raise errors.UserError(sentence)
  if options.gcsfuse_bucket:
    storage.check_url(f"gs://{options.gcsfuse_bucket}")


def validate_manifest(
  manifest: Any, *, kubernetes_version: str = KUBERNETES_VERSION
) -> None:
  """Checks a JobSet manifest offline, the way the API server would.

  Args:
    manifest: The manifest as loaded from YAML, or built by `build_manifest`.
    kubernetes_version: The cluster's Kubernetes version, "MAJOR.MINOR".

  Raises:
    errors.UserError: On the first problem, in one sentence naming the field.
  """
  jsonschema = _import("jsonschema")
  _check_kubernetes_version(kubernetes_version)
  if not isinstance(manifest, Mapping):
    raise errors.UserError(
      "The manifest must be a mapping, not a list or text."
    )
  for key, value in (("apiVersion", API_VERSION), ("kind", "JobSet")):
    if manifest.get(key) != value:
      raise errors.UserError(
        f"{key} must be {value!r}, not {manifest.get(key)!r}."
      )
  validator = jsonschema.Draft4Validator(_strict_jobset_schema())
  error = jsonschema.exceptions.best_match(validator.iter_errors(manifest))
  if error is not None:
    raise errors.UserError(_sentence(error.absolute_path, error.message))
  rjobs = manifest["spec"]["replicatedJobs"]
  # ObjectMeta has no schema in the CRD: check it as a core object's.
  _validate_core(
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": manifest["metadata"]},
    path=[],
    version=kubernetes_version,
  )
  for index, rjob in enumerate(rjobs):
    job = {
      "apiVersion": "batch/v1",
      "kind": "Job",
      "metadata": {
        "name": rjob["name"],
        **rjob["template"].get("metadata", {}),
      },
      "spec": rjob["template"].get("spec", {}),
    }
    _validate_core(
      job,
      path=["spec", "replicatedJobs", index, "template"],
      version=kubernetes_version,
    )
  _check_name(
    manifest["metadata"].get("name", ""),
    most_pods=max((_pods(rjob) for rjob in rjobs), default=1),
  )
  _check_layout(rjobs)


def _validate_core(resource: dict, *, path: list, version: str) -> None:
  """Checks a core resource against the schema of Kubernetes `version`."""
  kubernetes_validate = _import("kubernetes_validate")
  try:
    kubernetes_validate.validate(resource, version, strict=True)
  except kubernetes_validate.ValidationError as e:
    raise errors.UserError(_sentence([*path, *e.path], e.message)) from None


def _check_kubernetes_version(version: str) -> None:
  """Refuses a version kubernetes-validate ships no schemas for."""
  utils = _import("kubernetes_validate.utils")
  known = sorted(
    {utils.major_minor(v) for v in utils.all_versions()},
    key=lambda v: tuple(map(int, v.split("."))),
  )
  if version.removeprefix("v") not in known:
    raise errors.UserError(
      f"Kubernetes {version} is not a version kubernetes-validate knows; use "
      f"one of {', '.join(known)}."
    )


def _pods(rjob: Mapping[str, Any]) -> int:
  """Pods of a replicated job: its Jobs times each Job's parallelism."""
  return rjob.get("replicas", 1) * rjob["template"].get("spec", {}).get(
    "parallelism", 1
  )


def _check_name(name: str, *, most_pods: int) -> None:
  """The JobSet name must make pod hostnames that are DNS labels."""
  longest = jobset.hostname(
    jobset=name,
    replicated_job=WORKER,
    job_index=0,
    pod_index=max(0, most_pods - 1),
  )
  if not _DNS_LABEL.match(name) or len(longest) > 63:
    raise errors.UserError(
      f"name {name!r} must be lowercase letters, digits and '-', start with "
      f"a letter, and leave pod hostnames like {longest!r} at 63 characters "
      "or fewer."
    )


def _check_layout(rjobs: Sequence[Mapping[str, Any]]) -> None:
  """What the schemas cannot say: one chief pod, workers, images, enums."""
  if CHIEF not in [rjob["name"] for rjob in rjobs]:
    raise errors.UserError(
      f"spec.replicatedJobs has no {CHIEF!r} job; the chief owns checkpoints."
    )
  for index, rjob in enumerate(rjobs):
    where = f"spec.replicatedJobs[{index}]"
    pods = _pods(rjob)
    if pods < 1:
      raise errors.UserError(
        f"{where} ({rjob['name']}) has {pods} pods; drop it or run at least 1."
      )
    if rjob["name"] == CHIEF and pods != 1:
      raise errors.UserError(
        f"{where} is the chief and must have 1 pod, not {pods}."
      )
    job = rjob["template"].get("spec", {})
    if job.get("completionMode") != "Indexed":
      raise errors.UserError(
        f"{where}.template.spec.completionMode must be 'Indexed' (pod "
        f"hostnames carry the index), not {job.get('completionMode')!r}."
      )
    pod = job.get("template", {}).get("spec", {})
    _check_pod_failure_policy(job, pod, where=f"{where}.template.spec")
    where += ".template.spec.template.spec"
    if pod.get("restartPolicy") != "Never":
      raise errors.UserError(
        f"{where}.restartPolicy must be 'Never' (JobSet restarts the whole "
        f"cluster), not {pod.get('restartPolicy')!r}."
      )
    for c, container in enumerate(pod.get("containers", [])):
      if not str(container.get("image", "")).strip():
        raise errors.UserError(f"{where}.containers[{c}].image is missing.")
      policy = container.get("imagePullPolicy", "IfNotPresent")
      if policy not in _PULL_POLICIES:
        raise errors.UserError(
          f"{where}.containers[{c}].imagePullPolicy {policy!r} is not one of "
          f"{', '.join(_PULL_POLICIES)}."
        )


def _check_pod_failure_policy(
  job: Mapping[str, Any], pod: Mapping[str, Any], *, where: str
) -> None:
  """What the API server checks of a podFailurePolicy and the core schema
  does not say: the action and operator names, and exit-code rules that name
  a container of the pod (the schema requires action and operator)."""
  names = [container.get("name") for container in pod.get("containers", [])]
  rules = job.get("podFailurePolicy", {}).get("rules", [])
  for index, rule in enumerate(rules):
    at = f"{where}.podFailurePolicy.rules[{index}]"
    codes = rule.get("onExitCodes", {})
    for field, value, known in (
      ("action", rule.get("action"), _POD_FAILURE_ACTIONS),
      ("onExitCodes.operator", codes.get("operator"), ("In", "NotIn")),
      ("onExitCodes.containerName", codes.get("containerName"), names),
    ):
      if value is not None and value not in known:
        raise errors.UserError(
          f"{at}.{field} {value!r} is not one of {', '.join(known)}."
        )


@functools.cache
def _strict_jobset_schema() -> dict[str, Any]:
  """The vendored CRD's v1alpha2 schema, with unknown fields refused."""
  with open(SCHEMA_FILE, encoding="utf-8") as f:
    crd = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
  [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
  schema = version["schema"]["openAPIV3Schema"]
  _refuse_unknown_fields(schema)
  return schema


def _refuse_unknown_fields(schema: Any) -> None:
  """Adds additionalProperties: false to every object with fixed fields."""
  if isinstance(schema, dict):
    if "properties" in schema and not schema.get(
      "x-kubernetes-preserve-unknown-fields"
    ):
      schema.setdefault("additionalProperties", False)
    for value in schema.values():
      _refuse_unknown_fields(value)
  elif isinstance(schema, list):
    for value in schema:
      _refuse_unknown_fields(value)


def _sentence(path: Sequence[Any], message: str) -> str:
  """`a.b[0].c: message`, on one line, ending in a period."""
  where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
  message = " ".join(message.split())
  if len(message) > 300:
    message = message[:300] + "…"
  return f"{where.lstrip('.') or 'The manifest'}: {message.rstrip('.')}."


def _import(module: str) -> Any:
  """Imports a `k8s` extra's module, or says how to install it."""
  try:
    return importlib.import_module(module)
  except ImportError:
    raise errors.UserError(
      f"ctl-k8s needs {module}; install the k8s extra: pip install '.[k8s]'."
    ) from None


def main(argv: Sequence[str] | None = None) -> int:
  """Runs `ctl-k8s`; see the module docstring. Returns the exit code."""
  argv, trainer_args = jobspecs.split_trainer_args(
    sys.argv[1:] if argv is None else argv
  )
  args = _parser().parse_args(argv)

  def build() -> str:
    options = options_lib.from_flags(
      JobSetOptions, args, trainer_args=tuple(trainer_args)
    )
    manifest = build_manifest(options)
    validate_manifest(manifest, kubernetes_version=args.kubernetes_version)
    _warn_if_spot_grace_needs_a_node_pool(options)
    if args.measured_run:
      _warn_if_the_save_does_not_fit(options, args.measured_run)
    return jobspecs.format_spec(manifest, args.format)

  return jobspecs.run(build)


def agreed_save_secs(model_dir: str) -> tuple[float, float] | None:
  """How long an agreed save takes, as the run's ledger measured it.

  A SIGTERM is answered at the next loop boundary, then the step is saved
  to the bucket: with the local tier, written locally and its copy to the
  bucket waited for before the exit (a Spot VM's RAM goes with it), so the
  save is the longest `checkpoint_save` and the longest `checkpoint_upload`,
  never the cheaper local-only saves.

  Args:
    model_dir: The run directory of an earlier run of the job.

  Returns:
    (the longest loop, the longest save) in seconds, or None when the ledger
    has no save to the bucket.
  """
  loops, saves = [0.0], {"checkpoint_save": [], "checkpoint_upload": [0.0]}
  for events in ledger_reader.read(ledger_reader.ledger_dir(model_dir)):
    for event in events:
      if event["event"] != "phase" or not event["ok"]:
        continue
      if event["phase"] == progress.TRAIN_LOOP:
        loops.append(event["busy"] / max(1, event.get("loops", 1)))
      elif event["phase"] in saves:
        start, end = event.get("m0", event["t0"]), event.get("m1", event["t1"])
        saves[event["phase"]].append(end - start)
  if not saves["checkpoint_save"]:
    return None
  return max(loops), max(saves["checkpoint_save"]) + max(
    saves["checkpoint_upload"]
  )


def _warn_if_spot_grace_needs_a_node_pool(options: JobSetOptions) -> None:
  """Says on stderr when a Spot job's grace is longer than GKE gives Spot
  pods unless their node pool is set up for more (`SPOT_GRACE_SECS`): the
  manifest keeps it, and without that node pool the kubelet kills the pod
  at `SPOT_GRACE_SECS`, in the middle of a longer agreed save."""
  grace = pod_grace_secs(options)
  if options.spot and grace > SPOT_GRACE_SECS:
    print(
      f"warning: --grace_secs={grace} on Spot nodes holds only where the "
      "node pool's graceful node shutdown gives pods that long (GKE gives "
      f"Spot pods {SPOT_GRACE_SECS} s by default, at most "
      f"{SPOT_MAX_GRACE_SECS} s when the node pool is set up for it).",
      file=sys.stderr,
    )


def _warn_if_the_save_does_not_fit(options: JobSetOptions, run: str) -> None:
  """Says on stderr when `run`'s agreed save needs more than the trainer
  gets between SIGTERM and SIGKILL (the agent's grace, or the pod's)."""
  measured = agreed_save_secs(run)
  if measured is None:
    print(
      f"warning: the ledger of {run} has no checkpoint save to measure the "
      "agreed save by.",
      file=sys.stderr,
    )
    return
  grace = pod_grace_secs(options)
  if options.agent_restarts:
    grace -= AGENT_GRACE_MARGIN_SECS
  loop, save = measured
  if loop + save > grace:
    print(
      f"warning: an agreed save in {run} takes up to {loop + save:.1f} s (a "
      f"loop of {loop:.1f} s and a save of {save:.1f} s), more than the "
      f"{grace} s the trainer gets after SIGTERM; save locally (the local "
      "tier), take fewer --steps_per_loop (a SIGTERM is answered at the "
      "loop's end), or give --grace_secs where the nodes give more.",
      file=sys.stderr,
    )


def _parser() -> argparse.ArgumentParser:
  """The `ctl-k8s` command line; trainer arguments follow `--`."""
  parser = errors.ArgumentParser(
    prog="ctl-k8s",
    description="Write and check a JobSet manifest that runs the trainer "
    "image as a chief and workers on Kubernetes (GKE).",
    epilog="Arguments after -- become the trainer command line (args).",
  )
  add = parser.add_argument
  add("--name", required=True, help="JobSet name and DNS subdomain.")
  add("--image", required=True, help="Trainer image URI.")
  add("--num_workers", type=int, default=1, help="Pods, the chief included.")
  add("--namespace", help="Kubernetes namespace (default: kubectl's).")
  add("--gpus_per_node", type=int, default=0, help="nvidia.com/gpu per pod.")
  add("--accelerator", help="GKE accelerator node selector, e.g. nvidia-l4.")
  add(
    "--max_restarts",
    type=int,
    default=3,
    help="failurePolicy.maxRestarts: JobSet restarts of all pods.",
  )
  add(
    "--agent_restarts",
    type=int,
    default=0,
    help="Run the node agent, which restarts a failed trainer in place this"
    " many times before the pod fails (0: the trainer alone).",
  )
  add("--warm_spare", action="store_true", help="The agent keeps a spare.")
  add("--spot", action="store_true", help="Run on GKE Spot nodes.")
  add(
    "--grace_secs",
    type=int,
    help="terminationGracePeriodSeconds, time for the agreed save: what the "
    f"nodes give (default {DEFAULT_GRACE_SECS}, with --spot {SPOT_GRACE_SECS};"
    f" more where the node pool gives more); the node agent takes "
    f"{AGENT_GRACE_MARGIN_SECS} s less.",
  )
  add("--gcsfuse_bucket", help="Mount this bucket at /gcs/BUCKET (GKE CSI).")
  add("--service_account", help="Kubernetes service account of the pods.")
  add(
    "--port",
    type=int,
    default=jobset.DEFAULT_PORT,
    help="gRPC port of every task.",
  )
  add(
    "--kubernetes_version",
    default=KUBERNETES_VERSION,
    help="Check the pods against this Kubernetes version's schemas.",
  )
  add("--measured_run", help="Warn if this run's agreed save exceeds grace.")
  add("--format", choices=("yaml", "json"), default="yaml")
  return parser


if __name__ == "__main__":
  sys.exit(main())
