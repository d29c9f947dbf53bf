"""The README's and the docs pages' shell examples and links, checked.

Every ```sh block of README.md and docs/*.md runs here with bash (-e, -u,
pipefail), README first, then the pages in name order, in one scratch
directory that looks like the checkout (its `.venv`, `configs`, `scripts`)
with the venv's bin first on PATH, as for a user with the venv activated. A
block that cannot run offline or here (make targets, servers, gcloud, docker,
apt-get) says so with the info string ```sh not-tested and is only counted.

To keep this fast, the scratch configs/quickstart.cfg is the real one plus
QUICKSTART_OVERRIDES (later flags win in a flagfile); the steps, the model and
every flag on the pages' command lines are as written. $IMAGE is what the
Vertex AI page's build block sets.

Every relative link of those pages (a file, or a heading's #anchor by
GitHub's rules) must resolve, and every docs page must be linked from another
page and reachable from README.md, so none is orphaned.
"""

import collections
import os
import pathlib
import re
import shutil

import pytest

from tests.conftest import REPO
from tests.conftest import trainer_env
from trainer.testing import run_command

QUICKSTART_OVERRIDES = ("--image_size=16", "--per_replica_batch_size=16")
IMAGE = "us-docker.pkg.dev/my-project/ctl/trainer:latest"
_BLOCK = re.compile(
  r"^```sh( not-tested)?\n(.*?)^```$", re.DOTALL | re.MULTILINE
)
_FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # https:, mailto:


def _pages(root: str | pathlib.Path = REPO) -> list[pathlib.Path]:
  """README.md, then docs/*.md in name order: the pages a reader browses."""
  root = pathlib.Path(root)
  return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _blocks(page: pathlib.Path) -> list[tuple[bool, str]]:
  """(runs here, text) of each ```sh block of one page, in page order."""
  return [(not skip, body) for skip, body in _BLOCK.findall(page.read_text())]


def _anchors(text: str) -> set[str]:
  """The #anchors GitHub gives a page's headings: lower case, punctuation
  dropped but for - and _, spaces to -, a repeat suffixed -1, -2, ..."""
  seen = collections.Counter()
  anchors = set()
  for heading in re.findall(
    r"^#{1,6}[ \t]+(.+?)[ \t#]*$", _FENCE.sub("", text), re.M
  ):
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
    anchors.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
    seen[slug] += 1
  return anchors


def _links(page: pathlib.Path) -> list[str]:
  """Every link and image target of a page's prose (code is not prose)."""
  return _LINK.findall(_CODE_SPAN.sub("", _FENCE.sub("", page.read_text())))


def _broken_links(pages: list[pathlib.Path]) -> list[str]:
  """'page: target: why' for each relative link that leads nowhere."""
  broken = []
  for page in pages:
    for target in _links(page):
      if _SCHEME.match(target):
        continue
      path, _, anchor = target.partition("#")
      dest = (page.parent / path) if path else page
      if not dest.exists():
        broken.append(f"{page.name}: {target}: no such file")
      elif (
        anchor
        and dest.suffix == ".md"
        and anchor not in _anchors(dest.read_text())
      ):
        broken.append(f"{page.name}: {target}: no such heading")
  return broken


def _linked(page: pathlib.Path) -> set[pathlib.Path]:
  """The files a page links to (other than itself), resolved."""
  paths = {t.partition("#")[0] for t in _links(page) if not _SCHEME.match(t)}
  return {(page.parent / p).resolve() for p in paths if p} - {page.resolve()}


def _unlinked(pages: list[pathlib.Path]) -> tuple[list[str], list[str]]:
  """(docs pages no other page links to, pages README.md does not reach)."""
  linked = set().union(*(_linked(page) for page in pages))
  orphans = [p.name for p in pages[1:] if p.resolve() not in linked]
  reached, todo = {pages[0].resolve()}, [pages[0]]
  while todo:
    for dest in _linked(todo.pop()) - reached:
      reached.add(dest)
      if dest.suffix == ".md" and dest.is_file():
        todo.append(dest)
  return orphans, [p.name for p in pages if p.resolve() not in reached]


def _workspace(root: pathlib.Path) -> pathlib.Path:
  """A directory where the README's relative paths mean the checkout's."""
  for name in (".venv", "scripts"):
    (root / name).symlink_to(os.path.join(REPO, name))
  shutil.copytree(os.path.join(REPO, "configs"), root / "configs")
  with open(root / "configs" / "quickstart.cfg", "a") as f:
    f.write("".join(f"{flag}\n" for flag in QUICKSTART_OVERRIDES))
  return root


def test_every_block_is_run_or_marked():
  blocks = [block for page in _pages() for block in _blocks(page)]
  assert any(runs for runs, _ in blocks), "no tested ```sh block"
  for page in _pages():
    assert len(_blocks(page)) == len(
      re.findall(r"^```sh", page.read_text(), re.MULTILINE)
    ), f"{page.name}: a ```sh block with an info string this test does not know"


def test_the_readme_ctl_run_example_is_the_examples_code():
  """Each README ```python excerpt is lines of the example it names in its
  first line (`# examples/x.py, abridged`), which the suite runs
  (tests/test_examples.py), so the front page's code cannot drift from it."""
  excerpts = re.findall(
    r"^```python\n# (examples/\S+\.py)(.*?)^```$",
    pathlib.Path(REPO, "README.md").read_text(),
    re.S | re.M,
  )
  assert len(excerpts) == 2
  for path, excerpt in excerpts:
    example = {
      line.strip() for line in pathlib.Path(REPO, path).read_text().splitlines()
    }
    code = [
      line.strip()
      for line in excerpt.splitlines()[1:]
      if line.strip() not in ("", "...") and not line.lstrip().startswith("#")
    ]
    assert len(code) > 10, path
    assert [line for line in code if line not in example] == [], path


def test_every_relative_link_resolves():
  assert not _broken_links(_pages())


def test_every_docs_page_is_linked_and_reached_from_the_readme():
  orphans, unreached = _unlinked(_pages())
  assert not orphans, f"docs pages no other page links to: {orphans}"
  assert not unreached, f"pages README.md does not lead to: {unreached}"


def test_the_link_checks_find_broken_links_and_lost_pages(tmp_path):
  (tmp_path / "docs").mkdir()
  (tmp_path / "README.md").write_text(
    "# Top\n[a](docs/a.md#goodput-where-a-jobs-time-went) [b](docs/a.md#b-1)"
    " [c](docs/a.md#nothing) [d](docs/gone.md) [e](#top) `[f](docs/x.md)`\n"
  )
  (tmp_path / "docs" / "a.md").write_text(
    "# Goodput: where a job's `time` went\n## B\n## B\n```\n# [g](no.md)\n```\n"
  )
  (tmp_path / "docs" / "lost.md").write_text("[a](a.md) [c](chained.md)\n")
  (tmp_path / "docs" / "chained.md").write_text("chained\n")
  pages = _pages(tmp_path)
  assert _broken_links(pages) == [
    "README.md: docs/a.md#nothing: no such heading",
    "README.md: docs/gone.md: no such file",
  ]
  assert _unlinked(pages) == (["lost.md"], ["chained.md", "lost.md"])


@pytest.mark.processes
def test_readme_shell_examples_run_as_written(tmp_path):
  work = _workspace(tmp_path)
  env = trainer_env(IMAGE=IMAGE)
  env["PATH"] = f"{os.path.join(REPO, '.venv', 'bin')}:{env['PATH']}"
  for runs, body in [block for page in _pages() for block in _blocks(page)]:
    if not runs:
      continue
    result = run_command(
      ["bash", "-euo", "pipefail", "-c", body],
      cwd=work,
      env=env,
      timeout=600,
      check=False,
    )
    assert result.returncode == 0, f"{body}\n{result.stderr[-3000:]}"
  assert (work / "job.yaml").stat().st_size > 0
  assert (work / "runs" / "two" / "train_summary.json").exists()
