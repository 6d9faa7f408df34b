"""The smoke profile's corpus, made by the project (never copied from a dataset); the tests train on it too.

A tiny stochastic grammar writes English-like stories: enough regularity for a language model to learn in
seconds, with the punctuation, quotes, contractions and numbers that exercise the tokenizer.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

NAMES = ["Ada", "Ben", "Clara", "Dev", "Edith", "Felix", "Grace", "Hugo", "Iris", "Jonah", "Kemi", "Luca"]
NOUNS = ["garden", "letter", "river", "lantern", "window", "market", "harbour", "violin", "map", "orchard",
         "bridge", "kettle", "storm", "carriage", "library", "meadow"]
ADJECTIVES = ["old", "quiet", "bright", "narrow", "golden", "cold", "crooked", "gentle", "distant", "small"]
VERBS = ["found", "watched", "carried", "painted", "crossed", "opened", "remembered", "followed", "mended", "lost"]
ADVERBS = ["slowly", "at once", "again", "carefully", "before dawn", "without a word", "in the rain"]
SAYINGS = ["I can't stay long", "we won't forget it", "it's late", "don't be afraid", "they'd never know",
           "you're right", "that isn't ours"]
PLACES = ["the village", "the north road", "the station", "the hill", "the shore", "the old mill"]


def _sentence(rng: random.Random) -> str:
    name, other = rng.sample(NAMES, 2)
    noun, adj, verb = rng.choice(NOUNS), rng.choice(ADJECTIVES), rng.choice(VERBS)
    kind = rng.random()
    if kind < 0.35:
        return f"{name} {verb} the {adj} {noun} {rng.choice(ADVERBS)}."
    if kind < 0.55:
        return f"\u201c{rng.choice(SAYINGS).capitalize()},\u201d said {name} to {other}."
    if kind < 0.7:
        return f"At {rng.randint(1, 12)} o'clock they walked {rng.randint(2, 40)} miles to {rng.choice(PLACES)}."
    if kind < 0.85:
        return f"The {noun} was {adj}; {other} {verb} it \u2014 and {name} said nothing."
    return f"Was the {noun} really {adj}? {name} wasn't sure."


def synthetic_document(rng: random.Random, paragraphs: tuple[int, int] = (8, 24)) -> str:
    lines = []
    for _ in range(rng.randint(*paragraphs)):
        lines.append(" ".join(_sentence(rng) for _ in range(rng.randint(2, 6))))
    return "\n\n".join(lines)


def synthetic_corpus(documents: int, seed: int = 0) -> Iterator[dict[str, str]]:
    """`documents` stories as {'id', 'text'} records, the same for the same seed."""
    rng = random.Random(seed)
    for index in range(documents):
        title = f"The {rng.choice(ADJECTIVES).capitalize()} {rng.choice(NOUNS).capitalize()}"
        yield {"id": f"synthetic:{index}", "text": f"{title}\n\n{synthetic_document(rng)}"}
