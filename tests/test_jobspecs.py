"""ctl.cloud.jobspecs: what ctl-vertex and ctl-k8s share."""

import json

import yaml

from ctl import errors
from ctl.cloud import jobspecs


def test_trainer_args_follow_the_first_double_dash():
  assert jobspecs.split_trainer_args(["--a=1", "--", "--b", "--", "c"]) == (
    ["--a=1"],
    ["--b", "--", "c"],
  )
  assert jobspecs.split_trainer_args(["--a=1"]) == (["--a=1"], [])


def test_specs_render_in_order_as_yaml_or_json():
  spec = {"z": 1, "a": [{"b": "c"}]}
  text = jobspecs.format_spec(spec, "yaml")
  assert text.index("z:") < text.index("a:")
  assert yaml.safe_load(text) == spec
  assert json.loads(jobspecs.format_spec(spec, "json")) == spec


def test_run_prints_the_result_or_one_error_line(capsys):
  assert jobspecs.run(lambda: "kind: JobSet\n") == 0
  assert capsys.readouterr().out == "kind: JobSet\n"

  def refuse():
    raise errors.UserError("image is missing.")

  assert jobspecs.run(refuse) == errors.USER_ERROR_EXIT_CODE
  captured = capsys.readouterr()
  assert (captured.out, captured.err) == ("", "error: image is missing.\n")


def test_run_returns_the_exit_code_an_action_returns(capsys):
  assert jobspecs.run(lambda: 1) == 1
  assert jobspecs.run(lambda: 0) == 0
  assert capsys.readouterr().out == ""
