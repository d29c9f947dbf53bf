"""ctl.telemetry.spot_cost: a run's restart and save seconds from its goodput
accounting, and the table of what an hour of useful training costs.

The end-to-end check (a real run's ledger through `ctl-report --spot_price`)
is tests/test_report.py's; these hold the arithmetic to the goodput model.
"""

import pytest

from ctl.telemetry import goodput
from ctl.telemetry import goodput_model
from ctl.telemetry import spot_cost


def _accounting(*, attempts: int, saves: int, **seconds) -> goodput.Accounting:
  """An accounting of `attempts` starts and `saves` bucket saves."""
  spent = dict.fromkeys(goodput.CATEGORIES, 0.0) | seconds
  return goodput.Accounting(
    total_seconds=sum(spent.values()),
    seconds=spent,
    goodput_percent=0.0,
    final_step=0,
    failures=attempts - 1,
    lost_steps=0,
    checkpoint_saves=saves,
    attempts=(None,) * attempts,
    segments=(),
  )


def test_a_restart_is_a_starts_start_up_restore_and_tracing_plus_the_gap():
  costs = spot_cost.run_costs(
    _accounting(
      attempts=3,
      saves=4,
      **{
        goodput.STARTUP: 6.0,
        goodput.RESTORE: 3.0,
        goodput.TRACING: 9.0,
        goodput.RESTART_GAP: 10.0,
        goodput.CHECKPOINT_SAVE: 2.0,
        goodput.GOODPUT: 100.0,
      },
    )
  )
  # 18 s over 3 starts, 10 s of gap over the 2 restarts; 2 s over 4 saves.
  assert costs == spot_cost.RunCosts(restart_seconds=11.0, save_seconds=0.5)


def test_a_run_of_one_start_and_no_save_divides_by_nothing():
  costs = spot_cost.run_costs(
    _accounting(attempts=1, saves=0, **{goodput.STARTUP: 4.0})
  )
  assert costs == spot_cost.RunCosts(restart_seconds=4.0, save_seconds=0.0)


def test_each_row_prices_a_useful_hour_at_the_models_goodput():
  costs = spot_cost.RunCosts(restart_seconds=120.0, save_seconds=5.0)
  text = spot_cost.table(costs, spot_price=1.0, on_demand_price=3.0)
  rows = [line.split() for line in text.splitlines()[2:]]
  assert [(r[0], float(r[1])) for r in rows] == [
    ("on-demand", spot_cost.ON_DEMAND_MTBF_HOURS),
    *(("Spot", hours) for hours in spot_cost.PREEMPT_EVERY_HOURS),
  ]
  for vm, hours, _, percent, price, per_useful_hour in rows:
    expected = goodput_model.expected_goodput(
      fault_every_seconds=float(hours) * 3600,
      restart_seconds=120.0,
      save_seconds=5.0,
    )
    assert float(price) == (1.0 if vm == "Spot" else 3.0)
    assert float(percent.rstrip("%")) == pytest.approx(
      expected.goodput_percent, abs=0.05
    )
    assert float(per_useful_hour) == pytest.approx(
      100 * float(price) / expected.goodput_percent, rel=1e-3
    )


def test_a_vm_preempted_faster_than_it_restarts_never_trains():
  costs = spot_cost.RunCosts(restart_seconds=7200.0, save_seconds=1.0)
  text = spot_cost.table(
    costs, spot_price=1.0, on_demand_price=3.0, preempt_every_hours=(1.0,)
  )
  spot = text.splitlines()[-1].split()
  assert spot[0] == "Spot"
  assert spot[3:] == ["0.0%", "1.000", "never"]
