"""The CLI: one subcommand per stage, each with --help; bad arguments are one clear line."""

import subprocess
import sys
from pathlib import Path

import pytest

from gpt1.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]
STAGES = ["fetch", "clean", "bpe", "encode", "pretrain", "export", "config"]


def test_every_stage_has_help():
    parser = build_parser()
    subcommands = parser._subparsers._group_actions[0].choices
    assert set(STAGES) <= set(subcommands)
    for name in STAGES:
        text = subcommands[name].format_help()
        assert "--params" in text and "--profile" in text and "--set KEY=VALUE" in text


def test_python_dash_m_help_runs():
    out = subprocess.run([sys.executable, "-m", "gpt1", "fetch", "--help"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and "--out OUT" in out.stdout


def test_missing_required_argument_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bpe", "--corpus", "x"])
    assert info.value.code == 2
    assert "--out" in capsys.readouterr().err


def test_input_errors_print_one_line_without_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    code = main(["bpe", "--params", str(REPO / "params.yaml"), "--profile", "smoke",
                 "--corpus", str(tmp_path / "missing"), "--out", str(tmp_path / "tok")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "missing" in err
    assert not (tmp_path / "tok").exists()


def test_bad_workers(capsys):
    assert main(["config", "--params", str(REPO / "params.yaml")]) == 0
    assert main(["fetch", "--params", str(REPO / "params.yaml"), "--out", "x", "--workers", "0"]) == 2
    assert "--workers 0" in capsys.readouterr().err
