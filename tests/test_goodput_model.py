"""The goodput model: restart, lost work and saves per fault interval."""

import pytest

from ctl.telemetry import goodput_model


def _expected(fault_every, restart, save, save_every=None):
  return goodput_model.expected_goodput(
    fault_every_seconds=fault_every,
    restart_seconds=restart,
    save_seconds=save,
    save_every_seconds=save_every,
  )


def test_young_daly_interval():
  assert goodput_model.young_daly_interval(
    save_seconds=2.0, mtbf_seconds=3600.0
  ) == pytest.approx(120.0)


def test_the_three_costs_add_up_per_fault():
  # A fault every 300 s, 20 s to come back, saves of 1.5 s every 30 s:
  # 15 s lost on average; of the other 265 s, 1.5/30 wait for saves.
  expected = _expected(300.0, 20.0, 1.5, save_every=30.0)
  assert expected.lost_seconds == pytest.approx(15.0)
  assert expected.save_seconds == pytest.approx(265.0 * 0.05)
  assert expected.goodput_percent == pytest.approx(100.0 * 265.0 * 0.95 / 300.0)


def test_young_daly_is_the_best_interval():
  best = _expected(300.0, 10.0, 0.5)
  # Young/Daly with the time between a restart and the next fault.
  assert best.save_every_seconds == pytest.approx((2 * 0.5 * 290.0) ** 0.5)
  for every in (5.0, 10.0, 30.0, 60.0, 120.0):
    assert (
      _expected(300.0, 10.0, 0.5, save_every=every).goodput_percent
      < best.goodput_percent
    )
  # At the optimum the lost work and the saves cost the same but c / 2.
  assert best.lost_seconds == pytest.approx(best.save_seconds + 0.25)


def test_costs_beyond_the_interval_give_zero_not_a_negative_share():
  assert _expected(60.0, 90.0, 5.0).goodput_percent == 0.0
  assert _expected(60.0, 59.0, 5.0, save_every=10.0).goodput_percent == 0.0


def test_a_save_interval_longer_than_the_fault_interval_is_capped():
  expected = _expected(100.0, 0.0, 1.0, save_every=1000.0)
  assert expected.save_every_seconds == 100.0
  assert expected.lost_seconds == 50.0
  assert expected.goodput_percent == pytest.approx(50.0 * 0.99)
