"""One loader, three sources: the hub (its arguments), a mirror in the hub's layout, and local text files."""

from pathlib import Path

import datasets
import pytest

from gpt1.data.sources import (
    DatasetRef,
    iter_documents,
    load_arguments,
    load_split,
    mirror_file,
    source_description,
    text_files,
)
from gpt1.pipeline.errors import SourceError

SHARED_MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"
REF = DatasetRef("acme/reviews", "polarity", "validation")


@pytest.fixture
def mirror(tmp_path) -> Path:
    """A mirror holding one split written by `datasets` itself, ClassLabel names in its schema metadata."""
    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["negative", "positive"])})
    ds = datasets.Dataset.from_dict({"sentence": ["good film", "dull plot", "fine"], "label": [1, 0, 1]}, features)
    file = mirror_file(REF, tmp_path)
    file.parent.mkdir(parents=True)
    ds.to_parquet(str(file))
    return tmp_path


def test_hub_arguments_are_the_hub_id_config_and_split():
    assert load_arguments(REF, None) == {"path": "acme/reviews", "name": "polarity", "split": "validation"}


def test_mirror_swaps_the_arguments_not_the_code_path(mirror):
    kwargs = load_arguments(REF, mirror)
    assert kwargs["path"] == "parquet"
    assert kwargs["data_files"] == {"validation": str(mirror / "acme/reviews/polarity/validation.parquet")}


def test_mirror_gives_the_hub_records_and_features(mirror):
    ds = load_split(REF, mirror, columns=["sentence", "label"])
    assert ds.features["label"].names == ["negative", "positive"]
    assert list(ds) == [{"sentence": "good film", "label": 1}, {"sentence": "dull plot", "label": 0},
                        {"sentence": "fine", "label": 1}]
    streamed = load_split(REF, mirror, streaming=True)
    assert list(streamed) == list(ds)


def test_missing_split_names_what_is_present(mirror):
    with pytest.raises(SourceError, match=r"split 'train' not in mirror .*present: validation"):
        load_split(DatasetRef("acme/reviews", "polarity", "train"), mirror)


def test_missing_dataset_names_where_it_looked(mirror):
    with pytest.raises(SourceError, match=r"acme/other \(default, split train\): dataset not in mirror \(looked for"):
        load_split(DatasetRef("acme/other", None, "train"), mirror)


def test_missing_column_is_named(mirror):
    with pytest.raises(SourceError, match=r"missing column\(s\) premise; present: sentence, label"):
        load_split(REF, mirror, columns=["premise"])


def test_missing_mirror_folder(tmp_path):
    with pytest.raises(SourceError, match="does not exist; fix GPT1_DATA_MIRROR"):
        load_arguments(REF, tmp_path / "nowhere")


def test_local_text_files_one_document_each(tmp_path):
    (tmp_path / "b.txt").write_text("Second book.\nLine two.")
    (tmp_path / "a.txt").write_text("First book.")
    corpus = {"source": "files", "files": [str(tmp_path / "*.txt")], "seed": 0}
    docs = list(iter_documents(corpus, None))
    assert [d["text"] for d in docs] == ["First book.", "Second book.\nLine two."]
    assert docs[0]["id"].endswith("a.txt")


def test_unmatched_file_pattern_is_an_error(tmp_path):
    with pytest.raises(SourceError, match="matches no file"):
        text_files([str(tmp_path / "*.txt")])


def test_corpus_from_mirror_prefers_its_mirror_dataset(mirror):
    corpus = {"source": "hub",
              "dataset": {"path": "org/not-mirrored", "name": None, "split": "en", "text_field": "text"},
              "mirror_dataset": {"path": "acme/reviews", "name": "polarity", "split": "validation",
                                 "text_field": "sentence"}}
    docs = list(iter_documents(corpus, mirror))
    assert [d["text"] for d in docs] == ["good film", "dull plot", "fine"]


def test_synthetic_corpus_is_deterministic():
    corpus = {"source": "synthetic", "synthetic_documents": 3, "seed": 7}
    first, second = list(iter_documents(corpus, None)), list(iter_documents(corpus, None))
    assert first == second and len(first) == 3
    assert first != list(iter_documents({**corpus, "seed": 8}, None))


@pytest.mark.skipif(not SHARED_MIRROR.is_dir(), reason="the shared data mirror is absent")
def test_shared_mirror_sst2_has_hub_schema():
    ds = load_split(DatasetRef("nyu-mll/glue", "sst2", "validation"), SHARED_MIRROR, columns=["sentence", "label"])
    assert ds.features["label"].names == ["negative", "positive"]
    assert len(ds) == 872


def test_a_mirror_is_described_by_its_file_not_by_the_folder_it_was_read_from(tmp_path, monkeypatch):
    """The manifest's source is hashed downstream: one mirror reached as ../x, as /abs/x or through a link is one
    source, else the same bytes of data give another md5 on another machine."""
    corpus = {"source": "hub", "dataset": {"path": "acme/books", "name": None, "split": "en"},
              "mirror_dataset": {"path": "books/gutenberg", "name": "default", "split": "train"}}
    (tmp_path / "data").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "data")
    monkeypatch.chdir(tmp_path / "data")
    spellings = [tmp_path / "data", Path("../data"), Path("."), tmp_path / "link"]
    assert {source_description(corpus, m) for m in spellings} == {"mirror:books/gutenberg/default/train.parquet"}
    assert source_description(corpus, None) == "hub:acme/books (default, split en)"
