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


# Project Gutenberg's own lines around a book (licence, credits), as its files mark them: "*** START OF THE PROJECT
# GUTENBERG EBOOK PRIDE AND PREJUDICE ***" (older files: "THIS PROJECT", "EBook" or "E-BOOK"); the end also as the
# plain "End of the Project Gutenberg EBook of ..." line older files put before their END line
GUTENBERG_START = re.compile(r"^\*{3} ?START OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK\b.*$", re.I | re.M)
GUTENBERG_END = re.compile(r"^(?:\*{3} ?)?END OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK\b.*$", re.I | re.M)


def strip_gutenberg(text: str) -> str:
    """The book between Project Gutenberg's START and END lines, where it has them (a hub copy does; the mirror's
    novels were stripped before); a text without them is returned as it is."""
    start = GUTENBERG_START.search(text)
    if start:
        text = text[start.end():]
    end = GUTENBERG_END.search(text)
    return text[: end.start()] if end else text


def clean_text(text: str) -> str:
    """Project Gutenberg's header and footer cut, ftfy, paragraph unwrapping, then the original GPT-1
    standardisation: a corpus document as the clean stage writes it."""
    import ftfy

    return standardize(unwrap(ftfy.fix_text(strip_gutenberg(text))))


__all__ = ["clean_text", "standardize", "strip_gutenberg", "unwrap"]
