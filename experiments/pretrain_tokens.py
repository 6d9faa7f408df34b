"""Fine-tuned score against pre-training tokens: each snapshot of the pre-training run as the starting point.

    GPT1_DATA_MIRROR=../shared/data OMP_NUM_THREADS=1 .venv/bin/python -m experiments.pretrain_tokens \\
        --snapshots 3,4,5 --tasks sst2:3200,qnli:400,rte:400

Each arm fine-tunes the default profile's GPT from one weight snapshot of its pre-training
(results/default/pretrain/gpt/snapshots, taken at log-spaced updates; the last is the final model), or, arm
`scratch`, from no pre-training at all, or, arm `NAME:INDEX`, from a snapshot of another pre-training run named by
`--run NAME=FOLDER` (a longer budget, say: its full schedule, not a snapshot midway; or another shape of the GPT,
whose model.json says it), through
experiments/finetune_ab.py's held-out design: every arm trains on the same
seeded subset of the first 80% of the task's training data, from the same seed, and is scored on the same held-out
rest, never on a split the tables report. The arms of a task run one after another, their order rotated from task
to task. Printed per task and arm: the pre-training tokens and validation perplexity of the snapshot, the held-out
score ± bootstrap SE, and its difference from scratch and from the final model with the p of a paired bootstrap
over the held-out examples. So it measures how fast the fine-tuned scores rise with the pre-training budget, which
says what budget the paper's effects would need. Raw points: experiments/results/pretrain_tokens.jsonl (the run of
2026-11-23 logged no scores there: its printed table is experiments/results/pretrain_tokens.txt).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from bench.common import REPO, machine
from experiments.finetune_ab import compare, holdout_point
from experiments.learning_curves import RESULTS

PRETRAIN = REPO / "results" / "default" / "pretrain" / "gpt"
LOG = RESULTS.with_name("pretrain_tokens.jsonl")


def snapshot_folder(arm: str, run: Path, entry: dict[str, Any], weights: Path, into: Path) -> Path:
    """A pre-training folder (model.json + model.safetensors), named after `arm`, that holds one snapshot of `run`,
    so fine-tuning can start from it: the run's final model.json with the snapshot's step, tokens and weights."""
    from gpt1.pipeline import layout
    from gpt1.pipeline.files import read_json

    meta = read_json(run / layout.MODEL_JSON) | {
        "step": entry["step"], "tokens": entry["tokens"],
        "weights": {"bytes": entry["bytes"], "sha256": entry["sha256"]}}
    folder = into / arm.replace(":", "-")
    folder.mkdir()
    (folder / layout.MODEL_JSON).write_text(json.dumps(meta, indent=2))
    (folder / layout.MODEL_WEIGHTS).symlink_to(weights.resolve())
    return folder


def arms(names: list[str], runs: dict[str, Path], into: Path) -> dict[str, dict[str, Any]]:
    """name -> {variant, pretrained folder, tokens, val_perplexity} for `scratch`, snapshot indexes of the default
    run and `RUN:INDEX` of the runs named by --run."""
    from gpt1.modeling.checkpoints import iter_snapshots

    chosen: dict[str, dict[str, Any]] = {}
    for name in names:
        if name == "scratch":
            chosen[name] = {"variant": "scratch", "pretrained": None, "tokens": 0, "val_perplexity": None}
            continue
        run_name, _, index = name.rpartition(":")
        if run_name not in runs:
            raise SystemExit(f"--snapshots: {name!r} names no run: --run {run_name or '?'}=FOLDER is missing")
        run = runs[run_name]
        snapshots = {str(entry["index"]): (entry, weights) for entry, weights in iter_snapshots(run)}
        if index not in snapshots:
            raise SystemExit(f"--snapshots: {name!r} is neither 'scratch' nor a snapshot index of "
                             f"{run / 'snapshots'} ({', '.join(snapshots)})")
        entry, weights = snapshots[index]
        chosen[name] = {"variant": "pretrained", "pretrained": snapshot_folder(name, run, entry, weights, into),
                        "tokens": entry["tokens"], "val_perplexity": math.exp(entry["val_loss"])}
    return chosen


def named_runs(pairs: list[str]) -> dict[str, Path]:
    """'' -> the default profile's run, and NAME -> FOLDER for each --run NAME=FOLDER."""
    runs = {"": PRETRAIN}
    for pair in pairs:
        name, sep, folder = pair.partition("=")
        if not sep or not name or ":" in name or not (Path(folder) / "snapshots").is_dir():
            raise SystemExit(f"--run {pair!r}: want NAME=FOLDER, FOLDER a finished pre-training run (with snapshots/)")
        runs[name] = Path(folder)
    return runs


def measure(chosen: dict[str, dict[str, Any]], tasks: str, seed: int) -> None:
    names = list(chosen)
    final = max((n for n in names if n != "scratch"), key=lambda n: chosen[n]["tokens"], default=None)
    print("| task | arm | pre-training tokens | val ppl | held-out score ± SE | vs scratch (paired p) "
          "| vs most tokens (paired p) | train s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for turn, item in enumerate(tasks.split(",")):
        task, size = item.split(":")
        order = names[turn % len(names):] + names[:turn % len(names)]
        points = {name: holdout_point(task, int(size), seed, chosen[name]["variant"],
                                      pretrained=chosen[name]["pretrained"]) for name in order}
        scored = {name: compare(points[name], points[name])[:2] for name in names}
        with open(LOG, "a") as handle:
            for name, point in points.items():
                record = {k: v for k, v in point.items() if k not in ("labels", "predictions")}
                handle.write(json.dumps(record | {"arm": name, "tokens": chosen[name]["tokens"],
                                                  "val_perplexity": chosen[name]["val_perplexity"],
                                                  "score": scored[name][0], "se": scored[name][1],
                                                  "machine": machine()}) + "\n")
        for name in names:
            score, se = scored[name]
            cells = [_versus(points, other, name) for other in ("scratch", final)]
            ppl = chosen[name]["val_perplexity"]
            print(f"| {task} | {name} | {chosen[name]['tokens']:,} | {'' if ppl is None else f'{ppl:,.0f}'} | "
                  f"{100 * score:.1f} ± {100 * se:.1f} | {cells[0]} | {cells[1]} | "
                  f"{points[name]['train_seconds']:.0f} |", flush=True)


def _versus(points: dict[str, dict[str, Any]], other: str | None, name: str) -> str:
    if other is None or other not in points or other == name:
        return ""
    diff, p = compare(points[other], points[name])[4:]
    return f"{100 * diff:+.1f} (p {p:.2f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshots", default="scratch,3,4,5",
                        help="arms: 'scratch' and snapshot indexes of the pre-training run (its snapshots/index.json)")
    parser.add_argument("--run", action="append", default=[], metavar="NAME=FOLDER",
                        help="another pre-training run (longer, or another shape); arms name its snapshots NAME:INDEX")
    parser.add_argument("--tasks", default="sst2:3200,qnli:400,rte:400", help="task:training examples, ...")
    parser.add_argument("--seed", type=int, default=0, help="the fine-tuning seed of every arm (subset, order, init)")
    args = parser.parse_args(argv)
    runs = named_runs(args.run)
    print(f"{machine()}; pre-training run {PRETRAIN.relative_to(REPO)}"
          + "".join(f", {name}: {folder}" for name, folder in runs.items() if name) + f"; seed {args.seed}")
    with tempfile.TemporaryDirectory() as into:
        measure(arms(args.snapshots.split(","), runs, Path(into)), args.tasks, args.seed)


if __name__ == "__main__":
    main()
