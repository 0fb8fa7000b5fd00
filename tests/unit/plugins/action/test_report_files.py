# -*- coding: utf-8 -*-
"""report_files: the report's files written on the controller in one step, also under --check, never changed."""
import os
import stat

import pytest
from action_harness import action

from ansible_collections.hy3.fleet.plugins.action import report_files
from ansible_collections.hy3.fleet.plugins.action.report_files import ActionModule

FILES = {"fleet_budget.json": "[]\n", "fleet_budget.md": "| host |\n"}


def run(args, **kw):
    return action(ActionModule, args, **kw).run(task_vars={})


def mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


@pytest.mark.parametrize("check_mode", [False, True])
def test_writes_every_file_into_a_new_directory(tmp_path, check_mode):
    out_dir = tmp_path / "a" / "report"
    result = run({"dir": str(out_dir), "files": FILES}, check_mode=check_mode)
    assert not result.get("failed") and result["changed"] is False
    assert result["paths"] == [str(out_dir / name) for name in FILES] == result["written"]
    assert {name: (out_dir / name).read_text() for name in FILES} == FILES
    assert mode(out_dir) == mode(out_dir.parent) == 0o755 and mode(out_dir / "fleet_budget.md") == 0o644


def test_rewrites_only_what_differs_and_sets_the_modes(tmp_path):
    run({"dir": str(tmp_path), "files": FILES})
    os.chmod(str(tmp_path / "fleet_budget.json"), 0o600)
    result = run({"dir": str(tmp_path), "files": dict(FILES, **{"fleet_budget.md": "| host | GPUs |\n"})})
    assert result["written"] == [str(tmp_path / "fleet_budget.md")]
    assert (tmp_path / "fleet_budget.md").read_text() == "| host | GPUs |\n"
    assert mode(tmp_path / "fleet_budget.json") == 0o644 and sorted(os.listdir(str(tmp_path))) == sorted(FILES)


@pytest.mark.parametrize("name", ["../x", "a/b", "", ".."])
def test_a_name_with_a_directory_part_is_refused(tmp_path, name):
    result = run({"dir": str(tmp_path), "files": {name: "x"}})
    assert result["failed"] and "plain file name" in result["msg"] and os.listdir(str(tmp_path)) == []


def test_a_directory_that_cannot_be_made_fails_naming_it(tmp_path):
    (tmp_path / "file").write_text("")
    result = run({"dir": str(tmp_path / "file" / "report"), "files": FILES})
    assert result["failed"] and str(tmp_path / "file" / "report") in result["msg"]


def test_modes_are_octal_strings_or_numbers():
    assert report_files._mode("0640") == report_files._mode("640") == report_files._mode(0o640) == 0o640
