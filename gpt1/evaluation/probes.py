"""The zero-shot heuristics of the paper's §5 ("Zero-shot behaviours", Figure 2 right), scored along pre-training.

The paper asks whether the generative pre-training alone teaches the model the tasks: it evaluates, with no
fine-tuning and no task tokens, four heuristics on the language model at several points of its training:

* CoLA: the sentence's average token log-probability, thresholded ("acceptable" above the threshold); MCC.
* SST-2: append the word "very" and compare the LM's probability of "positive" and "negative" next; accuracy.
  Both words are one token in the paper's 40k vocabulary, and there the paper's rule (offset 0) is what is scored.
  With a smaller vocabulary "negative" may take two tokens, and the shorter word then wins whatever the sentence;
  only then is the two words' log-probability difference compared with an offset chosen on the train split (as
  CoLA's threshold), the paper's rule kept beside it as `uncalibrated`.
* RACE: the answer with the highest average token log-probability given document and question; accuracy.
* DPRD: replace the pronoun by each candidate; the candidate after which the rest of the sentence is likelier
  wins (Trinh and Le 2018's "partial" scoring); accuracy.

Every heuristic is one call of the shared scorer `gpt1.evaluation.scoring.score_continuations`: the log-probability of
continuation tokens given prefix tokens, the prefix cut from the LEFT to fit n_ctx, never the continuation. Texts go
through the tokenizer exactly as in fine-tuning (`encode_batch`), with no special tokens: the LM never saw them.

Scores are normalised as in the paper: (raw - random) / (sota - random), with the references the stage passes
(params.yaml's zeroshot_reference).

A library: the four probes, their scoring and each point's result with its standard error; the stage that loads the
data and the snapshots, writes zeroshot.json and logs to MLflow is gpt1.stages.zeroshot.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

from gpt1.data.rows import Example
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.evaluation.metrics import accuracy, bootstrap_se, matthews, paired_bootstrap
from gpt1.evaluation.scoring import BATCH_TOKENS, fit_context, score_continuations
from gpt1.evaluation.significance import BOOTSTRAP_SEED, RESAMPLES
from gpt1.pipeline.errors import ZeroshotError

TASK_ORDER = ("cola", "sst2", "race", "dprd")  # the order of the paper's Figure 2 (right) legend
METRICS = {"cola": "mcc", "sst2": "accuracy", "race": "accuracy", "dprd": "accuracy"}  # what each heuristic yields
COLA_CONTEXT = "."  # what a sentence is conditioned on, so that its first token is scored too (see cola_probe)
SST2_CUE = "very"
SST2_WORDS = ("negative", "positive")  # in GLUE label order: 0 negative, 1 positive
POSSESSIVES = frozenset({"his", "its", "their"})  # a candidate replacing one of these gets "'s" (Jimbo's car)

HEURISTICS = {
    "cola": f"mean token log-probability of the sentence conditioned on {COLA_CONTEXT!r} (so its first token is "
            "scored too); 'acceptable' when above a threshold chosen, per snapshot, to maximise MCC on a seeded "
            "subset of the train split; MCC reported on the evaluation split",
    "sst2": f"sentence + ' {SST2_CUE}', then the summed log-probability of the tokens of 'positive' vs 'negative' "
            "(the probability of the whole word, however many BPE tokens it has); 'positive' when log p(positive) - "
            "log p(negative) exceeds 0, the paper's rule, where both words are one token; where one spans several, "
            "an offset chosen, per snapshot, to maximise accuracy on a seeded subset of the train split (the paper's "
            "rule then reported as 'uncalibrated')",
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
    """The two label words after each sentence of the test split and, where an offset is fitted, of a fit split."""

    test: ChoiceProbe
    fit: ChoiceProbe | None = None

    def __len__(self) -> int:
        return len(self.test)

    @property
    def calibrated(self) -> bool:
        """Whether an offset is fitted (`sst2_needs_offset` says where)."""
        return self.fit is not None


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


def sst2_needs_offset(tokenizer: GPT1Tokenizer) -> bool:
    """Whether a label word spans several tokens: its summed log-probability then pays for each, a bias an offset
    fitted on a train split removes. The paper's vocabulary spells both words as one token each and takes offset 0."""
    return any(len(word) > 1 for word in _encode(tokenizer, list(SST2_WORDS)))


def sst2_offset_probe(tokenizer: GPT1Tokenizer, test: Sequence[Example],
                      fit: Sequence[Example] | None = None) -> Sst2Probe:
    """The test split's probe, and the fit split's where an offset is to be chosen on it: only where
    `sst2_needs_offset` (a fit split given for a vocabulary that spells both words whole is left out, so that
    the paper's rule holds wherever it can; a caller may skip loading it then)."""
    if fit is None or not sst2_needs_offset(tokenizer):
        return Sst2Probe(sst2_probe(tokenizer, test))
    return Sst2Probe(sst2_probe(tokenizer, test), sst2_probe(tokenizer, fit))


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
    """Accuracy of 'positive when log p(positive) - log p(negative) > offset': the paper's offset 0 where both words
    are one token; else the offset chosen on the fit split, the paper's rule beside it as `uncalibrated`."""
    def margins(part: ChoiceProbe) -> np.ndarray:
        scores = choice_scores(model, part, n_ctx, batch_tokens)
        return scores[:, 1] - scores[:, 0]  # SST2_WORDS: negative, positive

    test = margins(probe.test)
    if probe.fit is None:
        predictions = (test > 0).astype(int)
        return Scored(accuracy(probe.test.labels, predictions), probe.test.labels, predictions, {"offset": 0.0})
    offset, fit_accuracy = choose_threshold(margins(probe.fit), probe.fit.labels, metric=accuracy)
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
        return sum(count_truncated(part, n_ctx) for part in (probe.fit, probe.test) if part is not None)
    if isinstance(probe, ColaProbe):
        pairs = [(probe.context, s) for s in (*probe.fit_sentences, *probe.test_sentences)]
    else:
        pairs = list(zip(probe.prefixes, probe.continuations, strict=True))
    return sum(fit_context(p, c, n_ctx).truncated for p, c in pairs)


@dataclass(frozen=True)
class TaskData:
    """One task's probe, the split it scores and what zeroshot.json says of its data."""
    name: str
    probe: ChoiceProbe | ColaProbe | Sst2Probe
    split: str
    info: dict[str, Any]  # what zeroshot.json says about the task's data


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


__all__ = [
    "HEURISTICS",
    "METRICS",
    "TASK_ORDER",
    "ChoiceProbe",
    "ColaProbe",
    "Scored",
    "Sst2Probe",
    "TaskData",
    "choose_threshold",
    "cola_probe",
    "count_truncated",
    "dprd_probe",
    "dprd_texts",
    "evaluate_cola",
    "evaluate_probe",
    "evaluate_sst2",
    "normalise",
    "predict_choices",
    "pronoun_span",
    "race_probe",
    "score_point",
    "sst2_needs_offset",
    "sst2_offset_probe",
    "sst2_probe",
    "task_result",
]
