"""Expected goodput under periodic faults: what a fault and a save cost.

A job that fails every T seconds spends, per failure,

  restart   R: the seconds from the failure to the first resumed step (the
            restart gap, start-up, restore and first-loop tracing);
  lost      the work since the checkpoint it resumes from: half a save
            interval I on average, for a failure at a random moment;
  saves     in the rest, T - R - I / 2, a share c / I waits for the saves
            (c seconds each, one every I seconds of wall time),

so the share of T that trains is (T - R - I / 2) (1 - c / I) / T. The
interval that makes it largest is I = sqrt(2 c (T - R)): Young and Daly's
sqrt(2 c MTBF), with the time the job runs between a restart and the next
failure as the MTBF (for R, c << T the familiar 1 - R/T - I/2T - c/I). A
save interval set by hand can be given instead.
`benchmarks/recovery/tiers_lib.py` checks this model against killed runs and evaluates it at a fault every 5
and every 30 minutes; `--checkpoint_every_secs=auto` follows the same rule
(ctl.telemetry.goodput).
"""

import dataclasses
import math


def young_daly_interval(*, save_seconds: float, mtbf_seconds: float) -> float:
  """The checkpoint interval that minimizes expected waste (Young, Daly).

  Saving every T seconds costs save_seconds / T of the time; a failure loses
  T / 2 on average, i.e. T / (2 x MTBF) of the time; the sum is smallest at
  T = sqrt(2 x save_seconds x MTBF).
  """
  return math.sqrt(2.0 * save_seconds * mtbf_seconds)


@dataclasses.dataclass(frozen=True)
class Expected:
  """The model's answer for one fault interval; seconds are per failure.

  Attributes:
    goodput_percent: share of the fault interval that trains (0 when the
      restart alone takes it).
    save_every_seconds: the save interval assumed (the best unless given).
    restart_seconds, lost_seconds, save_seconds: the three costs per
      failure; with the steps that count they add up to the interval.
  """

  goodput_percent: float
  save_every_seconds: float
  restart_seconds: float
  lost_seconds: float
  save_seconds: float


def expected_goodput(
  *,
  fault_every_seconds: float,
  restart_seconds: float,
  save_seconds: float,
  save_every_seconds: float | None = None,
) -> Expected:
  """Goodput of a job that fails every `fault_every_seconds` (see above).

  Args:
    fault_every_seconds: mean time between failures (T), > 0.
    restart_seconds: failure to first resumed step.
    save_seconds: seconds one save blocks the steps.
    save_every_seconds: the wall time from one save's start to the next;
      None for the best, sqrt(2 c (T - R)). It is capped at T (a job saves
      at least once per failure interval, or it would lose everything
      every time).
  """
  running = max(0.0, fault_every_seconds - restart_seconds)
  if save_every_seconds is None:
    save_every_seconds = young_daly_interval(
      save_seconds=save_seconds, mtbf_seconds=running
    )
  interval = max(min(save_every_seconds, fault_every_seconds), 1e-9)
  lost = min(interval / 2.0, running)
  saving = (running - lost) * min(1.0, save_seconds / interval)
  trained = running - lost - saving
  return Expected(
    goodput_percent=100.0 * trained / fault_every_seconds,
    save_every_seconds=interval,
    restart_seconds=restart_seconds,
    lost_seconds=lost,
    save_seconds=saving,
  )
