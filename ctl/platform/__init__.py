"""What each platform tells a worker in its environment, one module a
platform, and the resolver the rest of ctl asks (docs/design.md, "Where a new
platform goes").

Modules (lowest first):
  vertex_ai: Vertex AI's variables: CLUSTER_SPEC's worker pools, the AIP_*
    output directories, the job, trial and project ids.
  tf_config: TF_CONFIG, the JSON cluster description every platform speaks
    in some dialect, and its job names.
  jobset: A GKE JobSet pod's CTL_JOBSET_* variables as a TF_CONFIG.
  resolver: Which platform describes this process, and what it says.
"""
