"""ctl.launch.workers: the local cluster a launcher starts, and its warm spare."""

import pytest

from ctl.distributed import cluster
from ctl.errors import UserError
from ctl.launch import workers


def test_loopback_tasks_form_one_cluster_with_a_rank_each():
  tasks = workers.loopback_tasks(3, port_base=23450)
  infos = [cluster.resolve(environ=task.env) for task in tasks]
  assert [task.rank for task in tasks] == [0, 1, 2]
  assert [info.task_index for info in infos] == [0, 1, 2]
  expected = ["localhost:23450", "localhost:23451", "localhost:23452"]
  for info in infos:
    assert list(info.workers) == expected


def test_loopback_tasks_without_a_port_base_take_free_ports():
  tasks = workers.loopback_tasks(2, port_base=None)
  (addresses,) = {cluster.resolve(environ=task.env).workers for task in tasks}
  assert len(set(addresses)) == 2


def test_the_spare_runs_the_same_module_and_arguments():
  assert workers.spare_command(
    ["/usr/bin/python3", "-m", "trainer.task", "--flagfile=x.cfg"]
  ) == [
    "/usr/bin/python3",
    "-m",
    "ctl.launch.spare",
    "trainer.task",
    "--flagfile=x.cfg",
  ]


def test_a_worker_command_a_spare_cannot_take_over_is_one_sentence():
  with pytest.raises(UserError, match=r"^--warm_spare needs a worker command"):
    workers.spare_command(["./train.sh", "--steps=10"])
