"""The one exception type that means "the user can fix this"."""


class UserError(Exception):
  """A mistake in flags, environment or files that the user can act on.

  The message is one sentence that says what is wrong and what to do. Entry
  points print it (no traceback) and exit with `USER_ERROR_EXIT_CODE`.
  """


USER_ERROR_EXIT_CODE = 2
