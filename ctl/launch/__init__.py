"""Processes: the local launcher, the node agent's supervisor, worker starts,
heartbeats, the warm spare, no orphans.

Modules (lowest first):
  output_relay: Worker output relayed to the launcher's own, each line whole
    and prefixed.
  heartbeats: The launcher's second line of defence against stalls: worker
    heartbeats.
  reaper: No orphans: worker processes die with the launcher that started
    them.
  spare: A warm spare: the next worker process, started early and blocked.
  workers: One start of the worker processes: their environment, exits and
    stop.
  supervisor: Supervision: start the workers, and start them again when one
    fails.
  launcher: Local multi-worker launcher and supervisor: N worker processes on
    loopback.
"""
