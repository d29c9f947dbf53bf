"""The benchmarks' statistics and machine-state reader, on made-up inputs.

Verdicts from synthetic per-round ratios (an interval that straddles the
threshold is UNDECIDED, a clear difference PASS or MISS, the interval
holds the true value as often as it says, at any count of rounds), and
the machine's state from two recorded
/proc/stat snapshots and a fake /proc directory. Nothing is timed.
"""

import numpy as np
import pytest

from benchmarks.harness import machine
from benchmarks.harness import markdown
from benchmarks.harness import stats

_NOISY = [0.93, 1.05, 0.97, 1.02, 0.99, 1.04, 0.95, 1.01]
# Two /proc/stat snapshots of a 2-CPU machine, 10 s (1,000 ticks per CPU at
# 100 Hz) apart: user +800, system +200, idle +700, iowait +50, steal +250.
_PROC_STAT_BEFORE = """\
cpu  14256 0 2439 39557 409 0 133 18 0 0
cpu0 1530 0 577 26040 172 0 72 12 0 0
cpu1 12725 0 1862 13516 237 0 60 5 0 0
intr 123456 0 0
ctxt 987654
"""
_PROC_STAT_AFTER = """\
cpu  15056 0 2639 40257 459 0 133 268 0 0
cpu0 1930 0 677 26390 197 0 72 137 0 0
cpu1 13125 0 1962 13866 262 0 60 130 0 0
intr 123999 0 0
ctxt 999999
"""


def _ratio(per_round):
  return stats.ratio(
    name="a / b",
    numerator="a",
    denominator="b",
    numerator_values=per_round,
    denominator_values=[1.0] * len(per_round),
  )


def test_an_interval_that_straddles_the_threshold_is_undecided():
  summary = _ratio(_NOISY)
  assert summary["ci_low"] < 1.0 < summary["ci_high"]
  target = stats.verdict(summary, threshold=1.0, name="a >= 1x b")
  assert target["status"] == stats.UNDECIDED
  assert target["reason"] == "the interval straddles 1"
  assert target["rounds"] == len(_NOISY)
  text = markdown.verdict_text(target)
  assert text.startswith("UNDECIDED 1x (95% CI ")
  assert "8 rounds: the interval straddles 1" in text


def test_a_clear_difference_is_pass_or_miss():
  summary = _ratio([1.21, 1.18, 1.25, 1.19, 1.22, 1.2])
  assert stats.verdict(summary, threshold=1.0, name="t")["status"] == "PASS"
  missed = stats.verdict(summary, threshold=1.5, name="t")
  assert (missed["status"], missed["clear"]) == ("MISS", True)
  assert "clear miss, even the best round is below" in (
    markdown.verdict_text(missed)
  )
  # The interval is below the threshold, yet one round reaches it: a MISS,
  # not a clear one.
  outlier = _ratio([0.9, 0.91, 0.89, 0.9, 0.92, 0.9, 0.91, 0.9, 1.2])
  missed = stats.verdict(outlier, threshold=1.0, name="t")
  assert (missed["status"], missed["clear"]) == ("MISS", False)


def test_from_six_rounds_the_interval_is_the_order_statistics():
  # 8 rounds: only their min-max holds the median 95% of the time.
  assert stats.interval(_NOISY) == (min(_NOISY), max(_NOISY))
  # 20 rounds: the 6th and 15th smallest (1 - 2 P(Bin(20, 1/2) <= 5) = 95.9%).
  rounds = [1 + i / 100 for i in (7, 3, 11, 19, 0, 5, 14, 2, 17, 9)] * 2
  ordered = sorted(rounds)
  assert stats.interval(rounds) == (ordered[5], ordered[14])
  assert stats.confidence_of(20, order=6) == pytest.approx(0.9586, abs=1e-4)
  assert stats.confidence_of(20, order=7) < stats.CONFIDENCE
  assert stats.MIN_ORDER_ROUNDS == 6
  assert stats.interval(rounds) == stats.interval(list(reversed(rounds)))
  with pytest.raises(ValueError, match="at least one"):
    stats.interval([])


def test_the_interval_holds_the_true_value_as_often_as_it_says():
  """Rounds drawn from a known distribution (log-normal, median and
  geometric mean 1): the 95% interval holds 1 in at least 94% of 4,000 draws
  at every count of rounds (the bootstrap used before: 75% at 3 rounds,
  94% at 6)."""
  rng = np.random.default_rng(7)
  for rounds in (2, 3, 5, 6, 10, 20):
    draws = rng.lognormal(mean=0.0, sigma=0.1, size=(4000, rounds))
    covered = [
      low <= 1.0 <= high for low, high in map(stats.interval, draws.tolist())
    ]
    assert np.mean(covered) >= 0.945, (rounds, np.mean(covered))


def test_two_rounds_that_differ_decide_nothing_three_close_ones_do():
  two = stats.verdict(_ratio([1.2, 1.3]), threshold=1.0, name="t")
  assert two["status"] == stats.UNDECIDED  # The bootstrap said PASS.
  assert two["ci_low"] < 1.0 < 2.0 < two["ci_high"]
  three = stats.verdict(_ratio([1.2, 1.3, 1.25]), threshold=1.0, name="t")
  assert three["status"] == stats.PASS
  assert 1.1 < three["ci_low"] < 1.2 and 1.3 < three["ci_high"] < 1.4
  # A non-positive value: the t interval of the values themselves.
  low, high = stats.interval([-1.0, 1.0])
  assert low < -1.0 and high > 1.0


def test_one_value_has_no_interval_and_decides_alone():
  target = stats.verdict(stats.summary("n", [0.97]), threshold=0.98, name="t")
  assert (target["ci_low"], target["ci_high"]) == (0.97, 0.97)
  assert target["status"] == "MISS"
  assert "1 round, no interval" in markdown.verdict_text(target)


def test_undecided_and_settled():
  passed = stats.verdict(_ratio([1.2, 1.3, 1.25]), threshold=1.0, name="t")
  busy = stats.undecided(passed, "machine busy")
  assert (busy["status"], busy["reason"]) == ("UNDECIDED", "machine busy")
  assert passed["status"] == "PASS"  # A copy; the original is kept.
  absent = stats.not_measured(name="t", threshold=1.0)
  assert stats.undecided(absent, "busy")["status"] == "NOT MEASURED"
  assert stats.settled([passed, absent])
  assert not stats.settled([passed, busy])
  straddles = stats.verdict(_ratio(_NOISY), threshold=1.0, name="t")
  assert stats.undecided(straddles, "machine busy")["reason"] == (
    "the interval straddles 1; machine busy"
  )


def _snapshot(proc_stat, processes, clock, own_seconds=0.0, load=0.5):
  return machine.Snapshot(
    clock=clock,
    cpu=machine.parse_cpu_line(proc_stat),
    processes=processes,
    own_seconds=own_seconds,
    load=load,
    cpu_mhz=2500.0,
  )


def test_the_machine_state_from_two_recorded_proc_stats():
  assert machine.parse_cpu_line(_PROC_STAT_BEFORE)["steal"] == 18
  section = 4242  # The section's session: its processes are not "others".
  before = _snapshot(
    _PROC_STAT_BEFORE,
    {10: ("pytest", 10, 100.0), 4242: ("python", section, 1.0)},
    clock=100.0,
    own_seconds=5.0,
  )
  after = _snapshot(
    _PROC_STAT_AFTER,
    {
      10: ("pytest", 10, 104.0),
      11: ("ld", 11, 0.5),
      4242: ("python", section, 9.0),
    },
    clock=110.0,
    own_seconds=11.0,
    load=2.5,
  )
  state = machine.state(before, after, session=section)
  # 2,000 ticks in all: steal 250, iowait 50.
  assert state["steal_percent"] == pytest.approx(12.5)
  assert state["iowait_percent"] == pytest.approx(2.5)
  # Working 1,000 ticks = 10 CPU s, less 6 s of ours, over 10 s.
  assert state["others_cores"] == pytest.approx(0.4)
  assert [(p["name"], p["cores"]) for p in state["busiest"]] == [
    ("pytest", pytest.approx(0.4)),
    ("ld", pytest.approx(0.05)),
  ]
  assert (state["load_start"], state["load_end"]) == (0.5, 2.5)
  assert state["busy"]
  assert "0.40 of a core (> 0.25)" in state["why"]
  assert "12.5% of the CPU stolen (> 5%)" in state["why"]
  assert markdown.machine_text(state).startswith("BUSY (other processes")


def test_a_quiet_machine_decides_and_a_busy_one_does_not():
  quiet = {"others_cores": 0.1, "steal_percent": 0.5}
  assert machine.busy_reasons(quiet) == []
  assert machine.busy_reasons(dict(quiet, steal_percent=6.0))
  passed = stats.verdict(_ratio([1.2, 1.3, 1.25]), threshold=1.0, name="t")
  body = {"targets": [passed], "notes": []}
  state = {"busy": False, "why": None}
  assert machine.judge(body, state)["targets"][0]["status"] == "PASS"
  judged = machine.judge(body, dict(state, busy=True, why="steal 9%"))
  assert judged["targets"][0]["status"] == "UNDECIDED"
  assert judged["targets"][0]["reason"] == "machine busy: steal 9%"
  assert judged["machine"]["busy"]
  assert "verdicts are UNDECIDED" in judged["notes"][-1]


def test_the_reader_on_a_fake_proc_directory(tmp_path):
  (tmp_path / "stat").write_text(_PROC_STAT_BEFORE)
  (tmp_path / "loadavg").write_text("1.50 1.20 0.90 2/300 4321\n")
  (tmp_path / "cpuinfo").write_text(
    "cpu MHz\t\t: 2400.0\ncpu MHz\t\t: 2600.0\n"
  )
  process = tmp_path / "77"
  process.mkdir()
  # A name with a space and a bracket; 250 + 50 ticks of CPU at 100 Hz.
  fields = ["S", "1", "77", "77", *["0"] * 7, "250", "50", "0", "0"]
  (process / "stat").write_text(f"77 (tf (worker) 1) {' '.join(fields)}\n")
  (tmp_path / "78" / "stat").mkdir(parents=True)  # Unreadable: skipped.
  snap = machine.snapshot(str(tmp_path), sysfs=str(tmp_path / "sys"))
  assert snap.cpu["idle"] == 39557
  assert snap.load == 1.5
  assert snap.processes == {77: ("tf (worker) 1", 77, pytest.approx(3.0))}
  assert snap.cpu_mhz == pytest.approx(2500.0)
  # Where sysfs has the current frequency (kHz), it wins.
  for cpu, khz in (("cpu0", "1800000"), ("cpu1", "2200000")):
    folder = tmp_path / "sys" / "devices" / "system" / "cpu" / cpu / "cpufreq"
    folder.mkdir(parents=True)
    (folder / "scaling_cur_freq").write_text(khz + "\n")
  snap = machine.snapshot(str(tmp_path), sysfs=str(tmp_path / "sys"))
  assert snap.cpu_mhz == pytest.approx(2000.0)
