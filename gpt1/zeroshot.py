"""The zero-shot heuristics of the paper's §5 ("Zero-shot behaviours", Figure 2 right), scored along pre-training.

The paper asks whether the generative pre-training alone teaches the model the tasks: it evaluates, with no
fine-tuning and no task tokens, four heuristics on the language model at several points of its training:

* CoLA: the sentence's average token log-probability, thresholded ("acceptable" above the threshold); MCC.
* SST-2: append the word "very" and compare the LM's probability of "positive" and "negative" next; accuracy.
  Both words are one token in the paper's 40k vocabulary; with a smaller one "negative" may take two, and the
  shorter word then wins whatever the sentence. So the two words' log-probability difference is compared with an
  offset chosen on the train split (as CoLA's threshold); the paper's rule (offset 0) is kept as `uncalibrated`.
* RACE: the answer with the highest average token log-probability given document and question; accuracy.
* DPRD: replace the pronoun by each candidate; the candidate after which the rest of the sentence is likelier
  wins (Trinh and Le 2018's "partial" scoring); accuracy.

Every heuristic is one call of the shared scorer `gpt1.scoring.score_continuations`: the log-probability of
continuation tokens given prefix tokens, the prefix cut from the LEFT to fit n_ctx, never the continuation. Texts go
through the tokenizer exactly as in fine-tuning (`encode_batch`), with no special tokens: the LM never saw them.

Scores are normalised as in the paper: (raw - random) / (sota - random), with params.yaml's zeroshot_reference.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from gpt1 import layout
from gpt1.checkpoints import MODEL_FILE, MODEL_JSON, SNAPSHOT_DIR, SNAPSHOT_INDEX, iter_snapshots, load_pretrained
from gpt1.errors import ZeroshotError
from gpt1.files import file_record, read_json, require_files, staged_outputs, write_csv, write_sealed_json
from gpt1.metrics import accuracy, bootstrap_se, matthews, paired_bootstrap
from gpt1.numerics import in_effect, note_upstream
from gpt1.runtime import default_device
from gpt1.scoring import BATCH_TOKENS, fit_context, score_continuations
from gpt1.significance import BOOTSTRAP_SEED, RESAMPLES
from gpt1.tasks import Example, LoadedSplit, evaluation_split, get_task, load_examples, mirror_splits
from gpt1.tokenizer import GPT1Tokenizer

TASK_ORDER = ("cola", "sst2", "race", "dprd")  # the order of the paper's Figure 2 (right) legend
METRICS = {"cola": "mcc", "sst2": "accuracy", "race": "accuracy", "dprd": "accuracy"}  # what each heuristic yields
COLA_CONTEXT = "."  # what a sentence is conditioned on, so that its first token is scored too (see cola_probe)
SST2_CUE = "very"
SST2_WORDS = ("negative", "positive")  # in GLUE label order: 0 negative, 1 positive
POSSESSIVES = frozenset({"his", "its", "their"})  # a candidate replacing one of these gets "'s" (Jimbo's car)
CSV_FIELDS = ("model", "step", "task", "metric", "raw", "se", "normalised", "normalised_se", "p_vs_first")
JSON_FILE, CSV_FILE = layout.ZEROSHOT_JSON, layout.ZEROSHOT_CSV

HEURISTICS = {
    "cola": f"mean token log-probability of the sentence conditioned on {COLA_CONTEXT!r} (so its first token is "
            "scored too); 'acceptable' when above a threshold chosen, per snapshot, to maximise MCC on a seeded "
            "subset of the train split; MCC reported on the evaluation split",
    "sst2": f"sentence + ' {SST2_CUE}', then the summed log-probability of the tokens of 'positive' vs 'negative' "
            "(the probability of the whole word, however many BPE tokens it has); 'positive' when log p(positive) - "
            "log p(negative) exceeds an offset chosen, per snapshot, to maximise accuracy on a seeded subset of the "
            "train split (the paper's rule, offset 0, is reported as 'uncalibrated')",
    "race": "per question, the option with the highest mean token log-probability conditioned on article + ' ' + "
            "question (the article loses its beginning first when the context overflows n_ctx)",
    "dprd": "the pronoun (its first whole-word, case-insensitive occurrence after both candidates' first mentions; "
            "the first occurrence anywhere if none follows them) is replaced by each candidate ('s appended for "
            "his/its/their); the candidate after which the rest of the sentence (the tokens after it) has the "
            "higher mean token log-probability wins",
}


# ----------------------------------------------------------------------------------------------------------------
# Probes: each task's token ids, built once, scored under every snapshot


@dataclass(frozen=True)
class ChoiceProbe:
    """Multiple-choice items (SST-2: the two label words, RACE: four options, DPRD: two candidates) as token ids,
    example-major: example i's options are rows i*k .. i*k+k-1. Prediction: the option with the best score."""

    prefixes: list[list[int]]
    continuations: list[list[int]]
    n_options: int
    labels: np.ndarray
    reduction: str

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class Sst2Probe:
    """The two label words after each sentence of a fit split (which chooses the offset) and of the test split."""

    fit: ChoiceProbe
    test: ChoiceProbe

    def __len__(self) -> int:
        return len(self.test)


@dataclass(frozen=True)
class ColaProbe:
    """Sentences conditioned on `context`: a fit split chooses the threshold, the test split is reported."""

    context: list[int]
    fit_sentences: list[list[int]]
    fit_labels: np.ndarray
    test_sentences: list[list[int]]
    test_labels: np.ndarray

    def __len__(self) -> int:
        return len(self.test_labels)


def _encode(tokenizer: GPT1Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Encode each distinct text once (RACE repeats an article for every question and option)."""
    distinct = sorted(set(texts))
    table = dict(zip(distinct, tokenizer.encode_batch(distinct), strict=True))
    return [table[t] for t in texts]


def _labels(examples: Sequence[Example]) -> np.ndarray:
    return np.array([int(e.label) for e in examples], dtype=np.int64)


def cola_probe(tokenizer: GPT1Tokenizer, fit: Sequence[Example], test: Sequence[Example]) -> ColaProbe:
    """Each sentence is conditioned on the encoding of COLA_CONTEXT ('.'): in running text a sentence follows a
    period, so every token of the sentence, its first included, is scored with an ordinary left context (with no
    context the first token could not be scored at all, and a one-word difference there would go unseen)."""
    sentences = _encode(tokenizer, [e.texts[0] for e in (*fit, *test)])
    return ColaProbe(tokenizer.encode(COLA_CONTEXT), sentences[: len(fit)], _labels(fit), sentences[len(fit) :],
                     _labels(test))


def sst2_probe(tokenizer: GPT1Tokenizer, examples: Sequence[Example]) -> ChoiceProbe:
    """Prefix: the sentence + ' very'; options: 'negative', 'positive' (GLUE's label order), each summed over its
    BPE tokens so that the score is the log-probability of the whole word."""
    prefixes = _encode(tokenizer, [f"{e.texts[0].rstrip()} {SST2_CUE}" for e in examples])
    words = _encode(tokenizer, list(SST2_WORDS))
    return ChoiceProbe([p for p in prefixes for _ in words], [w for _ in prefixes for w in words], len(words),
                       _labels(examples), "sum")


def sst2_calibrated_probe(tokenizer: GPT1Tokenizer, fit: Sequence[Example], test: Sequence[Example]) -> Sst2Probe:
    return Sst2Probe(sst2_probe(tokenizer, fit), sst2_probe(tokenizer, test))


def race_probe(tokenizer: GPT1Tokenizer, examples: Sequence[Example]) -> ChoiceProbe:
    """Prefix: article + ' ' + question (the fine-tuning context); options: the four answers, mean-scored."""
    k = len(examples[0].choices or ()) if examples else 4
    if any(len(e.choices or ()) != k for e in examples):
        raise ZeroshotError(f"race: every question needs {k} options")
    prefixes = _encode(tokenizer, [" ".join(e.texts) for e in examples for _ in range(k)])
    answers = _encode(tokenizer, [c for e in examples for c in e.choices or ()])
    return ChoiceProbe(prefixes, answers, k, _labels(examples), "mean")


def _word(text: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(text)}(?!\w)", re.IGNORECASE)


def pronoun_span(sentence: str, pronoun: str, candidates: Sequence[str]) -> tuple[int, int]:
    """(start, end) of the pronoun to resolve: its first whole-word occurrence (case-insensitive) after the first
    mentions of both candidates. In DPR (Rahman and Ng 2012) the target pronoun follows both candidates, and an
    earlier occurrence is another pronoun ("The workers were told they had been fired by the company, because they
    ..."); the first one after the candidates is the target wherever the mirror's sentences say it twice. A
    candidate missing from the sentence is ignored; with no occurrence after the candidates, the first one counts."""
    occurrences = [m.span() for m in _word(pronoun).finditer(sentence)]
    if not occurrences:
        raise ZeroshotError(f"dprd: pronoun {pronoun!r} does not occur as a word in {sentence!r}")
    ends = [m.end() for c in candidates if (m := _word(c).search(sentence))]
    after = [span for span in occurrences if span[0] >= max(ends, default=0)]
    return (after or occurrences)[0]


def dprd_texts(sentence: str, pronoun: str, candidates: Sequence[str]) -> list[tuple[str, str]]:
    """(sentence up to the pronoun + candidate, the rest of the sentence) per candidate."""
    start, end = pronoun_span(sentence, pronoun, candidates)
    suffix = "'s" if pronoun.lower() in POSSESSIVES else ""
    return [(sentence[:start] + candidate + suffix, sentence[end:]) for candidate in candidates]


def dprd_probe(tokenizer: GPT1Tokenizer, examples: Sequence[Example]) -> ChoiceProbe:
    """Prefix: the sentence up to the pronoun with a candidate in its place; continuation: the rest of the sentence,
    the same tokens for every candidate, so only the conditioning differs (encoded apart from the prefix, so the
    continuation's tokens are identical across candidates)."""
    pairs = [pair for e in examples for pair in dprd_texts(e.texts[0], e.texts[1], e.choices or ())]
    k = len(examples[0].choices or ()) if examples else 2
    return ChoiceProbe(_encode(tokenizer, [p for p, _ in pairs]), _encode(tokenizer, [c for _, c in pairs]), k,
                       _labels(examples), "mean")


# ----------------------------------------------------------------------------------------------------------------
# Predictions and metrics


def choice_scores(model: nn.Module, probe: ChoiceProbe, n_ctx: int | None = None,
                  batch_tokens: int = BATCH_TOKENS) -> np.ndarray:
    """[examples, options]: the score of every option of every example."""
    scores = score_continuations(model, probe.prefixes, probe.continuations, n_ctx=n_ctx,
                                 reduction=probe.reduction, batch_tokens=batch_tokens)
    return scores.reshape(len(probe), probe.n_options)


def predict_choices(model: nn.Module, probe: ChoiceProbe, n_ctx: int | None = None,
                    batch_tokens: int = BATCH_TOKENS) -> np.ndarray:
    """The best-scoring option of every example (ties: the first)."""
    return choice_scores(model, probe, n_ctx, batch_tokens).argmax(1)


def choose_threshold(scores: np.ndarray, labels: np.ndarray, metric: Callable = matthews) -> tuple[float, float]:
    """(threshold, metric) maximising `metric` (default MCC) of 'label 1 when score > threshold' on these examples.
    Candidates: below every score, and the midpoints between consecutive distinct scores; ties go to the lowest."""
    values = np.unique(np.asarray(scores, dtype=np.float64))
    candidates = [values[0] - 1.0, *((values[:-1] + values[1:]) / 2)]
    best = max(candidates, key=lambda t: (metric(labels, (scores > t).astype(int)), -t))
    return float(best), metric(labels, (scores > best).astype(int))


@dataclass(frozen=True)
class Scored:
    """A probe under one model: the task's metric on the reported examples, each example's prediction (the
    standard error and the paired tests resample them), and what was chosen on the fit split."""

    raw: float
    labels: np.ndarray
    predictions: np.ndarray
    details: dict[str, float]


def evaluate_cola(model: nn.Module, probe: ColaProbe, n_ctx: int | None = None,
                  batch_tokens: int = BATCH_TOKENS) -> Scored:
    """MCC on the test sentences, thresholded where MCC is best on the (separate) fit sentences."""
    def scores(sentences: list[list[int]]) -> np.ndarray:
        return score_continuations(model, [probe.context] * len(sentences), sentences, n_ctx=n_ctx,
                                   batch_tokens=batch_tokens)

    threshold, fit_mcc = choose_threshold(scores(probe.fit_sentences), probe.fit_labels)
    predictions = (scores(probe.test_sentences) > threshold).astype(int)
    return Scored(matthews(probe.test_labels, predictions), probe.test_labels, predictions,
                  {"threshold": threshold, "threshold_split_mcc": fit_mcc})


def evaluate_sst2(model: nn.Module, probe: Sst2Probe, n_ctx: int | None = None,
                  batch_tokens: int = BATCH_TOKENS) -> Scored:
    """Accuracy of 'positive when log p(positive) - log p(negative) > offset', the offset chosen on the fit split;
    and the paper's rule (offset 0) as `uncalibrated`."""
    def margins(part: ChoiceProbe) -> np.ndarray:
        scores = choice_scores(model, part, n_ctx, batch_tokens)
        return scores[:, 1] - scores[:, 0]  # SST2_WORDS: negative, positive

    offset, fit_accuracy = choose_threshold(margins(probe.fit), probe.fit.labels, metric=accuracy)
    test = margins(probe.test)
    predictions = (test > offset).astype(int)
    return Scored(accuracy(probe.test.labels, predictions), probe.test.labels, predictions,
                  {"offset": offset, "offset_split_accuracy": fit_accuracy,
                   "uncalibrated": accuracy(probe.test.labels, (test > 0).astype(int))})


def evaluate_probe(model: nn.Module, probe: ChoiceProbe | ColaProbe | Sst2Probe, n_ctx: int | None = None,
                   batch_tokens: int = BATCH_TOKENS) -> Scored:
    """The task's metric (MCC for CoLA, accuracy for SST-2 and the multiple-choice probes) and the predictions."""
    if isinstance(probe, ColaProbe):
        return evaluate_cola(model, probe, n_ctx, batch_tokens)
    if isinstance(probe, Sst2Probe):
        return evaluate_sst2(model, probe, n_ctx, batch_tokens)
    predictions = predict_choices(model, probe, n_ctx, batch_tokens)
    return Scored(accuracy(probe.labels, predictions), probe.labels, predictions, {})


def normalise(raw: float, reference: dict[str, Any]) -> float:
    """The paper's scale: 0 = random guessing, 1 = the state of the art of the time."""
    return (raw - reference["random"]) / (reference["sota"] - reference["random"])


def count_truncated(probe: ChoiceProbe | ColaProbe | Sst2Probe, n_ctx: int) -> int:
    """Rows whose prefix (or, rarely, continuation) did not fit n_ctx whole."""
    if isinstance(probe, Sst2Probe):
        return count_truncated(probe.fit, n_ctx) + count_truncated(probe.test, n_ctx)
    if isinstance(probe, ColaProbe):
        pairs = [(probe.context, s) for s in (*probe.fit_sentences, *probe.test_sentences)]
    else:
        pairs = list(zip(probe.prefixes, probe.continuations, strict=True))
    return sum(fit_context(p, c, n_ctx).truncated for p, c in pairs)


# ----------------------------------------------------------------------------------------------------------------
# The stage


@dataclass(frozen=True)
class TaskData:
    name: str
    probe: ChoiceProbe | ColaProbe | Sst2Probe
    split: str
    info: dict[str, Any]  # what zeroshot.json says about the task's data


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


def _load(cfg: Any, name: str, split: str) -> LoadedSplit:
    settings = cfg.section("zeroshot")
    synthetic = cfg.section("corpus")["source"] == "synthetic"
    return load_examples(name, split, None if synthetic else cfg.data_mirror, max_examples=settings["max_examples"],
                         synthetic=synthetic, seed=settings["seed"])


def _present(cfg: Any, name: str) -> list[str] | None:
    """Splits that exist where the data comes from (None: the hub or synthetic data, which have them all)."""
    mirror = cfg.data_mirror
    if cfg.section("corpus")["source"] == "synthetic" or mirror is None:
        return None
    return mirror_splits(get_task(name), mirror)


def prepare_task(cfg: Any, tokenizer: GPT1Tokenizer, name: str, n_ctx: int) -> TaskData:
    split = _split_of(name, _present(cfg, name))
    loaded = _load(cfg, name, split)
    info: dict[str, Any] = {"split": split, "examples": len(loaded.examples), "data": loaded.describe(),
                            "heuristic": HEURISTICS[name]}
    if name in ("cola", "sst2"):  # a threshold (CoLA) or an offset (SST-2) chosen on the train split
        fit_split = get_task(name).train
        fit = _load(cfg, name, fit_split)
        make = cola_probe if name == "cola" else sst2_calibrated_probe
        probe: ChoiceProbe | ColaProbe | Sst2Probe = make(tokenizer, fit.examples, loaded.examples)
        info.update(threshold_split=fit_split, threshold_examples=len(fit.examples), threshold_data=fit.describe())
    else:
        probe = {"race": race_probe, "dprd": dprd_probe}[name](tokenizer, loaded.examples)
    if name == "dprd":
        info["note"] = f"DPR has no training here, so its {split!r} split is a legitimate evaluation split"
    info["truncated_rows"] = count_truncated(probe, n_ctx)
    return TaskData(name, probe, split, info)


def check_inputs(model_dir: Path, tokenizer: GPT1Tokenizer) -> dict[str, Any]:
    """Fail before any work: the pretrain outputs must be there and made with this tokenizer. Returns model.json."""
    require_files("pretrain", model_dir / SNAPSHOT_DIR / SNAPSHOT_INDEX, model_dir / MODEL_JSON,
                  model_dir / MODEL_FILE)
    meta = read_json(model_dir / MODEL_JSON)
    if not isinstance(meta, dict) or not {"kind", "config", "step", "tokens"} <= meta.keys():
        raise ZeroshotError(f"{model_dir / MODEL_JSON}: not the model.json gpt1 pretrain writes (kind, config, step, "
                            f"tokens); re-run gpt1 pretrain")
    _check_snapshot_index(model_dir / SNAPSHOT_DIR / SNAPSHOT_INDEX)
    if meta.get("tokenizer_sha256") != tokenizer.fingerprint():
        raise ZeroshotError(
            f"{model_dir / MODEL_JSON}: tokenizer_sha256 {meta.get('tokenizer_sha256')} differs from the tokenizer's "
            f"{tokenizer.fingerprint()}; pass the tokenizer the model was pre-trained with, or re-run gpt1 pretrain"
        )
    return meta


def _check_snapshot_index(path: Path) -> None:
    """A list of at least one {index, step, tokens}: anything else would score the final model alone, silently."""
    entries = read_json(path)
    keys = {"index", "step", "tokens"}
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) and keys <= e.keys()
                                                               for e in entries):
        raise ZeroshotError(f"{path}: not a list of snapshots with index, step and tokens; re-run gpt1 pretrain")


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
        points.append(Point(None, int(meta["step"]), int(meta["tokens"]), None, model_dir / MODEL_FILE))
    return points


def load_point(point: Point, tokenizer_sha256: str, device: torch.device) -> nn.Module:
    model, meta = load_pretrained(point.weights)
    if meta.get("tokenizer_sha256") not in (None, tokenizer_sha256):
        raise ZeroshotError(f"{point.weights}: made with tokenizer {meta['tokenizer_sha256']}, not {tokenizer_sha256}")
    return model.to(device).eval()


def score_point(model: nn.Module, tasks: Sequence[TaskData], bar: Any = None) -> dict[str, Scored]:
    """Every task's probe under one model."""
    scored = {}
    for task in tasks:
        scored[task.name] = evaluate_probe(model, task.probe)
        if bar is not None:
            bar.update(1)
    return scored


def task_result(task: TaskData, reference: dict[str, Any], scored: Scored, first: Scored | None) -> dict[str, Any]:
    """zeroshot.json's entry of one task at one point: the raw metric and its bootstrap standard error over the
    examples, both on the paper's normalised scale too, and `p_vs_first`, the paired bootstrap p-value of this point
    against the curve's first on the same examples (None at the first point)."""
    metric = reference["metric"]
    se = bootstrap_se(metric, scored.labels, scored.predictions, n=RESAMPLES, seed=BOOTSTRAP_SEED)
    p_vs_first = None if first is None else paired_bootstrap(
        metric, scored.labels, scored.predictions, first.predictions, n=RESAMPLES, seed=BOOTSTRAP_SEED).p_value
    scale = reference["sota"] - reference["random"]
    return {"metric": metric, "raw": scored.raw, "se": se, "normalised": normalise(scored.raw, reference),
            "normalised_se": se / scale, "p_vs_first": p_vs_first, "examples": len(task.probe), "split": task.split,
            **scored.details}


def _csv_rows(kind: str, entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"model": kind, "step": e["step"], "task": task, **{key: r[key] for key in CSV_FIELDS[3:]}}
            for e in entries for task, r in e["tasks"].items()]


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    write_csv(path, CSV_FIELDS, rows)


def _mlflow_metrics(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    out = {}
    for task, r in results.items():
        out[f"{task}_{r['metric']}"] = r["raw"]
        out[f"{task}_{r['metric']}_se"] = r["se"]
        out[f"{task}_normalised"] = r["normalised"]
    return out


def zeroshot_stage(cfg: Any, model_dir: Path, tokenizer_dir: Path, out_dir: Path) -> dict[str, Any]:
    """`gpt1 zeroshot`: the four heuristics on every snapshot of MODEL_DIR (and its final model); writes
    OUT/zeroshot.json and OUT/zeroshot.csv together, logs an MLflow run (x axis: the snapshot's update count)."""
    from tqdm import tqdm

    from gpt1.tracking import stage_run

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    tokenizer = GPT1Tokenizer.load(tokenizer_dir)
    meta = check_inputs(model_dir, tokenizer)
    points = list_points(model_dir, meta)
    references = check_references(cfg.root["zeroshot_reference"])
    n_ctx = int(meta["config"]["n_ctx"])
    tasks = [prepare_task(cfg, tokenizer, name, n_ctx) for name in TASK_ORDER]  # data errors surface before scoring
    device = default_device()  # the snapshots are scored where fine-tuning would run
    numerics = in_effect(device.type)
    note_upstream(numerics, meta.get("numerics"), str(model_dir))
    kind = meta["kind"]
    params = {"model_dir": str(model_dir), "model_kind": kind, "zeroshot": cfg.section("zeroshot"),
              "zeroshot_reference": references, "splits": {t.name: t.split for t in tasks}, "points": len(points)}

    with stage_run("zeroshot", cfg.profile, cfg.root["mlflow"]["experiment"], params, name=f"zeroshot {kind}") as run:
        run.set_tags({"gpt1.model_kind": kind, "gpt1.tokenizer_sha256": tokenizer.fingerprint()})
        entries, first = [], None
        with tqdm(total=len(points) * len(tasks), desc=f"zeroshot {kind}", unit="task", dynamic_ncols=True) as bar:
            for point in points:
                model = load_point(point, tokenizer.fingerprint(), device)
                scored = score_point(model, tasks, bar)
                results = {t.name: task_result(t, references[t.name], scored[t.name],
                                               None if first is None else first[t.name]) for t in tasks}
                first = scored if first is None else first
                entries.append({"index": point.index, "step": point.step, "tokens": point.tokens,
                                "val_loss": point.val_loss, "final": point.index is None,
                                "weights": str(point.weights), "tasks": results})
                run.log_metrics(_mlflow_metrics(results), step=point.step)
        report = {
            "model_kind": kind, "model_dir": str(model_dir), "profile": cfg.profile, "n_ctx": n_ctx,
            "tokenizer_sha256": tokenizer.fingerprint(), "zeroshot": cfg.section("zeroshot"),
            "references": references, "tasks": {t.name: t.info for t in tasks}, "snapshots": entries,
            "numerics": numerics.to_json(),
            "notes": [
                "No fine-tuning: the pre-trained language model alone, with no special tokens (the LM never saw them).",
                "CoLA: the threshold is chosen separately for every snapshot on a seeded subset of the train split "
                f"(maximising MCC there), never on the reported split; MCC is reported on {tasks[0].split!r}.",
                "SST-2: likewise the offset between the two words' log-probabilities (maximising accuracy on train); "
                "'uncalibrated' is the paper's rule (offset 0), biased when one word has more BPE tokens.",
                "normalised = (raw - random) / (sota - random) with `references` (the paper's Figure 2 scale).",
                f"se: the bootstrap standard error over the evaluated examples ({RESAMPLES} resamples; the noise of "
                "the examples, for one pre-trained model); p_vs_first: the paired bootstrap p-value of a point "
                "against the first on the same examples (beyond one standard error is about p < 0.32, two p < 0.05).",
                "The final model is the last entry (final: true) only when its step differs from the last snapshot's.",
            ],
        }
        with staged_outputs(out_dir / JSON_FILE, out_dir / CSV_FILE) as (json_tmp, csv_tmp):
            _write_csv(csv_tmp, _csv_rows(kind, entries))
            write_sealed_json(json_tmp, {**report, "files": {CSV_FILE: file_record(csv_tmp)}})
        run.log_artifact(out_dir / JSON_FILE)
        run.log_artifact(out_dir / CSV_FILE)
    return report


__all__ = [
    "ChoiceProbe",
    "ColaProbe",
    "Scored",
    "Sst2Probe",
    "choose_threshold",
    "cola_probe",
    "dprd_probe",
    "dprd_texts",
    "evaluate_cola",
    "evaluate_probe",
    "evaluate_sst2",
    "normalise",
    "predict_choices",
    "pronoun_span",
    "race_probe",
    "sst2_calibrated_probe",
    "sst2_probe",
    "zeroshot_stage",
]
