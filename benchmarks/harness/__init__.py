"""The harness every section shares: its flags, budget, statistics and report.

Imports nothing else of benchmarks/ (docs/design.md, "Layers"). Its modules,
lowest first:

  settings: a section's Config field that is also a flag of its app.
  budget: how much of a section's planned work fits in its time budget.
  stats: medians, spreads, per-round ratios, their intervals and verdicts.
  device: which device to benchmark on, and which precisions it runs fast.
  machine: was the machine quiet enough over a section to decide?
  subreaper: runs a section's command so every process it starts is its
    own (orphans adopted and reaped, leftovers stopped).
  report: the results document, the sections of every app merged in one.
  markdown: a report rendered as Markdown, targets first.
  chart: a report drawn as one PNG, a panel per measured section.
  cli: the flags every app shares, and how an app hands back its sections.
"""
