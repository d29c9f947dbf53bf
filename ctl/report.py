"""ctl-report: where a job's time went, as a table and a timeline picture.

  ctl-report runs/quickstart              # or python -m ctl.report ...
  ctl-report gs://bucket/run --png=run.png

reads the run ledger (`<MODEL_DIR>/ledger`, see ctl.telemetry.ledger) of a finished or
running job, prints the goodput accounting (ctl.telemetry.goodput), each start of
the job and its way to its first step by phase (where a restart's seconds
go), which flags changed between starts (each start's flagfile is
`<MODEL_DIR>/ledger/<attempt>.flags`), and draws the timeline: one row per start, colored by category,
failures marked. The picture goes to `<MODEL_DIR>/goodput_timeline.png`
(for gs:// directories, `goodput_timeline.png` here) unless --png names the
file (a directory is refused); it needs matplotlib
(`pip install 'ctl-train-loop[report]'`).
"""

import argparse
from collections.abc import Sequence
import os
import signal
import sys

from ctl import errors
from ctl.errors import USER_ERROR_EXIT_CODE
from ctl.io import storage
from ctl.telemetry import goodput
from ctl.telemetry import ledger_reader
from ctl.telemetry import restart_phases
from ctl.telemetry import spot_cost

PNG_NAME = "goodput_timeline.png"

_LABELS = {
  goodput.GOODPUT: "training (goodput)",
  goodput.STARTUP: "start-up (imports, build)",
  goodput.RESTORE: "restore",
  goodput.TRACING: "first-loop tracing",
  goodput.CHECKPOINT_SAVE: "checkpoint save",
  goodput.CHECKPOINT_UPLOAD: "checkpoint upload",
  goodput.EVALUATION: "evaluation",
  goodput.ACTIONS: "loop actions",
  goodput.EXPORT: "export",
  goodput.LOST: "progress lost (redone later)",
  goodput.RESTART_GAP: "restart gap (no process)",
  goodput.OTHER: "other (logging, bookkeeping)",
}
_COLORS = {
  goodput.GOODPUT: "#2ca02c",
  goodput.STARTUP: "#1f77b4",
  goodput.RESTORE: "#aec7e8",
  goodput.TRACING: "#9467bd",
  goodput.CHECKPOINT_SAVE: "#ff7f0e",
  goodput.CHECKPOINT_UPLOAD: "#e6c229",
  goodput.EVALUATION: "#17becf",
  goodput.ACTIONS: "#bcbd22",
  goodput.EXPORT: "#8c564b",
  goodput.LOST: "#d62728",
  goodput.RESTART_GAP: "#bbbbbb",
  goodput.OTHER: "#e0e0e0",
}


def table(accounting: goodput.Accounting) -> str:
  """The accounting as plain-text tables: categories, then attempts."""
  total = accounting.total_seconds
  lines = [
    f"Goodput {accounting.goodput_percent:.1f}% of {total:.1f} s wall "
    f"time; {len(accounting.attempts)} start(s), "
    f"{accounting.failures} failure(s), {accounting.lost_steps} "
    f"step(s) trained twice; final step {accounting.final_step}.",
    *accounting.notes,
    "",
    f"{'category':<36} {'seconds':>9} {'share':>7}",
  ]
  for category in goodput.CATEGORIES:
    seconds = accounting.seconds[category]
    share = 100.0 * seconds / total if total else 0.0
    lines.append(f"{_LABELS[category]:<36} {seconds:>9.2f} {share:>6.1f}%")
  lines.append(
    f"{'total':<36} {sum(accounting.seconds.values()):>9.2f} {100.0:>6.1f}%"
  )
  lines += ["", *_badput_table(accounting), ""]
  lines += [
    f"{'start':>5} {'at s':>8} {'seconds':>8} {'restored':>8} "
    f"{'last step':>9} {'lost':>5}  outcome",
  ]
  origin = accounting.attempts[0].start
  for a in accounting.attempts:
    restored = "-" if a.restored_step is None else str(a.restored_step)
    lines.append(
      f"{a.index + 1:>5} {a.start - origin:>8.1f} "
      f"{a.end - a.start:>8.1f} {restored:>8} {a.last_step:>9} "
      f"{a.lost_steps:>5}  {a.outcome}"
      + (f" (restored from the {a.restored_from})" if a.restored_from else "")
    )
  lines += ["", *restart_table(accounting)]
  return "\n".join(lines)


def restart_table(accounting: goodput.Accounting) -> list[str]:
  """Each start's way to its first step, by phase (restart_phases):
  where a restart's seconds go, for every attempt."""
  heads = {
    "gap": "gap",
    "imports": "imports",
    "build": "build",
    goodput.RESTORE: "restore",
    "before_loop": "pre-loop",
    goodput.TRACING: "tracing",
    goodput.LOST: "lost",
  }
  lines = [
    "Seconds from the failure before each start to its first step:",
    f"{'start':>5} "
    + " ".join(f"{heads[p]:>8}" for p in restart_phases.RESTART_PHASES)
    + f" {'total':>8}",
  ]
  for a, row in zip(
    accounting.attempts, restart_phases.restart_phases(accounting)
  ):
    lines.append(
      f"{a.index + 1:>5} "
      + " ".join(f"{row[p]:>8.2f}" for p in restart_phases.RESTART_PHASES)
      + f" {sum(row.values()):>8.2f}"
    )
  return lines


def last_evaluation(attempts: Sequence[Sequence[dict]]) -> str | None:
  """The last evaluation the ledger recorded, as one line with every
  metric by name (the loss first), or None."""
  events = [e for a in attempts for e in a if e.get("event") == "evaluated"]
  if not events:
    return None
  last = events[-1]
  metrics = dict(last["metrics"])
  examples = metrics.pop("examples", None)
  values = {"loss": metrics.pop("loss", None), **metrics}
  shown = ", ".join(f"{k} {v:.4f}" for k, v in values.items() if v is not None)
  return f"Last evaluation: step {last['step']}: {shown} ({examples} examples)."


def flag_changes(attempts: Sequence[Sequence[dict]]) -> list[str]:
  """What changed in how the run was started, attempt by attempt: each
  start's flags (`RunOptions.start_flags`, in its start event) against the
  last start before it that recorded some; [] when none changed."""
  lines, before = [], None
  for number, attempt in enumerate(attempts, start=1):
    flags = attempt[0].get("flags") if attempt else None
    if flags is None:
      continue
    now = dict(_flag_value(f) for f in flags)
    if before is not None:
      changed = [
        f"--{name}: {_shown(before.get(name))} -> {_shown(now.get(name))}"
        for name in sorted(before.keys() | now.keys())
        if before.get(name) != now.get(name)
      ]
      if changed:
        lines.append(f"  start {number}: " + "; ".join(changed))
    before = now
  return ["Flags changed between starts:", *lines] if lines else []


def _flag_value(line: str) -> tuple[str, str]:
  """("name", "value") of a flagfile line: `--name=value`, `--name` (true)
  or `--noname` (false, for a switch)."""
  name, equals, value = line.removeprefix("--").partition("=")
  if equals:
    return name, value
  if name.startswith("no"):
    return name[2:], "false"
  return name, "true"


def _shown(value: str | None) -> str:
  return "(unset)" if value is None else repr(value)


def timeline(
  accounting: goodput.Accounting, path: str, *, title: str = ""
) -> None:
  """Draws one row per start of the job, colored by category, into `path`."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top

  attempts = accounting.attempts
  figure, axes = pyplot.subplots(
    figsize=(11, 1.6 + 0.75 * len(attempts)), layout="constrained"
  )
  _draw_rows(axes, accounting)
  _draw_legend(axes, accounting)
  axes.set_title(
    title
    or (
      f"Goodput {accounting.goodput_percent:.1f}% of "
      f"{accounting.total_seconds:.1f} s; {accounting.failures} failure(s), "
      f"{accounting.lost_steps} step(s) trained twice"
    )
  )
  figure.savefig(path, dpi=110, format="png")  # The name as given.
  pyplot.close(figure)


def _draw_rows(axes, accounting: goodput.Accounting) -> None:
  """One bar per start: its segments, how it ended, the steps it redid."""
  attempts = accounting.attempts
  origin = attempts[0].start
  for segment in accounting.segments:
    row = len(attempts) - 1 - segment.attempt
    axes.broken_barh(
      [(segment.start - origin, segment.end - segment.start)],
      (row - 0.35, 0.7),
      facecolors=_COLORS[segment.category],
      edgecolor="none",
      hatch="//" if segment.category == goodput.RESTART_GAP else None,
    )
  for a in attempts:
    row = len(attempts) - 1 - a.index
    if a.failed:
      axes.plot(
        a.end - origin, row, marker="X", markersize=13, color="black", zorder=3
      )
    note = a.outcome + (
      f", {a.lost_steps} steps redone" if a.lost_steps else ""
    )
    axes.annotate(
      note,
      (a.end - origin, row),
      xytext=(12, 0),
      textcoords="offset points",
      va="center",
      fontsize=9,
    )
  axes.set_yticks(range(len(attempts)))
  axes.set_yticklabels(
    [
      f"start {a.index + 1}\n(from step {a.restored_step})"
      if a.restored_step is not None
      else f"start {a.index + 1}"
      for a in reversed(attempts)
    ]
  )
  axes.set_ylim(-0.7, len(attempts) - 0.3)
  span = max((s.end for s in accounting.segments), default=origin) - origin
  axes.set_xlim(0, max(span, 1.0) * 1.3)
  axes.set_xlabel("seconds since the job's first process started")
  axes.grid(axis="x", alpha=0.3)


def _draw_legend(axes, accounting: goodput.Accounting) -> None:
  """The categories that occur, with their seconds, and the failure mark."""
  from matplotlib import lines  # pylint: disable=g-import-not-at-top
  from matplotlib import patches  # pylint: disable=g-import-not-at-top

  handles = [
    patches.Patch(
      facecolor=_COLORS[c],
      hatch="//" if c == goodput.RESTART_GAP else None,
      label=f"{_LABELS[c]}: {accounting.seconds[c]:.1f} s",
    )
    for c in goodput.CATEGORIES
    if accounting.seconds[c] > 0
  ]
  if accounting.failures:
    handles.append(
      lines.Line2D(
        [],
        [],
        marker="X",
        color="black",
        linestyle="none",
        markersize=9,
        label="failure",
      )
    )
  axes.legend(
    handles=handles,
    loc="upper left",
    bbox_to_anchor=(1.01, 1.0),
    fontsize=9,
    frameon=False,
  )


def _badput_table(accounting: goodput.Accounting) -> list[str]:
  """The badput again, by the BadputType of Google's ml-goodput-measurement."""
  total = accounting.total_seconds
  lines = [
    f"{'ml-goodput-measurement BadputType':<40} {'seconds':>9} {'share':>7}"
    "  ours"
  ]
  for badput_type, seconds in goodput.badput(accounting.seconds).items():
    share = 100.0 * seconds / total if total else 0.0
    ours = ", ".join(
      c for c, t in goodput.BADPUT_TYPES.items() if t == badput_type
    )
    lines.append(f"{badput_type:<40} {seconds:>9.2f} {share:>6.1f}%  {ours}")
  return lines


def main(argv: Sequence[str] | None = None) -> None:
  """Entry point of `ctl-report` and `python -m ctl.report`; exits.

  A reader that stops reading (`ctl-report DIR | head`) ends the report
  quietly with 141 (128 + SIGPIPE), as a tool killed by SIGPIPE does; a
  `UserError` is one `error: ...` line, exit 2.
  """
  try:
    _report(argv)
    sys.stdout.flush()
  except errors.UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(USER_ERROR_EXIT_CODE)
  except BrokenPipeError:
    # Python would flush stdout again at exit and fail the same way.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(128 + signal.SIGPIPE)


def _parser() -> errors.ArgumentParser:
  """`ctl-report`'s command line."""
  parser = errors.ArgumentParser(
    prog="ctl-report",
    description="Where a ctl job's wall time went (its run ledger).",
  )
  parser.add_argument(
    "model_dir", help="The run's --model_dir (local or gs://)."
  )
  parser.add_argument(
    "--png",
    default=None,
    help="The file to write the "
    f"timeline to, not a directory (default: <model_dir>/{PNG_NAME}; for "
    f"gs:// ./{PNG_NAME}); empty for none.",
  )
  parser.add_argument(
    "--spot_price",
    type=float,
    default=None,
    help="A Spot VM's price per hour: with --on_demand_price, prints what "
    "Spot is worth for this run (ctl.telemetry.spot_cost).",
  )
  parser.add_argument(
    "--on_demand_price",
    type=float,
    default=None,
    help="An on-demand VM's price per hour, in the same currency.",
  )
  return parser


def _checked_args(argv: Sequence[str] | None) -> argparse.Namespace:
  """`argv` parsed; a mistake in it is one sentence and exit 2, before
  anything is read."""
  parser = _parser()
  args = parser.parse_args(sys.argv[1:] if argv is None else argv)
  if (args.spot_price is None) != (args.on_demand_price is None) or any(
    price is not None and not price > 0
    for price in (args.spot_price, args.on_demand_price)
  ):
    parser.error("--spot_price and --on_demand_price go together, each > 0.")
  if args.png and os.path.isdir(args.png):
    parser.error(
      f"--png={args.png} is a directory; give the picture's file name, "
      f"such as {os.path.join(args.png, PNG_NAME)}"
    )
  if args.png and not os.path.isdir(os.path.dirname(args.png) or "."):
    parser.error(
      f"--png={args.png}: no directory {os.path.dirname(args.png)} to write "
      "it in; make it or name a file in another"
    )
  if args.png:
    try:
      storage.check_writable(os.path.dirname(args.png) or ".")
    except errors.UserError as e:
      parser.error(f"--png={args.png}: {str(e).rstrip('.')}")
  return args


def _check_reached(model_dir: str) -> None:
  """Offline, gcsfs would retry for about 50 s (for ever where a server
  never replies) before the report said anything: the trainer's check of
  the host name first, then one request given `storage.ANSWER_SECS`.

  Raises:
    UserError: the host name does not resolve, or no answer came.
  """
  storage.check_reachable(model_dir)
  try:
    storage.check_answers(model_dir)
  except OSError as e:
    why = (
      "" if isinstance(e, TimeoutError) else f" ({errors.error_sentence(e)})"
    )
    raise errors.UserError(
      f"Cloud Storage did not answer within {storage.ANSWER_SECS:g} s for "
      f"{model_dir}{why.rstrip('.')}; check the network, then run again."
    ) from None


def _report(argv: Sequence[str] | None) -> None:
  """Prints the accounting of the run named in `argv`; draws its timeline."""
  args = _checked_args(argv)
  _check_reached(args.model_dir)
  directory = ledger_reader.ledger_dir(args.model_dir)
  try:
    attempts = ledger_reader.read(directory)
  except OSError as e:
    attempts, reason = [], f" ({e})"
  else:
    reason = ""
  if not attempts:
    print(
      f"error: no run ledger in {directory}{reason}; pass the "
      f"--model_dir of a run made with ctl.",
      file=sys.stderr,
    )
    sys.exit(USER_ERROR_EXIT_CODE)
  accounting = goodput.account(attempts)
  print(table(accounting))
  evaluated = last_evaluation(attempts)
  if evaluated:
    print(f"\n{evaluated}")
  changes = flag_changes(attempts)
  if changes:
    print("\n" + "\n".join(changes))
  if args.spot_price is not None:
    costs = spot_cost.run_costs(accounting)
    print(
      "\n"
      + spot_cost.table(
        costs,
        spot_price=args.spot_price,
        on_demand_price=args.on_demand_price,
      )
    )
  png = args.png
  if png is None:
    png = (
      PNG_NAME
      if args.model_dir.startswith("gs://")
      else os.path.join(args.model_dir, PNG_NAME)
    )
  if png:
    _write_timeline(accounting, png, named=args.png is not None)


def _write_timeline(accounting, png: str, *, named: bool) -> None:
  """Draws the timeline to `png` and says where, or why there is none.

  A picture the user did not name (the default, in the run directory) that
  cannot be written is a note after the report, which stands; one named with
  --png is an error (exit 74).
  """
  try:
    timeline(accounting, png)
  except ImportError:
    print(
      "\nNo timeline: matplotlib is not installed (pip install 'ctl-train-loop[report]')."
    )
  except OSError as e:
    reason = e.strerror or type(e).__name__
    if named:
      print(f"error: cannot write {png} ({reason}).", file=sys.stderr)
      sys.exit(errors.CANNOT_WRITE_EXIT_CODE)
    print(
      f"\nNo timeline: cannot write {png} ({reason}); name another "
      "file with --png=FILE."
    )
  else:
    print(f"\nTimeline: {png}")


if __name__ == "__main__":
  main()
