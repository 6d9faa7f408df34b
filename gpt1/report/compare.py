"""`gpt1 compare A B`: did a change matter beyond noise? Two results trees, job by job and cell by cell.

A cell is one fine-tuning job kind (task x variant) and one number the paper reports for it (its paper metric, e.g.
CoLA's MCC); and, for each variant whose 8 GLUE columns both trees hold, Table 5's Avg. B minus A is tested twice
where it can be:
- paired, on the evaluation examples both scored (gpt1.evaluation.significance: a paired bootstrap, each side the
  mean of its seeds, the examples drawn once for all): is the difference larger than the choice of evaluation
  examples explains?
- across seeds, where both trees have two or more seeds in common (a paired t-test of the per-seed scores): is it
  larger than the seeds' spread explains? A change of a training setting moves a score the way a new seed does, so
  this is the test that counts when it exists.
A cell "changed" when every test it has says so at the Holm-adjusted level (over all the cells compared, so that
twenty cells at 5% do not find one change by chance). Identical predictions on every seed are "same predictions".
Beside the cells: the GPT's validation perplexity in each tree, and its held-out perplexity (WikiText-2) with B minus
A paired by article where both trees scored the same tokens (gpt1.evaluation.perplexity).
The settings that differ are read from the records themselves (each job's metrics.json: recipe, model, data,
tokenizer, numerics; pre-training's model.json), not from a params file that may have changed since.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from gpt1.evaluation.significance import Key, Prediction, average_test, column_test
from gpt1.pipeline import layout, records
from gpt1.pipeline.errors import CompareError, ReportError
from gpt1.pipeline.files import flatten, read_json
from gpt1.report.inputs import heldout_points, predictions_beside, verified_heldout
from gpt1.report.tables import (
    AVERAGE_COLUMN,
    Column,
    component_mean,
    load_paper,
    make_columns,
    paired_runs,
    task_columns,
)

SETTING_BLOCKS = ("recipe", "model", "data", "tokenizer", "numerics", "lm_weight", "epochs", "transfer_layers")
NOISE = ("content_sha256", "files", "source", "sha256_of_files")  # provenance, not settings


@dataclass(frozen=True)
class Job:
    """The seeds of one task x variant in one tree: their metrics.json records and predictions."""

    task: str
    variant: str
    metrics: dict[int, dict[str, Any]]
    predictions: dict[int, dict[Key, Prediction]]


def find_jobs(tree: Path) -> dict[tuple[str, str], Job]:
    """Every fine-tuning job of a results tree (finetune/<task>/<variant>/<seed>/metrics.json), by (task, variant);
    predictions are checked against the size and sha256 their metrics.json records, as the report checks them."""
    if not tree.is_dir():
        raise CompareError(f"{tree}: no such folder; give a results tree such as results/default")
    found: dict[tuple[str, str], dict[int, Path]] = {}
    for path in sorted(tree.glob(f"{layout.finetune_dir('*', '*', '*')}/{layout.FINETUNE_METRICS}")):
        task, variant, seed = path.parts[-4:-1]
        if seed.isdigit():
            found.setdefault((task, variant), {})[int(seed)] = path
    if not found:
        raise CompareError(f"{tree}: no fine-tuning results (finetune/<task>/<variant>/<seed>/metrics.json); give a "
                           f"results tree such as results/default")
    jobs = {}
    for (task, variant), paths in found.items():
        metrics = {seed: records.read("finetune_metrics", path, ReportError) for seed, path in paths.items()}
        beside = {seed: predictions_beside(path) for seed, path in paths.items()}
        predictions = {seed: p for seed, p in beside.items() if p is not None}
        jobs[(task, variant)] = Job(task, variant, metrics, predictions)
    return jobs


def job_settings(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a fine-tuning record holds, flattened (recipe.lr, model.config.n_layer, ...)."""
    return flatten({key: metrics[key] for key in SETTING_BLOCKS if key in metrics}, NOISE)


def settings_table(a: Mapping[tuple[str, str], Job], b: Mapping[tuple[str, str], Job],
                   pretrain: tuple[dict[str, Any], dict[str, Any]]) -> pd.DataFrame:
    """One row per setting that differs: its value in A and in B and the jobs where it does."""
    rows: dict[tuple[str, str, str], list[str]] = {}
    for where, (sa, sb) in _setting_pairs(a, b, pretrain):
        for key in sorted(sa.keys() | sb.keys()):
            if sa.get(key) != sb.get(key):
                rows.setdefault((key, repr(sa.get(key)), repr(sb.get(key))), []).append(where)
    table = [{"setting": k, "A": va, "B": vb, "where": ", ".join(w) if len(w) <= 4 else f"{len(w)} jobs"}
             for (k, va, vb), w in rows.items()]
    return pd.DataFrame(table, columns=["setting", "A", "B", "where"])


def _setting_pairs(a: Mapping[tuple[str, str], Job], b: Mapping[tuple[str, str], Job],
                   pretrain: tuple[dict[str, Any], dict[str, Any]]) -> Iterable[tuple[str, tuple[dict, dict]]]:
    if pretrain[0] or pretrain[1]:
        yield "pretrain", pretrain
    for key in sorted(a.keys() & b.keys()):
        seed = min(a[key].metrics.keys() & b[key].metrics.keys(), default=None)
        if seed is not None:
            yield f"{key[0]}/{key[1]}", (job_settings(a[key].metrics[seed]), job_settings(b[key].metrics[seed]))


def pretrain_record_settings(tree: Path) -> dict[str, Any]:
    """The GPT pre-training's settings as its model.json records them (not config.pretrain_settings: params)."""
    path = tree / layout.pretrain_dir("gpt") / layout.MODEL_JSON
    if not path.is_file():
        return {}
    meta = read_json(path)
    settings = {f"pretrain.{k}": v for k, v in meta.items() if k in ("config", "kind", "numerics", "recipe")}
    return flatten(settings, NOISE)


def _score(metrics: Mapping[str, Any], report: str) -> tuple[str, float]:
    block = metrics["reports"][report]
    metric = block["paper_metric"]
    return metric, 100.0 * float(block["metrics"][metric])


def _seed_test(a: list[float], b: list[float]) -> float | None:
    """Two-sided p of a paired t-test over seeds; None under two pairs. Where the seeds' differences are all equal
    (a discrete metric on few examples does that) the t-test is undefined, not p = 0: then the exact sign-flip
    test's p, 2 / 2**n (1 when they are all 0), as small as n seeds can show without a spread to measure."""
    if len(a) < 2:
        return None
    from scipy import stats

    diffs = [y - x for x, y in zip(a, b, strict=True)]
    if all(d == diffs[0] for d in diffs):
        return 1.0 if diffs[0] == 0 else 2.0 / 2 ** len(diffs)
    return float(stats.ttest_rel(b, a).pvalue)


def _same_predictions(a: Job, b: Job, seeds: Iterable[int]) -> bool:
    return all(s in a.predictions and s in b.predictions and a.predictions[s] == b.predictions[s] for s in seeds)


def cell_rows(a: Mapping[tuple[str, str], Job], b: Mapping[tuple[str, str], Job]) -> list[dict[str, Any]]:
    rows = []
    for key in sorted(a.keys() | b.keys()):
        if key not in a or key not in b:
            rows.append({"task": key[0], "variant": key[1], "report": "", "metric": "", "verdict":
                         "only in A" if key in a else "only in B"})
            continue
        ja, jb = a[key], b[key]
        seeds = sorted(ja.metrics.keys() & jb.metrics.keys())
        for report in sorted(ja.metrics[seeds[0]]["reports"]) if seeds else []:
            metric, _ = _score(ja.metrics[seeds[0]], report)
            sa = [_score(ja.metrics[s], report)[1] for s in seeds]
            sb = [_score(jb.metrics[s], report)[1] for s in seeds]
            paired = column_test("B", report, metric, [report], {s: jb.predictions[s] for s in seeds
                                 if s in jb.predictions and s in ja.predictions}, ja.predictions)
            rows.append({"task": key[0], "variant": key[1], "report": report, "metric": metric,
                         "seeds": len(seeds), "A": sum(sa) / len(sa), "B": sum(sb) / len(sb),
                         "B - A": sum(sb) / len(sb) - sum(sa) / len(sa),
                         "p paired": None if paired is None else paired.p_value,
                         "examples": None if paired is None else paired.examples,
                         "p seeds": _seed_test(sa, sb), "same predictions": _same_predictions(ja, jb, seeds)})
    return rows


AVERAGE_TASK = "Table 5 Avg"  # the task column of the row that compares Table 5's average


def _average_score(jobs: list[Job], columns: list[Column], seed: int) -> float:
    """Table 5's Avg of one seed: the mean of the columns (`jobs` their jobs, in order), each the mean of its
    reports' metrics."""
    return sum(component_mean(c, lambda r, m, job=job: float(job.metrics[seed]["reports"][r]["metrics"][m]))
               for c, job in zip(columns, jobs, strict=True)) / len(columns)


def average_rows(a: Mapping[tuple[str, str], Job], b: Mapping[tuple[str, str], Job]) -> list[dict[str, Any]]:
    """Table 5's Avg, B - A, for each variant whose 8 columns' jobs both trees hold (on the seeds all of them have):
    the paired test of the average (significance.average_test) and the seeds' t-test of the per-seed averages. As
    for a cell, A and B are the metrics' means over those seeds, the paired test is over the ones with predictions;
    the rows join the cells' Holm family."""
    columns = task_columns(make_columns("table5", load_paper()["tables"]["table5"]))
    rows = []
    for variant in sorted({v for _, v in a.keys() & b.keys()}):
        keys = [(c.task, variant) for c in columns]
        if not all(k in a and k in b for k in keys):
            continue
        seeds = sorted(set.intersection(*(set(a[k].metrics) & set(b[k].metrics) for k in keys)))
        if not seeds:
            continue
        sa = [_average_score([a[k] for k in keys], columns, s) for s in seeds]
        sb = [_average_score([b[k] for k in keys], columns, s) for s in seeds]
        paired = average_test("B", AVERAGE_COLUMN, paired_runs(
            columns, [{s: b[k].predictions[s] for s in seeds if s in b[k].predictions} for k in keys],
            [{s: a[k].predictions[s] for s in seeds if s in a[k].predictions} for k in keys]))
        rows.append({"task": AVERAGE_TASK, "variant": variant, "report": AVERAGE_COLUMN, "metric": "average",
                     "seeds": len(seeds), "A": sum(sa) / len(sa), "B": sum(sb) / len(sb),
                     "B - A": sum(sb) / len(sb) - sum(sa) / len(sa),
                     "p paired": None if paired is None else paired.p_value,
                     "examples": None if paired is None else paired.examples, "p seeds": _seed_test(sa, sb),
                     "same predictions": all(_same_predictions(a[k], b[k], seeds) for k in keys)})
    return rows


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment (family-wise error) of p-values, in their order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def verdicts(table: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Each cell's verdict: its tests' p-values Holm-adjusted over all the cells, then 'changed' when all agree."""
    table = table.copy()
    for column in ("p paired", "p seeds"):
        if column not in table:
            table[column] = None
        tested = table[column].notna()
        table[column + " (Holm)"] = None
        if tested.any():
            table.loc[tested, column + " (Holm)"] = holm([float(p) for p in table.loc[tested, column]])
    for i, row in table.iterrows():
        if row.get("verdict") in ("only in A", "only in B"):
            continue
        tests = [row[c] for c in ("p paired (Holm)", "p seeds (Holm)") if row[c] is not None and not _nan(row[c])]
        if row["same predictions"]:
            verdict = "same predictions"
        elif not tests:
            verdict = "untested (no predictions)"
        elif all(p < alpha for p in tests):
            verdict = "changed"
        else:
            verdict = "within noise"
        table.loc[i, "verdict"] = verdict
    return table


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


@dataclass(frozen=True)
class Comparison:
    cells: pd.DataFrame
    settings: pd.DataFrame
    perplexity: tuple[float | None, float | None]
    alpha: float
    heldout: str | None = None  # the GPT's held-out perplexity in both trees, B - A paired by article

    def summary(self) -> str:
        counts = self.cells["verdict"].value_counts().to_dict()
        parts = [f"{n} {v}" for v, n in sorted(counts.items())]
        return f"{len(self.cells)} cells: " + ", ".join(parts) + f" (Holm-adjusted, alpha {self.alpha})"


def _perplexity(tree: Path) -> float | None:
    path = tree / layout.pretrain_dir("gpt") / layout.PRETRAIN_METRICS
    return float(read_json(path)["val_perplexity"]) if path.is_file() else None


def heldout_comparison(a: Path, b: Path) -> str | None:
    """The GPT's held-out perplexity (WikiText-2) at its last point in both trees: B - A paired by article where
    both scored the same tokens, else (two vocabularies) per WikiText word, untested; None unless both have it."""
    paths = [tree / layout.zeroshot_dir("gpt") / layout.HELDOUT_CSV for tree in (a, b)]
    if not all(path.is_file() for path in paths):
        return None
    first, second = (heldout_points(verified_heldout(path))[-1] for path in paths)
    ra, rb = first.result(), second.result()
    paired = second.minus(first)
    if paired is None:
        return (f"Held-out perplexity of the GPT per WikiText-2 word: A {ra['word_perplexity']:.1f}, B "
                f"{rb['word_perplexity']:.1f} (the trees' tokenizers split the articles differently: no paired test).")
    test, se = paired
    return (f"Held-out perplexity of the GPT (WikiText-2): A {ra['perplexity']:.2f}, B {rb['perplexity']:.2f}; B - A "
            f"{test.difference:+.4f} nats a token, SE {se:.4f} paired by article, p {test.p_value:.3f}.")


def compare_trees(a: Path, b: Path, alpha: float = 0.05) -> Comparison:
    jobs_a, jobs_b = find_jobs(a), find_jobs(b)
    cells = verdicts(pd.DataFrame(cell_rows(jobs_a, jobs_b) + average_rows(jobs_a, jobs_b)), alpha)
    settings = settings_table(jobs_a, jobs_b, (pretrain_record_settings(a), pretrain_record_settings(b)))
    return Comparison(cells, settings, (_perplexity(a), _perplexity(b)), alpha, heldout_comparison(a, b))


NUMBERS = ("seeds", "A", "B", "B - A", "examples", "p paired (Holm)", "p seeds (Holm)")  # right-aligned cells


def _display(cells: pd.DataFrame) -> pd.DataFrame:
    shown = cells.drop(columns=["same predictions", "p paired", "p seeds"], errors="ignore").copy()
    for column, style in (("A", "{:.1f}"), ("B", "{:.1f}"), ("B - A", "{:+.1f}"), ("p paired (Holm)", "{:.3g}"),
                          ("p seeds (Holm)", "{:.3g}")):
        if column in shown:
            shown[column] = shown[column].map(lambda v, style=style: "" if v is None or _nan(v)
                                              else style.format(float(v)))
    for column in ("seeds", "examples"):  # integers that a missing value made floats
        if column in shown:
            shown[column] = shown[column].map(lambda v: "" if v is None or _nan(v) else str(int(v)))
    return shown.fillna("").astype(str)


def render(comparison: Comparison, a: str, b: str) -> dict[str, str]:
    """compare.md, compare.html and compare.tex (the settings that differ, then the cells, a changed verdict in bold;
    pandas' tables through gpt1.report.renderers) and the two CSVs (cells with raw p-values; settings)."""
    from html import escape

    from gpt1.report.renderers import html_page, html_table, latex_tabular, markdown_table, md, tex

    cells, settings = _display(comparison.cells), comparison.settings.astype(str)
    align, left = "".join("r" if column in NUMBERS else "l" for column in cells.columns), "l" * settings.shape[1]
    changed = pd.DataFrame({c: cells["verdict"].eq("changed") & (c == "verdict") for c in cells.columns})
    pa, pb = comparison.perplexity
    head = [f"A: {a}", f"B: {b}", comparison.summary()]
    head += [] if pa is None or pb is None else [f"Validation perplexity of the GPT: A {pa:.2f}, B {pb:.2f}."]
    head += [comparison.heldout] if comparison.heldout else []
    none, titles = "(no setting differs in the records)", ("Settings that differ", "Cells (B - A, points)")

    def shown(frame: pd.DataFrame, text: Callable[[str], str]) -> pd.DataFrame:
        return frame.map(text).rename(columns=text)

    markdown = [
        markdown_table(shown(settings, md), align=left) if len(settings) else none,
        markdown_table(shown(cells, md), changed, align),
    ]
    html = [
        html_table(shown(settings, escape), "settings") if len(settings) else f"<p>{none}</p>",
        html_table(shown(cells, escape), "cells", changed.map(lambda bold: "significant" if bold else "")),
    ]
    latex = [
        latex_tabular(shown(settings, tex), align=left) if len(settings) else tex(none),
        latex_tabular(shown(cells, tex), changed, align),
    ]
    return {
        "compare.md": "\n\n".join(["# gpt1 compare", f"A: `{a}`  \nB: `{b}`", f"**{md(head[2])}**", *map(md, head[3:]),
                                    *(f"## {t}\n\n{table}" for t, table in zip(titles, markdown, strict=True))]) + "\n",
        "compare.html": html_page("gpt1 compare", ["<h1>gpt1 compare</h1>", "<p>" + "<br>".join(map(escape, head)) +
                                  "</p>", *(f"<h2>{t}</h2>\n{table}" for t, table in zip(titles, html, strict=True))]),
        "compare.tex": "\n".join(["% Rendered by gpt1 compare (gpt1/report/compare.py); needs "
                                   "\\usepackage{booktabs}.",
                                   " \\\\\n".join(map(tex, head)) + r"\par", *(rf"\paragraph{{{tex(t)}}}" + "\n" + table
                                   for t, table in zip(titles, latex, strict=True))]) + "\n",
        "cells.csv": comparison.cells.to_csv(index=False),
        "settings.csv": comparison.settings.to_csv(index=False),
    }  # fmt: skip


__all__ = ["CompareError", "Comparison", "compare_trees", "find_jobs", "holm", "job_settings", "render", "verdicts"]
