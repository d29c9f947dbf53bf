"""The wheel's packages: `ctl` and the reference trainer as `ctl_trainer`.

The repository's `trainer/` (`python -m trainer.task` from a checkout and in
the image) is installed under the name `ctl_trainer`: `trainer` is a top-level
name another project on PyPI uses, and a user who had both would get one
silently replaced. The trainer imports its own modules relatively, so it runs
under either name. setup.cfg holds everything else; `packages` and
`package_dir` are here because setup.cfg cannot combine `find:` with a
renamed package. `make wheel-check` checks the wheel's top-level names.
"""

import setuptools

setuptools.setup(
  packages=[
    *setuptools.find_packages(include=["ctl", "ctl.*"]),
    "ctl_trainer",
  ],
  package_dir={"ctl_trainer": "trainer"},
)
