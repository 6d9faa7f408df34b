"""A copy of the project that both engines run in, as a user's checkout: what Snakemake and DVC read, params.yaml
selecting a profile changed by `--set`-style overrides and top-level lists, git and DVC initialised. The end-to-end
tests make theirs here (tests/pipeline_repo.smoke_checkout) and so does the GPU check's section dag (gpu/dag.py),
so the DAG rehearsed on the CPU is the one the GPU runs.

Imports no torch, no Snakemake and no DVC (DVC runs as `python -m dvc` in a child).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from bench.gpu.env import PARAMS, REPO

FOLDERS = ("workflow", "gpt1")
FILES = ("dvc.yaml", "environment.yml", ".gitignore", ".dvcignore")


def params(profile: str, overrides: tuple[str, ...] = (), top: dict[str, Any] | None = None) -> dict[str, Any]:
    """The repository's params.yaml selecting `profile`, that profile changed by `overrides` (as `gpt1 --set
    KEY=VALUE` takes them), then the top-level keys of `top` (e.g. finetune_tasks)."""
    from gpt1.pipeline.config import apply_overrides

    settings = apply_overrides(yaml.safe_load(PARAMS.read_text()), profile, list(overrides))
    settings.update(profile=profile, **(top or {}))
    return settings


def command(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run `args`; its output, or a RuntimeError holding the end of it."""
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                           f"{done.stderr[-3000:]}")
    return done.stdout + done.stderr


def init(root: Path, env: dict[str, str]) -> bool:
    """`git init` and `dvc init` in `root`; where git is missing (the GPU machine's image may lack it), `dvc init
    --no-scm`. True when git was there."""
    git = shutil.which("git", path=env.get("PATH")) is not None
    if git:
        command(["git", "init", "-q"], root, env)
    command([sys.executable, "-m", "dvc", "init", "-q", *(() if git else ("--no-scm",))], root, env)
    shutil.copy(REPO / ".dvc" / "config", root / ".dvc" / "config")
    return git


def make(root: Path, env: dict[str, str], settings: dict[str, Any]) -> bool:
    """The checkout in `root` with `settings` as its params.yaml (see `params`); True when it is a git repository
    (else DVC runs without an SCM)."""
    root.mkdir(parents=True, exist_ok=True)
    for name in FOLDERS:
        shutil.copytree(REPO / name, root / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for name in FILES:
        shutil.copy(REPO / name, root / name)
    (root / "params.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    return init(root, env)
