"""ctl.data.datafiles: a folder's file list is saved once and reused on restarts."""

import os

import pytest

from ctl.data import datafiles
from ctl.errors import UserError


@pytest.fixture
def folder(tmp_path):
  for name in ("b/2.png", "a/1.jpg", "a/0.jpg"):
    path = tmp_path / "images" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(name.encode())
  return str(tmp_path / "images")


def test_the_manifest_keeps_the_first_list_when_files_are_added(
  folder, tmp_path
):
  files = datafiles.open_files(folder)
  manifest_dir = datafiles.open_files(str(tmp_path / "checkpoints"))
  assert datafiles.load_manifest(files, manifest_dir=manifest_dir) is None
  names = files.list()
  assert names == sorted(names) and len(names) == 3
  datafiles.save_manifest(files, manifest_dir=manifest_dir, names=names)
  with open(os.path.join(folder, "a", "9.jpg"), "wb") as f:
    f.write(b"new")
  assert len(files.list()) == 4
  assert datafiles.load_manifest(files, manifest_dir=manifest_dir) == names
  assert files.read(names[0]) == names[0].encode()


def test_a_manifest_of_another_folder_is_a_user_error(folder, tmp_path):
  manifest_dir = datafiles.open_files(str(tmp_path / "checkpoints"))
  datafiles.save_manifest(
    datafiles.open_files(folder), manifest_dir=manifest_dir, names=["a/0.jpg"]
  )
  other = datafiles.open_files(str(tmp_path / "elsewhere"))
  with pytest.raises(
    UserError, match="lists the files of .*, not of --data_dir=.*elsewhere"
  ):
    datafiles.load_manifest(other, manifest_dir=manifest_dir)


def test_every_top_directory_is_listed_and_a_link_inside_one_hides_none(
  folder, caplog
):
  # A link inside `b` to `a`, and `c`, a second way into `a`: a walk that
  # listed `b` (or `c`) first went into `a` through the link and then left
  # `a` itself out as "already listed".
  os.symlink("../a", os.path.join(folder, "b", "a_again"))
  os.symlink("a", os.path.join(folder, "c"))
  names = datafiles.open_files(folder).list()
  assert names == ["a/0.jpg", "a/1.jpg", "b/2.png", "c/0.jpg", "c/1.jpg"]
  assert f"{folder}/b/a_again leads to {folder}/a" in caplog.text
  assert f"2 files under {folder} are reached by more than one name" in (
    caplog.text
  )
