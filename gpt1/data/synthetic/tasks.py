"""The smoke profile's task data, made by the project (never copied from a dataset).

For every registered dataset, configuration and split, `synthetic_split` builds a small `datasets.Dataset` with
exactly the hub's columns and features (ClassLabel names, float32 scores, lists of options), so the same parsing
code reads it as the mirror or the hub. Each generator plants a little learnable signal: sentiment words for
SST-2, shuffled word order for unacceptable CoLA sentences, hypotheses that repeat (entail), negate (contradict) or
leave (neutral) the premise, similarity that follows word overlap, and right answers that share words with the
context. Rows are deterministic in (seed, dataset, configuration, split).
"""

from __future__ import annotations

import random
import uuid
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import datasets

from gpt1.data.synthetic.corpus import ADJECTIVES, NAMES, NOUNS, PLACES, VERBS
from gpt1.pipeline.errors import SyntheticDataError

Row = dict[str, Any]
POSITIVE = ["wonderful", "charming", "moving", "brilliant", "delightful", "warm", "funny", "clever", "tender"]
NEGATIVE = ["dull", "tedious", "clumsy", "bleak", "boring", "messy", "shallow", "tiresome", "hollow"]
SUBJECTS = ["the film", "this story", "the cast", "the script", "its ending", "the music", "every scene"]
DAYS = ["monday", "tuesday", "friday", "sunday"]
ANIMATE = ["dog", "child", "farmer", "sailor", "cat", "teacher"]
THINGS = ["ball", "bucket", "ladder", "parcel", "basket", "stone"]
ANIMATE_REASONS = ["hungry", "tired", "curious", "angry"]  # the pronoun refers to the first (animate) candidate
THING_REASONS = ["heavy", "broken", "slippery", "empty"]  # ... or to the second (a thing)


def _glue_features(text: tuple[str, ...], label: datasets.ClassLabel | datasets.Value) -> datasets.Features:
    return datasets.Features({**{t: datasets.Value("string") for t in text}, "label": label,
                              "idx": datasets.Value("int32")})


def _class(*names: str) -> datasets.ClassLabel:
    return datasets.ClassLabel(names=list(names))


_STRING = datasets.Value("string")
_NLI3 = ("entailment", "neutral", "contradiction")
_NLI2 = ("entailment", "not_entailment")
_RACE = datasets.Features({"example_id": _STRING, "article": _STRING, "answer": _STRING, "question": _STRING,
                           "options": datasets.List(_STRING)})

# The hub's features, per (dataset, configuration) (checked against the mirror in tests/test_tasks.py).
FEATURES: dict[tuple[str, str], datasets.Features] = {
    ("nyu-mll/glue", "cola"): _glue_features(("sentence",), _class("unacceptable", "acceptable")),
    ("nyu-mll/glue", "sst2"): _glue_features(("sentence",), _class("negative", "positive")),
    ("nyu-mll/glue", "mrpc"): _glue_features(("sentence1", "sentence2"), _class("not_equivalent", "equivalent")),
    ("nyu-mll/glue", "qqp"): _glue_features(("question1", "question2"), _class("not_duplicate", "duplicate")),
    ("nyu-mll/glue", "stsb"): _glue_features(("sentence1", "sentence2"), datasets.Value("float32")),
    ("nyu-mll/glue", "mnli"): _glue_features(("premise", "hypothesis"), _class(*_NLI3)),
    ("nyu-mll/glue", "qnli"): _glue_features(("question", "sentence"), _class(*_NLI2)),
    ("nyu-mll/glue", "rte"): _glue_features(("sentence1", "sentence2"), _class(*_NLI2)),
    ("stanfordnlp/snli", "plain_text"): datasets.Features(
        {"premise": _STRING, "hypothesis": _STRING, "label": _class(*_NLI3)}),
    ("allenai/scitail", "tsv_format"): datasets.Features({"premise": _STRING, "hypothesis": _STRING, "label": _STRING}),
    ("ehovy/race", "middle"): _RACE,
    ("ehovy/race", "high"): _RACE,
    ("LSDSem/story_cloze", "2016"): datasets.Features({
        "story_id": _STRING, **{f"input_sentence_{i}": _STRING for i in range(1, 5)},
        "sentence_quiz1": _STRING, "sentence_quiz2": _STRING, "answer_right_ending": datasets.Value("int32")}),
    ("community-datasets/definite_pronoun_resolution", "plain_text"): datasets.Features({
        "sentence": _STRING, "pronoun": _STRING, "candidates": datasets.List(_STRING, length=2),
        "label": _class("0", "1")}),
}


# ------------------------------------------------------------------------------------------ sentence pieces


def _event(rng: random.Random) -> tuple[str, str, str, str, str]:
    """(name, verb, adjective, noun, place) of one made-up event."""
    return rng.choice(NAMES), rng.choice(VERBS), rng.choice(ADJECTIVES), rng.choice(NOUNS), rng.choice(PLACES)


def _other(rng: random.Random, pool: list[str], *avoid: str) -> str:
    return rng.choice([w for w in pool if w not in avoid])


def _sst2(rng: random.Random, label: int) -> Row:
    words = POSITIVE if label == 1 else NEGATIVE
    first, second = rng.sample(words, 2)
    return {"sentence": f"{rng.choice(SUBJECTS)} is {first} and {second} . ", "label": label}


def _cola(rng: random.Random, label: int) -> Row:
    name, verb, adj, noun, place = _event(rng)
    words = [name, verb, "the", adj, noun, "near", place]
    if label == 0:  # unacceptable: the same words in a broken order
        while words[0] == name:
            rng.shuffle(words)
    sentence = " ".join(words)
    return {"sentence": sentence[0].upper() + sentence[1:] + ".", "label": label}


def _nli(rng: random.Random, label: str) -> tuple[str, str]:
    """(premise, hypothesis) for label entailment, neutral or contradiction."""
    name, verb, adj, noun, place = _event(rng)
    premise = f"{name} {verb} the {adj} {noun} at {place} while {_other(rng, NAMES, name)} waited."
    if label == "entailment":
        return premise, f"{name} {verb} the {noun}."
    if label == "contradiction":
        return premise, f"{name} never {verb} any {noun}."
    return premise, f"{name} wanted to buy a {_other(rng, ADJECTIVES, adj)} {_other(rng, NOUNS, noun)} later."


def _mnli(rng: random.Random, label: int) -> Row:
    premise, hypothesis = _nli(rng, _NLI3[label])
    return {"premise": premise, "hypothesis": hypothesis, "label": label}


def _rte(rng: random.Random, label: int) -> Row:
    premise, hypothesis = _nli(rng, "entailment" if label == 0 else rng.choice(_NLI3[1:]))
    return {"sentence1": premise, "sentence2": hypothesis, "label": label}


def _scitail(rng: random.Random, label: int) -> Row:
    premise, hypothesis = _nli(rng, "entailment" if label == 0 else "neutral")
    return {"premise": premise, "hypothesis": hypothesis, "label": ("entails", "neutral")[label]}


def _qnli(rng: random.Random, label: int) -> Row:
    name, verb, adj, noun, place = _event(rng)
    if label == 1:  # the sentence does not answer: another person, another place
        name, place = _other(rng, NAMES, name), _other(rng, PLACES, place)
    sentence = f"On a {rng.choice(DAYS).capitalize()} morning, {name} {verb} the {adj} {noun} at {place}."
    return {"question": f"What did {name} do at {place}?", "sentence": sentence, "label": label}


def _paraphrase(rng: random.Random, same: bool) -> tuple[str, str]:
    name, verb, adj, noun, place = _event(rng)
    day = rng.choice(DAYS)
    first = f"{name} {verb} the {adj} {noun} at {place} on {day} ."
    if not same:
        name, noun = _other(rng, NAMES, name), _other(rng, NOUNS, noun)
    return first, f"On {day} , {name} {verb} the {adj} {noun} at {place} ."


def _mrpc(rng: random.Random, label: int) -> Row:
    first, second = _paraphrase(rng, label == 1)
    return {"sentence1": first, "sentence2": second, "label": label}


def _qqp(rng: random.Random, label: int) -> Row:
    verb, adj, noun = rng.choice(VERBS), rng.choice(ADJECTIVES), rng.choice(NOUNS)
    first = f"How can I find the {adj} {noun} that Ada {verb}?"
    if label == 0:
        adj, noun = _other(rng, ADJECTIVES, adj), _other(rng, NOUNS, noun)
    return {"question1": first, "question2": f"Where is the {adj} {noun} that Ada {verb}?", "label": label}


def _stsb(rng: random.Random, label: int) -> Row:
    del label  # the score follows from how many of the four slots the second sentence keeps
    slots = list(_event(rng)[:4])
    pools = [NAMES, VERBS, ADJECTIVES, NOUNS]
    kept = rng.randint(0, 4)
    changed = rng.sample(range(4), 4 - kept)
    other = [_other(rng, pools[i], slots[i]) if i in changed else slots[i] for i in range(4)]
    score = round(min(5.0, max(0.0, 1.25 * kept + rng.uniform(-0.2, 0.2))), 2)
    return {"sentence1": "{} {} the {} {}.".format(*slots), "sentence2": "{} {} the {} {}.".format(*other),
            "label": score}


def _snli(rng: random.Random, label: int) -> Row:
    row = _mnli(rng, label)
    if rng.random() < 0.05:  # as on the hub: a few pairs whose annotators did not agree
        row["label"] = -1
    return row


def _race_article(rng: random.Random, config: str, number: int) -> list[Row]:
    """One article and a question per event in it (RACE asks several questions about each article)."""
    events = [_event(rng) for _ in range(rng.randint(2, 4))]
    article = " ".join(f"{n} {v} the {a} {o} at {p}." for n, v, a, o, p in events)
    used = {e[3] for e in events}
    rows = []
    for name, verb, adj, noun, _ in events:
        label = rng.randrange(4)
        wrong = rng.sample(sorted(set(NOUNS) - used), 3)
        options = [f"{_other(rng, VERBS, verb)} the {_other(rng, ADJECTIVES, adj)} {w}" for w in wrong]
        options.insert(label, f"{verb} the {adj} {noun}")  # the right answer repeats words of the article
        rows.append({"example_id": f"{config}{number}.txt", "article": article, "answer": "ABCD"[label],
                     "question": f"What did {name} do?", "options": options})
    return rows


def _story_cloze(rng: random.Random, label: int) -> Row:
    name, verb, adj, noun, place = _event(rng)
    other, other_noun = _other(rng, NAMES, name), _other(rng, NOUNS, noun)
    right, wrong = f"{name} kept the {adj} {noun} forever.", f"{other} sold the {other_noun} to a stranger."
    endings = (right, wrong) if label == 0 else (wrong, right)
    sentences = [f"{name} went to {place}.", f"There {name} saw a {adj} {noun}.", f"{name} {verb} the {noun}.",
                 f"Then {name} carried the {noun} home."]
    return {"story_id": str(uuid.UUID(int=rng.getrandbits(128))),
            **{f"input_sentence_{i}": s for i, s in enumerate(sentences, 1)},
            "sentence_quiz1": endings[0], "sentence_quiz2": endings[1], "answer_right_ending": label + 1}


def _dpr(rng: random.Random, label: int) -> Row:
    agent, thing = rng.choice(ANIMATE), rng.choice(THINGS)
    reason = rng.choice(ANIMATE_REASONS if label == 0 else THING_REASONS)
    return {"sentence": f"The {agent} dropped the {thing} because it was {reason}.", "pronoun": "it",
            "candidates": [f"The {agent}", f"the {thing}"], "label": label}


# (generator, number of label values): a generator takes (rng, label) and returns one row.
_GENERATORS: dict[tuple[str, str], tuple[Callable[..., Row], int]] = {
    ("nyu-mll/glue", "cola"): (_cola, 2),
    ("nyu-mll/glue", "sst2"): (_sst2, 2),
    ("nyu-mll/glue", "mrpc"): (_mrpc, 2),
    ("nyu-mll/glue", "qqp"): (_qqp, 2),
    ("nyu-mll/glue", "stsb"): (_stsb, 1),
    ("nyu-mll/glue", "mnli"): (_mnli, 3),
    ("nyu-mll/glue", "qnli"): (_qnli, 2),
    ("nyu-mll/glue", "rte"): (_rte, 2),
    ("stanfordnlp/snli", "plain_text"): (_snli, 3),
    ("allenai/scitail", "tsv_format"): (_scitail, 2),
    ("LSDSem/story_cloze", "2016"): (_story_cloze, 2),
    ("community-datasets/definite_pronoun_resolution", "plain_text"): (_dpr, 2),
}


def _rows(path: str, config: str, rows: int, rng: random.Random) -> list[Row]:
    if path == "ehovy/race":
        out: list[Row] = []
        while len(out) < rows:
            out.extend(_race_article(rng, config, len(out)))
        return out[:rows]
    generator, classes = _GENERATORS[(path, config)]
    labels = [i % classes for i in range(rows)]  # balanced, then shuffled
    rng.shuffle(labels)
    out = []
    for i, label in enumerate(labels):
        row = generator(rng, label)
        if "idx" in FEATURES[(path, config)]:
            row["idx"] = i
        out.append(row)
    return out


def synthetic_split(path: str, config: str | None, split: str, rows: int = 64, seed: int = 0, *,
                    splits: Sequence[str]) -> datasets.Dataset:
    """A made-up split of a registered hub dataset, with the hub's exact features; deterministic in its arguments.
    `splits`: the dataset's hub splits (its task's `TaskSpec.splits`; `gpt1.data.rows`, which reads a task's rows,
    imports this module, not the other way round).

    GLUE test splits carry label -1 everywhere, as on the hub (their labels are hidden)."""
    config = config or "default"
    if (path, config) not in FEATURES:
        raise SyntheticDataError(f"synthetic data: no registered task reads {path} ({config}); "
                                 f"known: {', '.join(f'{p} ({c})' for p, c in FEATURES)}")
    if split not in splits:
        raise SyntheticDataError(f"synthetic data: {path} ({config}) has no split {split!r}; "
                                 f"hub splits: {', '.join(splits)}")
    if rows < 1:
        raise SyntheticDataError(f"synthetic data: rows must be at least 1, got {rows}")
    # A stable per-split seed (crc32, not hash(), which changes between processes).
    rng = random.Random(zlib.crc32(f"{seed}|{path}|{config}|{split}".encode()))
    records = _rows(path, config, rows, rng)
    if path == "nyu-mll/glue" and split.startswith("test"):
        for record in records:
            record["label"] = -1.0 if config == "stsb" else -1
    features = FEATURES[(path, config)]
    columns = {name: [r[name] for r in records] for name in features}
    return datasets.Dataset.from_dict(columns, features=features)
