"""workflow/scripts/gpt1.sh, the stage command of both engines: which Python it runs, and torchrun per GPU."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ECHO = '#!/bin/sh\necho "$0 $*"\n'  # a stand-in Python that prints how it was called


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The launcher where it lives in a checkout, with nothing else around it."""
    shutil.copy(REPO / "workflow" / "scripts" / "gpt1.sh", executable(tmp_path / "workflow/scripts/gpt1.sh", ""))
    return tmp_path


def launch(root: Path, *args: str, **env: str) -> str:
    """Run the launcher with a minimal environment (no GPU variables, no nvidia-smi) plus `env`."""
    base = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    out = subprocess.run(["sh", "workflow/scripts/gpt1.sh", *args], cwd=root, env={**base, **env},
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout.strip()


def test_gpt1_python_wins(checkout: Path, tmp_path: Path):
    python = executable(tmp_path / "bin" / "python", ECHO)
    executable(checkout / ".venv/bin/python", ECHO)
    called = launch(checkout, "fetch", "--profile", "smoke", GPT1_PYTHON=str(python))
    assert called == f"{python} -m gpt1 fetch --profile smoke"


def test_the_checkouts_venv_without_gpt1_python(checkout: Path):
    """`.venv/bin/dvc repro` from a shell where nothing is activated: DVC sets no GPT1_PYTHON."""
    venv_python = executable(checkout / ".venv/bin/python", ECHO)
    assert launch(checkout, "report", "--out", "x").endswith(" -m gpt1 report --out x")
    assert Path(launch(checkout, "report").split()[0]).resolve() == venv_python.resolve()


@pytest.mark.parametrize(("gpus", "processes"), [
    ({"GPT1_GPUS": "4"}, 4),
    ({"SLURM_GPUS_ON_NODE": "2", "CUDA_VISIBLE_DEVICES": "0,1"}, 2),
    ({"CUDA_VISIBLE_DEVICES": "0,1,2"}, 3),
    ({"CUDA_VISIBLE_DEVICES": "0"}, 1),
    ({"CUDA_VISIBLE_DEVICES": ""}, 1),
    ({}, 1),
])  # fmt: skip
def test_per_gpu_starts_one_process_per_gpu(checkout: Path, tmp_path: Path, gpus: dict, processes: int):
    python = str(executable(tmp_path / "bin" / "python", ECHO))
    called = launch(checkout, "--per-gpu", "pretrain", "--model", "gpt", GPT1_PYTHON=python, **gpus)
    torchrun = f"-m torch.distributed.run --standalone --nproc_per_node={processes} " if processes > 1 else ""
    assert called == f"{python} {torchrun}-m gpt1 pretrain --model gpt"
