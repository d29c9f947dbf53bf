"""Job specs for the platforms: Vertex AI custom jobs and the Reduction
Server, Kubernetes JobSets, their offline checks.

Modules (lowest first):
  jobspecs: What the job-spec generators `ctl-vertex` and `ctl-k8s` share.
  reduction_server: Vertex AI Reduction Server: the reducer pool of a custom
    job, and its terms.
  vertex_check: Checks a Vertex AI CustomJobSpec offline, the way gcloud and
    Vertex AI would.
  vertex_follow: Follows a Vertex AI custom job until it ends, for
    `ctl-vertex --wait`.
  vertex: Vertex AI custom jobs: build a CustomJobSpec, check it offline,
    submit it.
  k8s: Kubernetes: a JobSet manifest for the trainer image, checked offline.
"""
