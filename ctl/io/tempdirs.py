"""Private local directories: the staging root and per-process scratch dirs.

Everything ctl writes under the system temporary directory is private to the
user (mode 0700, owned by us, never reached through a symbolic link), so
checkpoint copies are not readable by other users and no other user can plant
a file or link where ctl will write.

A per-process scratch directory carries its owner's pid in its name, so one
left behind by a killed process (SIGKILL runs no cleanup) is removed by the
next process that makes one with the same prefix (several may sweep at once,
as the node agents of a restarted job do: one that is gone is skipped).
"""

import os
import re
import shutil
import stat
import tempfile

from ctl import processes
from ctl.errors import UserError


def private_root(name: str) -> str:
  """`<tmp>/<name>-<uid>`, created 0700 if missing, checked to be ours.

  Raises:
    UserError: it is a symbolic link or not a directory, belongs to another
      user, or others may read or write it.
  """
  root = os.path.join(tempfile.gettempdir(), f"{name}-{os.getuid()}")
  try:
    os.mkdir(root, 0o700)
  except FileExistsError:
    pass
  status = os.lstat(root)
  if (
    not stat.S_ISDIR(status.st_mode)
    or status.st_uid != os.getuid()
    or status.st_mode & 0o077
  ):
    raise UserError(
      f"{root} is not a private directory of this user (a link, another "
      "owner, or open to others); remove it and run again."
    )
  return root


def scratch_dir(prefix: str) -> str:
  """A new private temporary directory `<tmp>/<prefix><pid>_XXXX`.

  First removes this user's directories with the same prefix whose process
  is gone.
  """
  pattern = re.compile(re.escape(prefix) + r"(\d+)_[^/]*")
  tmp = tempfile.gettempdir()
  for name in os.listdir(tmp):
    match = pattern.fullmatch(name)
    path = os.path.join(tmp, name)
    if match and not processes.pid_alive(int(match.group(1))):
      try:
        status = os.lstat(path)
      except FileNotFoundError:  # Another process swept it first.
        continue
      if stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid():
        shutil.rmtree(path, ignore_errors=True)
  return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}_")
