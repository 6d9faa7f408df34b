"""Figure 2 (left: layers transferred; right: zero-shot against pre-training) and the pre-training curves.

Drawn as the paper draws them: one colour per task, a line style per model (right) or per split (left). A figure
names its missing inputs on itself, and its bytes depend on the data only (no dates, a fixed SVG salt).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpt1.report.inputs import LAYER_TASKS, MODELS, Analyses, Gap, gap_notes, heldout_points
from gpt1.report.numbers import mean_sd

ZEROSHOT_TASKS = {
    "sst2": "Sentiment analysis (SST-2)",
    "dprd": "Winograd schema resolution (DPRD)",
    "cola": "Linguistic acceptability (CoLA)",
    "race": "Question answering (RACE)",
}
COLOURS = {"mnli": "tab:blue", "race": "tab:orange", "gpt": "tab:blue", "lstm": "tab:red"}  # left, pre-training
ZEROSHOT_COLOURS = {"sst2": "tab:blue", "dprd": "tab:orange", "cola": "tab:green", "race": "tab:red"}


def layer_means(analyses: Analyses) -> dict[str, dict[str, list[float]]]:
    """Per task: layers k, mean train and dev accuracy (percent) over the seeds present, their sd, and dev's standard
    error: across seeds when there are several, else the one seed's bootstrap SE over its evaluation examples."""
    curves = {}
    for task, seeds in analyses.layers.items():
        ks = sorted({row["layers"] for rows in seeds.values() for row in rows})
        if not ks:
            continue
        curve: dict[str, list[float]] = {"k": [float(k) for k in ks]}
        for split, column in (("train", "train_accuracy"), ("dev", "dev_accuracy")):
            stats = [
                mean_sd(
                    [
                        100.0 * row[column]
                        for rows in seeds.values()
                        for row in rows
                        if row["layers"] == k and row[column] is not None
                    ]
                    or [math.nan]
                )
                for k in ks
            ]
            curve[split] = [m for m, _ in stats]
            curve[f"{split}_sd"] = [s if s is not None else 0.0 for _, s in stats]
        if len(seeds) > 1:
            curve["dev_se"] = [sd / math.sqrt(len(seeds)) for sd in curve["dev_sd"]]
        else:
            rows = {row["layers"]: row for seed_rows in seeds.values() for row in seed_rows}
            curve["dev_se"] = [100.0 * rows[k]["dev_se"] for k in ks]
        curve["seeds"] = [float(len(seeds))]
        curves[task] = curve
    return curves


def zeroshot_points(rows: Sequence[dict[str, Any]], task: str) -> list[tuple[int, float, float]]:
    """(pre-training step, normalised score, its standard error) of one task, by step."""
    return sorted((r["step"], r["normalised"], r["normalised_se"]) for r in rows if r["task"] == task)


def _new_figure(width: float = 5.0, height: float = 3.8, panels: int = 1) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width * panels, height), layout="constrained")
    return figure, [figure.add_subplot(1, panels, i + 1) for i in range(panels)]


def _gap_text(figure: Any, gaps: Sequence[Gap]) -> None:
    """Name what is missing on the figure itself: a figure silently missing a line reads as a result."""
    if not gaps:
        return
    notes = gap_notes(gaps)
    shown = notes[:4] + ([f"... and {len(notes) - 4} more"] if len(notes) > 4 else [])
    # Below the axes, outside the layout: savefig's tight bounding box takes it in.
    figure.text(0.01, -0.01, "\n".join(shown), fontsize=5.5, color="0.35", va="top", ha="left")


def _no_data(axis: Any, what: str) -> None:
    axis.text(0.5, 0.5, f"no {what} yet", transform=axis.transAxes, ha="center", va="center", color="0.4")


def figure2_left(analyses: Analyses) -> Any:
    """Accuracy against the number of pre-trained layers transferred: dev solid, train dashed, a colour per task."""
    figure, (axis,) = _new_figure()
    curves = layer_means(analyses)
    for task, curve in curves.items():
        colour, label = COLOURS.get(task, "tab:gray"), LAYER_TASKS.get(task, task)
        for split, style in (("train", "--"), ("dev", "-")):
            mean, sd = np.array(curve[split]), np.array(curve[f"{split}_sd"])
            axis.plot(
                curve["k"], mean, style, color=colour, marker="o", markersize=3.5, label=f"{label} {split.capitalize()}"
            )
            if curve["seeds"][0] > 1:
                axis.fill_between(curve["k"], mean - sd, mean + sd, color=colour, alpha=0.12, linewidth=0)
        axis.errorbar(curve["k"], curve["dev"], yerr=curve["dev_se"], fmt="none", ecolor=colour, elinewidth=0.8,
                      capsize=2.5)
    if not curves:
        _no_data(axis, "layer-transfer results")
    else:
        axis.legend(fontsize=8, frameon=False)
        seeds = sorted({len(s) for s in analyses.layers.values()})
        axis.set_title(
            f"{_layer_data(analyses)}\nmean of {'/'.join(map(str, seeds))} seed(s); bars: dev ± 1 SE",
            fontsize=7, color="0.35",
        )
    axis.set_xlabel("# of layers transferred")
    axis.set_ylabel("Accuracy (%)")
    axis.xaxis.get_major_locator().set_params(integer=True)
    axis.grid(alpha=0.3)
    _gap_text(figure, analyses.gaps.get("figure2_left", []))
    return figure


def _layer_data(analyses: Analyses) -> str:
    """What each curve trained on and was scored on: 'MultiNLI: train 1600, dev 1500 of <split>; RACE: ...'."""
    def values(rows: dict[int, list[dict[str, Any]]], key: str) -> str:
        return "/".join(str(v) for v in sorted({r[key] for seed_rows in rows.values() for r in seed_rows}))

    return "; ".join(
        f"{LAYER_TASKS.get(task, task)}: train {values(seeds, 'train_examples')}, dev {values(seeds, 'dev_examples')} "
        f"of {values(seeds, 'dev_split')}"
        for task, seeds in analyses.layers.items() if any(seeds.values())
    )


def figure2_right(analyses: Analyses) -> Any:
    """Normalised zero-shot performance against pre-training updates (log): a colour per task, LSTM dashed; a band
    of ± 1 bootstrap SE over the evaluated examples around the Transformer's lines."""
    from matplotlib.lines import Line2D

    figure, (axis,) = _new_figure()
    drawn = set()
    for model, rows in analyses.zeroshot.items():
        style = MODELS.get(model, (model, ":"))[1]
        for task in ZEROSHOT_TASKS:
            points = [point for point in zeroshot_points(rows, task) if point[0] > 0]
            if points:  # a log axis has no 0: an untrained snapshot (step 0) is left out
                steps, values, errors = (np.array(column) for column in zip(*points, strict=True))
                axis.plot(steps, values, style, color=ZEROSHOT_COLOURS[task], marker="o", markersize=3)
                if model == "gpt":  # the LSTM's bands would hide the lines; its SEs are in zeroshot.csv
                    axis.fill_between(steps, values - errors, values + errors, color=ZEROSHOT_COLOURS[task],
                                      alpha=0.1, linewidth=0)
                drawn.add((model, task))
    if not drawn:
        _no_data(axis, "zero-shot results")
    axis.set_xscale("log")
    axis.axhline(0.0, color="0.6", linewidth=0.8, zorder=0)
    axis.set_xlabel("# of pre-training updates")
    axis.set_ylabel("Normalized performance")
    axis.grid(alpha=0.3)
    tasks = [Line2D([], [], color=ZEROSHOT_COLOURS[t], label=label) for t, label in ZEROSHOT_TASKS.items()]
    models = [Line2D([], [], color="0.2", linestyle=MODELS[m][1], label=MODELS[m][0]) for m in MODELS]
    axis.legend(handles=tasks + models, fontsize=7, framealpha=0.8, loc="best")  # one legend: "best" sees the lines
    _gap_text(figure, analyses.gaps.get("figure2_right", []))
    return figure


def pretraining_figure(analyses: Analyses) -> Any:
    """Validation perplexity (log) and training loss against training tokens, for the GPT and the LSTM (tokens, not
    updates: the two may train with different batches, pretrain.by_model); beside the validation perplexity, the
    held-out one on WikiText-2 at the zero-shot stage's points, with its 1-SE band (by article)."""
    figure, (left, right) = _new_figure(4.2, 3.4, panels=2)
    for model, rows in analyses.curves.items():
        label, style = MODELS.get(model, (model, ":"))
        colour = COLOURS.get(model, "tab:gray")
        for axis, column in ((left, "val_perplexity"), (right, "train_loss")):
            points = sorted((r["tokens"], r[column]) for r in rows if r[column] is not None)
            if points:
                tokens, values = zip(*points, strict=True)
                axis.plot(tokens, values, style, color=colour, marker="o", markersize=2.5,
                          label=f"{label}, novels (validation)" if axis is left else label)
    for model, rows in analyses.heldout.items():
        label, colour = MODELS.get(model, (model, ":"))[0], COLOURS.get(model, "tab:gray")
        points = [(p.tokens, p.result()) for p in heldout_points(rows) if p.tokens > 0]
        if points:
            tokens = [t for t, _ in points]
            left.plot(tokens, [r["perplexity"] for _, r in points], ":", color=colour, marker="s", markersize=2.5,
                      label=f"{label}, WikiText-2 (held out)")
            left.fill_between(tokens, *zip(*(r["perplexity_1se"] for _, r in points), strict=True), color=colour,
                              alpha=0.15, linewidth=0)
    for axis, name in ((left, "Perplexity"), (right, "Training loss")):
        axis.set_xlabel("Pre-training tokens")
        axis.set_ylabel(name)
        axis.grid(alpha=0.3, which="both")
        if axis.lines:
            axis.legend(fontsize=7 if axis is left else 8, frameon=False)
        else:
            _no_data(axis, "pre-training curves")
    if left.lines:
        left.set_yscale("log")
    _gap_text(figure, analyses.gaps.get("pretraining", []))
    return figure


FIGURE_BUILDERS: dict[str, Callable[[Analyses], Any]] = {
    "figure2_left": figure2_left,
    "figure2_right": figure2_right,
    "pretraining": pretraining_figure,
}
FIGURES = tuple(FIGURE_BUILDERS)


def save_figure(figure: Any, path: Path, fmt: str) -> None:
    """Deterministic bytes (no dates, a fixed SVG id salt): committed figures change only when the data does."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)  # the Agg backend, whatever MPLBACKEND says: stages run headless
    metadata = {"Date": None} if fmt == "svg" else {"Software": None}
    with matplotlib.rc_context({"svg.hashsalt": "gpt1", "svg.fonttype": "none"}):
        figure.savefig(path, format=fmt, dpi=200, metadata=metadata, bbox_inches="tight", pad_inches=0.05)
