"""Where a fine-tuning job's time goes: jobs of `python -m gpt1 finetune` on a finished run's pre-trained GPT and
encoded task, each process timed from outside and its phases read from its MLflow run (gpt1.pipeline.clock). In the
same rounds, A B C A B C (this machine's speed drifts): the same job exiting as a plain `sys.exit(main())` does,
through the interpreter's last collection (what `gpt1.cli.main.entry` skips), and a baseline, an interpreter that
imports torch and MLflow and exits: the floor of every model job's process.

    .venv/bin/python -m bench.job_phases [--results results/smoke] [--task rte] [--rounds 5]

Prints a Markdown table: each phase's median seconds and share of the job's wall; what follows the last mark
(the run's end, the interpreter's exit) is the wall less time.process_s. Section dag of bench/gpu_check.sh reads the
same phases from a whole DAG's runs (`run_times`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpt1.pipeline import layout
from gpt1.pipeline.clock import PHASE_PREFIX, PHASES_TAG

BASELINE = "import torch, mlflow"  # what a model stage's process imports before its work
COLLECTED = "import sys; from gpt1.cli.main import main; sys.exit(main())"  # the exit before gpt1.cli.main.entry


def run_times(runs: list[Any]) -> dict[str, dict[str, Any]]:
    """Stage -> medians over its finished MLflow runs: the run's open span (`run_s`: MLflow's start to end); its
    `wall_seconds` (`wall_s`), and its training (`train_s`, tokens over tokens per second), where the stage logs
    them. For a fine-tuning job (the finetune stage's, the ablations' among them) the wall is the job's own (inputs
    loaded, trained, evaluated), the run opening after the loading and closing after the logs; pre-training's wall
    is its training alone, summed over resumed invocations. `phases`: where the stage logs them (pre-training,
    fine-tuning and layers: gpt1.pipeline.clock), the median seconds of each phase of the process, from the OS's
    start of it to its run's last metrics (`process`); beside a rule's Snakemake wall, the rest is the run's end and
    the process's exit."""
    spans: dict[str, dict[str, list[float]]] = {}
    phases: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        if run.info.status != "FINISHED" or run.info.end_time is None:
            continue
        metrics, stage = run.data.metrics, run.data.tags.get("gpt1.stage", "?")
        found = spans.setdefault(stage, {"run_s": [], "wall_s": [], "train_s": []})
        found["run_s"].append((run.info.end_time - run.info.start_time) / 1e3)
        if "wall_seconds" in metrics:
            found["wall_s"].append(metrics["wall_seconds"])
        if metrics.get("tokens_per_second") and "tokens" in metrics:
            found["train_s"].append(metrics["tokens"] / metrics["tokens_per_second"])
        for phase in [*filter(None, run.data.tags.get(PHASES_TAG, "").split(",")), "process"]:
            if (value := metrics.get(f"{PHASE_PREFIX}{phase}_s")) is not None:
                phases.setdefault(stage, {}).setdefault(phase, []).append(value)
    return {stage: {"runs": len(found["run_s"]),
                    **{k: round(statistics.median(v), 1) if v else None for k, v in found.items()},
                    "phases": {k: round(statistics.median(v), 2) for k, v in phases.get(stage, {}).items()}}
            for stage, found in sorted(spans.items())}


def finetune_command(results: Path, profile: str, task: str, out: Path, entry: list[str]) -> list[str]:
    """A fine-tuning job as the engines run it (the CLI in its own process, `entry` the interpreter's arguments that
    start it) on `results`' GPT, BPE and task."""
    return [sys.executable, *entry, "finetune", "--profile", profile, "--task", task, "--variant", "pretrained",
            "--seed", "0", "--pretrained", str(results / layout.pretrain_dir("gpt")),
            "--tokenizer", str(results / layout.TOKENIZER), "--examples", str(results / layout.task_dir(task)),
            "--out", str(out)]


def timed(command: list[str], env: dict[str, str]) -> float:
    """The command's wall seconds (run in the repository: params.yaml), from before its start to after its exit; it
    must succeed."""
    from bench.common import REPO

    tick = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - tick
    if done.returncode != 0:
        raise SystemExit(f"job_phases: {' '.join(command[:4])} ... exited {done.returncode}: "
                         f"{(done.stderr.strip().splitlines() or [''])[-1]}")
    return seconds


def measure(results: Path, profile: str, task: str, rounds: int, work: Path) -> dict[str, Any]:
    """`rounds` fine-tuning jobs, as many exiting through the last collection and as many baselines, interleaved;
    the jobs' phases from their MLflow runs (each kind of job its own store)."""
    from bench.gpu.stages import logged_runs

    kinds = {"job": ["-m", "gpt1"], "collected": ["-c", COLLECTED]}
    envs = {kind: {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work / kind}.db"} for kind in kinds}
    walls: dict[str, list[float]] = {"job": [], "collected": [], "baseline": []}
    for i in range(rounds):
        for kind, entry in kinds.items():
            walls[kind].append(timed(finetune_command(results, profile, task, work / f"{kind}{i}", entry), envs[kind]))
        walls["baseline"].append(timed([sys.executable, "-c", BASELINE], envs["job"]))
    found: dict[str, Any] = {"task": task, "profile": profile, "rounds": rounds}
    for kind in kinds:
        times = run_times(logged_runs(work / f"{kind}.db")[1])["finetune"]
        found[kind] = {"wall_s": statistics.median(walls[kind]), "phases": times["phases"], "runs": times["runs"]}
    found["baseline_s"] = statistics.median(walls["baseline"])
    return found


def markdown(found: dict[str, Any]) -> str:
    """The job's phases beside the same job exiting through the last collection; the baseline; the ratio."""
    job, collected = found["job"], found["collected"]

    def row(name: str, seconds: float, other: float) -> str:
        return f"| {name} | {seconds:.2f} | {seconds / job['wall_s']:.0%} | {other:.2f} |"

    lines = [f"`gpt1 finetune --task {found['task']}` ({found['profile']} profile), medians of {found['rounds']} "
             "rounds, A B C interleaved:", "",
             "| phase | seconds | share of the job | exiting through the last collection |",
             "| --- | ---: | ---: | ---: |"]
    lines += [row(phase, seconds, collected["phases"].get(phase, float("nan")))
              for phase, seconds in job["phases"].items() if phase != "process"]
    lines += [row("process (`time.process_s`: the start to the last mark)", job["phases"]["process"],
                  collected["phases"]["process"]),
              row("after the last mark: the run's end, the exit", job["wall_s"] - job["phases"]["process"],
                  collected["wall_s"] - collected["phases"]["process"]),
              row("**the job, timed from outside**", job["wall_s"], collected["wall_s"]),
              f"| baseline: `python -c '{BASELINE}'` | {found['baseline_s']:.2f} | "
              f"{found['baseline_s'] / job['wall_s']:.0%} | |"]
    return "\n".join([*lines, "", f"The job exiting through the last collection takes "
                                  f"{collected['wall_s'] / job['wall_s']:.2f}x as long."])


def main(argv: list[str] | None = None) -> None:
    from bench.common import REPO, machine

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=REPO / "results" / "smoke",
                        help="a finished run's results/<profile>/ (default: results/smoke)")
    parser.add_argument("--profile", default=None, help="its profile (default: the folder's name)")
    parser.add_argument("--task", default="rte", help="the task to fine-tune (default: rte)")
    parser.add_argument("--rounds", type=int, default=5, help="jobs and baselines each (default: 5)")
    args = parser.parse_args(argv)
    needed = [args.results / layout.pretrain_dir("gpt"), args.results / layout.task_dir(args.task)]
    if missing := [str(p) for p in needed if not p.is_dir()]:
        raise SystemExit(f"job_phases: {', '.join(missing)} missing: run the pipeline first (e.g. snakemake --cores "
                         f"all --config profile=smoke), or give --results")
    if args.rounds < 1:
        raise SystemExit(f"job_phases: --rounds {args.rounds}: at least 1")
    with tempfile.TemporaryDirectory(prefix="gpt1-job-phases-") as work:
        found = measure(args.results, args.profile or args.results.name, args.task, args.rounds, Path(work))
    print(machine())
    print(markdown(found))


if __name__ == "__main__":
    main()
