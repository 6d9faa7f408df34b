"""The CLI: one subcommand per stage, each with --help; bad arguments are one clear line."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpt1.cli.main import build_parser, main
from gpt1.pipeline.errors import UsageError
from gpt1.training import cores
from gpt1.training.cores import default_workers

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
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "tok").exists()


def test_bad_workers(capsys):
    assert main(["config", "--params", str(REPO / "params.yaml")]) == 0
    assert main(["clean", "--params", str(REPO / "params.yaml"), "--raw", "r", "--out", "x", "--workers", "0"]) == 2
    assert "--workers 0" in capsys.readouterr().err


def test_workers_only_where_a_stage_uses_them(capsys):
    """A pool for clean, bpe and encode; torch threads for the model stages; no flag that a stage would ignore."""
    stages = build_parser()._subparsers._group_actions[0].choices
    for stage in ("fetch", "encode-task", "export", "config"):
        assert "--workers" not in stages[stage].format_help()
    for stage in ("clean", "bpe", "encode"):
        assert "processes to use" in stages[stage].format_help()
    for stage in ("pretrain", "finetune", "layers", "zeroshot", "report"):  # the report: its page of samples
        assert "torch threads when the profile is not pinned" in stages[stage].format_help()
    with pytest.raises(SystemExit):
        main(["fetch", "--out", "x", "--workers", "2"])
    assert "unrecognized arguments: --workers 2" in capsys.readouterr().err


@pytest.mark.parametrize(("env", "stage", "expected"), [
    ({}, "bpe", len(os.sched_getaffinity(0))),  # a pool: every core
    ({}, "finetune", None),  # a model: torch's own default
    ({"OMP_NUM_THREADS": "3"}, "encode", 3),  # Snakemake's threads for the job
    ({"OMP_NUM_THREADS": "3,1"}, "pretrain", 3),  # OpenMP's nested form: the outer level
    ({"OMP_NUM_THREADS": "3", "GPT1_WORKERS": "5"}, "clean", 5),  # GPT1_WORKERS wins
])
def test_default_workers(monkeypatch, env, stage, expected):
    for name in ("GPT1_WORKERS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert default_workers(stage) == expected


def test_bad_workers_env_fails_only_the_stages_that_read_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("GPT1_WORKERS", "all")
    assert main(["config", "--params", str(REPO / "params.yaml")]) == 0
    assert main(["clean", "--params", str(REPO / "params.yaml"), "--raw", str(tmp_path), "--out", "x"]) == 2
    assert "GPT1_WORKERS='all': expected a number of cores to use" in capsys.readouterr().err


def test_model_threads_pinned_and_unpinned(capsys):
    """Pinned: cpu.threads whatever the environment asks (one line says so); an explicit --workers that differs is
    refused with the settings that would do it. Unpinned: what was asked, None leaving torch's choice."""
    pinned = {"pinned": True, "threads": 1}
    assert cores.model_threads(pinned, None, explicit=False) == 1
    assert cores.model_threads(pinned, 1, explicit=True) == 1
    assert cores.model_threads(pinned, 2, explicit=False) == 1
    note = "computing with cpu.threads=1 torch threads (pinned), not the 2 of the environment"
    assert note in capsys.readouterr().err
    with pytest.raises(UsageError, match=r"--workers 2: the profile pins every model job to cpu.threads=1.*"
                                         r"--set cpu.threads=2.*--set cpu.pinned=false"):
        cores.model_threads(pinned, 2, explicit=True)
    unpinned = {"pinned": False, "threads": None}
    assert cores.model_threads(unpinned, 3, explicit=True) == 3
    assert cores.model_threads(unpinned, None, explicit=False) is None


def test_explicit_workers_against_the_pin_exit_2(capsys, tmp_path):
    code = main(["finetune", "--params", str(REPO / "params.yaml"), "--profile", "smoke", "--workers", "2",
                 "--task", "rte", "--variant", "scratch", "--seed", "0", "--pretrained", str(tmp_path),
                 "--tokenizer", str(tmp_path), "--out", str(tmp_path / "out")])
    assert code == 2
    assert "--workers 2: the profile pins every model job to cpu.threads=1" in capsys.readouterr().err


def test_config_prints_null_for_no_mirror(capsys, monkeypatch):
    import yaml

    monkeypatch.delenv("GPT1_DATA_MIRROR", raising=False)
    assert main(["config", "--params", str(REPO / "params.yaml"), "--profile", "smoke"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["data_mirror"] is None


def test_a_reader_that_leaves_ends_the_command_quietly():
    """`gpt1 config | head -1`: the reader gone is no error of gpt1's (it was 'Broken pipe; check the path')."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "gpt1", "config", "--profile", "smoke"], cwd=REPO, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


@pytest.mark.parametrize(("argv", "said"), [
    (["fetch", "--out", "x", "--bogus"], "gpt1 fetch: error: unrecognized arguments: --bogus (see gpt1 fetch --help)"),
    (["sample", "--model", "m", "--tokenizer", "t", "--prompt", "p", "--top-k", "abc"],
     "gpt1 sample: error: argument --top-k: 'abc': give a whole number, or 0 (or none) to sample from every token"),
])  # fmt: skip
def test_a_bad_option_points_at_its_own_commands_help(capsys, argv, said):
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(argv)
    assert stop.value.code == 2 and capsys.readouterr().err.startswith(said)


def test_every_command_has_a_description_in_its_help():
    for name, parser in build_parser().stages.items():
        assert parser.description, name


@pytest.mark.parametrize("command", ["finetune", "encode-task"])
def test_the_task_help_names_every_task_a_job_takes(command):
    from gpt1.data.tasks import FINETUNE_TASKS

    text = " ".join(build_parser().stages[command].format_help().split())
    assert f"--task TASK one of {', '.join(FINETUNE_TASKS)}" in text
