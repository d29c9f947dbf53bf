"""The benchmarks on tiny settings: they run, and their report adds up.

No speed is asserted anywhere (the machine is shared and noisy); what is
checked is that every benchmark runs, writes every field the report needs,
and that every ratio and verdict follows from the measured numbers in the
JSON itself.
"""

import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import textwrap

from absl.testing import flagsaver
import pytest

from benchmarks import run_all
from benchmarks.harness import budget as budget_lib
from benchmarks.harness import chart
from benchmarks.harness import cli
from benchmarks.harness import machine
from benchmarks.harness import markdown
from benchmarks.harness import report as report_lib
from benchmarks.harness import stats
from benchmarks.recovery import restart_lib
from benchmarks.speed import input_pipeline_lib
from benchmarks.speed import input_scale_lib
from benchmarks.speed import scaling_lib
from benchmarks.speed import throughput_lib
from benchmarks.workloads import variants as variants_lib
from ctl.errors import UserError
from trainer.testing import run_command

# The throughput benchmark's smallest model and batch, loops of 2 steps.
_TINY_THROUGHPUT = dict(
  model="small_cnn", image_size=8, batch_size=4, steps_per_loop=2
)
_ROW_FIELDS = (
  "name",
  "kind",
  "steps_per_loop",
  "precision",
  "xla",
  "images_per_second",
  "images_per_second_min",
  "images_per_second_max",
  "images_per_second_per_round",
  "seconds_per_round",
  "images_per_round",
  "first_call_seconds",
)
_RATIO_FIELDS = (
  "name",
  "numerator",
  "denominator",
  "per_round",
  "median",
  "min",
  "max",
  "ci_low",
  "ci_high",
)
_TARGET_FIELDS = (
  "name",
  "ratio",
  "threshold",
  "measured",
  "min",
  "max",
  "ci_low",
  "ci_high",
  "rounds",
  "status",
  "clear",
  "reason",
)
_SECTION_FIELDS = (
  "title",
  "status",
  "config",
  "columns",
  "chart_key",
  "rows",
  "ratios",
  "targets",
  "notes",
)


def _check_section(body, row_fields=("name",)):
  assert set(_SECTION_FIELDS) <= set(body), body.keys()
  assert body["status"] == "ok"
  for row in body["rows"]:
    assert set(row_fields) <= set(row), (row_fields, row.keys())
  for ratio in body["ratios"]:
    assert set(_RATIO_FIELDS) <= set(ratio)
  for target in body["targets"]:
    assert set(_TARGET_FIELDS) <= set(target)


def _check_ratios_follow_from_rows(body, key="images_per_second"):
  """Recomputes every ratio and verdict from the rows' per-round rates."""
  per_round = {
    row["name"]: row[f"{key}_per_round"]
    for row in body["rows"]
    if f"{key}_per_round" in row
  }
  by_name = {row["name"]: row for row in body["rows"]}
  for ratio in body["ratios"]:
    numerator = per_round[ratio["numerator"]]
    denominator = per_round.get(ratio["denominator"]) or [
      by_name[ratio["denominator"]][key]
    ] * len(numerator)
    expected = [n / d for n, d in zip(numerator, denominator)]
    assert ratio["per_round"] == pytest.approx(expected)
    assert ratio["median"] == pytest.approx(statistics.median(expected))
    assert ratio["min"] == pytest.approx(min(expected))
    assert ratio["max"] == pytest.approx(max(expected))
  ratios = {ratio["name"]: ratio for ratio in body["ratios"]}
  for target in body["targets"]:
    if target["measured"] is None:
      assert target["status"] == "NOT MEASURED"
      continue
    numerator_name, denominator_name = target["ratio"].split(" / ")
    expected = [
      n / d
      for n, d in zip(per_round[numerator_name], per_round[denominator_name])
    ]
    assert target["measured"] == pytest.approx(statistics.median(expected))
    assert target["status"] == _expected_status(body, expected, target)
    if target["ratio"] in ratios:
      assert ratios[target["ratio"]]["median"] == pytest.approx(
        target["measured"]
      )


def _expected_status(body, per_round, target) -> str:
  """PASS, MISS or UNDECIDED: from the per-round ratios' interval, and
  UNDECIDED whatever it says where run_all found the machine busy."""
  if (body.get("machine") or {}).get("busy"):
    return "UNDECIDED"
  low, high = stats.interval(per_round)
  assert (target["ci_low"], target["ci_high"]) == pytest.approx((low, high))
  if low >= target["threshold"]:
    return "PASS"
  return "MISS" if high < target["threshold"] else "UNDECIDED"


def _a_over_b(a: list[float], b: list[float]) -> dict:
  """The ratio "a / b" of rows a and b measured over rounds."""
  return stats.ratio(
    name="a / b",
    numerator="a",
    denominator="b",
    numerator_values=a,
    denominator_values=b,
  )


def test_ratio_is_the_median_of_per_round_ratios():
  ratio = _a_over_b([10.0, 12.0, 9.0], [10.0, 10.0, 10.0])
  assert ratio["per_round"] == pytest.approx([1.0, 1.2, 0.9])
  assert (ratio["median"], ratio["min"], ratio["max"]) == pytest.approx(
    (1.0, 0.9, 1.2)
  )
  with pytest.raises(ValueError, match="Rounds differ"):
    stats.per_round_ratios([1.0], [1.0, 2.0])


def test_each_ratio_is_listed_once_whatever_its_specs_resolve_to():
  """With steps_per_loop=1 (the ResNet50 section), engine:N is engine:1 and
  bare:N is bare: the default specs name `engine spl=1 / bare step` three
  times and `/ fit` twice; the report lists each pair once, in order."""
  defaults = {"steps_per_loop": 1, "precision": "float32", "xla": False}
  rates = {
    variants_lib.parse(spec, **defaults): [10.0, 11.0, 9.0]
    for spec in ("engine:1", "bare", "fit:1")
  }
  ratios = throughput_lib._ratios(  # pylint: disable=protected-access
    throughput_lib.DEFAULT_RATIOS, defaults, rates
  )
  pairs = [(r["numerator"], r["denominator"]) for r in ratios]
  assert pairs == [
    ("engine spl=1 +float32", "bare step +float32"),
    ("engine spl=1 +float32", "fit spe=1 +float32"),
    ("bare step +float32", "fit spe=1 +float32"),
  ]


def test_verdict_is_pass_miss_or_undecided_by_the_interval():
  """More in tests/test_bench_stats.py."""
  summary = _a_over_b([0.97, 0.99, 1.01], [1.0, 1.0, 1.0])
  assert stats.verdict(summary, threshold=0.9, name="t")["status"] == "PASS"
  straddles = stats.verdict(summary, threshold=0.98, name="t")
  assert straddles["status"] == "UNDECIDED"
  missed = stats.verdict(summary, threshold=1.05, name="t")
  assert (missed["status"], missed["clear"]) == ("MISS", True)
  assert markdown.verdict_text(missed).startswith("MISS 0.99x (95% CI ")


def test_variant_specs():
  defaults = dict(steps_per_loop=100, precision="none", xla=False)
  engine = variants_lib.parse("engine:N+bf16+xla", **defaults)
  assert (engine.kind, engine.steps_per_call, engine.precision, engine.xla) == (
    "engine",
    100,
    "bf16",
    True,
  )
  assert engine.name == "engine spl=100 +bf16 +xla"
  assert variants_lib.parse("bare", **defaults).name == "bare step"
  assert variants_lib.parse("bare:N", **defaults).name == "bare loop spl=100"
  assert variants_lib.parse("fit:1", **defaults).name == "fit spe=1"
  lean = variants_lib.parse("engine:1+noacc", **defaults)
  assert (lean.train_accuracy, lean.name) == (False, "engine spl=1 no accuracy")
  bare = variants_lib.parse("bare+noacc", **defaults)
  assert (bare.train_accuracy, bare.name) == (False, "bare step no accuracy")
  numerator, denominator, threshold = variants_lib.parse_target(
    "engine:N/fit:1>=2", **defaults
  )
  assert (numerator.steps_per_call, denominator.kind, threshold) == (
    100,
    "fit",
    2.0,
  )
  for bad in ("keras:1", "engine:x", "engine:1+fp8", "fit:1+noacc"):
    with pytest.raises(UserError, match="Bad"):
      variants_lib.parse(bad, **defaults)
  with pytest.raises(UserError, match="Bad target"):
    variants_lib.parse_target("engine:N/bare>0.98", **defaults)


def test_report_renders_every_section_and_target(tmp_path):
  summary = stats.ratio(
    name="x / y",
    numerator="x",
    denominator="y",
    numerator_values=[2.0],
    denominator_values=[1.0],
  )
  measured = report_lib.section(
    title="Measured",
    rows=[
      {"name": "x", "images_per_second": 2.0},
      {"name": "y", "images_per_second": 1.0},
    ],
    ratios=[summary],
    notes=["a note"],
    targets=[
      stats.verdict(summary, threshold=3.0, name="x >= 3x y"),
      stats.not_measured(name="z >= 1x y", threshold=1.0),
    ],
  )
  report = report_lib.merge(
    report_lib.new_report({"cpu_count": 2}),
    {
      "measured": measured,
      "checkpointing": report_lib.placeholder(
        title="checkpointing", status="pending", note="not yet"
      ),
    },
  )
  with pytest.raises(ValueError, match="already"):
    report_lib.merge(report, {"measured": measured})
  text = markdown.render(report)
  for expected in (
    "## Targets",
    "MISS 2x",
    "NOT MEASURED",
    "a note",
    "status: **pending**",
    "| x | 2 |",
  ):
    assert expected in text
  run_dir = report_lib.new_run_dir(str(tmp_path))
  report_lib.write_json(report, run_dir)
  png = chart.write(report, os.path.join(run_dir, "chart.png"))
  with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  latest = report_lib.point_latest(str(tmp_path), run_dir)
  with open(os.path.join(latest, report_lib.RESULTS_JSON)) as f:
    assert json.load(f)["sections"]["checkpointing"]["status"] == "pending"
  with pytest.raises(ValueError, match="status"):
    report_lib.section(title="bad", status="great")


def test_a_chart_of_long_names_lays_out_every_label(tmp_path):
  """A standard run's target name of 119 characters (`restart`'s, in `make
  bench` of 2026-12-07) left no room for the labels: matplotlib gave up the
  layout with a warning, and the chart came out with every label cut and
  each panel's title over the one above."""
  sections = {}
  for index in range(12):
    summary = stats.ratio(
      name=f"cluster restart / spare restart {index}",
      numerator="cluster",
      denominator="spare",
      numerator_values=[1.2, 1.3],
      denominator_values=[1.0, 1.1],
    )
    sections[f"section_{index}"] = report_lib.section(
      title="Goodput model (small CNN): checked against the killed runs, "
      "then at a kill every 5 and 30 minutes",
      rows=[
        {
          "name": f"agent + spare + local tier: model, a kill every {m} min",
          "images_per_second": 90.0 + m,
        }
        for m in (5, 30)
      ],
      ratios=[summary],
      targets=[
        stats.verdict(
          summary,
          threshold=1.0,
          name="a warm spare starts the restarted chief sooner than a new "
          "process (to its first mark: no interpreter start, no imports)",
        )
      ],
    )
  report = report_lib.merge(report_lib.new_report({"cpu_count": 2}), sections)
  chart.write(report, str(tmp_path / "chart.png"))  # A warning fails it.


def test_latest_replaces_a_copy_and_leaves_no_temporary_link(tmp_path):
  """`latest` a directory (the copy made where links are not allowed): the
  next run's `latest` is a copy of it too, and the link that could not take
  its place is not left beside it."""
  first, second = (
    report_lib.new_run_dir(str(tmp_path / name)) for name in ("a", "b")
  )
  for run_dir, name in ((first, "first"), (second, "second")):
    with open(os.path.join(run_dir, "which"), "w") as f:
      f.write(name)
  shutil.copytree(first, tmp_path / report_lib.LATEST)
  latest = report_lib.point_latest(str(tmp_path), second)
  assert (tmp_path / report_lib.LATEST / "which").read_text() == "second"
  assert sorted(os.listdir(tmp_path)) == ["a", "b", report_lib.LATEST]
  assert latest == str(tmp_path / report_lib.LATEST)


@pytest.mark.processes
def test_a_round_other_processes_disturb_is_timed_again_and_decides_nothing():
  """Two processes burn both cores through the whole run, so every round
  is disturbed: each is timed again while the cap (the planned rounds)
  allows, and the rounds kept then leave the target UNDECIDED, saying so.
  (The section's own average cannot see a burst of a few seconds.)"""
  burners = [
    subprocess.Popen([sys.executable, "-c", "while True: pass"])
    for _ in range(2)
  ]
  try:
    sections = throughput_lib.run(
      throughput_lib.Config(
        **_TINY_THROUGHPUT,
        steps=40,  # Rounds of a fraction of a second: /proc/stat's ticks.
        repeats=2,
        variants=("engine:N", "bare"),
        extras=("none",),
        targets=("engine:N/bare>=0.1",),
        measure_peak=False,
        time_budget_secs=600,
        section="busy",
      )
    )
  finally:
    for burner in burners:
      burner.kill()
      burner.wait()
  body = sections["busy"]
  notes = " ".join(body["notes"])
  assert notes.count("timed again: other processes used") == 2
  assert "Kept, though disturbed by other processes: round 1 (" in notes
  [target] = body["targets"]
  assert target["status"] == "UNDECIDED"
  assert "disturbed by other processes" in target["reason"]


def test_throughput_on_tiny_settings(tmp_path):
  progress = []
  sections = throughput_lib.run(
    throughput_lib.Config(
      **_TINY_THROUGHPUT,
      steps=2,
      repeats=2,
      slices=2,  # The 1-step variants run a step in each, the others one.
      variants=("engine:N", "engine:1", "bare", "bare:N", "fit:1", "fit:N"),
      extras=("auto",),
      targets=(
        "engine:N/bare>=0.98",
        "engine:N/fit:1>=1.0",
        "engine:N+fp16/engine:N>=1.0",
      ),
      measure_peak=True,
      peak_size=128,
      section="tiny",
    ),
    progress=progress.append,
  )
  # A write after every round: a run stopped at its limit keeps its rounds,
  # and the final one is out before the models are torn down.
  partial, final = progress
  assert final == sections
  assert partial["tiny"]["status"] == "partial"
  assert partial["tiny"]["config"]["rounds_done"] == 1
  assert len(partial["tiny"]["rows"][0]["images_per_second_per_round"]) == 1
  # Through the JSON file, as run_all reads it.
  path = str(tmp_path / "sections.json")
  report_lib.write_sections(path, sections)
  sections = report_lib.read_sections(path)
  body = sections["tiny"]
  _check_section(body, _ROW_FIELDS + ("mfu_percent",))
  names = [row["name"] for row in body["rows"]]
  assert names[:6] == [
    "engine spl=2",
    "engine spl=1",
    "bare step",
    "bare loop spl=2",
    "fit spe=1",
    "fit spe=2",
  ]
  assert "engine spl=2 +xla" in names
  notes = " ".join(body["notes"])
  for precision in ("bf16", "fp16"):  # Run, or skipped with the reason.
    name = f"engine spl=2 +{precision}"
    assert name in names or f"{name} skipped" in notes
  for row in body["rows"]:
    assert row["images_per_round"] == 2 * 4
    assert row["images_per_second_per_round"] == pytest.approx(
      [row["images_per_round"] / s for s in row["seconds_per_round"]]
    )
    assert row["images_per_second"] == pytest.approx(
      statistics.median(row["images_per_second_per_round"])
    )
  _check_ratios_follow_from_rows(body)
  statuses = [t["status"] for t in body["targets"]]
  assert set(statuses[:2]) <= {"PASS", "MISS", "UNDECIDED"}
  assert (statuses[2] == "NOT MEASURED") == ("engine spl=2 +fp16" not in names)
  # MFU follows from the measured peak and the model's FLOPs.
  peaks = {
    row["precision"]: row["peak_flops_per_second"]
    for row in sections["limits"]["rows"]
  }
  flops = body["config"]["training_flops_per_image"]
  for row in body["rows"]:
    assert row["mfu_percent"] == pytest.approx(
      100 * flops * row["images_per_second"] / peaks[row["precision"]]
    )


def test_a_rounds_slices_spread_each_variants_whole_calls_evenly():
  config = throughput_lib.Config(steps=100, slices=10)
  for steps_per_call, expected in (
    (1, [10] * 10),
    (20, [0, 20, 0, 20, 0, 20, 0, 20, 0, 20]),
    (100, [0] * 9 + [100]),
  ):
    pieces = [
      throughput_lib._slice_steps(steps_per_call, config, piece)
      for piece in range(config.slices)
    ]
    assert pieces == expected


def test_plan_keeps_what_fits_the_budget_and_never_goes_below_its_floor():
  plan = budget_lib.plan
  # No budget, or everything fits: all that was planned.
  assert plan(100, 3, None, 100) == 3
  assert plan(100, 3, 0, 100) == 3
  assert plan(100, 3, 400, 150) == 3
  # Issue 29: a 240 s first round after 200 s of set-up, 375 s budget.
  assert plan(240, 2, 375, 440) == 1
  assert plan(100, 5, 400, 150) == 3  # 250 s left: two more rounds.
  assert plan(100, 5, 400, 500, floor=2) == 2  # Over already: the floor.
  assert plan(100, 1, 10, 500, floor=2) == 1  # Never more than planned.


def test_plan_cuts_rounds_first_then_steps_down_to_the_floor():
  plan = budget_lib.plan_rounds_and_steps
  assert plan(1.0, 3, 30, None, 0, steps_floor=5) == (3, 30)
  assert plan(1.0, 3, 30, 100, 0, steps_floor=5) == (3, 30)
  assert plan(1.0, 3, 30, 100, 40, steps_floor=5) == (2, 30)
  # 60 s left, 2 runs a round: one round of 30 steps fits exactly.
  assert plan(1.0, 3, 30, 100, 40, steps_floor=5, runs_per_round=2) == (1, 30)
  assert plan(1.0, 3, 30, 100, 70, steps_floor=5, runs_per_round=2) == (1, 15)
  assert plan(1.0, 3, 30, 100, 99, steps_floor=5, runs_per_round=2) == (1, 5)


def test_plan_by_estimate_keeps_the_most_units_whose_estimate_fits():
  plan = budget_lib.plan_by_estimate

  def estimate(epochs):  # 10 s of start-up, 20 s an epoch.
    return 10 + 20 * epochs

  assert plan(estimate, 6, None, 1000) == 6
  assert plan(estimate, 6, 200, 50) == 6  # 150 s left: all 6 (130 s).
  assert plan(estimate, 6, 200, 100) == 4  # 100 s left: 4 (90 s).
  assert plan(estimate, 6, 200, 300, floor=2) == 2  # Over already: floor.
  assert plan(estimate, 6, 200, 300) == 1
  assert budget_lib.Budget(0).fits(1e9)
  assert not budget_lib.Budget(1).fits(1.0)


def test_budget_notes_and_records_what_it_cut():
  budget = budget_lib.Budget(405)
  assert budget.rounds(1.0, 3) == 3  # Fits: no note.
  assert budget.notes() == []
  assert budget.config()["used"] == {"rounds": 3}
  budget.record("steps", 60, 120, "first round took 210 s")
  budget.record("rounds", 1, 2, "first round took 210 s")
  assert budget.notes() == [
    "Scaled down to fit its 405 s budget on this machine: 1 of 2 rounds, "
    "60 of 120 steps (first round took 210 s)."
  ]
  assert budget.config() == {
    "time_budget_secs": 405,
    "planned": {"rounds": 2, "steps": 120},
    "used": {"rounds": 1, "steps": 60},
  }
  assert budget_lib.Budget(0).config() == {}
  assert run_all.section_budget(540) == 0.75 * 540 - 30


@pytest.mark.processes
def test_a_section_over_its_budget_runs_fewer_rounds_and_says_so(tmp_path):
  # The small model on tiny settings, 6 rounds planned and a budget the
  # set-up alone overruns: one round, the app's usual JSON, status ok.
  output = tmp_path / "small.json"
  run_command(
    [
      sys.executable,
      "-m",
      "benchmarks.speed.throughput",
      f"--output={output}",
      "--section=small",
      *run_all._TINY_THROUGHPUT,  # pylint: disable=protected-access
      "--repeats=6",
      "--time_budget_secs=1",
    ]
  )
  body = report_lib.read_sections(str(output))["small"]
  assert body["status"] == "ok"
  assert body["config"]["repeats"] == 6
  assert body["config"]["rounds_done"] == 1
  assert body["config"]["planned"] == {"rounds": 6}
  assert body["config"]["used"] == {"rounds": 1}
  assert all(len(row["seconds_per_round"]) == 1 for row in body["rows"])
  assert any(
    note.startswith(
      "Scaled down to fit its 1 s budget on this machine: "
      "1 of 6 rounds (first round took "
    )
    for note in body["notes"]
  )


def _app_over_a_one_second_budget(tmp_path, app: str, *flags: str) -> dict:
  """Runs `benchmarks.<app>` with --time_budget_secs=1; its sections."""
  output = tmp_path / f"{app}.json"
  run_command(
    [
      sys.executable,
      "-m",
      f"benchmarks.{app}",
      f"--output={output}",
      *flags,
      "--time_budget_secs=1",
    ]
  )
  return report_lib.read_sections(str(output))


@pytest.mark.processes
def test_goodput_over_its_budget_runs_fewer_epochs_and_says_so(tmp_path):
  # ctl's clean run at the 2 epochs planned overruns the budget: every run
  # is then one epoch (the fewest that hold the kill; ctl's clean run
  # again), the restart cost is skipped, and the section says so.
  sections = _app_over_a_one_second_budget(
    tmp_path,
    "recovery.goodput",
    "--epochs=2",
    "--kills=1",
    "--checkpoint_every=10",
    "--image_size=16",
    "--batch_size=64",
    "--restart_model=small_cnn",
    "--restart_image_size=16",
  )
  assert list(sections) == ["goodput"]  # No restart-cost section.
  body = sections["goodput"]
  _check_section(body)
  assert body["config"]["epochs"] == 1
  assert body["config"]["planned"] == {
    "epochs": 2,
    "restart-cost measurements": 1,
  }
  assert body["config"]["used"] == {"epochs": 1, "restart-cost measurements": 0}
  ctl_row, keras_row = body["rows"]
  assert ctl_row["same_weights_as_uninterrupted"]
  assert ctl_row["starts"] == keras_row["starts"] == 2
  assert any(
    note.startswith(
      "Scaled down to fit its 1 s budget on this machine: 1 of 2 epochs, "
      "0 of 1 restart-cost measurements (ctl's uninterrupted run took "
    )
    and "floor 1, the fewest epochs that hold the 1 kills" in note
    for note in body["notes"]
  )


@pytest.mark.processes
def test_input_scale_over_its_budget_runs_one_round_and_says_so(tmp_path):
  """On tiny settings: each pipeline's exact share, read by index, in the
  one round a 1 s budget leaves, and the section says it scaled down."""
  sections = _app_over_a_one_second_budget(
    tmp_path,
    "speed.input_scale",
    "--num_records=200",
    "--jpeg_size=8",
    "--image_size=8",
    "--global_batch=16",
    "--pipelines=1,2",
    "--decode_batches=2",
    "--entry_records=64",
    "--repeats=3",
    "--resume_passes=2",
    f"--cache_dir={tmp_path}",
  )
  for name in ("input_scale", "input_scale_entry"):
    body = sections[name]
    _check_section(body)
    assert body["config"]["planned"] == {"rounds": 3}
    assert body["config"]["used"] == {"rounds": 1}
    assert any(
      note.startswith(
        "Scaled down to fit its 1 s budget on this machine: 1 of 3 rounds "
        "(first round took "
      )
      for note in body["notes"]
    )
    assert any("1 interleaved rounds" in note for note in body["notes"])
  rows = {row["name"]: row for row in sections["input_scale"]["rows"]}
  for n in (1, 2):
    row = rows[f"records read per pipeline, N={n} (max)"]
    # Read by index, the count is exact: the pipeline's share.
    assert row[input_scale_lib.INDEXED] == row["target"] == 192 // n
    # Streamed, the count is only reported: on a dataset this tiny the
    # read-ahead (a 1,024-record shuffle buffer, larger than the dataset)
    # moves whole epochs between the two snapshots, depending on how far
    # the background threads got. At the benchmark's 50,000 records it is
    # a small error.
    assert isinstance(row[input_scale_lib.STREAMED], int)
  targets = sections["input_scale"]["targets"]
  assert [t["status"] for t in targets[:2]] == ["PASS", "PASS"]
  # The resume targets: a sample per pass, 2 passes in the one round.
  assert [t["rounds"] for t in targets[2:]] == [2, 2]
  entry = sections["input_scale_entry"]
  _check_section(entry, ("name", "records_per_second"))
  assert len(entry["rows"]) == 4
  assert all(
    len(row["records_per_second_per_round"]) == 1 for row in entry["rows"]
  )


@contextlib.contextmanager
def _flags_parsed():
  """absl's flags read as parsed (their defaults, as an app's command line
  without them), then as they were: unparsed, outside an app."""
  parsed = cli.FLAGS.is_parsed()
  cli.FLAGS.mark_as_parsed()
  try:
    yield
  finally:
    if not parsed:
      cli.FLAGS.unparse_flags()


@pytest.mark.parametrize(
  "values,words",
  [
    (dict(repeats=0), "--repeats must be >= 1, got 0."),
    (dict(time_budget_secs=-5.0), "--time_budget_secs must be 0 (no budget)"),
    (dict(output="{tmp}/no/out.json"), "no directory {tmp}/no to write it in"),
  ],
  ids=["repeats", "budget", "output-dir"],
)
def test_every_app_refuses_bad_shared_flags_before_it_measures(
  tmp_path, values, words
):
  """`run_app` checks these first and exits 2 with the sentence (one app's
  process shows it end to end: test_errors' bad input)."""
  values = {
    k: v.format(tmp=tmp_path) if isinstance(v, str) else v
    for k, v in values.items()
  }
  with _flags_parsed(), flagsaver.flagsaver(**values):
    with pytest.raises(UserError) as e:
      cli.check_shared_flags()
  assert words.format(tmp=tmp_path) in str(e.value)
  assert not os.path.exists(tmp_path / "no")  # No directory made.


def test_throughput_refuses_a_variant_spec_it_cannot_read():
  with pytest.raises(UserError, match="Bad steps 'x'"):
    throughput_lib.run(
      throughput_lib.Config(
        **_TINY_THROUGHPUT, variants=("engine:x",), measure_peak=False
      )
    )


def test_throughput_rejects_steps_that_do_not_fill_a_loop():
  with pytest.raises(UserError, match="multiple"):
    throughput_lib.run(
      throughput_lib.Config(
        **_TINY_THROUGHPUT,
        steps=3,
        repeats=1,
        extras=("none",),
        measure_peak=False,
      )
    )


def _restart(down, first, restored, resumed):
  """One mode's seconds from a kill, as `restart_lib.one_restart` gives."""
  return dict(
    to_chief_down=down,
    to_first_mark=first,
    to_restored=restored,
    to_resumed_step=resumed,
    to_training=resumed - 0.1,
  )


def _chief_marks(path, marks):
  """An events file of the chief's marks: (attempt, phase, end, seconds,
  steps), each at step 5 (the fields `restart_lib` reads)."""
  with open(path, "w") as f:
    for attempt, phase, end, seconds, steps in marks:
      event = dict(
        worker=0,
        attempt=attempt,
        pid=100 + attempt,
        phase=phase,
        step=5,
        monotonic=end,
        seconds=seconds,
        steps=steps,
      )
      f.write(json.dumps(event) + "\n")


@pytest.mark.parametrize("steady_loop", [False, True])
def test_a_restarts_resumed_steps_come_off_at_a_steady_pace(
  tmp_path, steady_loop
):
  # The resumed loop's 5 steps train (goodput): they come off the restart at
  # the killed run's pace. A first loop's pace holds its tracing (ResNet50's
  # whole-cluster restart, 36.7 s by its ledger, came out as 6.4 s): a kill
  # after the first loop alone has no pace to take them off at.
  events = tmp_path / "events.jsonl"
  killed_run = [(0, "first_loop", 30.0, 30.0, 5)]
  if steady_loop:
    killed_run.append((0, "train_loop", 35.0, 5.0, 5))
  resumed = (1, "first_loop", 80.0, 35.0, 5)
  _chief_marks(events, [*killed_run, (1, "restore", 45.0, 1.0, 0), resumed])
  resumed_event = json.loads(events.read_text().splitlines()[-1])
  if not steady_loop:
    with pytest.raises(AssertionError, match="no train loop before the kill"):
      restart_lib._split(str(events), 40.0, resumed_event)
    return
  found = restart_lib._split(str(events), 40.0, resumed_event)
  assert found["to_resumed_step"] == 40.0
  assert found["to_training"] == 40.0 - 5 * 1.0  # 1 s a step, not 6.


def test_the_restart_section_reports_and_judges_the_modes_it_ran():
  # Made-up seconds of three rounds: the cold cluster restart about twice
  # the spare's, its first mark about five times later.
  found = {
    "cluster": [_restart(2, 9 + r, 10 + r, 17 + r) for r in range(3)],
    "spare": [_restart(1, 1.8 + r / 10, 3, 8.5 + r / 2) for r in range(3)],
  }
  config = restart_lib.Config(modes=("cluster", "spare"), repeats=3)
  body = restart_lib._section(config, found)["restart"]
  assert [row["name"] for row in body["rows"]] == ["cluster", "spare"]
  assert len(body["ratios"]) == 2  # No agent: no ratio needs one.
  assert [t["status"] for t in body["targets"]] == ["PASS", "PASS"]
  assert body["targets"][1]["measured"] == pytest.approx(10 / 1.9)
  # With the cold agent restart too, its two ratios are reported, untargeted.
  found["agent"] = [_restart(6, 12, 13, 20 + r) for r in range(3)]
  body = restart_lib._section(config, found)["restart"]
  assert len(body["ratios"]) == 4 and len(body["targets"]) == 2


@pytest.mark.parametrize("modes", ["agent,spare", "cluster,spare,warm"])
@pytest.mark.processes
def test_the_restart_app_refuses_modes_its_targets_cannot_use(modes):
  done = run_command(
    [sys.executable, "-m", "benchmarks.recovery.restart", f"--modes={modes}"],
    check=False,
    timeout=120,
  )
  assert done.returncode == 2
  assert "--modes must name cluster and spare" in done.stderr
  assert "Traceback" not in done.stderr


def test_input_pipeline_on_tiny_settings():
  sections = input_pipeline_lib.run(
    input_pipeline_lib.Config(
      num_jpegs=12,
      jpeg_width=48,
      jpeg_height=40,
      image_size=16,
      batch_size=4,
      batches=2,
      warmup_batches=1,
      repeats=2,
      model_images_per_second=50.0,
      model_label="a model",
      model_image_size=8,
    )
  )
  body = sections["input_pipeline"]
  _check_section(body, ("name", "images_per_second"))
  pipeline, model = body["rows"]
  assert len(pipeline["images_per_second_per_round"]) == 2
  assert model["images_per_second"] == 50.0
  _check_ratios_follow_from_rows(body)
  assert any("pixel-count estimate" in note for note in body["notes"])


_STAND_IN_WORKER = textwrap.dedent("""\
    # Stands in for trainer.task: the chief writes a summary whose rate
    # depends on the number of workers in TF_CONFIG.
    import json, os, sys
    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if "=" in a)
    config = json.loads(os.environ["TF_CONFIG"])
    workers = len(config["cluster"]["worker"])
    if int(flags["train_steps"]) < 0:
      sys.exit(3)
    if config["task"]["index"] == 0:
      os.makedirs(flags["model_dir"], exist_ok=True)
      with open(os.path.join(flags["model_dir"], "train_summary.json"),
                "w") as f:
        json.dump({"examples_per_second": 300.0 / (1 + 0.5 * workers)}, f)
    """)


@pytest.mark.processes
def test_scaling_reads_the_chief_summary_of_each_run(tmp_path):
  script = tmp_path / "worker.py"
  script.write_text(_STAND_IN_WORKER)
  config = scaling_lib.Config(
    repeats=2, steps=5, worker_command=(sys.executable, str(script))
  )
  body = scaling_lib.run(config)["scaling"]
  _check_section(
    body,
    (
      "name",
      "workers",
      "examples_per_second",
      "examples_per_second_per_round",
      "examples_per_second_per_worker",
    ),
  )
  one, two = body["rows"]
  assert one["examples_per_second_per_round"] == pytest.approx([200.0] * 2)
  assert two["examples_per_second_per_round"] == pytest.approx([150.0] * 2)
  assert two["examples_per_second_per_worker"] == pytest.approx(75.0)
  _check_ratios_follow_from_rows(body, key="examples_per_second")
  assert body["ratios"][0]["median"] == pytest.approx(0.75)
  with pytest.raises(RuntimeError, match="exited with 3"):
    scaling_lib.run(
      scaling_lib.Config(
        repeats=1, steps=-1, worker_command=(sys.executable, str(script))
      )
    )


@pytest.mark.processes
def test_run_all_quick_writes_json_markdown_and_chart(tmp_path):
  only = ["small_model", "input_pipeline"]
  results = tmp_path / "results"
  run_command(
    [
      sys.executable,
      "-m",
      "benchmarks.run_all",
      "--quick",
      f"--results_dir={results}",
      f"--only={','.join(only)}",
    ],
    timeout=240,
  )
  latest = results / report_lib.LATEST
  assert os.path.islink(latest)
  assert os.path.dirname(os.path.realpath(latest)) == os.path.realpath(results)
  for name in (
    report_lib.RESULTS_JSON,
    report_lib.REPORT_MD,
    report_lib.CHART_PNG,
  ):
    assert (latest / name).stat().st_size > 0
  report = json.loads((latest / report_lib.RESULTS_JSON).read_text())
  assert list(report["sections"]) == only
  for key in ("cpu_count", "tensorflow", "keras", "total_seconds"):
    assert key in report["machine"]
  small = report["sections"]["small_model"]
  _check_section(small, _ROW_FIELDS)
  _check_ratios_follow_from_rows(small)
  # The quick run judges the standard run's targets.
  [standard] = [b for b in run_all.BENCHMARKS if b.section == "small_model"]
  [targets] = [f for f in standard.flags if f.startswith("--targets=")]
  assert [t["threshold"] for t in small["targets"]] == [
    float(t.split(">=")[1])
    for t in targets.removeprefix("--targets=").split(",")
  ]
  _check_ratios_follow_from_rows(report["sections"]["input_pipeline"])
  text = (latest / report_lib.REPORT_MD).read_text()
  for target in report_lib.all_targets(report):
    assert markdown.verdict_text(target) in text
  # The machine's state over each section, beside its numbers.
  for body in report["sections"].values():
    state = body["machine"]
    assert state["busy"] == bool(machine.busy_reasons(state))
    assert f"Machine: {markdown.machine_text(state)}" in text


@pytest.mark.processes
def test_run_all_names_each_section_that_did_not_finish(tmp_path):
  """A crash, a timeout and a section the budget skipped each fail the run."""
  tiny = run_all._TINY_THROUGHPUT  # pylint: disable=protected-access
  crash = run_all.Benchmark(  # 3 steps do not fill loops of 2: exit 2.
    "crash", "benchmarks.speed.throughput", (*tiny, "--steps=3")
  )
  slow = run_all.Benchmark(
    "slow", "benchmarks.speed.throughput", tiny, quick_timeout_secs=1
  )
  _, report = run_all.run(
    results_dir=str(tmp_path / "ran"), quick=True, benchmarks=(crash, slow)
  )
  assert run_all.broken_sections(report) == ["crash (failed)", "slow (timeout)"]
  _, report = run_all.run(
    results_dir=str(tmp_path / "skipped"),
    quick=True,
    budget_secs=0,
    benchmarks=(crash,),
  )
  assert run_all.broken_sections(report) == ["crash (skipped)"]


@pytest.mark.processes
def test_quick_sections_run_side_by_side_and_one_that_reads_others_waits(
  tmp_path,
):
  """--parallel=2: the first section waits for a file the second makes, so
  the run ends only if both run at once; the third takes its flags from
  the sections before it (`flags_from`), so it starts after both ended.
  The report lists them in their chosen order."""
  made = tmp_path / "made"

  def stub(section, *flags, **kwargs):
    return run_all.Benchmark(section, "tests.bench_stub", flags, **kwargs)

  chosen = (
    stub("waits", f"--wait_for={made}", quick_timeout_secs=120),
    stub("makes", f"--touch={made}"),
    stub("reads", flags_from=lambda sections: [f"--saw={','.join(sections)}"]),
  )
  _, report = run_all.run(
    results_dir=str(tmp_path / "runs"),
    quick=True,
    benchmarks=chosen,
    parallel=2,
  )
  assert run_all.broken_sections(report) == []
  assert list(report["sections"]) == ["waits", "makes", "reads"]
  assert report["sections"]["reads"]["notes"][0] == "saw: waits,makes"


@pytest.mark.processes
def test_more_than_one_section_at_a_time_is_for_quick_settings_only(tmp_path):
  result = subprocess.run(
    [
      sys.executable,
      "-m",
      "benchmarks.run_all",
      f"--results_dir={tmp_path}",
      "--parallel=2",
    ],
    capture_output=True,
    text=True,
    check=False,
  )
  assert result.returncode == 2
  assert result.stderr.startswith("error: --parallel=2: sections run one at")
  assert result.stderr.count("\n") == 1
  assert not os.listdir(tmp_path)  # Refused before anything ran.


def test_an_opt_in_section_runs_only_when_named():
  # restart_resnet50 takes minutes a round: not in the standard 20 minutes,
  # but `--only=restart_resnet50` (and `make bench BENCH_FLAGS=...`) runs it.
  default = [b.section for b in run_all.chosen_benchmarks(())]
  assert "restart" in default and "restart_resnet50" not in default
  named = run_all.chosen_benchmarks(["restart_resnet50", "restart"])
  assert [b.section for b in named] == ["restart", "restart_resnet50"]
  assert "--model=resnet50" in named[1].flags
  with pytest.raises(UserError, match="unknown sections"):
    run_all.chosen_benchmarks(["restart_r50"])


# For each app in turn: the flags its module defines, the flags of its
# Config's `settings.flag` fields, and the fields whose value read from the
# unset flags is not the Config's default. Then its flags are removed: apps
# share flag names (--model), so they cannot all be defined at once.
_APP_FLAGS = textwrap.dedent("""\
  import dataclasses, importlib, json, sys
  from absl import flags
  from benchmarks.harness import cli, settings
  found = {}
  for app, prefix in json.loads(sys.argv[1]).items():
    importlib.import_module(f"benchmarks.{app}")
    config = importlib.import_module(f"benchmarks.{app}_lib").Config
    flags.FLAGS(["app"])
    own = flags.FLAGS.flags_by_module_dict().get(f"benchmarks.{app}", [])
    read = dataclasses.asdict(cli.config_from_flags(config, prefix=prefix))
    names = (settings.flag_name(f, prefix) for f in dataclasses.fields(config))
    found[app] = {
      "flags": sorted(flag.name for flag in own),
      "fields": sorted(filter(None, names)),
      "drifted": sorted(
        name
        for name, default in dataclasses.asdict(config()).items()
        if read[name] != default
      ),
    }
    for name in found[app]["flags"]:
      delattr(flags.FLAGS, name)
  print(json.dumps(found))
""")


@pytest.mark.processes
def test_each_app_defines_its_config_as_flags_with_its_defaults():
  # Every app `benchmarks/F/X.py` with a `benchmarks/F/X_lib.py` has a
  # Config; an app is named `F.X`, its module less `benchmarks.`.
  here = os.path.dirname(run_all.__file__)
  apps = sorted(
    f"{os.path.basename(folder)}.{name[: -len('_lib.py')]}"
    for folder, _, names in os.walk(here)
    for name in names
    if name.endswith("_lib.py")
    and os.path.exists(os.path.join(folder, name.replace("_lib", "")))
  )
  prefixes = {"recovery.checkpointing": "cost_", "recovery.tiers": "tiers_"}
  found = json.loads(
    run_command(
      [
        sys.executable,
        "-c",
        _APP_FLAGS,
        json.dumps({app: prefixes.get(app, "") for app in apps}),
      ]
    ).stdout.splitlines()[-1]
  )
  assert len(found) == 10
  # benchmarks/harness/cli.py's own flags:
  shared = {"output", "section", "device", "repeats"}
  for app, seen in found.items():
    assert seen["flags"] == seen["fields"], app
    assert seen["drifted"] == [], app
  # Every flag that run_all passes is one its app defines (or cli's).
  for benchmark in run_all.BENCHMARKS:
    app = benchmark.module.removeprefix("benchmarks.")
    for flag in (*benchmark.flags, *benchmark.quick_flags):
      name = flag[2:].split("=")[0]
      known = {*found[app]["flags"], *shared}
      assert name in known or name.removeprefix("no") in known, (app, flag)


@pytest.mark.processes
def test_the_sections_share_the_runs_budget_in_proportion_to_their_plans(
  tmp_path,
):
  """Two standard sections planned 1:3 share a 300 s run: the first gets a
  quarter of what is left, the second all that the first left (less the
  margin to its timeout)
  (before, each took a share of its own timeout, and the last section of a
  standard run here got 1 s and timed out). The sections are stand-ins
  (tests/bench_stub.py): the first takes 8 s, which the second's share
  must leave out."""
  sections = [
    run_all.Benchmark(
      name, "tests.bench_stub", flags, timeout_secs=900, planned_secs=planned
    )
    for name, flags, planned in (
      ("input_pipeline", ("--sleep=8",), 1),
      ("scaling", (), 3),
    )
  ]
  run_dir, report = run_all.run(
    results_dir=str(tmp_path), budget_secs=300, benchmarks=sections
  )
  assert run_all.broken_sections(report) == []

  def budget(name):
    with open(os.path.join(run_dir, "logs", f"{name}.log")) as f:
      command = f.readline()
    return float(re.search(r"--time_budget_secs=(\d+)", command).group(1))

  left = 300 - run_all._REPORT_RESERVE_SECS  # pylint: disable=protected-access
  start_up = run_all._START_UP_SECS  # pylint: disable=protected-access
  assert budget("input_pipeline") == pytest.approx(left / 4 - start_up, abs=1)
  first_took = report["sections"]["input_pipeline"]["seconds"]
  assert first_took >= 8
  # All that is left, less the margin kept to its timeout (what is left).
  share = run_all._BUDGET_SHARE  # pylint: disable=protected-access
  assert budget("scaling") == pytest.approx(
    share * (left - first_took) - start_up, abs=2
  )
