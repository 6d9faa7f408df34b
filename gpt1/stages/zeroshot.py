"""The zero-shot stage (`gpt1 zeroshot`, the paper's §5, Figure 2 right): the four heuristics of
`gpt1.evaluation.probes` on every pre-training snapshot of a model and its final weights, on the profile's task data
(`zeroshot` settings, params.yaml's zeroshot_reference); and at every point the held-out perplexity on WikiText-2's
validation articles (`gpt1.evaluation.perplexity`: text no stage and no choice has seen; the pre-training's own
validation windows chose its recipe). zeroshot.json, zeroshot.csv and heldout.csv (the loss per article, which the
report pairs across models) written together, each point's metrics to MLflow (x axis: the snapshot's update count).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from gpt1.data.rows import LoadedSplit, evaluation_split, load_examples, mirror_splits
from gpt1.data.tasks import get_task
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.data.wikitext import load_articles, source_name
from gpt1.evaluation.perplexity import DocumentProbe, document_losses, document_probe, perplexity_result
from gpt1.evaluation.probes import (
    HEURISTICS,
    METRICS,
    TASK_ORDER,
    ChoiceProbe,
    ColaProbe,
    Sst2Probe,
    TaskData,
    cola_probe,
    count_truncated,
    dprd_probe,
    race_probe,
    score_point,
    sst2_needs_offset,
    sst2_offset_probe,
    task_result,
)
from gpt1.evaluation.significance import RESAMPLES
from gpt1.modeling.checkpoints import iter_snapshots, load_pretrained
from gpt1.pipeline import layout, records
from gpt1.pipeline.errors import ZeroshotError
from gpt1.pipeline.files import (
    check_types,
    file_record,
    read_json,
    require_files,
    staged_outputs,
    write_csv,
)
from gpt1.training.numerics import in_effect, note_upstream
from gpt1.training.runtime import default_device

if TYPE_CHECKING:
    from gpt1.pipeline.config import Config
    from gpt1.pipeline.tracking import StageRun

CSV_FIELDS = ("model", "step", "task", "metric", "raw", "se", "normalised", "normalised_se", "p_vs_first")
HELDOUT_FIELDS = ("model", "step", "tokens", "article", "scored_tokens", "words", "nll")


@dataclass(frozen=True)
class Point:
    """One model along pre-training: a snapshot, or the final weights."""

    index: int | None  # the snapshot's index; None for the final model
    step: int
    tokens: int
    val_loss: float | None
    weights: Path


def _split_of(name: str, present: list[str] | None) -> str:
    spec = get_task(name)
    report = next(r for r in spec.reports if not r.configs)  # the whole task (RACE: middle and high together)
    return evaluation_split(spec, report, present)


def _load(cfg: Config, name: str, split: str) -> LoadedSplit:
    settings = cfg.section("zeroshot")
    synthetic = cfg.synthetic
    return load_examples(name, split, None if synthetic else cfg.data_mirror, max_examples=settings["max_examples"],
                         synthetic=synthetic, seed=settings["seed"])


def _present(cfg: Config, name: str) -> list[str] | None:
    """Splits that exist where the data comes from (None: the hub or synthetic data, which have them all)."""
    mirror = cfg.data_mirror
    if cfg.synthetic or mirror is None:
        return None
    return mirror_splits(get_task(name), mirror)


def prepare_task(cfg: Config, tokenizer: GPT1Tokenizer, name: str, n_ctx: int) -> TaskData:
    split = _split_of(name, _present(cfg, name))
    loaded = _load(cfg, name, split)
    info: dict[str, Any] = {"split": split, "examples": len(loaded.examples), "data": loaded.describe(),
                            "heuristic": HEURISTICS[name]}
    probe: ChoiceProbe | ColaProbe | Sst2Probe
    if name == "cola" or (name == "sst2" and sst2_needs_offset(tokenizer)):  # a threshold or offset chosen on train
        fit_split = get_task(name).train
        fit = _load(cfg, name, fit_split)
        probe = (cola_probe(tokenizer, fit.examples, loaded.examples) if name == "cola"
                 else sst2_offset_probe(tokenizer, loaded.examples, fit.examples))
        info.update(threshold_split=fit_split, threshold_examples=len(fit.examples), threshold_data=fit.describe())
    elif name == "sst2":  # both words one token each: the paper's rule, offset 0, and no train split to read
        probe = sst2_offset_probe(tokenizer, loaded.examples)
    else:
        probe = {"race": race_probe, "dprd": dprd_probe}[name](tokenizer, loaded.examples)
    if name == "dprd":
        info["note"] = f"DPR has no training here, so its {split!r} split is a legitimate evaluation split"
    info["truncated_rows"] = count_truncated(probe, n_ctx)
    return TaskData(name, probe, split, info)


def prepare_heldout(cfg: Config, tokenizer: GPT1Tokenizer) -> tuple[DocumentProbe, dict[str, Any]]:
    """WikiText-2's validation articles as token ids (made-up articles in WikiText's layout for synthetic data)."""
    articles = load_articles(None if cfg.synthetic else cfg.data_mirror, cfg.synthetic)
    probe = document_probe(tokenizer, articles)
    info = {"data": source_name(cfg.data_mirror, cfg.synthetic), "articles": len(articles),
            "titles": list(probe.titles), "words": sum(probe.words),
            "scored_tokens": int(probe.scored_tokens.sum())}
    return probe, info


def check_inputs(model_dir: Path, tokenizer: GPT1Tokenizer) -> dict[str, Any]:
    """Fail before any work: the pretrain outputs must be there and made with this tokenizer. Returns model.json."""
    require_files("pretrain", model_dir / layout.SNAPSHOTS / layout.SNAPSHOT_INDEX, model_dir / layout.MODEL_JSON,
                  model_dir / layout.MODEL_WEIGHTS)
    meta = read_json(model_dir / layout.MODEL_JSON)
    if not isinstance(meta, dict) or not {"kind", "config", "step", "tokens"} <= meta.keys():
        raise ZeroshotError(f"{model_dir / layout.MODEL_JSON}: not the model.json gpt1 pretrain writes (kind, config, "
                            f"step, tokens); re-run gpt1 pretrain")
    _check_snapshot_index(model_dir / layout.SNAPSHOTS / layout.SNAPSHOT_INDEX)
    if meta.get("tokenizer_sha256") != tokenizer.fingerprint():
        raise ZeroshotError(
            f"{model_dir / layout.MODEL_JSON}: tokenizer_sha256 {meta.get('tokenizer_sha256')} differs from the "
            f"tokenizer's {tokenizer.fingerprint()}; pass the tokenizer the model was pre-trained with, or re-run gpt1 "
            f"pretrain"
        )
    return meta


def _check_snapshot_index(path: Path) -> None:
    """A list of at least one {index, step, tokens}: anything else would score the final model alone, silently."""
    entries = read_json(path)
    kinds = {"index": int, "step": int, "tokens": int}
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) and kinds.keys() <= e.keys()
                                                               for e in entries):
        raise ZeroshotError(f"{path}: not a list of snapshots with index, step and tokens; re-run gpt1 pretrain")
    for entry in entries:
        check_types(entry, kinds, path, "pretrain", ZeroshotError)


def check_references(references: dict[str, Any]) -> dict[str, Any]:
    """zeroshot_reference of every task, its metric the one the heuristic yields (the normalisation needs both)."""
    for name in TASK_ORDER:
        if name not in references:
            raise ZeroshotError(f"zeroshot_reference.{name}: missing; valid tasks: {', '.join(TASK_ORDER)}")
        if references[name]["metric"] != METRICS[name]:
            raise ZeroshotError(f"zeroshot_reference.{name}.metric: {references[name]['metric']!r}, but the "
                                f"{name} heuristic yields {METRICS[name]!r}")
    return {name: references[name] for name in TASK_ORDER}


def list_points(model_dir: Path, meta: dict[str, Any]) -> list[Point]:
    """Every kept snapshot in order, then the final model if it is not the last snapshot already."""
    points = [Point(e["index"], int(e["step"]), int(e["tokens"]), e.get("val_loss"), path)
              for e, path in iter_snapshots(model_dir)]
    require_files("pretrain", *(p.weights for p in points))
    if not points or points[-1].step != meta["step"]:
        points.append(Point(None, int(meta["step"]), int(meta["tokens"]), None, model_dir / layout.MODEL_WEIGHTS))
    return points


def load_point(point: Point, tokenizer_sha256: str, device: torch.device) -> nn.Module:
    model, meta = load_pretrained(point.weights)
    if meta.get("tokenizer_sha256") not in (None, tokenizer_sha256):
        raise ZeroshotError(f"{point.weights}: made with tokenizer {meta['tokenizer_sha256']}, not {tokenizer_sha256}")
    return model.to(device).eval()


def _csv_rows(kind: str, entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"model": kind, "step": e["step"], "task": task, **{key: r[key] for key in CSV_FIELDS[3:]}}
            for e in entries for task, r in e["tasks"].items()]


def _heldout_rows(kind: str, point: Point, probe: DocumentProbe, nll: np.ndarray) -> list[dict[str, Any]]:
    return [{"model": kind, "step": point.step, "tokens": point.tokens, "article": i, "scored_tokens": int(tokens),
             "words": words, "nll": float(v)}
            for i, (tokens, words, v) in enumerate(zip(probe.scored_tokens, probe.words, nll, strict=True))]


def _heldout_metrics(result: dict[str, Any]) -> dict[str, float]:
    return {f"heldout_{key}": result[key] for key in ("loss", "loss_se", "perplexity", "word_perplexity")}


def _mlflow_metrics(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    out = {}
    for task, r in results.items():
        out[f"{task}_{r['metric']}"] = r["raw"]
        out[f"{task}_{r['metric']}_se"] = r["se"]
        out[f"{task}_normalised"] = r["normalised"]
    return out


NOTES = [
    "No fine-tuning: the pre-trained language model alone, with no special tokens (the LM never saw them).",
    "CoLA: the threshold is chosen separately for every snapshot on a seeded subset of the train split "
    "(maximising MCC there), never on the reported split; MCC is reported on {cola_split!r}.",
    "SST-2: the paper's rule (positive when log p(positive) > log p(negative)) where both words are one BPE token; "
    "where one spans several (a small vocabulary), which biases that rule towards the shorter, the offset between "
    "the two words' log-probabilities is chosen likewise on train, and 'uncalibrated' is the paper's rule.",
    "normalised = (raw - random) / (sota - random) with `references` (the paper's Figure 2 scale).",
    "se: the bootstrap standard error over the evaluated examples ({resamples} resamples; the noise of "
    "the examples, for one pre-trained model); p_vs_first: the paired bootstrap p-value of a point "
    "against the first on the same examples (beyond one standard error is about p < 0.32, two p < 0.05).",
    "The final model is the last entry (final: true) only when its step differs from the last snapshot's.",
    "heldout_lm: the perplexity on WikiText-2's validation articles, text the model never saw and no setting was "
    "chosen on (the pre-training's validation windows chose its recipe); every token but an article's first is "
    "scored once, in windows of n_ctx tokens overlapping by one; loss in nats per token, its SE a bootstrap over "
    "articles; word_perplexity divides the same loss by WikiText's word count (words plus one end-of-line per "
    "line), comparable across vocabularies; heldout.csv has each article's summed loss.",
]


def score_points(points: list[Point], tasks: list[TaskData], heldout: DocumentProbe, references: dict[str, Any],
                 tokenizer_sha256: str, device: torch.device, run: StageRun,
                 kind: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every snapshot scored on every task and on the held-out articles: an entry per point, each task's result
    against the first point's; the rows of heldout.csv; each point's metrics logged at its update count."""
    from tqdm import tqdm

    entries, rows, first = [], [], None
    with tqdm(total=len(points) * (len(tasks) + 1), desc=f"zeroshot {kind}", unit="task", dynamic_ncols=True) as bar:
        for point in points:
            model = load_point(point, tokenizer_sha256, device)
            scored = score_point(model, tasks, bar)
            results = {t.name: task_result(t, references[t.name], scored[t.name],
                                           None if first is None else first[t.name]) for t in tasks}
            first = scored if first is None else first
            nll = document_losses(model, heldout)
            bar.update(1)
            heldout_lm = perplexity_result(heldout.scored_tokens, np.array(heldout.words), nll)
            rows += _heldout_rows(kind, point, heldout, nll)
            entries.append({"index": point.index, "step": point.step, "tokens": point.tokens,
                            "val_loss": point.val_loss, "final": point.index is None,
                            "weights": str(point.weights), "tasks": results, "heldout_lm": heldout_lm})
            run.log_metrics({**_mlflow_metrics(results), **_heldout_metrics(heldout_lm)}, step=point.step)
    return entries, rows


def zeroshot_stage(cfg: Config, model_dir: Path, tokenizer_dir: Path, out_dir: Path) -> dict[str, Any]:
    """`gpt1 zeroshot`: the four heuristics on every snapshot of MODEL_DIR (and its final model); writes
    OUT/zeroshot.json and OUT/zeroshot.csv together, logs an MLflow run (x axis: the snapshot's update count)."""
    from gpt1.pipeline.tracking import published_run

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    tokenizer = GPT1Tokenizer.load(tokenizer_dir)
    tokenizer_sha256 = tokenizer.fingerprint()
    meta = check_inputs(model_dir, tokenizer)
    points = list_points(model_dir, meta)
    references = check_references(cfg.root["zeroshot_reference"])
    n_ctx = int(meta["config"]["n_ctx"])
    tasks = [prepare_task(cfg, tokenizer, name, n_ctx) for name in TASK_ORDER]  # data errors surface before scoring
    heldout, heldout_info = prepare_heldout(cfg, tokenizer)
    device = default_device()  # the snapshots are scored where fine-tuning would run
    numerics = in_effect(device.type)
    note_upstream(numerics, meta.get("numerics"), str(model_dir))
    kind = meta["kind"]
    params = {"model_dir": str(model_dir), "model_kind": kind, "zeroshot": cfg.section("zeroshot"),
              "zeroshot_reference": references, "splits": {t.name: t.split for t in tasks}, "points": len(points)}

    with published_run("zeroshot", cfg, params, name=f"zeroshot {kind}") as run:
        run.set_tags({"gpt1.model_kind": kind, "gpt1.tokenizer_sha256": tokenizer_sha256})
        entries, heldout_rows = score_points(points, tasks, heldout, references, tokenizer_sha256, device, run, kind)
        report = {
            "model_kind": kind, "model_dir": str(model_dir), "profile": cfg.profile, "n_ctx": n_ctx,
            "tokenizer_sha256": tokenizer_sha256, "zeroshot": cfg.section("zeroshot"),
            "references": references, "tasks": {t.name: t.info for t in tasks}, "heldout_lm": heldout_info,
            "snapshots": entries,
            "numerics": numerics.to_json(),
            "notes": [note.format(cola_split=tasks[0].split, resamples=RESAMPLES) for note in NOTES],
        }
        outputs = [out_dir / name for name in (layout.ZEROSHOT_JSON, layout.ZEROSHOT_CSV, layout.HELDOUT_CSV)]
        with staged_outputs(*outputs) as (json_tmp, csv_tmp, heldout_tmp):
            write_csv(csv_tmp, CSV_FIELDS, _csv_rows(kind, entries))
            write_csv(heldout_tmp, HELDOUT_FIELDS, heldout_rows)
            files = {layout.ZEROSHOT_CSV: file_record(csv_tmp), layout.HELDOUT_CSV: file_record(heldout_tmp)}
            records.write("zeroshot", json_tmp, {**report, "files": files})
        for path in outputs:
            run.log_output(path)
    return report


__all__ = ["CSV_FIELDS", "HELDOUT_FIELDS", "check_inputs", "check_references", "list_points", "prepare_heldout",
           "prepare_task", "zeroshot_stage"]
