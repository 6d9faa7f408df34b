"""What the sections of bench/gpu_check.py share: the run's context (device, sizes, folders, deadline), the
`gpt1` children's commands and environment, and one record per section.

Imports no torch: the orchestrator stays light, and `--device cpu` hides the GPUs before any child loads torch.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "bench" / "gpu_bundle"
PARAMS = REPO / "params.yaml"
PROFILE = "smoke"  # its synthetic data and task sizes; SMALL makes its model a little larger
CONTEXT_FILE = "context.json"
MACHINE_FILE = "machine.json"  # in WORK: provenance() of the run, for every report's header
COMMIT_FILE = "commit.txt"  # in the bundle: the commit it was prepared at (the GPU machine's copy has no .git)

# The stages of section c, and the bundle's CPU stages before them, run the smoke profile with these settings: the
# bundle's examples are encoded for this n_ctx, so both sides must pass the same (encode-task records them, finetune
# checks them). `fast`: the GPU machine has no spaCy or ftfy; unpinned: the pin is about CPU kernels.
SMALL = ("cpu.pinned=false", "bpe.pretokenizer=fast", "model.n_layer=2", "model.n_embd=64", "model.n_head=2",
         "model.n_ctx=64", "model.dropout=0.1")  # fmt: skip
# Updates of 16 windows in micro-batches of 8, a resumable checkpoint every 25: 300 updates on a GPU (seconds: the
# kill must land before the end), 100 on the CPU (where an update takes longer and the rehearsal must be quick).
PRETRAIN = ("pretrain.batch_size=16", "pretrain.micro_batch_size=8", "pretrain.epochs=1000",
            "pretrain.warmup_steps=20", "pretrain.eval_every=50", "pretrain.eval_batches=2",
            "pretrain.checkpoint_every=25", "pretrain.snapshots=4")  # fmt: skip
PRETRAIN_STEPS = {"cuda": 300, "cpu": 100}
# One task per input transformation (paper Figure 1)
TASKS = {"classification": "sst2", "entailment": "rte", "similarity": "stsb", "multiple_choice": "story_cloze"}


@dataclass
class Context:
    """One run of the check: where it writes, on what, how small, until when."""

    out: Path  # what comes back from the GPU machine (at most 8 files): see report.OUT_FILES
    work: Path  # everything else: the stages' outputs, the MLflow store, the sections' records, logs
    bundle: Path  # made by --prepare: data/ (tokenizer, ids, tasks), wheels/, lengths.json
    device: str  # cuda | cpu
    tiny: bool  # tiny shapes in sections b, d and e (always on the CPU)
    started: float  # time.time() at the start
    budget_s: float  # wall-clock seconds for the whole run

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def remaining(self) -> float:
        return self.budget_s - (time.time() - self.started)

    def record(self, section: str) -> Path:
        return self.work / "sections" / f"{section}.json"

    def read_record(self, section: str) -> dict[str, Any] | None:
        path = self.record(section)
        return json.loads(path.read_text()) if path.is_file() else None

    def pretrain(self) -> tuple[str, ...]:
        """The --set overrides of every pre-training run of the check (sections c and d)."""
        return (*PRETRAIN, f"pretrain.max_steps={self.pretrain_steps}")

    @property
    def pretrain_steps(self) -> int:
        return PRETRAIN_STEPS[self.device]

    def machine(self) -> dict[str, Any]:
        """provenance() as the run saved it at its start (empty before)."""
        path = self.work / MACHINE_FILE
        return json.loads(path.read_text()) if path.is_file() else {}

    def data(self, *parts: str) -> Path:
        return self.bundle.joinpath("data", *parts)

    def save(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        values = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}
        (self.work / CONTEXT_FILE).write_text(json.dumps(values, indent=1))

    @classmethod
    def load(cls, work: Path) -> Context:
        values = json.loads((work / CONTEXT_FILE).read_text())
        return cls(**{k: Path(values[k]) if k in ("out", "work", "bundle") else v for k, v in values.items()})


def mirror() -> Path:
    """The data mirror on this machine: GPT1_DATA_MIRROR, else ../shared/data (bench.common's, which imports torch)."""
    return Path(os.environ.get("GPT1_DATA_MIRROR", REPO.parent / "shared" / "data"))


def write_json(path: Path, data: Any) -> None:
    """Whole or not at all: a reader (or a time-out) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(temp, path)


# ----------------------------------------------------------------------------------------------------------------
# Provenance: which machine and which commit (issue 43 item 5)


def command_output(*args: str, cwd: Path = REPO) -> str | None:
    """A command's stripped stdout; None when it is missing or fails (git outside a checkout, no nvidia-smi)."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit() -> str | None:
    """HEAD, with "-dirty" when tracked files differ from it; None outside a checkout (not a parent folder's)."""
    if not (REPO / ".git").exists():
        return None
    head = command_output("git", "rev-parse", "HEAD")
    if not head:
        return None
    changed = command_output("git", "status", "--porcelain", "--untracked-files=no")
    return head + ("-dirty" if changed else "")


def write_commit(bundle: Path) -> str:
    """At prepare time, in the checkout: the commit into the bundle, which travels where .git does not."""
    commit = git_commit()
    if commit is None:
        raise SystemExit(f"prepare: {REPO} is not a git checkout; cannot name the commit the bundle is for")
    (bundle / COMMIT_FILE).write_text(commit + "\n")
    return commit


def commit(bundle: Path) -> str:
    """The commit that runs: the one the bundle was prepared at (the device tool's copy of the tree carries the .git
    of the session's start, whose HEAD is stale: seen on 2026-11-27), saying where git disagrees; git's where no
    bundle names one."""
    path = bundle / COMMIT_FILE
    prepared = path.read_text().strip() if path.is_file() else ""
    found = git_commit()
    if prepared:
        stale = f"; the .git here says {found}" if found is not None and found != prepared else ""
        return f"{prepared} (as prepared{stale})"
    if found is not None:
        return found
    return "unknown (no git checkout, and no commit.txt in the bundle: run --prepare)"


def cpu_model() -> str:
    """The processor's name as /proc/cpuinfo gives it (what the numerics probe names a host by)."""
    from gpt1.training.numerics import processor  # no torch: the orchestrator stays light

    return processor()


def gpu_name(device: str) -> str:
    """nvidia-smi's names of the GPUs (no torch here: the orchestrator stays light)."""
    if device != "cuda":
        return "no GPU (device cpu)"
    names = command_output("nvidia-smi", "--query-gpu=name", "--format=csv,noheader")
    return ", ".join(sorted(set(names.splitlines()))) if names else "a CUDA device (nvidia-smi gave no name)"


def package_version(name: str) -> str | None:
    """An installed package's version from its metadata (importing torch here would cost the orchestrator seconds)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def provenance(ctx: Context) -> dict[str, Any]:
    """What every report names, whichever sections ran: the machine, its driver and packages, and the commit."""
    driver = command_output("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader") if ctx.cuda else None
    found = {"gpu": gpu_name(ctx.device), "cpu": cpu_model(), "cpus": os.cpu_count(), "host": socket.gethostname(),
             "commit": commit(ctx.bundle), "python": platform.python_version(),
             "driver": driver.splitlines()[0] if driver else None,
             "torch": package_version("torch"), "transformers": package_version("transformers")}
    return {key: value for key, value in found.items() if value}


# ----------------------------------------------------------------------------------------------------------------
# The gpt1 CLI as a child


def with_repo(env: dict[str, str]) -> dict[str, str]:
    """`env` with the repository first on PYTHONPATH: a child runs this checkout's `gpt1` and `bench` (`python -m
    bench.gpu_check`, `python -m gpt1`) from any folder, installed or not."""
    paths = [str(REPO), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(REPO)]]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def child_env(ctx: Context) -> dict[str, str]:
    """The environment of every child: the repository importable, the run's MLflow store, no progress bars, no
    data mirror (the smoke profile's data is made by the project); on the CPU no GPU and one thread each."""
    env = with_repo(dict(os.environ))
    env.update(MLFLOW_TRACKING_URI=f"sqlite:///{ctx.work / 'mlflow.db'}", TQDM_DISABLE="1", PYTHONUNBUFFERED="1")
    env.pop("GPT1_DATA_MIRROR", None)
    if not ctx.cuda:
        env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def gpt1_args(stage: str, *args: str, overrides: tuple[str, ...] = ()) -> list[str]:
    """`python -m gpt1 STAGE` on the repository's params.yaml, the smoke profile, SMALL and `overrides`."""
    sets = [f"--set={o}" for o in (*SMALL, *overrides)]
    return [sys.executable, "-m", "gpt1", stage, "--params", str(PARAMS), "--profile", PROFILE, *sets, *args]


@dataclass
class Finished:
    """A child that ran to its end: its command (as text), exit code, seconds and the tail of its output."""

    name: str
    command: str
    returncode: int
    seconds: float
    log: Path

    def tail(self, chars: int = 1500) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.is_file() else ""

    def check(self) -> Finished:
        if self.returncode != 0:
            raise RuntimeError(f"{self.name}: exit {self.returncode} after {self.seconds:.0f} s: {self.tail()}")
        return self


def start(ctx: Context, name: str, args: list[str]) -> tuple[subprocess.Popen, Path, float]:
    """Start a child whose output goes to WORK/logs/NAME.log, in WORK (where MLflow puts its artifacts: ./mlruns)."""
    log = ctx.work / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        child = subprocess.Popen(args, env=child_env(ctx), cwd=ctx.work, stdout=handle, stderr=subprocess.STDOUT)
    return child, log, time.perf_counter()


def run_all(ctx: Context, jobs: dict[str, list[str]], timeout: float) -> dict[str, Finished]:
    """Run the children side by side (fine-tuning jobs leave most of a GPU idle); wait at most `timeout` seconds
    for all of them, then kill what is left (its exit code then says so)."""
    started = {name: start(ctx, name, args) for name, args in jobs.items()}
    deadline, done = time.monotonic() + timeout, {}
    for name, (child, log, tick) in started.items():
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        done[name] = Finished(name, " ".join(jobs[name]), child.returncode, time.perf_counter() - tick, log)
    return done


def run_one(ctx: Context, name: str, args: list[str], timeout: float) -> Finished:
    return run_all(ctx, {name: args}, timeout)[name]
