"""WikiText-2's rows as articles: headings, the @-marks joined back, WikiText's word count, the made-up stand-in."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from gpt1.data.wikitext import WIKITEXT2, detokenize, load_articles, source_name, split_articles, synthetic_lines
from gpt1.pipeline.errors import SourceError

ROWS = ["", " = First Title = \n", "", " A line , with 1 @,@ 000 words @-@ and 2 @.@ 5 . \n", "",
        " = = A Section = = \n", "", " More text . \n", "", " = Second = \n", "", " Only line . \n"]


def test_articles_begin_at_level_one_headings_and_keep_their_sections():
    first, second = split_articles(ROWS)
    assert (first.title, second.title) == ("First Title", "Second")
    assert first.paragraphs == ("= First Title =", "A line , with 1,000 words-and 2.5 .", "= = A Section = =",
                                "More text .")
    assert second.paragraphs == ("= Second =", "Only line .")


def test_word_count_is_wikitexts_whitespace_words_plus_one_end_of_line_per_line():
    first, second = split_articles(ROWS)
    assert first.words == sum(len(row.split()) + 1 for row in ROWS[:9])  # the leading blank row is the first's
    assert first.words + second.words == sum(len(row.split()) for row in ROWS) + len(ROWS)


def test_only_the_three_at_marks_are_joined_back():
    assert detokenize(" 2 @.@ 5 km @-@ long , 1 @,@ 000 's \n") == "2.5 km-long , 1,000 's"
    assert detokenize(" e @ mail \n") == "e @ mail"


def test_text_before_the_first_heading_opens_the_first_article():
    (article,) = split_articles([" intro . \n", "", " = T = \n", " body . \n"])
    assert article.title == "T" and article.paragraphs == ("intro .", "= T =", "body .") and article.words == 11


def test_lines_with_no_heading_make_one_untitled_article():
    (article,) = split_articles(["text one \n", "", "text two \n"])
    assert article.title == "" and article.paragraphs == ("text one", "text two") and article.words == 7


def test_synthetic_articles_are_in_wikitexts_layout_and_fixed_by_their_seed():
    lines = synthetic_lines(3)
    assert lines == synthetic_lines(3) and lines != synthetic_lines(3, seed=1)
    articles = split_articles(lines)
    assert len(articles) == 3 and all(a.title.startswith("The ") and len(a.paragraphs) >= 3 for a in articles)
    assert load_articles(None, synthetic=True, synthetic_articles=3) == articles


def write_mirror(root: Path, rows: list[str]) -> Path:
    file = root / WIKITEXT2.path / WIKITEXT2.name / f"{WIKITEXT2.split}.parquet"
    file.parent.mkdir(parents=True)
    datasets.Dataset.from_dict({"text": rows}).to_parquet(str(file))
    return root


def test_articles_are_read_from_a_mirror_in_the_hubs_layout(tmp_path):
    assert load_articles(write_mirror(tmp_path, ROWS)) == split_articles(ROWS)


def test_a_mirror_copy_with_nothing_but_blank_lines_is_named(tmp_path):
    with pytest.raises(SourceError, match=r"no article .* in .*validation\.parquet: copy it into the mirror again"):
        load_articles(write_mirror(tmp_path, ["", "  \n"]))


def test_where_the_articles_came_from_names_no_folder():
    assert source_name(Path("/any/mirror"), False) == source_name(Path("elsewhere"), False)
    assert source_name(Path("m"), False).endswith("from the mirror") and "hub" in source_name(None, False)
    assert source_name(None, True) == "synthetic WikiText-style articles"


def test_a_mirror_without_wikitext_names_the_file_it_looked_for(tmp_path):
    (tmp_path / "other").mkdir()
    with pytest.raises(SourceError, match=r"dataset not in mirror \(looked for .*validation\.parquet\)"):
        load_articles(tmp_path)
