"""TensorBoard's time-series page in a real headless browser: PNG + what it drew.

Starts TensorBoard on a run's TensorBoard directory, opens the time-series
page filtered to some tags in headless Chromium (Debian's `chromium` and
`chromium-driver` packages, driven through chromedriver's W3C WebDriver HTTP
API, so no Python package is needed), waits until every card has drawn its
lines, and writes a screenshot plus a JSON file beside it saying, per card,
which runs the browser drew:

  python scripts/tensorboard_screenshot.py \\
      --logdir=runs/quickstart/tensorboard --out=docs/tensorboard.png

Exit codes: 0 done; 2 no browser or no such logdir (one sentence); 1
TensorBoard or the browser failed, or the cards never drew both runs.
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ctl.distributed import ports  # noqa: E402  # pylint: disable=g-import-not-at-top

flags.DEFINE_string(
  "logdir", "runs/quickstart/tensorboard", "The run's TensorBoard directory."
)
flags.DEFINE_string(
  "out",
  "docs/tensorboard.png",
  "Where the PNG goes; what was drawn goes to the same path with .json.",
)
flags.DEFINE_string(
  "tag_filter",
  "^(loss|accuracy)$",
  "Show the cards whose tag matches this regex (the page's filter box).",
)
flags.DEFINE_integer("width", 1400, "Browser window width.")
flags.DEFINE_integer("height", 760, "Browser window height.")
flags.DEFINE_integer("timeout_secs", 180, "Give up after this long.")

FLAGS = flags.FLAGS

BROWSER = "chromium"
DRIVER = "chromedriver"
# Headless Chromium as root in a container: no sandbox, no GPU, and nothing
# that reaches outside the machine.
CHROMIUM_FLAGS = (
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--hide-scrollbars",
)
RUNS = ("train", "validation")

# Per line-chart card: its title and the runs whose lines it drew (by the
# legend rows and the stroke colours of the drawn paths).
_CARDS_JS = """
return [...document.querySelectorAll('.line-chart')].map(chart => {
  const card = chart.closest('scalar-card-component');
  const tag = card && card.querySelector('.heading .tag');
  const title = tag ? tag.getAttribute('title') : '';
  const colors = new Set([...chart.querySelectorAll('path')]
      .filter(p => (p.getAttribute('d') || '').includes('L') && p.style.stroke)
      .map(p => p.style.stroke));
  const words = card ? card.innerText.split(/\\s+/) : [];
  return {title: title, colors: colors.size,
          runs: %s.filter(run => words.includes(run))};
});
""" % json.dumps(list(RUNS))  # noqa: UP031  (JavaScript braces)


def _call(method: str, url: str, body=None):
  """One JSON request; returns the decoded answer (WebDriver: its value)."""
  request = urllib.request.Request(
    url,
    method=method,
    headers={"Content-Type": "application/json"},
    data=None if body is None else json.dumps(body).encode(),
  )
  with urllib.request.urlopen(request, timeout=120) as answer:
    return json.load(answer)


def _poll(what: str, fn, deadline: float):
  """Calls `fn` until it returns something true; returns that."""
  last = None
  while time.time() < deadline:
    try:
      last = fn()
      if last:
        return last
    except (OSError, urllib.error.HTTPError):
      pass  # Not listening yet.
    time.sleep(1)
  raise RuntimeError(
    f"{what} did not happen in {FLAGS.timeout_secs} s (last answer: {last})."
  )


class _Browser:
  """A chromedriver session (W3C WebDriver over HTTP)."""

  def __init__(self, profile: str, deadline: float):
    (port,) = ports.free_ports(1)
    self._driver = subprocess.Popen(
      [shutil.which(DRIVER), f"--port={port}"],
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
    )
    self._url = f"http://127.0.0.1:{port}"
    _poll(
      "chromedriver start",
      lambda: _call("GET", f"{self._url}/status")["value"]["ready"],
      deadline,
    )
    options = {
      "binary": shutil.which(BROWSER),
      "args": [
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        f"--window-size={FLAGS.width},{FLAGS.height}",
      ],
    }
    self._session = (
      self._url
      + "/session/"
      + _call(
        "POST",
        f"{self._url}/session",
        {
          "capabilities": {
            "alwaysMatch": {
              "browserName": "chrome",
              "goog:chromeOptions": options,
            }
          }
        },
      )["value"]["sessionId"]
    )

  def go(self, url: str) -> None:
    _call("POST", f"{self._session}/url", {"url": url})

  def run(self, script: str):
    return _call(
      "POST", f"{self._session}/execute/sync", {"script": script, "args": []}
    )["value"]

  def screenshot(self) -> bytes:
    return base64.b64decode(
      _call("GET", f"{self._session}/screenshot")["value"]
    )

  def close(self) -> None:
    try:
      _call("DELETE", self._session)
    finally:
      self._driver.terminate()
      self._driver.wait(timeout=30)


def screenshot(logdir: str, out: str) -> list[dict]:
  """Writes the PNG to `out`; returns the cards as the browser drew them."""
  deadline = time.time() + FLAGS.timeout_secs
  (port,) = ports.free_ports(1)
  board_url = f"http://127.0.0.1:{port}"
  board = subprocess.Popen(
    [
      sys.executable,
      "-m",
      "tensorboard.main",
      f"--logdir={logdir}",
      "--host=127.0.0.1",
      f"--port={port}",
    ],
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  try:
    _poll(
      f"TensorBoard listing the runs {RUNS}",
      lambda: set(RUNS) <= set(_call("GET", f"{board_url}/data/runs")),
      deadline,
    )
    return _capture(board_url, out, deadline)
  finally:
    board.terminate()
    board.wait(timeout=30)


def _capture(board_url: str, out: str, deadline: float) -> list[dict]:
  """Opens the board's time series in a fresh headless browser, waits until
  every card draws every run, writes the PNG to `out`; returns the cards."""
  with tempfile.TemporaryDirectory() as profile:
    browser = _Browser(profile, deadline)
    try:
      # forceSVG: headless Chromium has no WebGL, TensorBoard's default
      # line renderer.
      browser.go(
        f"{board_url}/?darkMode=false&forceSVG=true&tagFilter="
        f"{urllib.parse.quote(FLAGS.tag_filter)}#timeseries"
      )
      browser.run(
        "const close = document.querySelector("
        "'[aria-label=\"Close side pane\"]');"
        "if (close) close.click();"
      )
      cards = _poll(
        "every card drawing the train and validation lines",
        lambda: _all_drawn(browser.run(_CARDS_JS)),
        deadline,
      )
      time.sleep(1)  # Let the last frame settle.
      with open(out, "wb") as f:
        f.write(browser.screenshot())
      return cards
    finally:
      browser.close()


def _all_drawn(cards: list[dict]) -> list[dict] | None:
  """`cards` once there are some and each draws a line of every run in
  RUNS, else None (not yet)."""
  if cards and all(
    c["colors"] >= len(RUNS) and len(c["runs"]) == len(RUNS) for c in cards
  ):
    return cards
  return None


def main(argv):
  del argv
  missing = [name for name in (BROWSER, DRIVER) if not shutil.which(name)]
  if missing:
    print(
      f"error: {' and '.join(missing)} not found; install Debian's: "
      "apt-get install -y chromium chromium-driver.",
      file=sys.stderr,
    )
    sys.exit(2)
  if not os.path.isdir(FLAGS.logdir):
    print(
      f"error: {FLAGS.logdir} is not a directory; train first (make demo).",
      file=sys.stderr,
    )
    sys.exit(2)
  os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
  try:
    cards = screenshot(FLAGS.logdir, FLAGS.out)
  except (RuntimeError, OSError, subprocess.SubprocessError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  with open(os.path.splitext(FLAGS.out)[0] + ".json", "w") as f:
    json.dump({"cards": cards}, f, indent=2)
  print(
    f"Wrote {FLAGS.out}: "
    + "; ".join(f"{c['title']}: {', '.join(c['runs'])}" for c in cards)
  )


if __name__ == "__main__":
  app.run(main)
