"""The text normalisation of GPT-1's corpus and tokenizer: Gutenberg's hard-wrapped lines joined into paragraphs
(`unwrap`, the clean stage), and the original `text_standardize` (`standardize`), which the clean stage applies to the
corpus and the `spacy` pre-tokeniser applies again to any text it encodes. A library module: plain functions of str."""

from __future__ import annotations

import re


def standardize(text: str) -> str:
    """The original GPT-1 `text_standardize`: unify dashes and ellipses, space out punctuation, tidy whitespace."""
    text = text.replace("\u2014", "-").replace("\u2013", "-").replace("\u2015", "-")
    text = text.replace("\u2026", "...").replace("\u00b4", "'")
    text = re.sub(r"""(-+|~+|!+|"+|;+|\?+|\++|,+|\)+|\(+|\\+|\/+|\*+|\[+|\]+|}+|{+|\|+|_+)""", r" \1 ", text)
    text = re.sub(r"\s*\n\s*", " \n ", text)
    text = re.sub(r"[^\S\n]+", " ", text)
    return text.strip()


def unwrap(text: str) -> str:
    """Join hard-wrapped lines into paragraphs (Gutenberg wraps at ~70 columns); one newline between paragraphs."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    paragraphs = (" ".join(line.strip() for line in block.split("\n")) for block in re.split(r"\n\s*\n", text))
    return "\n".join(p.strip() for p in paragraphs if p.strip())


def clean_text(text: str) -> str:
    """ftfy, paragraph unwrapping, then the original GPT-1 standardisation: a corpus document as the clean stage
    writes it."""
    import ftfy

    return standardize(unwrap(ftfy.fix_text(text)))


__all__ = ["clean_text", "standardize", "unwrap"]
