"""Where the spaCy pre-tokenisers lowercase, and what it moves: before spaCy, as transformers 4.x's slow
`OpenAIGPTTokenizer` does (`spacy`, the profiles': gpt1.data.tokenizer.spacy_pieces), or after it, token by token, as
OpenAI's own finetune-transformer-lm code does (`openai`, the released vocabulary's since 2026-11-29:
gpt1.data.tokenizer.openai_pieces; `text_utils.TextEncoder.encode`: `self.bpe(token.text.lower())`).

    .venv/bin/python -m experiments.lowercase_order [--books 20] [--chars 20000] [--seed 0]

spaCy's exceptions are case-sensitive ("Mr." is one token, "mr." two), so the two orders part on abbreviations.
Prints, over a seeded excerpt of `--chars` characters from the middle of each of `--books` novels of the mirror,
the words of each order, the share of words that differ (a word-level diff), and the commonest differences.
"""

from __future__ import annotations

import argparse
import difflib
import random
from collections import Counter
from collections.abc import Sequence

from gpt1.data.tokenizer import openai_pieces, spacy_pieces

MIRROR_NOVELS = "../shared/data/books/gutenberg/default/train.parquet"


def words_lowercased_first(text: str) -> list[str]:
    """`spacy` (transformers 4.x): the text lowercased, then ftfy, standardisation and spaCy."""
    return [w for piece in spacy_pieces(text) for w in piece]


def words_lowercased_after(text: str) -> list[str]:
    """`openai` (OpenAI's code): ftfy, standardisation and spaCy on the cased text, then each token lowercased."""
    return [w for piece in openai_pieces(text) for w in piece]


def differences(texts: Sequence[str]) -> tuple[int, int, Counter]:
    """(words after, words that differ, Counter of (ours, OpenAI's) word runs that differ)."""
    total = differ = 0
    found: Counter = Counter()
    for text in texts:
        ours, theirs = words_lowercased_first(text), words_lowercased_after(text)
        total += len(theirs)
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ours, theirs, autojunk=False).get_opcodes():
            if op != "equal":
                differ += max(i2 - i1, j2 - j1)
                found[(" ".join(ours[i1:i2]), " ".join(theirs[j1:j2]))] += 1
    return total, differ, found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--books", type=int, default=20, help="novels drawn from the mirror (default 20)")
    parser.add_argument("--chars", type=int, default=20000, help="characters from the middle of each (default 20000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--novels", default=MIRROR_NOVELS, help=f"the novels' parquet (default {MIRROR_NOVELS})")
    args = parser.parse_args(argv)
    import pyarrow.parquet as pq

    books = random.Random(args.seed).sample(pq.read_table(args.novels).to_pylist(), args.books)
    texts = [b["text"][len(b["text"]) // 2: len(b["text"]) // 2 + args.chars] for b in books]
    total, differ, found = differences(texts)
    print(f"{args.books} excerpts of {args.chars} characters: {total} words (OpenAI's order), {differ} differ "
          f"({100 * differ / total:.2f}%)")
    for (ours, theirs), n in found.most_common(10):
        print(f"  {n:5d}  ours {ours!r}  OpenAI's {theirs!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
