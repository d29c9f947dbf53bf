"""ctl.train.parts: the parts a run is built from.

`assemble` and `Parts.close` run in every controller test
(test_controller.py) and end to end through the command line; here, the
duty with a decision of its own: the divergence guard.
"""

import numpy as np
import pytest

from ctl.errors import TrainingDiverged
from ctl.train import parts


def test_the_divergence_guard_names_the_first_bad_step_and_gives_up():
  guard = parts.DivergenceGuard(max_recoveries=1)
  guard.record(np.array([0.5, np.nan, np.inf]), last_step=30)
  assert guard.recoveries == 1
  with pytest.raises(
    TrainingDiverged, match="not finite at step 29 after 1 rollbacks"
  ):
    guard.record(np.array([0.5, 0.4, np.nan]), last_step=30)
