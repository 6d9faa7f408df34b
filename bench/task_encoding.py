"""What encoding each task once saves: a fine-tuning job's data preparation, loaded and tokenised in the job (as
every job did before the encode_task stage) or read from the task's encoded examples.

    GPT1_DATA_MIRROR=../shared/data .venv/bin/python -m bench.task_encoding [--rounds 2] [--tasks rte race]

Each measurement is a fresh process, as a pipeline job is: it loads the default profile's tokenizer (untimed: a job
needs it either way), then times side A, `plan_task_data` (parquet, cut, cap, spaCy, BPE, §3.3 transformation), or
side B, `read_encoded` (the encode_task stage's files, made once beforehand and timed too). Sides interleave
A B A B per task because this machine's speed drifts; medians are quoted. Needs results/default/tokenizer.
The pipeline runs each task's data preparation once per job that reads it: the count per task is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, machine, median

RESULTS = REPO / "results" / "default"
SIDE = r"""
import json, sys, time
from pathlib import Path
from gpt1.pipeline.config import load_config
from gpt1.data.rows import data_settings, data_source
from gpt1.data.taskdata import plan_task_data, read_encoded
from gpt1.data.tasks import get_task
from gpt1.data.tokenizer import GPT1Tokenizer
side, task, folder = sys.argv[1], sys.argv[2], Path(sys.argv[3])
cfg = load_config("params.yaml", "default")
spec, finetune, n_ctx = get_task(task), cfg.section("finetune"), cfg.section("model")["n_ctx"]
tokenizer = GPT1Tokenizer.load(sys.argv[4])
start = time.perf_counter()
source = data_source(cfg.data_mirror, False, spec)
if side == "load":
    data = plan_task_data(spec, finetune, source, tokenizer, n_ctx)
else:
    data = read_encoded(folder, spec, tokenizer.fingerprint(), n_ctx, data_settings(spec, finetune, source))
print(json.dumps({"seconds": time.perf_counter() - start, "examples": len(data.train.examples)
                  + sum(len(p.examples) for p in data.evals)}))
"""


def side(name: str, task: str, folder: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", SIDE, name, task, str(folder), str(RESULTS / "tokenizer")],
                         cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def encode_once(task: str, folder: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpt1", "encode-task", "--profile", "default", "--task", task,
                    "--tokenizer", str(RESULTS / "tokenizer"), "--out", str(folder)], cwd=REPO,
                   capture_output=True, check=True,
                   env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder.parent}/mlflow.db"})
    return time.perf_counter() - start


def jobs_per_task(task: str) -> int:
    """Jobs of the default pipeline that prepare this task's data: variants, ablations, layer runs (n_layer + 1)."""
    import yaml

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    seeds = len(params["seeds"])
    n = len(params["finetune_variants"]) * seeds
    n += 2 * seeds if task in params["ablation_tasks"] else 0
    layers = params["profiles"]["default"]["model"]["n_layer"] + 1
    return n + (layers * seeds if task in params["layer_transfer_tasks"] else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tasks", nargs="+", default=None, help="default: params.yaml's finetune_tasks")
    args = parser.parse_args()
    import yaml

    tasks = args.tasks or yaml.safe_load((REPO / "params.yaml").read_text())["finetune_tasks"]
    print(f"# {machine()}; rounds {args.rounds}")
    print("| task | examples | load in the job (median) | read encoded (median) | saved per job | jobs | saved "
          "per run | encode once |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    totals = [0.0, 0.0]
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            folder = Path(tmp) / task
            once = encode_once(task, folder)
            times: dict[str, list[float]] = {"load": [], "read": []}
            examples = 0
            for _ in range(args.rounds):
                for name in ("load", "read"):
                    result = side(name, task, folder)
                    times[name].append(result["seconds"])
                    examples = result["examples"]
            load, read, jobs = median(times["load"]), median(times["read"]), jobs_per_task(task)
            saved = jobs * (load - read) - once
            totals[0] += saved
            totals[1] += once
            print(f"| {task} | {examples} | {load:.2f} s | {read:.2f} s | {load - read:.2f} s | {jobs} | "
                  f"{saved:.1f} s | {once:.1f} s |", flush=True)
    print(f"\nsaved per pipeline run, net of the encode_task jobs: {totals[0]:.0f} s "
          f"(the encode_task jobs themselves: {totals[1]:.0f} s, process start-up included)")


if __name__ == "__main__":
    main()
