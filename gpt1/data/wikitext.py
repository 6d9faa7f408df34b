"""WikiText-2 (Merity et al. 2016), raw, validation: held-out language-model text, from the hub, a mirror or made up.

The language model's own validation windows chose its recipe (docs/decisions.md), so their perplexity is not held
out; WikiText-2's Wikipedia articles are text no stage and no choice has seen, of another domain than the novels.

The split is one row per line, an article beginning at its level-1 heading (" = Title = "). The raw version keeps
the dataset's own tokenisation (" , ", " 's "), and writes a hyphen, comma or point inside a number or word as
" @-@ ", " @,@ ", " @.@ ": those three are joined back (their @ marks are no language), nothing else is changed.

Word-level perplexity divides the summed loss by WikiText's own count of its tokens: the whitespace-separated words
plus one end-of-line per line (217,646 in validation), the unit of the published word-level numbers, whatever the
model's vocabulary; token-level perplexity depends on the BPE and compares only models of one vocabulary.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpt1.data.sources import DatasetRef, load_split, mirror_file
from gpt1.data.synthetic.corpus import ADJECTIVES, NOUNS, synthetic_document
from gpt1.pipeline.errors import SourceError

WIKITEXT2 = DatasetRef("Salesforce/wikitext", "wikitext-2-raw-v1", "validation")
HEADING = re.compile(r"^ = ([^=].*) = $")  # level 1 only: " = = Section = = " lines stay inside their article
JOINERS = {" @-@ ": "-", " @,@ ": ",", " @.@ ": "."}


@dataclass(frozen=True)
class Article:
    """One article: its title, its paragraphs (the non-empty lines, headings included, joined back) and its size in
    WikiText's word count."""

    title: str
    paragraphs: tuple[str, ...]
    words: int


def detokenize(line: str) -> str:
    for marked, plain in JOINERS.items():
        line = line.replace(marked, plain)
    return line.strip()


def split_articles(lines: Sequence[str]) -> list[Article]:
    """The split's rows as articles; lines before the first heading belong to the first article."""
    groups: list[tuple[str, list[str]]] = [("", [])]
    titled = False  # a heading seen yet: the first one names the lines before it too
    for line in lines:
        heading = HEADING.match(line.rstrip("\n"))
        if heading and titled:
            groups.append((heading.group(1), []))
        elif heading:
            groups[0], titled = (heading.group(1), groups[0][1]), True
        groups[-1][1].append(line)
    articles = []
    for title, group in groups:
        paragraphs = tuple(text for text in (detokenize(line) for line in group) if text)
        if paragraphs:
            articles.append(Article(title, paragraphs, sum(len(line.split()) + 1 for line in group)))
    return articles


def synthetic_lines(articles: int, seed: int = 0) -> list[str]:
    """Made-up rows in WikiText's layout (blank lines, " = Title = " headings, paragraphs), from the smoke corpus's
    grammar under another seed: the tests' stand-in, never copied from the dataset."""
    rng = random.Random(f"wikitext|{seed}")
    lines = []
    for _ in range(articles):
        title = f"The {rng.choice(ADJECTIVES).capitalize()} {rng.choice(NOUNS).capitalize()}"
        lines += ["", f" = {title} = \n", ""]
        for paragraph in synthetic_document(rng, paragraphs=(2, 5)).split("\n\n"):
            lines += [f" {paragraph} \n", ""]
    return lines


def source_name(mirror: Path | None, synthetic: bool) -> str:
    """Where the articles came from, without the mirror's folder: the same file read from another one is the same."""
    if synthetic:
        return "synthetic WikiText-style articles"
    return f"{WIKITEXT2} from the {'mirror' if mirror else 'Hugging Face hub'}"


def load_articles(mirror: Path | None, synthetic: bool = False, *, synthetic_articles: int = 6) -> list[Article]:
    """WikiText-2's validation articles, from the mirror (or the hub when `mirror` is None), or made up."""
    if synthetic:
        lines = synthetic_lines(synthetic_articles)
    else:
        lines = list(load_split(WIKITEXT2, mirror, columns=("text",))["text"])
    articles = split_articles(lines)
    if not articles:
        where = f"{mirror_file(WIKITEXT2, mirror)}: copy it into the mirror again" if mirror else (
            "the hub's copy: clear its cache (HF_DATASETS_CACHE) and load it again")
        raise SourceError(f"{WIKITEXT2}: no article (no non-empty line) in {where}")
    return articles


__all__ = ["WIKITEXT2", "Article", "detokenize", "load_articles", "source_name", "split_articles", "synthetic_lines"]
