"""experiments/val_windows.py: the documents' bounds in an encoded split, and the standard errors by window and
clustered by document that docs/findings.md quotes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import TinyData
from scipy import stats

from experiments import val_windows
from gpt1.data.ids import load_ids
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.pipeline.files import read_jsonl


def test_each_document_starts_where_its_own_encoding_does(tiny_data: TinyData) -> None:
    split = load_ids(tiny_data.ids / "validation.bin", tiny_data.ids / "validation.json")
    ids, header = split.ids, split.header
    source = tiny_data.corpus / "validation.jsonl"
    # conftest encodes with chunk_chars 20,000
    starts = val_windows.document_starts(source, tiny_data.tokenizer, header["dtype"], 20_000, len(ids))
    docs = list(read_jsonl(source))
    assert len(starts) == len(docs) == header["documents"] and starts[0] == 0
    tokenizer = GPT1Tokenizer.load(tiny_data.tokenizer)
    for start, doc in zip(starts, docs, strict=True):
        first = tokenizer.encode(doc["text"][:200])[:5]
        assert ids[start : start + 5].tolist() == first
    with pytest.raises(SystemExit, match="the split holds"):
        val_windows.document_starts(source, tiny_data.tokenizer, header["dtype"], 20_000, len(ids) + 1)


def test_clustered_by_single_windows_is_the_windows_error_and_clusters_widen_it() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(4.0, 0.5, 60)
    alone = val_windows.errors(values, np.arange(60))
    assert alone.clustered_se == pytest.approx(alone.windows_se)  # G = n: sqrt(n/(n-1) * (n-1) s^2) / n = s / sqrt(n)
    # three documents whose windows share an offset each: the spread between documents is what the mean can miss
    documents = np.repeat(np.arange(3), 20)
    shifted = values + np.array([-1.0, 0.0, 1.0])[documents]
    by_document = val_windows.errors(shifted, documents)
    sums = [np.sum(shifted[documents == g] - shifted.mean()) for g in range(3)]
    assert by_document.clustered_se == pytest.approx(math.sqrt(3 / 2 * np.sum(np.square(sums))) / 60)
    assert by_document.clustered_se > 3 * by_document.windows_se
    low, high = by_document.interval()
    assert high - by_document.mean == pytest.approx(4.302653 * by_document.clustered_se, rel=1e-5)  # t, 2 df
    assert low < by_document.mean < high


def test_a_window_belongs_to_the_document_it_starts_in() -> None:
    starts = np.array([0, 100, 250])
    offsets = np.array([0, 99, 100, 101, 249, 250, 400])
    assert val_windows.window_documents(starts, offsets).tolist() == [0, 0, 1, 1, 1, 2, 2]


def test_the_paired_line_is_second_minus_first_with_a_t_test_on_documents_minus_one() -> None:
    rng = np.random.default_rng(1)
    documents = np.repeat(np.arange(4), 10)
    first = rng.normal(4.0, 0.3, 40)
    second = first + 0.2 + np.array([0.05, -0.05, 0.1, -0.1])[documents] + rng.normal(0, 0.01, 40)
    errors = val_windows.errors(second - first, documents)
    t = errors.mean / errors.clustered_se
    line = val_windows.describe_paired(first, second, documents)
    assert line.startswith(f"paired: second minus first {errors.mean:+.4f} nats") and errors.mean > 0
    assert f"({t:+.1f} SE, t-test p {2 * stats.t.sf(abs(t), 3):.2g} on 3 df)" in line
