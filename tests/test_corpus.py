"""Corpus stages: fetch with caps and a manifest, clean with ftfy + standardisation, dedupe, split by document."""

import json

import pytest

from gpt1.data.textnorm import clean_text, strip_gutenberg, unwrap
from gpt1.pipeline.errors import Gpt1Error
from gpt1.pipeline.files import sha256_file
from gpt1.stages.corpus import capped, clean, fetch, validation_indices

SYNTHETIC = {"source": "synthetic", "synthetic_documents": 10, "seed": 0, "max_documents": None, "max_bytes": None,
             "validation_fraction": 0.2}


def docs(*texts):
    return [{"id": str(i), "text": t} for i, t in enumerate(texts)]


def test_cap_by_documents_and_by_bytes():
    records = docs("aaaa", "bbbb", "cccc")
    assert len(list(capped(records, 2, None))) == 2
    # The cap in bytes stops once it has been reached: 4 + 4 >= 6.
    assert [d["text"] for d in capped(records, None, 6)] == ["aaaa", "bbbb"]
    assert len(list(capped(records, None, None))) == 3


def test_fetch_writes_records_and_a_manifest(tmp_path):
    out, manifest = tmp_path / "raw.jsonl", tmp_path / "raw.manifest.json"
    info = fetch({**SYNTHETIC, "max_documents": 4}, None, out, manifest)
    lines = out.read_text().splitlines()
    assert len(lines) == 4 and set(json.loads(lines[0])) == {"id", "text"}
    assert info == json.loads(manifest.read_text())
    assert info["documents"] == 4 and info["sha256"] == sha256_file(out)
    assert info["text_bytes"] == sum(len(json.loads(line)["text"].encode()) for line in lines)
    assert info["source"] == "synthetic:10docs:seed0"


def test_failed_fetch_leaves_no_output(tmp_path):
    out, manifest = tmp_path / "raw.jsonl", tmp_path / "raw.manifest.json"
    with pytest.raises(Gpt1Error, match="no documents"):
        fetch({**SYNTHETIC, "synthetic_documents": 1, "max_bytes": 1, "max_documents": 0}, None, out, manifest)
    assert list(tmp_path.iterdir()) == []


def test_unwrap_joins_hard_wrapped_lines_into_paragraphs():
    assert unwrap("It was a\ndark night.\r\n\r\nThe end\n  came.\n\n\n") == "It was a dark night.\nThe end came."


def test_clean_text_repairs_mojibake_and_standardises():
    assert clean_text("donâ€™t  stop—now…") == "don't stop - now..."
    assert clean_text('He said "hi", then\nleft!!') == 'He said " hi " , then left !!'


BOOK = "EMMA\n\nCHAPTER I\n\nEmma Woodhouse, handsome, clever, and rich.\n"


@pytest.mark.parametrize("raw", [
    "The Project Gutenberg EBook of Emma\n\nThis eBook is for the use of anyone\n\n"
    "*** START OF THIS PROJECT GUTENBERG EBOOK EMMA ***\n" + BOOK +
    "End of the Project Gutenberg EBook of Emma, by Jane Austen\n\n*** END OF THIS PROJECT GUTENBERG EBOOK EMMA ***\n"
    "Updated editions will replace the previous one",
    "*** Start of the Project Gutenberg eBook Emma ***\n" + BOOK + "*** END OF THE PROJECT GUTENBERG E-BOOK EMMA ***\n",
])
def test_a_hub_copy_loses_project_gutenbergs_header_and_footer(raw):
    assert strip_gutenberg(raw).strip() == BOOK.strip()
    assert "gutenberg" not in clean_text(raw).lower() and "Emma Woodhouse" in clean_text(raw)


def test_a_book_without_the_marks_is_kept_whole():
    """The mirror's novels were stripped before: the clean stage's bytes of them do not move."""
    text = BOOK + "He read *** the end of the project *** aloud.\n"
    assert strip_gutenberg(text) == text


def test_split_is_seeded_and_keeps_both_sides():
    assert validation_indices(10, 0.2, 0) == validation_indices(10, 0.2, 0)
    assert validation_indices(10, 0.2, 0) != validation_indices(10, 0.2, 1)
    assert len(validation_indices(10, 0.2, 0)) == 2
    assert len(validation_indices(3, 0.01, 0)) == 1  # at least one held out
    assert len(validation_indices(2, 0.99, 0)) == 1  # at least one to train on
    with pytest.raises(Gpt1Error, match="at least 2"):
        validation_indices(1, 0.5, 0)


def test_clean_drops_empty_and_duplicate_documents(tmp_path):
    raw = tmp_path / "raw.jsonl"
    texts = ["One story.", "  \n ", "Another story.", "One  story.", "Third tale.", "Fourth tale."]
    raw.write_text("".join(json.dumps(d) + "\n" for d in docs(*texts)))
    outputs = {"train": tmp_path / "train.jsonl", "validation": tmp_path / "validation.jsonl"}
    info = clean(raw, {"validation_fraction": 0.25, "seed": 0}, outputs, tmp_path / "manifest.json")
    assert (info["raw_documents"], info["dropped_empty"], info["dropped_duplicate"]) == (6, 1, 1)
    assert info["train"]["documents"] == 3 and info["validation"]["documents"] == 1
    kept = [json.loads(line)["text"] for s in outputs.values() for line in s.read_text().splitlines()]
    assert sorted(kept) == ["Another story.", "Fourth tale.", "One story.", "Third tale."]
    assert info["train"]["sha256"] == sha256_file(outputs["train"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "raw.jsonl", "train.jsonl",
                                                          "validation.jsonl"]
