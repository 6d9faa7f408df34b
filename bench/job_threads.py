"""Throughput of pipeline jobs on a small machine: one job at a time with every core, or one job per core.

    GPT1_DATA_MIRROR=../shared/data .venv/bin/python -m bench.job_threads [--rounds 2] [--group finetune]

Snakemake sets OMP_NUM_THREADS to a job's `threads:`. With `threads: workflow.cores` the jobs run one after
another, each using every core; with `threads: 1` they run side by side, one core each. This times the same
jobs of the default profile both ways, interleaved (A B A B) because this machine's speed drifts, and prints
the median wall time of each side and their ratio. Needs the default pipeline's pre-trained models and tokenizer
(results/default/).

Groups: finetune (four fine-tuning jobs of the default recipe), pretrain (the GPT and the LSTM, 60 updates each).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import REPO, machine, median

RESULTS = REPO / "results" / "default"
# Four jobs of similar length, longest first, so that two side by side finish together: the pipeline's fan-out has
# dozens of jobs, where the load balances; with few, one long job would time its own single-thread speed instead.
FINETUNE_TASKS = ("stsb", "qqp", "qnli", "mnli")


def finetune_jobs(work: Path) -> list[list[str]]:
    return [[sys.executable, "-m", "gpt1", "finetune", "--profile", "default", "--task", task,
             "--variant", "pretrained", "--seed", "0", "--pretrained", str(RESULTS / "pretrain" / "gpt"),
             "--tokenizer", str(RESULTS / "tokenizer"), "--out", str(work / task)] for task in FINETUNE_TASKS]


def pretrain_jobs(work: Path) -> list[list[str]]:
    return [[sys.executable, "-m", "gpt1", "pretrain", "--profile", "default", "--model", model,
             "--ids", str(RESULTS / "ids"), "--tokenizer", str(RESULTS / "tokenizer"), "--out", str(work / model),
             "--set", "pretrain.max_steps=60", "--set", "pretrain.eval_every=30", "--set", "pretrain.snapshots=2"]
            for model in ("gpt", "lstm")]


def run_job(command: list[str], threads: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tempfile.gettempdir()}/bench-job-threads.db"}
    subprocess.run(command, env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def timed(commands: list[list[str]], parallel: bool, cores: int) -> float:
    start = time.perf_counter()
    if parallel:  # one job per core, one thread each (threads: 1)
        with ThreadPoolExecutor(cores) as pool:
            list(pool.map(lambda command: run_job(command, 1), commands))
    else:  # one job at a time with every core (threads: workflow.cores)
        for command in commands:
            run_job(command, cores)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--group", choices=["finetune", "pretrain"], default="finetune")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    serial, parallel = [], []
    with tempfile.TemporaryDirectory() as tmp:
        jobs = (finetune_jobs if args.group == "finetune" else pretrain_jobs)(Path(tmp))
        for round_ in range(args.rounds):
            serial.append(timed(jobs, parallel=False, cores=cores))
            parallel.append(timed(jobs, parallel=True, cores=cores))
            print(f"round {round_}: one at a time x{cores} threads {serial[-1]:.0f} s, "
                  f"{cores} side by side x1 thread {parallel[-1]:.0f} s", flush=True)
    print(f"\n{machine()}\n{args.group}: {len(jobs)} jobs, {args.rounds} rounds, interleaved")
    print(f"| side | median wall time |\n| --- | --- |\n| one at a time, {cores} threads | {median(serial):.0f} s |")
    print(f"| {cores} side by side, 1 thread | {median(parallel):.0f} s |")
    print(f"speed-up of side by side: {median(serial) / median(parallel):.2f}x")


if __name__ == "__main__":
    main()
