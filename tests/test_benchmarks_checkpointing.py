"""The checkpointing benchmark on tiny settings: every field, and its sums.

It runs the app as `run_all` does (a process writing its sections to
`--output`), with small_cnn instead of ResNet50 and a few steps, against the
real emulator it starts itself. No speed is asserted: only that every number
the report shows is there and is what the measured numbers say.
"""

import statistics
import sys

import pytest

from benchmarks import run_all
from benchmarks.harness import report as report_lib
from trainer.testing import run_command

STEPS = 20  # Per round; the first round starts fresh, the second resumes.
VARIANTS = ("none", "gcsfs_async")
TINY = (
  "--io_model=small_cnn",
  "--io_image_size=16",
  f"--cost_train_steps={STEPS}",
  "--cost_checkpoint_every=10",
  "--cost_steps_per_loop=5",
  "--repeats=2",
  f"--cost_variants={','.join(VARIANTS)}",
)


def _close(actual, expected):
  return actual == pytest.approx(expected, rel=1e-9, abs=1e-12)


def _check_spread(row, key, values):
  """row[key] and its _min/_max are the median, min and max of `values`."""
  assert values, key
  assert _close(row[key], statistics.median(values)), key
  assert _close(row[f"{key}_min"], min(values)), key
  assert _close(row[f"{key}_max"], max(values)), key


def _check_ratio(ratio, numerator, denominator):
  """A ratio is summarised from the per-round ratios of the two rows."""
  assert _close(
    ratio["per_round"], [n / d for n, d in zip(numerator, denominator)]
  )
  assert _close(ratio["median"], statistics.median(ratio["per_round"]))
  assert _close(ratio["min"], min(ratio["per_round"]))
  assert _close(ratio["max"], max(ratio["per_round"]))


@pytest.fixture(scope="module")
def sections(tmp_path_factory):
  output = tmp_path_factory.mktemp("bench") / "checkpointing.json"
  run_command(
    [
      sys.executable,
      "-m",
      "benchmarks.recovery.checkpointing",
      f"--output={output}",
      "--section=ckpt",
      *TINY,
    ]
  )
  return report_lib.read_sections(str(output))


def test_it_is_in_the_standard_run():
  (entry,) = [
    b
    for b in run_all.BENCHMARKS
    if b.module == "benchmarks.recovery.checkpointing"
  ]
  assert entry.section == "checkpointing"
  assert "--io_model=resnet50" in entry.flags
  assert "--io_model=small_cnn" in entry.quick_flags


@pytest.mark.processes
def test_sections_are_named_after_the_section_flag(sections):
  assert list(sections) == ["ckpt", "ckpt_training"]
  for body in sections.values():
    assert body["status"] == "ok"
    assert body["notes"] and body["config"]
    assert body["chart_key"] in body["columns"]
    for column in body["columns"]:  # Rows without one are checked below.
      assert any(column in row for row in body["rows"]), column


@pytest.mark.processes
def test_checkpoint_io_numbers_come_from_the_rounds(sections):
  body = sections["ckpt"]
  assert body["config"]["model"] == "small_cnn"
  size = body["config"]["checkpoint_megabytes"]
  assert size > 0
  rows = {row["name"]: row for row in body["rows"]}
  assert sorted(rows) == sorted(
    [
      "save, local disk",
      "save, gs:// (gcsfs)",
      "restore, local disk",
      "restore, gs:// (gcsfs)",
    ]
  )
  for name, row in rows.items():
    rounds = row["seconds_per_round"]
    assert len(rounds) == 2 and all(s > 0 for s in rounds)
    _check_spread(row, "seconds", rounds)
    assert _close(row["megabytes_per_second"], size / row["seconds"])
    if "gs://" in name:
      transfer = row["transfer_seconds_per_round"]
      _check_spread(row, "transfer_seconds", transfer)
      # Uploading or downloading is part of the whole save or restore.
      assert all(t <= s for t, s in zip(transfer, rounds))
    else:
      assert "transfer_seconds" not in row
  assert len(body["ratios"]) == 2
  for ratio in body["ratios"]:
    _check_ratio(
      ratio,
      rows[ratio["numerator"]]["seconds_per_round"],
      rows[ratio["denominator"]]["seconds_per_round"],
    )


@pytest.mark.processes
def test_training_numbers_come_from_the_runs(sections):
  body = sections["ckpt_training"]
  rows = body["rows"]
  assert [row["name"] for row in rows] == [
    "no checkpoints",
    "async, gs:// (gcsfs)",
  ]
  baseline = rows[0]["examples_per_second_per_round"]
  for row in rows:
    rates = row["examples_per_second_per_round"]
    assert len(rates) == 2 and all(r > 0 for r in rates)
    _check_spread(row, "examples_per_second", rates)
    # Round 0 starts fresh; round 1 resumes where round 0 ended.
    assert row["restored_steps"] == [None, STEPS]
    assert row["seconds_to_first_step_fresh"] > 0
    resumed = row["seconds_to_first_step_resumed_per_round"]
    _check_spread(row, "seconds_to_first_step_resumed", resumed)
    restore = row["seconds_to_restore_per_round"]
    assert all(0 < r < f for r, f in zip(restore, resumed))
    assert row["save_count"] == len(row["save_seconds_all"])
    if row["save_count"]:
      _check_spread(row, "save_seconds", row["save_seconds_all"])
    else:
      assert "save_seconds" not in row
    if row is not rows[0]:
      _check_spread(
        row,
        "throughput_cost_percent",
        [100 * (1 - r / b) for r, b in zip(rates, baseline)],
      )
  # One save inside each round's window (at step 10, then at 30).
  assert [row["save_count"] for row in rows] == [0, 2]
  assert "throughput_cost_percent" not in rows[0]

  by_name = {row["name"]: row for row in rows}
  assert [(r["numerator"], r["denominator"]) for r in body["ratios"]] == [
    ("async, gs:// (gcsfs)", "no checkpoints")
  ]
  for ratio in body["ratios"]:
    _check_ratio(
      ratio,
      by_name[ratio["numerator"]]["examples_per_second_per_round"],
      by_name[ratio["denominator"]]["examples_per_second_per_round"],
    )
