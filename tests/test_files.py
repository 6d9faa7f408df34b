"""gpt1.pipeline.files: the one JSON and the one CSV writer of the results tree."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gpt1.pipeline.errors import Gpt1Error
from gpt1.pipeline.files import (
    publication,
    read_sealed_json,
    stage_command,
    staged_outputs,
    staged_path,
    unwritable,
    write_csv,
    write_json,
)


def test_write_csv_writes_a_header_then_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "curve.csv"
    write_csv(path, ["step", "loss"], [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.25}])
    assert path.read_bytes() == b"step,loss\r\n1,2.5\r\n2,2.25\r\n"  # the csv module's dialect, as before
    assert list(csv.DictReader(path.open(newline=""))) == [{"step": "1", "loss": "2.5"}, {"step": "2", "loss": "2.25"}]


def test_write_json_sorts_keys_unless_the_order_says_something(tmp_path: Path) -> None:
    write_json(tmp_path / "a.json", {"b": 1, "a": [1, 2]})
    assert (tmp_path / "a.json").read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    write_json(tmp_path / "b.json", {"b": 1, "a": 2}, sort_keys=False)
    assert list(json.loads((tmp_path / "b.json").read_text())) == ["b", "a"]


def test_a_publication_holds_every_staged_output_until_it_ends(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "sub" / "b.txt"
    with publication():
        with staged_outputs(first) as (temp,):
            temp.write_text("a")
        assert not first.exists() and staged_path(first) == temp  # written, held under its temporary name
        with staged_outputs(second) as (temp,):
            temp.write_text("b")
        assert staged_path(second).read_text() == "b"
    assert (first.read_text(), second.read_text()) == ("a", "b")
    assert staged_path(first) == first  # outside a publication a path is where it is
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.json", "b.txt", "sub"]


def test_a_failure_inside_a_publication_publishes_nothing_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    done, later = tmp_path / "done.txt", tmp_path / "later.txt"
    done.write_text("earlier run")
    with pytest.raises(OSError, match="store gone"), publication():
        with staged_outputs(done, later) as temps:
            for temp in temps:
                temp.write_text("this run")
        raise OSError("store gone")  # e.g. MLflow's logging, after the outputs were written
    assert done.read_text() == "earlier run" and not later.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["done.txt"]


def test_publications_do_not_nest(tmp_path: Path) -> None:
    with publication(), pytest.raises(RuntimeError, match="inside a publication"), publication():
        pass


def test_a_stage_is_named_by_the_command_that_runs_it(tmp_path: Path) -> None:
    assert stage_command("encode_task") == "gpt1 encode-task"  # the DAG's stage name, the CLI's command
    (tmp_path / "encoded.json").write_text("[]")
    with pytest.raises(Gpt1Error, match=r"encoded.json: holds a list, expected an object; re-run gpt1 encode-task"):
        read_sealed_json(tmp_path / "encoded.json", "encode_task")


def test_a_publication_refuses_to_find_an_output_it_does_not_hold(tmp_path: Path) -> None:
    with publication(), pytest.raises(RuntimeError, match=r"other.txt: not an output written in this publication"):
        staged_path(tmp_path / "other.txt")  # its file would be the earlier run's


def test_a_rename_that_fails_leaves_no_temporary_file_behind(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()  # a folder where the second output goes: its rename fails
    with pytest.raises(IsADirectoryError), staged_outputs(tmp_path / "a", tmp_path / "b", tmp_path / "c") as temps:
        for temp in temps:
            temp.write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # renames are not atomic together; temps gone


def test_flatten_nested_params():
    from gpt1.pipeline.files import flatten

    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": [1, 2]}) == {"a.b": 1, "a.c.d": 2, "e": [1, 2]}
    assert flatten({"a": {"b": 1, "sha256": "x"}, "sha256": "y"}, skip=("sha256",)) == {"a.b": 1}  # at any depth


def test_unwritable_says_why_a_folder_takes_no_file(tmp_path):
    assert unwritable(tmp_path) is None and list(tmp_path.iterdir()) == []  # it leaves nothing behind
    (tmp_path / "plain").write_text("")
    assert isinstance(unwritable(tmp_path / "plain"), NotADirectoryError)
