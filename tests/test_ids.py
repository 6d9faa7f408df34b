"""Encode: corpus splits -> a flat token-id file and its header, the same whatever the number of workers."""

import json

import numpy as np
import pytest

from gpt1.data.ids import encode_split, load_ids
from gpt1.data.synthetic.corpus import synthetic_corpus
from gpt1.data.tokenizer import GPT1Tokenizer, train
from gpt1.pipeline.errors import IdsError


@pytest.fixture(scope="module")
def corpus_and_tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("encode")
    docs = list(synthetic_corpus(6, seed=1))
    (folder / "train.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    train([d["text"] for d in docs], "spacy", merges=120, limit_alphabet=100).save(folder / "tok")
    return folder, docs


def test_ids_are_the_documents_joined_by_paragraph_separators(corpus_and_tokenizer, tmp_path):
    folder, docs = corpus_and_tokenizer
    header = encode_split(folder / "tok", folder / "train.jsonl", tmp_path / "t.bin", tmp_path / "t.json",
                          "uint16", 1000, workers=1)
    tok = GPT1Tokenizer.load(folder / "tok")
    expected: list[int] = []
    for index, doc in enumerate(docs):
        expected += (tok.paragraph_separator() if index else []) + tok.encode(doc["text"])
    ids = load_ids(tmp_path / "t.bin", tmp_path / "t.json", tok.fingerprint())
    assert ids.ids.dtype == np.uint16 and list(ids.ids) == expected
    assert header == json.loads((tmp_path / "t.json").read_text())
    assert (header["tokens"], header["documents"], header["vocab_size"]) == (len(expected), 6, tok.base_vocab_size)


def test_two_workers_write_the_same_bytes(corpus_and_tokenizer, tmp_path, monkeypatch):
    folder, _ = corpus_and_tokenizer
    monkeypatch.setattr("gpt1.data.pool.SMALL_INPUT_BYTES", 0)  # force the worker pool on a small file
    for workers in (1, 2):
        encode_split(folder / "tok", folder / "train.jsonl", tmp_path / f"{workers}.bin", tmp_path / f"{workers}.json",
                     "uint16", 500, workers)
    for suffix in ("bin", "json"):
        assert (tmp_path / f"1.{suffix}").read_bytes() == (tmp_path / f"2.{suffix}").read_bytes()


def test_either_dtype_holds_the_same_ids(corpus_and_tokenizer, tmp_path):
    folder, _ = corpus_and_tokenizer
    for dtype in ("uint16", "uint32"):
        encode_split(folder / "tok", folder / "train.jsonl", tmp_path / f"{dtype}.bin", tmp_path / f"{dtype}.json",
                     dtype, 500, 1)
    assert np.array_equal(np.fromfile(tmp_path / "uint16.bin", dtype=np.uint16),
                          np.fromfile(tmp_path / "uint32.bin", dtype=np.uint32))


def test_a_header_without_its_keys_is_refused(corpus_and_tokenizer, tmp_path):
    folder, _ = corpus_and_tokenizer
    encode_split(folder / "tok", folder / "train.jsonl", tmp_path / "t.bin", tmp_path / "t.json", "uint16", 1000, 1)
    header = json.loads((tmp_path / "t.json").read_text())
    del header["tokens"]
    (tmp_path / "t.json").write_text(json.dumps(header))
    with pytest.raises(IdsError, match=r"t\.json: header lacks tokens; re-run gpt1 encode"):
        load_ids(tmp_path / "t.bin", tmp_path / "t.json")


def test_truncated_file_and_wrong_tokenizer_are_refused(corpus_and_tokenizer, tmp_path):
    folder, _ = corpus_and_tokenizer
    encode_split(folder / "tok", folder / "train.jsonl", tmp_path / "t.bin", tmp_path / "t.json", "uint16", 1000, 1)
    with pytest.raises(IdsError, match="encoded with tokenizer"):
        load_ids(tmp_path / "t.bin", tmp_path / "t.json", "0" * 64)
    data = (tmp_path / "t.bin").read_bytes()
    (tmp_path / "t.bin").write_bytes(data[:-2])
    with pytest.raises(IdsError, match="truncated or stale"):
        load_ids(tmp_path / "t.bin", tmp_path / "t.json")
    with pytest.raises(IdsError, match="run the encode stage"):
        load_ids(tmp_path / "missing.bin", tmp_path / "t.json")
