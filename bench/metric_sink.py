"""The pre-training loop's speed beside its MLflow writer thread: the sink as it is (`MetricSink`: at most one write
every WRITE_EVERY_S, sleeping in between) against the sink before 2026-12-01 (`EagerSink`: a write of whatever had
queued as soon as the last write ended), A B A B: the smoke GPT's own loop (gpt1.training.pretraining.train) for
--steps updates on a smoke run's token ids, each side logging to its own sqlite store. A write is ~20 ms of
SQLAlchemy's Python, and a thread that writes holds the interpreter's lock the loop needs.

    .venv/bin/python -m bench.metric_sink [--results results/smoke] [--steps 400] [--rounds 3]

Prints each side's updates a second (the loop's own wall, validation at its end included), their medians and ratio.
One torch thread, as the smoke profile's stage; its kernels are torch's own (not pinned: that needs a fresh process).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import statistics
import tempfile
from pathlib import Path
from typing import Any

from gpt1.pipeline import layout
from gpt1.pipeline.tracking import MetricSink


class EagerSink(MetricSink):
    """The sink before 2026-12-01, the baseline: the thread blocks for the first queued item, then writes everything
    queued with it at once, and goes back to waiting."""

    def _work(self) -> None:
        while True:
            items = [self.queue.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    items.append(self.queue.get_nowait())
            stop = items[-1] is None
            self._write([item for item in items if item is not None])
            if stop:
                return

    def close(self) -> None:
        if self.thread:
            self.queue.put(None)
            self.thread.join()
            self.thread = None


SINKS: dict[str, type[MetricSink]] = {"MetricSink": MetricSink, "EagerSink (before)": EagerSink}


def one_loop(results: Path, steps: int, sink: type[MetricSink], work: Path) -> float:
    """Updates a second of one pre-training loop of the smoke GPT, from a fresh job, logging through `sink`."""
    from gpt1.pipeline.config import load_config, pretrain_settings
    from gpt1.pipeline.tracking import stage_run
    from gpt1.training.pretraining import build_job, train
    from gpt1.training.runtime import init_runtime

    overrides = [f"pretrain.max_steps={steps}", "pretrain.epochs=1000", f"pretrain.eval_every={steps}",
                 f"pretrain.checkpoint_every={steps}"]
    cfg = load_config(layout_params(), "smoke", overrides)
    job = build_job("gpt", cfg.section("model"), pretrain_settings(cfg, "gpt"), results / layout.IDS,
                    results / layout.TOKENIZER, work / "out", init_runtime())  # as the stage builds it
    import mlflow

    before, uri = os.environ.get("MLFLOW_TRACKING_URI"), mlflow.get_tracking_uri()
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"  # the store stage_run opens
    try:
        with stage_run("bench-metric-sink", cfg.profile, cfg.experiment, {}) as run:
            logger = sink(run)
            try:
                progress = train(job, logger.log)
            finally:
                logger.close()
    finally:  # as they were: the variable, and MLflow's own setting, which stage_run sets
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before
        mlflow.set_tracking_uri(uri)
    return steps / progress.wall_seconds


def layout_params() -> Path:
    from bench.common import REPO

    return REPO / "params.yaml"


def measure(results: Path, steps: int, rounds: int, work: Path) -> dict[str, Any]:
    speeds: dict[str, list[float]] = {name: [] for name in SINKS}
    for i in range(rounds):
        for name, sink in SINKS.items():
            folder = work / f"{i}-{len(speeds[name])}-{sink.__name__}"
            folder.mkdir()
            speeds[name].append(one_loop(results, steps, sink, folder))
    medians = {name: statistics.median(values) for name, values in speeds.items()}
    return {"steps": steps, "rounds": rounds, "speeds": speeds, "medians": medians,
            "ratio": medians["MetricSink"] / medians["EagerSink (before)"]}


def markdown(found: dict[str, Any]) -> str:
    lines = [f"The smoke GPT's pre-training loop, {found['steps']} updates, {found['rounds']} rounds A B A B:", "",
             "| sink | updates/s, each round | median |", "| --- | --- | ---: |"]
    lines += [f"| {name} | {', '.join(f'{v:.1f}' for v in found['speeds'][name])} | {found['medians'][name]:.1f} |"
              for name in SINKS]
    return "\n".join([*lines, "", f"MetricSink / EagerSink: **{found['ratio']:.2f}x** the updates a second."])


def main(argv: list[str] | None = None) -> None:
    import torch

    from bench.common import REPO, machine

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=REPO / "results" / "smoke",
                        help="a smoke run's results/smoke/ (default: this checkout's)")
    parser.add_argument("--steps", type=int, default=400, help="updates a loop (default: 400)")
    parser.add_argument("--rounds", type=int, default=3, help="loops a side (default: 3)")
    args = parser.parse_args(argv)
    if missing := [str(p) for p in (args.results / layout.IDS, args.results / layout.TOKENIZER) if not p.is_dir()]:
        raise SystemExit(f"metric_sink: {', '.join(missing)} missing: run the smoke pipeline first (snakemake --cores "
                         "all --config profile=smoke), or give --results")
    if args.steps < 1 or args.rounds < 1:
        raise SystemExit("metric_sink: --steps and --rounds: at least 1")
    torch.set_num_threads(1)  # as the smoke profile's stage computes (its kernels are not pinned here: torch is loaded)
    with tempfile.TemporaryDirectory(prefix="gpt1-metric-sink-") as work:
        found = measure(args.results, args.steps, args.rounds, Path(work))
    print(machine())
    print(markdown(found))


if __name__ == "__main__":
    main()
