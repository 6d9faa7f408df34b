"""The four input transformations of §3.3 (Figure 1, right): a task's example as the token sequences its head reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpt1.data.rows import Example
from gpt1.data.tasks import TaskSpec, task_spec
from gpt1.evaluation.scoring import left_truncate
from gpt1.pipeline.errors import TaskError


@dataclass(frozen=True)
class Transformed:
    sequences: list[list[int]]  # 1 (classification, entailment), 2 (similarity: both orders) or k (choices)
    truncated: bool


def _assemble(context: list[int], tail: list[int] | None, ids: dict[str, int], n_ctx: int) -> tuple[list[int], bool]:
    """[start] context [delim] tail [extract], or [start] context [extract] when there is no tail, within n_ctx."""
    specials = 2 if tail is None else 3
    budget = n_ctx - specials
    if budget < 1:
        raise TaskError(f"n_ctx {n_ctx} leaves no room for text beside {specials} special tokens")
    # The context loses its beginning first; the tail is cut from the right only if it alone overflows.
    fitted = left_truncate(context, tail or [], budget)
    sequence = [ids["_start_"], *fitted.context]
    if tail is not None:
        sequence += [ids["_delimiter_"], *fitted.tail]
    return [*sequence, ids["_classify_"]], fitted.truncated


def transform_batch(spec: TaskSpec | str, examples: Sequence[Example], tokenizer, n_ctx: int) -> list[Transformed]:
    """The input transformations of §3.3 (Figure 1, right) as token ids, encoding each distinct text once.

    - classification: [start] text [extract]
    - entailment:     [start] premise [delim] hypothesis [extract]
    - similarity:     [start] A [delim] B [extract] and [start] B [delim] A [extract]; the model sums the two
                      extract-token states before the linear layer
    - multiple choice: [start] context [delim] answer_k [extract] for every answer k; the context is the
                      text fields joined by a space (RACE: article + " " + question; Story Cloze: the four
                      sentences), the answers the choices
    start/delim/extract are `tokenizer.specials` _start_, _delimiter_, _classify_.

    Truncation, when a sequence exceeds n_ctx: the special tokens always stay. The context (the only text of
    classification, the premise, the first text of a similarity order, the article-and-question context) is
    trimmed from the LEFT, so the end next to the delimiter survives (RACE: the question outlives the article;
    `gpt1.evaluation.scoring.left_truncate`, the rule zero-shot scoring uses too).
    The second segment (hypothesis, second text, answer) is never trimmed unless it alone, with the specials,
    exceeds n_ctx; then the context is dropped entirely and that segment is cut from the right. `truncated`
    reports whether any sequence of the example lost tokens.
    """
    spec = task_spec(spec)
    if not spec.finetune:
        raise TaskError(f"task {spec.name} is an analysis dataset (zero-shot), not fine-tuned: no input transformation")
    ids = tokenizer.specials
    texts = sorted({t for e in examples for t in _segments(spec, e)})
    encoded = dict(zip(texts, tokenizer.encode_batch(texts), strict=True))
    results = []
    for example in examples:
        pairs = _pairs(spec, example)
        built = [_assemble(encoded[a], None if b is None else encoded[b], ids, n_ctx) for a, b in pairs]
        results.append(Transformed([s for s, _ in built], any(t for _, t in built)))
    return results


def transform(spec: TaskSpec | str, example: Example, tokenizer, n_ctx: int) -> Transformed:
    """One example's sequences; see `transform_batch` for the layouts and the truncation policy."""
    return transform_batch(spec, [example], tokenizer, n_ctx)[0]


def _pairs(spec: TaskSpec, example: Example) -> list[tuple[str, str | None]]:
    """(context, tail) per sequence, before encoding."""
    if spec.kind == "classification":
        return [(example.texts[0], None)]
    if spec.kind == "entailment":
        return [(example.texts[0], example.texts[1])]
    if spec.kind == "similarity":
        a, b = example.texts
        return [(a, b), (b, a)]
    context = " ".join(example.texts)
    return [(context, choice) for choice in example.choices or ()]


def _segments(spec: TaskSpec, example: Example) -> list[str]:
    return [t for pair in _pairs(spec, example) for t in pair if t is not None]
