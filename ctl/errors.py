"""The one exception type that means "the user can fix this".

Also the argument parser of ctl's own command lines, whose mistakes are
reported the same way: one `error: ...` line, exit 2.
"""

import argparse
import sys


class UserError(Exception):
  """A mistake in flags, environment or files that the user can act on.

  The message is one sentence that says what is wrong and what to do. Entry
  points print it (no traceback) and exit with `USER_ERROR_EXIT_CODE`.
  """


USER_ERROR_EXIT_CODE = 2


class ArgumentParser(argparse.ArgumentParser):
  """argparse, with a bad command line reported as one line (no usage)."""

  def error(self, message):
    print(f"error: {message}; see {self.prog} --help.", file=sys.stderr)
    sys.exit(USER_ERROR_EXIT_CODE)
