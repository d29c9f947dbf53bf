"""Retries a call that failed transiently, with exponential backoff.

Cloud Storage answers 429 and 5xx, drops connections and times out now and
then; a checkpoint upload must ride that out, but not for ever: after
`RetryPolicy.deadline_s` the last error is raised so the job fails visibly
instead of hanging.
"""

from collections.abc import Callable
import dataclasses
import time
from typing import TypeVar

from absl import logging

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
  """How long and how often to retry a remote call that failed transiently.

  Attributes:
    deadline_s: Seconds from the first attempt after which no new attempt
      starts; the last attempt's error is raised instead.
    initial_backoff_s: The sleep after the first failure; it doubles after
      each further failure.
    max_backoff_s: The longest single sleep.
    attempt_timeout_s: If set, an attempt still running after this many
      seconds is cancelled and counts as a transient failure. Only calls into
      asynchronous filesystems (gcsfs) can be cancelled; None leaves each
      attempt to the client's own timeouts and retries.
  """

  deadline_s: float = 600.0
  initial_backoff_s: float = 1.0
  max_backoff_s: float = 30.0
  attempt_timeout_s: float | None = None


def call(
  fn: Callable[[], _T],
  *,
  policy: RetryPolicy,
  is_transient: Callable[[Exception], bool],
  what: str,
) -> _T:
  """Calls `fn` until it returns, retrying transient errors.

  Args:
    fn: The call to make; it must be safe to repeat.
    policy: When to stop retrying.
    is_transient: Says whether an error may go away by itself.
    what: What `fn` does, for the warning logged before each retry.

  Returns:
    What `fn` returned.

  Raises:
    Exception: The error of `fn` when it is not transient, or when the next
      attempt would start after the deadline.
  """
  deadline = time.monotonic() + policy.deadline_s
  backoff = policy.initial_backoff_s
  while True:
    try:
      return fn()
    except Exception as error:  # pylint: disable=broad-except
      if not is_transient(error) or time.monotonic() + backoff > deadline:
        raise
      logging.warning(
        "%s failed (%s: %s); retrying in %.1f s.",
        what,
        type(error).__name__,
        error,
        backoff,
      )
    time.sleep(backoff)
    backoff = min(2 * backoff, policy.max_backoff_s)
