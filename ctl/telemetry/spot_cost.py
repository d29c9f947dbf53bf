"""What Spot VMs are worth for one run: goodput and cost per useful hour.

A Spot VM costs a fraction of an on-demand one and is preempted now and
then. Each preemption costs the run a restart and the work since its last
checkpoint, and saving more often costs steps: the goodput model
(ctl.telemetry.goodput_model) gives the share of the wall time that trains
at each preemption rate, with the run's own restart and save seconds read
from its ledger. The price of an hour of useful training is then the price
of an hour divided by that share, so Spot pays where

  spot_price / spot_goodput < on_demand_price / on_demand_goodput.

`ctl-report MODEL_DIR --spot_price=... --on_demand_price=...` prints the
table for a run (prices are the user's: they differ by region, machine and
month, so none is written here).
"""

from collections.abc import Sequence
import dataclasses

from ctl.telemetry import goodput
from ctl.telemetry import goodput_model

# Preemption intervals the table shows by default, in hours.
PREEMPT_EVERY_HOURS = (0.25, 1.0, 4.0, 24.0)
# An on-demand VM's mean time between failures assumed (host maintenance,
# crashes): about a month.
ON_DEMAND_MTBF_HOURS = 720.0


@dataclasses.dataclass(frozen=True)
class RunCosts:
  """What one failure and one save cost this run, in seconds.

  Attributes:
    restart_seconds: a start's start-up, restore and first-loop tracing,
      plus the gap before it when the run was restarted.
    save_seconds: the checkpoint saves' seconds per bucket save.
  """

  restart_seconds: float
  save_seconds: float


def run_costs(accounting: goodput.Accounting) -> RunCosts:
  """The restart and save seconds of the run `accounting` describes."""
  seconds = accounting.seconds
  starts = max(len(accounting.attempts), 1)
  per_start = (
    seconds[goodput.STARTUP]
    + seconds[goodput.RESTORE]
    + seconds[goodput.TRACING]
  ) / starts
  gap = seconds[goodput.RESTART_GAP] / max(starts - 1, 1)
  return RunCosts(
    restart_seconds=per_start + gap,
    save_seconds=seconds[goodput.CHECKPOINT_SAVE]
    / max(accounting.checkpoint_saves, 1),
  )


def table(
  costs: RunCosts,
  *,
  spot_price: float,
  on_demand_price: float,
  preempt_every_hours: Sequence[float] = PREEMPT_EVERY_HOURS,
  on_demand_mtbf_hours: float = ON_DEMAND_MTBF_HOURS,
) -> str:
  """The Spot and on-demand goodput and cost per useful hour, as text.

  Args:
    costs: the run's restart and save seconds (`run_costs`).
    spot_price: a Spot VM's price per hour (any currency).
    on_demand_price: an on-demand VM's price per hour, the same currency.
    preempt_every_hours: the Spot preemption intervals to show.
    on_demand_mtbf_hours: the on-demand VM's mean time between failures.
  """

  def row(name: str, every_hours: float, price: float) -> str:
    expected = goodput_model.expected_goodput(
      fault_every_seconds=every_hours * 3600.0,
      restart_seconds=costs.restart_seconds,
      save_seconds=costs.save_seconds,
    )
    share = expected.goodput_percent / 100.0
    useful = f"{price / share:>14.3f}" if share > 0 else f"{'never':>14}"
    return (
      f"{name:<10} {every_hours:>13g} {expected.save_every_seconds:>11.0f} "
      f"{expected.goodput_percent:>8.1f}% {price:>10.3f} {useful}"
    )

  lines = [
    f"What Spot is worth against on-demand, for this run's restart of "
    f"{costs.restart_seconds:.1f} s and save of {costs.save_seconds:.2f} s "
    "(the goodput model, saves at their best interval):",
    f"{'VM':<10} {'fails every h':>13} {'save every s':>11} {'goodput':>9} "
    f"{'price / h':>10} {'per useful h':>14}",
    row("on-demand", on_demand_mtbf_hours, on_demand_price),
    *(row("Spot", hours, spot_price) for hours in preempt_every_hours),
  ]
  return "\n".join(lines)
