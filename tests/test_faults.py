"""ctl.resilience.faults: the CTL_FAULTS grammar, and who a fault applies to.

What the faults do to a run is tested where it matters: NaN rollbacks in
test_fault_tolerance.py, stalls in test_stalls.py, the step without faults
in test_loop.py.
"""

import pytest

from ctl import env
from ctl.errors import UserError
from ctl.resilience import faults


def test_faults_parse_with_their_places_and_filters():
  assert faults.parse(
    " nan@23, stall@40:input:worker=1:attempt=0,"
    "slow@*:secs=0.5,stall@7:checkpoint_upload:secs=3"
  ) == (
    faults.Fault(kind="nan", step=23, where="step"),
    faults.Fault(kind="stall", step=40, where="input", worker=1, attempt=0),
    faults.Fault(kind="slow", step=None, secs=0.5),
    faults.Fault(kind="stall", step=7, where="checkpoint_upload", secs=3.0),
  )
  assert faults.parse("") == ()


def test_only_this_workers_and_attempts_faults_apply():
  environ = env.faults_environment("crash@5:worker=1,stall@9:attempt=2,nan@3")
  kinds = lambda **who: [f.kind for f in faults.from_environ(environ, **who)]
  assert kinds(worker=0, attempt=0) == ["nan"]
  assert kinds(worker=1, attempt=0) == ["crash", "nan"]
  assert kinds(worker=0, attempt=2) == ["stall", "nan"]
  assert faults.from_environ({}, worker=0, attempt=0) == ()


def test_faults_act_only_with_their_switch():
  for switch in ({}, {env.FAULTS_ENABLED: "0"}):
    environ = {env.FAULTS: "crash@5", **switch}
    assert faults.from_environ(environ, worker=0, attempt=0) == ()
  with pytest.raises(UserError, match="CTL_FAULTS_ENABLED must be 1 or 0"):
    faults.from_environ(
      {env.FAULTS: "crash@5", env.FAULTS_ENABLED: "yes"}, worker=0, attempt=0
    )


@pytest.mark.parametrize(
  "spec, words",
  [
    ("freeze@3", "unknown kind 'freeze'"),
    ("stall@soon", "needs a step number or * after @"),
    ("stall@3:disk", "unknown option 'disk'"),
    ("stall@3:secs=long", "bad number in 'secs=long'"),
    ("nan@3:input", "takes no place or secs"),
    ("slow@3", "needs secs=S"),
  ],
)
def test_a_bad_fault_is_one_sentence(spec, words):
  with pytest.raises(UserError) as error:
    faults.parse(spec)
  message = str(error.value)
  assert words in message and message.startswith(f"CTL_FAULTS fault {spec!r}")
  assert message.endswith(".") and "\n" not in message
