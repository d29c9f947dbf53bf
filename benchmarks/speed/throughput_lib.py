"""Training throughput: our engine against a bare step and Keras `model.fit`.

Every variant trains the same model on the same in-memory synthetic batch
under the same one-device strategy. Each is warmed up (traced, compiled, run
once), then the variants are timed INTERLEAVED in rounds, each over the same
number of images per round, so machine noise hits all of them alike; each
round starts one step further along the list (A B C, B C A, C A B, ...) so
that no variant always runs first.
The report gives images/s per variant (median and min-max over rounds), the
ratios between variants (median of the per-round ratios, min-max), model
FLOPs utilisation against the device's measured matmul rate, and a verdict
(PASS, MISS or UNDECIDED, `stats.verdict`) for each target given. Under a
time budget, rounds are added while a target is UNDECIDED and one more fits
(`_one_more`), and a round that other processes disturbed is timed again
(`_disturbed`). The app is `benchmarks/speed/throughput.py`.
"""

from collections.abc import Callable
import dataclasses
import os
import time

from absl import logging
import tensorflow as tf

from benchmarks.harness import budget as budget_lib
from benchmarks.harness import device as device_lib
from benchmarks.harness import machine
from benchmarks.harness import report as report_lib
from benchmarks.harness import settings
from benchmarks.harness import stats
from benchmarks.speed import peak_lib
from benchmarks.workloads import flops as flops_lib
from benchmarks.workloads import runners
from benchmarks.workloads import variants as variants_lib
from ctl.errors import UserError

DEFAULT_VARIANTS = ("engine:1", "engine:N", "bare", "fit:1")
DEFAULT_RATIOS = (
  "engine:N/bare",
  "engine:N/fit:1",
  "engine:1/bare",
  "engine:1/fit:1",
  "engine:N/engine:1",
  "engine:N/bare:N",
  "engine:N+noacc/bare:N+noacc",
  "engine:1+noacc/bare+noacc",
  "fit:N/fit:1",
  "bare/fit:1",
  "engine:N+bf16/engine:N",
  "engine:N+fp16/engine:N",
  "engine:N+xla/engine:N",
  "engine:N+xla/fit:1+xla",
)
# Rounds added to settle an UNDECIDED target stop at this many times the
# planned ones (`_one_more`).
_MAX_ROUNDS_FACTOR = 2
# What --extras=auto adds, if the device supports the precision.
_AUTO_EXTRAS = {
  "cpu": ("engine:N+bf16", "engine:N+fp16", "engine:N+xla"),
  "gpu": ("engine:N+fp16", "engine:N+bf16", "engine:N+xla", "fit:1+xla"),
}


@dataclasses.dataclass(frozen=True)
class Config(settings.Rounds):
  """One throughput run; its `settings.flag` fields are the app's flags."""

  model: str = settings.flag(
    "resnet50",
    "The trainer's model to train.",
    choices=("resnet50", "small_cnn"),
  )
  image_size: int = settings.flag(224, "Side of the square input images.")
  batch_size: int = settings.flag(16, "Global batch size (one device).")
  steps: int = settings.flag(
    3,
    "Timed steps per variant per round; a "
    "multiple of every variant's steps per call.",
  )
  steps_per_loop: int = settings.flag(
    3, "N in the variant specs: steps per engine call / per fit execution."
  )
  slices: int = settings.flag(
    1,
    "Each round times every variant's steps in this many interleaved "
    "slices (whole calls each), so the variants of a ratio share the "
    "machine's moments; more suits steps of a few milliseconds.",
  )
  precision: str = settings.flag(
    "none",
    "Precision of the variants that name none.",
    choices=device_lib.PRECISIONS,
  )
  xla: bool = settings.flag(False, "Compile every variant's step with XLA.")
  variants: tuple[str, ...] = settings.flag(
    DEFAULT_VARIANTS,
    "Variant specs (see benchmarks/workloads/variants.py); the first is the main one.",
  )
  extras: tuple[str, ...] = settings.flag(
    ("auto",),
    "More variants: 'auto' adds the "
    "mixed-precision and XLA ones the device supports; 'none'.",
  )
  ratios: tuple[str, ...] = settings.flag(
    DEFAULT_RATIOS,
    "Ratios to "
    "report (numerator/denominator); those with a variant that "
    "did not run are left out.",
  )
  targets: tuple[str, ...] = settings.flag(
    (),
    "Targets numerator/denominator>=threshold, stated as PASS, MISS or "
    "UNDECIDED.",
  )
  optimizer: str = settings.flag(
    "adam",
    "As the trainer's --optimizer (default adam).",
    choices=("adam", "sgd"),
  )
  measure_peak: bool = settings.flag(
    True, "Measure the matmul peak and report MFU (adds a 'limits' section)."
  )
  peak_size: int = peak_lib.size_flag()  # The matmul peak's (`peak_lib`).
  peak_chain: int = peak_lib.chain_flag()
  device: str = "auto"
  title: str = settings.flag("", "Section title; empty describes the run.")
  section: str = "throughput"


def run(config: Config, progress: Callable[[dict], None] | None = None) -> dict:
  """Runs the benchmark; returns {section: body} (plus "limits" with MFU).

  Args:
    config: what to run.
    progress: called with the sections so far after every round (status
      "partial", then "ok" after the last), so a run stopped at a time
      limit keeps its rounds, and the final results are out before the
      models and traced functions are freed when this returns (which took
      5 to 60 s of CPU on a 2-core machine).

  With `config.time_budget_secs`, the rounds after the first are cut to
  those that fit it at the first round's pace (never below 1; steps are not
  cut: the standard runs time one call of the longest variant, the least
  that measures it).

  Returns:
    {config.section: body}, plus {"limits": body} when the peak is measured.

  Raises:
    UserError: a bad spec or sizes that do not fit together.
    RuntimeError: every variant failed to build or warm up.
  """
  if min(config.repeats, config.steps, config.slices) < 1:
    raise UserError(
      "repeats, steps and slices must be >= 1, got "
      f"{config.repeats}, {config.steps} and {config.slices}."
    )
  budget = budget_lib.Budget(config.time_budget_secs)
  device = device_lib.resolve(config.device)
  defaults = dict(
    steps_per_loop=config.steps_per_loop,
    precision=config.precision,
    xla=config.xla,
  )
  notes = []
  chosen = _choose_variants(config, device, defaults, notes)
  setup = _Setup(config, device, chosen, notes)
  meters = _peak_meters(config, device, setup.groups)
  return _rounds(
    config, device, defaults, setup, meters, notes, budget, progress
  )


def _rounds(
  config, device, defaults, setup, meters, notes, budget, progress
) -> dict:
  """Times the rounds (cut to `budget` after the first, which counts the
  set-up too, or added to while a target is UNDECIDED and a round fits, see
  `_one_more`); the sections after the last, each round's to `progress`."""
  seconds = {variant: [] for variant in setup.runners}
  peak_rates = {precision: [] for precision in meters}
  rounds, round_index, retimed, disturbed = config.repeats, 0, 0, []
  while round_index < rounds:
    start, before = time.perf_counter(), machine.snapshot()
    took_by_variant, rates_now = _time_round(config, setup, meters, round_index)
    took = time.perf_counter() - start
    why = _disturbed(before, budget)
    if why and retimed < config.repeats and budget.fits(took):
      retimed += 1
      notes.append(f"Round {round_index + 1} timed again: {why} while it ran.")
      continue
    if why:
      disturbed.append(f"round {round_index + 1} ({why})")
    for variant, secs in took_by_variant.items():
      seconds[variant].append(secs)
    for precision, rate in rates_now.items():
      peak_rates[precision].append(rate)
    if round_index == 0:
      rounds = budget.rounds(took, config.repeats)
    round_index += 1
    if round_index == rounds and _one_more(
      config, defaults, seconds, budget, took
    ):
      rounds += 1
    peaks = {
      precision: meters[precision].row(rates)
      for precision, rates in peak_rates.items()
    }
    logging.info("round %d of %d done", round_index, rounds)
    sections = _sections(
      config,
      device,
      defaults,
      setup,
      peaks,
      seconds,
      notes,
      budget,
      status="ok" if round_index == rounds else "partial",
    )
    sections = _undecided_if(disturbed, sections)
    if progress:
      progress(sections)
  return sections


def _disturbed(before: machine.Snapshot, budget) -> str | None:
  """Why the round since `before` was disturbed by other processes (their
  CPU, or the hypervisor's steal, over `machine`'s limits), or None.

  Judged under a budget only (run_all's: by hand the rounds are exactly
  --repeats, as for `_one_more`). The section's own average, which
  run_all judges, misses a burst: ten seconds of a test run slowed one
  ResNet50 round's engine step by 40% while the section, 325 s, stayed
  under a quarter of a core (docs/benchmarks.md).
  """
  if not budget.secs:
    return None
  state = machine.state(before, machine.snapshot(), session=os.getsid(0))
  return "; ".join(machine.busy_reasons(state)) or None


def _undecided_if(disturbed: list[str], sections: dict) -> dict:
  """`sections` with every target UNDECIDED when a kept round was
  `disturbed` (no time was left to time it again), and a note naming it."""
  if not disturbed:
    return sections
  reason = "disturbed by other processes: " + ", ".join(disturbed)
  return {
    name: dict(
      body,
      targets=[stats.undecided(t, reason) for t in body.get("targets", [])],
      notes=[
        *body.get("notes", []),
        f"Kept, though {reason}: nothing decided.",
      ],
    )
    for name, body in sections.items()
  }


def _one_more(config, defaults, seconds, budget, round_secs) -> bool:
  """Whether to add a round after the planned ones: only under a budget
  (run_all's; by hand exactly --repeats run), while a target is UNDECIDED
  because its interval straddles the threshold, another round of
  `round_secs` fits the budget, and fewer than _MAX_ROUNDS_FACTOR x the
  planned rounds have run (so the whole `make bench` keeps its 20 minutes).
  """
  done = len(next(iter(seconds.values())))
  if not budget.secs or done >= _MAX_ROUNDS_FACTOR * config.repeats:
    return False
  targets = _targets(config.targets, defaults, _rates(config, seconds), [])
  if stats.settled(targets) or not budget.fits(round_secs):
    return False
  budget.record("rounds", done + 1, config.repeats, "")
  return True


def _peak_meters(config, device, groups) -> dict:
  """{precision: its matmul-peak meter} for each model group's precision,
  or {} when the peak is not measured."""
  if not config.measure_peak:
    return {}
  return {
    precision: peak_lib.MatmulMeter(
      device=device,
      precision=precision,
      size=config.peak_size,
      chain=config.peak_chain,
    )
    for precision in groups
  }


def _time_round(config, setup, meters, round_index) -> tuple[dict, dict]:
  """Times one round: each variant's `config.steps` in `config.slices`
  slices, the variants interleaved in the round's rotated order, then each
  peak meter once; returns ({variant: seconds}, {precision: peak rate}).

  Slicing matters where a step takes milliseconds: a burst of another
  process's work then lands on every variant of a slice alike, not on the
  one variant that ran its whole round during it.
  """
  order = _rotated(list(setup.runners), round_index, config.repeats)
  took = dict.fromkeys(order, 0.0)
  for piece in range(config.slices):
    for variant in order:
      steps = _slice_steps(variant.steps_per_call, config, piece)
      if steps:
        took[variant] += setup.runners[variant].run(steps)
  # The peak is one more variant.
  return took, {precision: meter.rate() for precision, meter in meters.items()}


def _slice_steps(steps_per_call: int, config, piece: int) -> int:
  """The steps of slice `piece` for a variant of `steps_per_call`: its
  round's calls spread evenly over the slices (a variant of fewer calls
  than slices runs in some of them only)."""
  calls = config.steps // steps_per_call
  first = piece * calls // config.slices
  last = (piece + 1) * calls // config.slices
  return (last - first) * steps_per_call


def _rotated(order: list, round_index: int, rounds: int) -> list:
  """The round's order: A B C, then B C A, then C A B, ...

  Each round starts further along, so whatever slows the start of a round
  (the matmul-peak measurement before it, say) is not always charged to the
  same variant, and no variant always runs behind the same neighbour.
  """
  start = round_index * len(order) // max(rounds, 1)
  return order[start:] + order[:start]


class _Setup:
  """Models, runners and first-call times of the chosen variants.

  A variant that fails to build or warm up (an op XLA cannot compile, say)
  is left out with a note rather than costing the others.
  """

  def __init__(self, config, device, chosen, notes):
    self._config = config
    self._chosen = chosen
    self._strategy = tf.distribute.OneDeviceStrategy(device.name)
    self._dataset, self._num_classes = runners.synthetic_batch(
      image_size=config.image_size, batch_size=config.batch_size
    )
    self.groups, self.runners, self.first_call = {}, {}, {}
    self._loops = {}
    for variant in chosen:
      try:
        runner = self._runner(variant)
        start = time.perf_counter()
        runner.run(runner.warmup_steps)
        self.first_call[variant] = time.perf_counter() - start
        self.runners[variant] = runner
        logging.info(
          "%s: first call %.1f s", variant.name, self.first_call[variant]
        )
      except Exception as e:  # pylint: disable=broad-except
        logging.exception("%s failed", variant.name)
        notes.append(
          f"{variant.name} failed and was left out: "
          f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        )
    if not self.runners:
      raise RuntimeError("Every variant failed: " + " ".join(notes))
    self.train_flops = flops_lib.training_flops_per_example(
      next(iter(self.groups.values())).model
    )

  def _group(self, precision: str) -> runners.ModelGroup:
    """The model group of `precision`, built by its first variant."""
    if precision not in self.groups:
      self.groups[precision] = runners.build_group(
        strategy=self._strategy,
        model_name=self._config.model,
        image_size=self._config.image_size,
        num_classes=self._num_classes,
        precision=precision,
        optimizer=self._config.optimizer,
      )
    return self.groups[precision]

  def _engine_loop(self, variant):
    """The compiled TrainLoop `variant` shares with the engine variants of
    its `_loop_key`, built for the most steps per call among them.

    A loop of one step is traced without a tf.range loop, as
    TrainLoop(steps_per_loop=1) is for users; longer ones share one.
    """
    key = _loop_key(variant)
    if key not in self._loops:
      self._loops[key] = runners.train_loop(
        strategy=self._strategy,
        group=self._group(variant.precision),
        global_batch_size=self._config.batch_size,
        xla=variant.xla,
        train_accuracy=variant.train_accuracy,
        steps_per_loop=max(
          v.steps_per_call
          for v in self._chosen
          if v.kind == "engine" and _loop_key(v) == key
        ),
      )
    return self._loops[key]

  def _runner(self, variant):
    """A new runner of `variant`'s kind (not warmed up)."""
    if variant.kind == "engine":
      return runners.EngineRunner(
        strategy=self._strategy,
        loop=self._engine_loop(variant),
        dataset=self._dataset,
        steps_per_loop=variant.steps_per_call,
      )
    if variant.kind == "bare":
      return runners.BareRunner(
        strategy=self._strategy,
        group=self._group(variant.precision),
        dataset=self._dataset,
        global_batch_size=self._config.batch_size,
        xla=variant.xla,
        steps_per_loop=variant.steps_per_call,
        train_accuracy=variant.train_accuracy,
      )
    return runners.FitRunner(
      strategy=self._strategy,
      group=self._group(variant.precision),
      dataset=self._dataset,
      steps_per_execution=variant.steps_per_call,
      xla=variant.xla,
    )


def _loop_key(variant) -> tuple:
  """Engine variants with the same key share one compiled TrainLoop."""
  return (
    variant.precision,
    variant.xla,
    variant.train_accuracy,
    variant.steps_per_call == 1,
  )


def _sections(
  config, device, defaults, setup, peaks, seconds, notes, budget, *, status
) -> dict:
  """The report sections from the rounds timed so far."""
  rounds = len(next(iter(seconds.values())))
  images = config.steps * config.batch_size
  rates = _rates(config, seconds)
  rows = _rows(setup, peaks, seconds, rates, images)
  notes = list(notes)
  targets = _targets(config.targets, defaults, rates, notes)
  notes += _overhead_notes(defaults, seconds, config.steps)
  notes += _standard_notes(
    config, device, images, setup.train_flops, list(seconds), rounds
  )
  body = report_lib.section(
    title=config.title
    or (
      f"{config.model} {config.image_size}x"
      f"{config.image_size}, batch {config.batch_size}:"
      " training throughput"
    ),
    rows=rows,
    ratios=_ratios(config.ratios, defaults, rates),
    targets=targets,
    notes=notes,
    status=status,
    columns=[
      "name",
      "images_per_second",
      *(["mfu_percent"] if peaks else []),
      "first_call_seconds",
    ],
    config=_run_config(config, device, setup.train_flops, rounds),
  )
  sections = {config.section: budget.stamp(body)}
  if peaks:
    sections["limits"] = _limits_section(
      peaks, rows, setup.train_flops, config, status
    )
  return sections


def _rates(config, seconds) -> dict:
  """{variant: images/s in each round} from {variant: seconds per round}."""
  images = config.steps * config.batch_size
  return {
    variant: [images / s for s in times] for variant, times in seconds.items()
  }


def _rows(setup, peaks, seconds, rates, images) -> list[dict]:
  """A row per variant; with MFU where its precision's peak is measured."""
  rows = []
  for variant, times in seconds.items():
    row = _row(
      variant, rates[variant], times, images, setup.first_call[variant]
    )
    peak = peaks.get(variant.precision)
    if peak:
      row["mfu_percent"] = (
        100
        * setup.train_flops
        * row["images_per_second"]
        / peak["peak_flops_per_second"]
      )
    rows.append(row)
  return rows


def _run_config(config, device, train_flops, rounds) -> dict:
  """The section's `config`: the settings the numbers were measured at."""
  return {
    "model": config.model,
    "image_size": config.image_size,
    "batch_size": config.batch_size,
    "steps": config.steps,
    "steps_per_loop": config.steps_per_loop,
    "repeats": config.repeats,
    "rounds_done": rounds,
    "precision": config.precision,
    "xla": config.xla,
    "optimizer": config.optimizer,
    "device": device.description,
    "training_flops_per_image": train_flops,
  }


def _choose_variants(config, device, defaults, notes):
  """The variants to run, in order, without duplicates or unsupported ones."""
  specs = list(config.variants)
  for extra in config.extras:
    if extra == "auto":
      specs += _AUTO_EXTRAS[device.kind]
    elif extra != "none":
      specs.append(extra)
  chosen = []
  for spec in specs:
    variant = variants_lib.parse(spec, **defaults)
    if variant in chosen:
      continue
    supported, reason = device.supports(variant.precision)
    if not supported:
      notes.append(f"{variant.name} skipped: {reason}")
      continue
    if config.steps % variant.steps_per_call:
      raise UserError(
        f"--steps={config.steps} must be a multiple of the "
        f"steps per call of {variant.name} "
        f"({variant.steps_per_call})."
      )
    chosen.append(variant)
  return chosen


def _row(variant, rates, times, images, first_call) -> dict:
  return {
    "name": variant.name,
    "kind": variant.kind,
    "steps_per_loop": variant.steps_per_call,
    "precision": variant.precision,
    "xla": variant.xla,
    **stats.spread_fields("images_per_second", rates),
    "images_per_second_per_round": rates,
    "seconds_per_round": times,
    "images_per_round": images,
    "first_call_seconds": first_call,
  }


def _ratio(numerator, denominator, rates) -> dict:
  """The throughput ratio of two variants over the rounds."""
  return stats.ratio(
    name=f"{numerator.name} / {denominator.name}",
    numerator=numerator.name,
    denominator=denominator.name,
    numerator_values=rates[numerator],
    denominator_values=rates[denominator],
  )


def _ratios(specs, defaults, rates) -> list[dict]:
  """The ratios of `specs` whose variants ran, each pair once: with
  steps_per_loop=1, `engine:N/bare`, `engine:1/bare` and `engine:N/bare:N`
  are one ratio."""
  pairs = []
  for spec in specs:
    pair = variants_lib.parse_ratio(spec, **defaults)
    numerator, denominator = pair
    if (
      numerator in rates
      and denominator in rates
      and numerator != denominator
      and pair not in pairs
    ):
      pairs.append(pair)
  return [_ratio(n, d, rates) for n, d in pairs]


def _targets(specs, defaults, rates, notes) -> list[dict]:
  targets = []
  for spec in specs:
    numerator, denominator, threshold = variants_lib.parse_target(
      spec, **defaults
    )
    name = f"{numerator.name} >= {threshold:g}x {denominator.name}"
    missing = [v.name for v in (numerator, denominator) if v not in rates]
    if missing:
      targets.append(stats.not_measured(name=name, threshold=threshold))
      notes.append(
        f"Target {name} was not measured: {', '.join(missing)} did not run."
      )
      continue
    targets.append(
      stats.verdict(
        _ratio(numerator, denominator, rates),
        threshold=threshold,
        name=name,
      )
    )
  return targets


def _overhead_notes(defaults, seconds, steps) -> list[str]:
  """Splits a step's time into in-loop work and per-call host overhead."""
  one = variants_lib.parse("engine:1", **defaults)
  many = variants_lib.parse("engine:N", **defaults)
  if one not in seconds or many not in seconds or one == many:
    return []
  per_step_one = stats.spread(seconds[one])["median"] / steps
  per_step_many = stats.spread(seconds[many])["median"] / steps
  host = per_step_one - per_step_many
  return [
    f"Engine: {_duration(per_step_many)} per step inside the "
    f"compiled loop ({many.name}); {_duration(host, sign=True)} per "
    f"step when the host is called every step ({one.name}). "
    "steps_per_loop can remove only the second part."
  ]


def _duration(seconds: float, sign: bool = False) -> str:
  """0.0042 -> "4.2 ms"; 3.5 -> "3.5 s" (with sign: "+4.2 ms")."""
  text = f"{seconds * 1e3:.3g} ms" if abs(seconds) < 1 else f"{seconds:.3g} s"
  return ("+" + text) if sign and seconds >= 0 else text


def _standard_notes(
  config, device, images, train_flops, measured, rounds
) -> list[str]:
  notes = [
    f"Each variant was warmed up, then timed over {config.steps} steps "
    f"({images} images) per round, {rounds} round{'s' * (rounds > 1)}"
    f"{_rounds_planned(rounds, config.repeats)}, "
    "interleaved, each round starting further along the list.",
    f"Ratios are medians of per-round ratios, with a {stats.CONFIDENCE:.0%} "
    "confidence interval (docs/benchmarks.md) and the min-max over rounds.",
    "fit is timed from its first batch to the end of its epoch, without "
    "the setup of each fit call, which favours fit.",
    "Engine variants of one precision with more than one step per call "
    "share a compiled loop (the step count is a tensor), so only the "
    "first of them pays for tracing; spl=1 has its own (no tf.range "
    "loop).",
    f"Training FLOPs per image: {train_flops:.3g} (3 x forward, conv and "
    "dense layers at 2 FLOPs per multiply-add).",
  ]
  if any(variant.xla for variant in measured):
    notes.append(
      "XLA variants compile the forward and backward pass (as "
      "ctl.train.loop.TrainLoop(jit_compile=True) does); Keras compiles "
      "the whole fit step."
    )
  if device.kind == "gpu":
    notes.append(
      "Keras fit defaults to jit_compile='auto', which is XLA on a "
      "GPU when no tf.distribute strategy is used: compare "
      "'fit spe=1 +xla' for that case."
    )
  return notes


def _rounds_planned(rounds: int, planned: int) -> str:
  """What follows "N rounds": e.g. " of 10" when rounds were cut, or
  " (10 planned; ...)" when some were added."""
  if rounds < planned:
    return f" of {planned}"
  if rounds > planned:
    return f" ({planned} planned; more added while a target was UNDECIDED)"
  return ""


def _limits_section(peaks, rows, train_flops, config, status) -> dict:
  notes = [
    f"Model FLOPs utilisation (MFU) = {train_flops:.3g} training FLOPs"
    f" per image ({config.model}, {config.image_size}x"
    f"{config.image_size}) x images/s / the peak matmul rate of the "
    "variant's precision: the best of the rounds, measured once per "
    "round between the variants, so under the same machine noise."
  ]
  notes += [
    f"MFU of {row['name']}: {row['mfu_percent']:.1f}%"
    for row in rows
    if "mfu_percent" in row
  ]
  return report_lib.section(
    title="Limits: dense matmul peak and model FLOPs utilisation",
    rows=list(peaks.values()),
    chart_key="peak_flops_per_second",
    columns=list(peak_lib.COLUMNS),
    notes=notes,
    status=status,
    config={"repeats": config.repeats},
  )
