"""Figure 2 right on examples the figure never reports: does a pre-training budget lift the zero-shot heuristics?

    GPT1_DATA_MIRROR=../shared/data .venv/bin/python -m experiments.zeroshot_heldout \\
        --run 1x=results/default/pretrain/gpt --run 2x=<folder> --run 4x=<folder> --examples 1000 --reported 1000

The zero-shot stage (gpt1.stages.zeroshot) scores its four heuristics on CoLA, SST-2 and RACE validation and on a seeded
subset of DPR's one split. Choosing a pre-training budget by the figure those examples draw would tune on a
reported split, so this scores the same heuristics, with the same code, on examples the stage never reports:

* CoLA, SST-2: a seeded `--examples` of their train splits outside the `--fit` examples that choose the threshold
  (CoLA) and the offset (SST-2), which are the stage's own (its seeded subset at zeroshot.max_examples = `--fit`);
* RACE: a seeded `--examples` of its train split (the stage reports validation);
* DPRD: the examples of its split outside the stage's seeded `--reported` (at most what is left).

Every run (`--run NAME=FOLDER`, a `gpt1 pretrain` output) is scored at its first snapshot and at its final model;
runs sharing a first snapshot (the same seed, so the same initial weights) score it once. Printed: each point's
score ± bootstrap SE, final minus first with the paired bootstrap's p, and how many of the four curves end above
where they start by more than one SE (the issue's yardstick for Figure 2 right). Raw points:
experiments/results/zeroshot_heldout.jsonl; `--from-log` prints an invocation's table again from them, scoring nothing.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import MIRROR, REPO, machine

LOG = Path(__file__).with_name("results") / "zeroshot_heldout.jsonl"
TOKENIZER = REPO / "results" / "default" / "tokenizer"


@dataclass(frozen=True)
class HeldOut:
    """One task's probe on held-out examples, in the form gpt1.evaluation.probes.task_result reads."""

    task: Any  # gpt1.evaluation.probes.TaskData
    reference: dict[str, Any]


def complement(n: int, taken: np.ndarray) -> np.ndarray:
    """Positions 0..n-1 not in `taken`, in order."""
    return np.setdiff1d(np.arange(n), taken)


def held_out_tasks(tokenizer: Any, examples: int, fit: int, reported: int, seed: int) -> list[HeldOut]:
    """The four probes on examples the zero-shot stage never reports (see the module's docstring)."""
    from gpt1.data.rows import cap_positions, load_examples
    from gpt1.evaluation.probes import (
        TASK_ORDER,
        TaskData,
        cola_probe,
        dprd_probe,
        race_probe,
        sst2_offset_probe,
    )
    from gpt1.pipeline.config import load_config

    references = load_config(REPO / "params.yaml", "default").root["zeroshot_reference"]
    out = []
    for name in TASK_ORDER:
        pool = load_examples(name, "train", MIRROR).examples  # every labelled example, in the split's order
        if name in ("cola", "sst2"):
            fit_at = cap_positions(np.arange(len(pool)), fit, seed)  # the stage's own fit subset
            test_at = cap_positions(complement(len(pool), fit_at), examples, seed)
            fit_rows, test_rows = [pool[i] for i in fit_at], [pool[i] for i in test_at]
            if name == "cola":
                probe = cola_probe(tokenizer, fit_rows, test_rows)
            else:  # the stage's rule: an offset fitted only where a label word spans several tokens
                probe = sst2_offset_probe(tokenizer, test_rows, fit_rows)
        elif name == "race":
            probe = race_probe(tokenizer, [pool[i] for i in cap_positions(np.arange(len(pool)), examples, seed)])
        else:  # dprd: its one split is the reported one; keep what the stage's subset leaves
            test_at = complement(len(pool), cap_positions(np.arange(len(pool)), reported, seed))
            probe = dprd_probe(tokenizer, [pool[i] for i in test_at])
        out.append(HeldOut(TaskData(name, probe, "train", {}), references[name]))
    return out


def score(weights: Path, tasks: list[HeldOut]) -> dict[str, Any]:
    """gpt1.stages.zeroshot's Scored of every task under the model in `weights`."""
    from gpt1.evaluation.probes import evaluate_probe
    from gpt1.modeling.checkpoints import load_pretrained

    model, _ = load_pretrained(weights)
    model.eval()
    with torch.no_grad():
        return {t.task.name: evaluate_probe(model, t.task.probe) for t in tasks}


def points(runs: dict[str, Path]) -> dict[str, tuple[str, Path]]:
    """point name -> (weights sha256, weights): `first` once if every run starts from the same weights, else
    `NAME:first` per run; then `NAME:final` per run."""
    from gpt1.modeling.checkpoints import iter_snapshots
    from gpt1.pipeline import layout
    from gpt1.pipeline.files import sha256_file

    firsts = {name: next(iter(iter_snapshots(folder))) for name, folder in runs.items()}
    if len({entry["sha256"] for entry, _ in firsts.values()}) == 1:
        entry, path = next(iter(firsts.values()))
        chosen = {"first": (entry["sha256"], path)}
    else:
        chosen = {f"{name}:first": (entry["sha256"], path) for name, (entry, path) in firsts.items()}
    for name, folder in runs.items():
        chosen[f"{name}:final"] = (sha256_file(folder / layout.MODEL_WEIGHTS), folder / layout.MODEL_WEIGHTS)
    return chosen


def first_point(run: str, names: Any) -> str:
    """The name of `run`'s first point among `names` (see `points`)."""
    return "first" if "first" in names else f"{run}:first"


def table(runs: list[str], results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Markdown: per task the first point (one per run when the runs start from different weights), each run's
    final point, and final minus first (p); then the count. `results`: point -> task ->
    gpt1.evaluation.probes.task_result."""
    def first(run: str) -> dict[str, Any]:
        return results[first_point(run, results)]

    starts = list(dict.fromkeys(first_point(run, results) for run in runs))
    head = ["task (examples)", *(s.replace(":", " ") for s in starts), *(f"{r} final" for r in runs),
            *(f"{r} − first (p)" for r in runs)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    beyond = dict.fromkeys(runs, 0)
    tasks = results[starts[0]]
    for name, result in tasks.items():
        scale = 100.0 if result["metric"] == "accuracy" else 1.0
        cells = [f"{name} {result['metric']} ({result['examples']})",
                 *(f"{results[s][name]['raw'] * scale:.3g} ± {results[s][name]['se'] * scale:.2g}" for s in starts)]
        diffs = []
        for run in runs:
            end, start = results[f"{run}:final"][name], first(run)[name]
            cells.append(f"{end['raw'] * scale:.3g} ± {end['se'] * scale:.2g}")
            up = end["raw"] - start["raw"]
            beyond[run] += up > max(end["se"], start["se"])
            diffs.append(f"{up * scale:+.3g} ({end['p_vs_first']:.2f})")
        lines.append("| " + " | ".join(cells + diffs) + " |")
    counts = ", ".join(f"{run} {n} of {len(tasks)}" for run, n in beyond.items())
    return "\n".join(lines) + f"\n\nCurves above their start by more than one SE (the larger of the two): {counts}"


def logged(args: dict[str, Any]) -> tuple[str, dict[str, dict[str, dict[str, Any]]]]:
    """(machine, point -> task results) of the logged invocation with these arguments (the latest, if repeated)."""
    rows = [row for line in LOG.read_text().splitlines() if (row := json.loads(line))["args"] == args]
    if not rows:
        raise SystemExit(f"{LOG}: no points logged for {args}; run without --from-log to score them")
    return rows[-1]["machine"], {row["point"]: row["tasks"] for row in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, metavar="NAME=FOLDER",
                        help="a gpt1 pretrain output folder (snapshots/ and model.safetensors); repeat for more runs")
    parser.add_argument("--examples", type=int, default=1000, help="held-out examples per task (DPRD: what is left)")
    parser.add_argument("--fit", type=int, default=1000,
                        help="the stage's zeroshot.max_examples: CoLA's and SST-2's fit subsets (default 1000)")
    parser.add_argument("--reported", type=int, default=1000,
                        help="DPRD examples the stage reports (zeroshot.max_examples; default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="zeroshot.seed (default 0)")
    parser.add_argument("--from-log", action="store_true",
                        help="print the table of these arguments' logged points again, scoring nothing")
    args = parser.parse_args()
    invocation = {k: v for k, v in vars(args).items() if k != "from_log"}  # what the log records and matches
    runs = {name: Path(folder) for name, folder in (item.split("=", 1) for item in args.run)}
    if args.from_log:
        recorded_on, results = logged(invocation)
        print(recorded_on)
        print(table(list(runs), results))
        return

    from gpt1.data.tokenizer import GPT1Tokenizer
    from gpt1.evaluation.probes import task_result

    tasks = held_out_tasks(GPT1Tokenizer.load(TOKENIZER), args.examples, args.fit, args.reported, args.seed)
    chosen = points(runs)
    scored = {point: score(weights, tasks) for point, (_, weights) in chosen.items()}
    first = {run: scored[first_point(run, scored)] for run in runs}
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for point in chosen:
        run = point.split(":")[0]
        base = None if point.endswith("first") else first[run]
        results[point] = {t.task.name: task_result(t.task, t.reference, scored[point][t.task.name],
                                                   None if base is None else base[t.task.name]) for t in tasks}
    with open(LOG, "a") as handle:
        for point, (sha, weights) in chosen.items():
            handle.write(json.dumps({"point": point, "weights": str(weights), "sha256": sha, "args": invocation,
                                     "machine": machine(), "tasks": results[point]}) + "\n")
    print(machine())
    print(table(list(runs), results))


if __name__ == "__main__":
    main()
