"""The task registry, loading (cuts, caps, validation), the four input transformations and the synthetic data."""

from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from scipy.stats import spearmanr

from gpt1.data.rows import Cut, Example, evaluation_split, load_examples, parse_row, report_examples
from gpt1.data.sources import DatasetRef, mirror_file
from gpt1.data.synthetic.corpus import synthetic_corpus
from gpt1.data.synthetic.tasks import FEATURES, synthetic_split
from gpt1.data.tasks import FINETUNE_TASKS, TASKS, get_task
from gpt1.data.tokenizer import train
from gpt1.data.transforms import transform, transform_batch
from gpt1.pipeline.errors import Gpt1Error, SyntheticDataError, TaskError
from gpt1.report.tables import PAPER_NUMBERS

SHARED_MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"
_absent = pytest.mark.skipif(not SHARED_MIRROR.is_dir(), reason="the shared data mirror is absent")


def needs_mirror(test):
    return pytest.mark.mirror(_absent(test))


@pytest.fixture(scope="module")
def tok():
    texts = [d["text"] for d in synthetic_corpus(6, seed=1)]
    return train(texts, "fast", merges=50, limit_alphabet=100)


def _ids(tok):
    s = tok.specials
    return s["_start_"], s["_delimiter_"], s["_classify_"]


# ------------------------------------------------------------------------------------------------ registry


def test_registry_holds_the_papers_twelve_tasks_and_dpr():
    assert set(FINETUNE_TASKS) == {"snli", "mnli", "qnli", "scitail", "rte", "race", "story_cloze", "mrpc", "qqp",
                                   "stsb", "sst2", "cola"}
    assert not TASKS["dprd"].finetune
    kinds = {name: spec.kind for name, spec in TASKS.items()}
    assert kinds["sst2"] == kinds["cola"] == "classification"
    assert kinds["mrpc"] == kinds["qqp"] == kinds["stsb"] == "similarity"
    assert kinds["race"] == kinds["story_cloze"] == "multiple_choice"
    assert {kinds[t] for t in ("snli", "mnli", "qnli", "scitail", "rte")} == {"entailment"}


def test_metrics_and_reported_numbers():
    assert TASKS["cola"].paper_metric == "mcc"
    assert TASKS["mrpc"].metrics == TASKS["qqp"].metrics == ("f1", "accuracy")
    assert TASKS["stsb"].metrics == ("pearson", "spearman") and TASKS["stsb"].paper_metric == "pearson"
    assert {name for name, spec in TASKS.items() if "accuracy" not in spec.metrics} == {"stsb"}
    reports = set(PAPER_NUMBERS)
    assert {"mnli_m", "mnli_mm", "race_m", "race_h", "race", "story_cloze", "dprd"} <= reports
    assert "mnli" not in reports
    assert PAPER_NUMBERS["mnli_mm"].paper_split == "test_mismatched" and PAPER_NUMBERS["mnli_mm"].via == "GLUE server"
    assert PAPER_NUMBERS["snli"].via == "public test labels" and PAPER_NUMBERS["race_h"].table == "3"
    assert PAPER_NUMBERS["qqp"].metric == "f1" and PAPER_NUMBERS["cola"].table == "4"


def test_evaluation_split_prefers_public_test_labels_that_are_present():
    snli, sst2, mnli = TASKS["snli"], TASKS["sst2"], TASKS["mnli"]
    assert evaluation_split(snli, snli.reports[0]) == "test"
    assert evaluation_split(snli, snli.reports[0], present=["validation"]) == "validation"
    assert evaluation_split(sst2, sst2.reports[0]) == "validation"  # hidden GLUE test labels
    assert [evaluation_split(mnli, r) for r in mnli.reports] == ["validation_matched", "validation_mismatched"]


def test_unknown_task_lists_the_valid_names():
    with pytest.raises(TaskError, match=r"task 'sst-2' is unknown; valid: snli, mnli, .*cola"):
        get_task("sst-2")
    with pytest.raises(TaskError, match="unknown"):
        load_examples("imdb", "train", synthetic=True)


# ------------------------------------------------------------------------------------------- transformations


def test_classification_layout(tok):
    start, delim, extract = _ids(tok)
    ex = Example(("Ada found the garden.",), 1, None, 0)
    out = transform("sst2", ex, tok, n_ctx=64)
    assert out.sequences == [[start, *tok.encode("Ada found the garden."), extract]]
    assert not out.truncated and delim not in out.sequences[0]


def test_entailment_layout(tok):
    start, delim, extract = _ids(tok)
    premise, hypothesis = tok.encode("The old river was cold."), tok.encode("It was cold.")
    out = transform("mnli", Example(("The old river was cold.", "It was cold."), 0, None, 0), tok, n_ctx=64)
    (seq,) = out.sequences
    assert seq == [start, *premise, delim, *hypothesis, extract]
    assert seq.index(delim) == 1 + len(premise)


def test_similarity_gives_both_orders(tok):
    start, delim, extract = _ids(tok)
    a, b = "Ben opened the window.", "The window was opened by Ben."
    out = transform("mrpc", Example((a, b), 1, None, 0), tok, n_ctx=64)
    ea, eb = tok.encode(a), tok.encode(b)
    assert out.sequences == [[start, *ea, delim, *eb, extract], [start, *eb, delim, *ea, extract]]


def test_multiple_choice_gives_one_sequence_per_answer(tok):
    start, delim, extract = _ids(tok)
    article, question = "Clara crossed the bridge. Hugo lost the map.", "What did Hugo lose?"
    choices = ("the map", "the bridge", "a letter", "a kettle")
    out = transform("race", Example((article, question), 0, choices, 0, "middle"), tok, n_ctx=64)
    context = tok.encode(article + " " + question)
    assert out.sequences == [[start, *context, delim, *tok.encode(c), extract] for c in choices]
    sentences = ("Ada went out.", "She saw a storm.", "She ran home.", "It rained.")
    story = transform("story_cloze", Example(sentences, 1, ("She was dry.", "She sang."), 0), tok, n_ctx=64)
    assert len(story.sequences) == 2
    assert story.sequences[1] == [start, *tok.encode(" ".join(sentences)), delim, *tok.encode("She sang."), extract]


def test_truncation_trims_the_context_from_the_left(tok):
    start, delim, extract = _ids(tok)
    premise = " ".join(["Iris mended the lantern again."] * 6)
    hypothesis = "Iris mended it."
    ep, eh = tok.encode(premise), tok.encode(hypothesis)
    n_ctx = len(eh) + 3 + 5
    out = transform("rte", Example((premise, hypothesis), 0, None, 3), tok, n_ctx=n_ctx)
    (seq,) = out.sequences
    assert out.truncated and len(seq) == n_ctx
    assert seq == [start, *ep[-5:], delim, *eh, extract]  # the premise keeps its end, the hypothesis is whole


def test_truncation_keeps_race_question_and_every_answer(tok):
    start, delim, extract = _ids(tok)
    article, question = " ".join(["Felix watched the storm."] * 10), "Who watched?"
    choices = ("Felix", "Grace", "the old harbour", "Iris")
    context, q = tok.encode(article + " " + question), tok.encode(question)
    n_ctx = 3 + max(len(tok.encode(c)) for c in choices) + len(q) + 2
    out = transform("race", Example((article, question), 0, choices, 0), tok, n_ctx=n_ctx)
    assert out.truncated and len(out.sequences) == 4
    for seq, choice in zip(out.sequences, choices, strict=True):
        answer = tok.encode(choice)
        assert seq[0] == start and seq[-1] == extract and len(seq) == n_ctx
        assert seq[-1 - len(answer) : -1] == answer and seq[-2 - len(answer)] == delim
        kept = seq[1 : -2 - len(answer)]
        assert kept == context[len(context) - len(kept) :]  # a suffix of the context: the question survives
        assert kept[-len(q) :] == q


def test_an_overlong_answer_is_cut_from_the_right_and_the_context_dropped(tok):
    start, delim, extract = _ids(tok)
    hypothesis = " ".join(["Jonah followed the road."] * 5)
    eh = tok.encode(hypothesis)
    out = transform("snli", Example(("Short premise.", hypothesis), 0, None, 0), tok, n_ctx=8)
    assert out.truncated and out.sequences == [[start, delim, *eh[:5], extract]]
    out = transform("sst2", Example((hypothesis,), 0, None, 0), tok, n_ctx=6)
    assert out.sequences == [[start, *eh[-4:], extract]]  # classification: the one text is the context


def test_similarity_truncates_each_order(tok):
    a, b = " ".join(["Kemi painted the quiet harbour."] * 4), "Kemi painted."
    out = transform("qqp", Example((a, b), 0, None, 0), tok, n_ctx=12)
    start, delim, extract = _ids(tok)
    ea, eb = tok.encode(a), tok.encode(b)
    # Either order overflows: the context is dropped and the answer kept, cut from the right where it is too long
    assert len(eb) <= 9 < len(ea)
    assert out.truncated and out.sequences == [[start, delim, *eb, extract], [start, delim, *ea[:9], extract]]


def test_no_room_for_text_and_zero_shot_tasks_are_errors(tok):
    with pytest.raises(TaskError, match="n_ctx 3 leaves no room"):
        transform("rte", Example(("a b", "c"), 0, None, 0), tok, n_ctx=3)
    with pytest.raises(TaskError, match="zero-shot"):
        transform("dprd", Example(("The dog ate.", "it"), 0, ("dog", "cat"), 0), tok, n_ctx=32)


def test_transform_batch_equals_one_by_one(tok):
    loaded = load_examples("race", "validation", synthetic=True, max_examples=6)
    batch = transform_batch("race", loaded.examples, tok, n_ctx=40)
    assert batch == [transform("race", e, tok, n_ctx=40) for e in loaded.examples]


# ------------------------------------------------------------------------------------------------ loading


def test_cut_gives_disjoint_deterministic_parts():
    train_cut, eval_cut = Cut("validation", 0.0, 0.8, seed=3), Cut("validation", 0.8, 1.0, seed=3)
    train_part = load_examples("story_cloze", "train", cut=train_cut, synthetic=True, synthetic_rows=50)
    eval_part = load_examples("story_cloze", "validation", cut=eval_cut, synthetic=True, synthetic_rows=50)
    a, b = {e.index for e in train_part.examples}, {e.index for e in eval_part.examples}
    assert len(a) == 40 and len(b) == 10 and not a & b and a | b == set(range(50))
    again = load_examples("story_cloze", "train", cut=train_cut, synthetic=True, synthetic_rows=50)
    assert again.examples == train_part.examples
    other = load_examples("story_cloze", "train", cut=Cut("validation", 0.0, 0.8, seed=4), synthetic=True,
                          synthetic_rows=50)
    assert {e.index for e in other.examples} != a
    d = train_part.description
    assert d["part"] == "train" and d["split"] == "validation" and d["cut_spec"]["end_fraction"] == 0.8
    assert train_part.describe().startswith("validation[0%:80%] (shuffled, seed 3) as train, 40 of 40 rows")


def test_cut_needs_a_real_split_and_sane_fractions():
    with pytest.raises(TaskError, match=r"split 'train' is not one of its hub splits: validation, test"):
        load_examples("story_cloze", "train", synthetic=True)
    with pytest.raises(TaskError, match="start_fraction < end_fraction"):
        load_examples("story_cloze", "train", cut=Cut("validation", 0.5, 0.5), synthetic=True)


def test_cap_is_a_seeded_random_subset():
    full = load_examples("sst2", "validation", synthetic=True)
    first = load_examples("sst2", "validation", max_examples=10, synthetic=True, seed=1)
    assert len(first.examples) == 10 and first.capped == len(full.examples) - 10
    assert first.examples == load_examples("sst2", "validation", max_examples=10, synthetic=True, seed=1).examples
    other = load_examples("sst2", "validation", max_examples=10, synthetic=True, seed=2)
    assert [e.index for e in first.examples] != [e.index for e in other.examples]
    assert [e.index for e in first.examples] != list(range(10))
    assert [e.index for e in first.examples] == sorted(e.index for e in first.examples)
    by_index = {e.index: e for e in full.examples}  # the cap seed picks rows; it does not change the data
    assert all(by_index[e.index] == e for e in other.examples)


def test_race_reads_both_configurations_and_reports_each():
    spec = TASKS["race"]
    loaded = load_examples(spec, "validation", synthetic=True, synthetic_rows=20)
    assert loaded.rows_read == 40 and {e.config for e in loaded.examples} == {"middle", "high"}
    by_report = {r.name: report_examples(spec, r, loaded.examples) for r in spec.reports}
    assert len(by_report["race_m"]) == len(by_report["race_h"]) == 20 and len(by_report["race"]) == 40
    middle = load_examples(spec, "validation", synthetic=True, synthetic_rows=20, configs=["middle"])
    assert {e.config for e in middle.examples} == {"middle"}
    with pytest.raises(TaskError, match=r"configuration.* low unknown; valid: middle, high"):
        load_examples(spec, "validation", synthetic=True, configs=["low"])


def test_labels_are_decoded_per_encoding():
    race = load_examples("race", "validation", synthetic=True, max_examples=5).examples
    assert all(isinstance(e.label, int) and 0 <= e.label < 4 and len(e.choices) == 4 for e in race)
    story = load_examples("story_cloze", "validation", synthetic=True).examples
    assert {e.label for e in story} == {0, 1}
    scitail = load_examples("scitail", "validation", synthetic=True).examples
    assert {e.label for e in scitail} == {0, 1}
    stsb = load_examples("stsb", "validation", synthetic=True).examples
    assert all(isinstance(e.label, float) and 0 <= e.label <= 5 for e in stsb)


# ------------------------------------------------------------------------------------------ bad input


def _write(mirror: Path, path: str, config: str, split: str, columns: dict, features=None) -> None:
    file = mirror_file(DatasetRef(path, config, split), mirror)
    file.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(columns, features=features).to_parquet(str(file))


def test_snli_rows_without_gold_label_are_dropped_and_counted(tmp_path):
    features = FEATURES[("stanfordnlp/snli", "plain_text")]
    _write(tmp_path, "stanfordnlp/snli", "plain_text", "validation",
           {"premise": ["p a", "p b", "p c", "p d"], "hypothesis": ["h"] * 4, "label": [0, -1, 2, -1]}, features)
    loaded = load_examples("snli", "validation", tmp_path)
    assert [e.index for e in loaded.examples] == [0, 2] and loaded.unlabelled_dropped == 2
    assert loaded.rows_read == 4 and loaded.description["unlabelled_dropped"] == 2


def test_a_split_left_empty_is_an_error(tmp_path):
    features = FEATURES[("stanfordnlp/snli", "plain_text")]
    _write(tmp_path, "stanfordnlp/snli", "plain_text", "test",
           {"premise": ["p"], "hypothesis": ["h"], "label": [-1]}, features)
    with pytest.raises(TaskError, match=r"task snli, split test: no labelled rows \(1 read, 1 without a gold label"):
        load_examples("snli", "test", tmp_path)
    with pytest.raises(TaskError, match="task sst2, split test: no labelled rows"):  # GLUE: hidden test labels
        load_examples("sst2", "test", synthetic=True)


def test_empty_text_names_task_split_row_and_field(tmp_path):
    _write(tmp_path, "nyu-mll/glue", "sst2", "validation",
           {"sentence": ["fine", "good", "  "], "label": [1, 1, 0], "idx": [0, 1, 2]})
    with pytest.raises(TaskError, match=r"task sst2, split validation, row 2, field 'sentence': empty"):
        load_examples("sst2", "validation", tmp_path)


def test_errors_in_a_cut_name_the_source_split_and_its_row(tmp_path):
    sentences = ["fine"] * 9 + [""]
    columns = {"sentence": sentences, "label": [1] * 10, "idx": list(range(10))}
    _write(tmp_path, "nyu-mll/glue", "sst2", "validation", columns)
    with pytest.raises(TaskError, match=r"task sst2, split validation\[0%:100%\] \(shuffled, seed 0\), row 9, field"):
        load_examples("sst2", "train", tmp_path, cut=Cut("validation", 0.0, 1.0))


def test_missing_value_and_missing_column(tmp_path):
    _write(tmp_path, "nyu-mll/glue", "rte", "validation",
           {"sentence1": ["a", None], "sentence2": ["b", "c"], "label": [0, 1], "idx": [0, 1]})
    with pytest.raises(TaskError, match=r"task rte, split validation, row 1, field 'sentence1': empty or not text"):
        load_examples("rte", "validation", tmp_path)
    _write(tmp_path, "nyu-mll/glue", "rte", "train", {"sentence1": ["a"], "label": [0], "idx": [0]})
    with pytest.raises(TaskError, match=r"task rte, split train, field 'sentence2': column missing"):
        load_examples("rte", "train", tmp_path)
    with pytest.raises(TaskError, match=r"task cola, split validation, row 4, field 'sentence': missing"):
        parse_row(TASKS["cola"], "validation", {"label": 1}, 4)


def test_label_out_of_range_names_the_valid_values(tmp_path):
    _write(tmp_path, "nyu-mll/glue", "mnli", "validation_matched",
           {"premise": ["a", "b"], "hypothesis": ["c", "d"], "label": [0, 3], "idx": [0, 1]})
    with pytest.raises(TaskError, match=r"task mnli, split validation_matched, row 1, field 'label': label 3 is not "
                                        r"0..2 \(entailment, neutral, contradiction\)"):
        load_examples("mnli", "validation_matched", tmp_path)
    row = {"premise": "a", "hypothesis": "b"}
    with pytest.raises(TaskError, match=r"row 7, field 'label': label 'maybe' is not one of 'entails', 'neutral'"):
        parse_row(TASKS["scitail"], "test", {**row, "label": "maybe"}, 7)
    with pytest.raises(TaskError, match=r"field 'label': label 5.5 is not a number in 0.0..5.0"):
        parse_row(TASKS["stsb"], "train", {"sentence1": "a", "sentence2": "b", "label": 5.5}, 0)
    story = {f"input_sentence_{i}": "s" for i in range(1, 5)} | {"sentence_quiz1": "x", "sentence_quiz2": "y"}
    with pytest.raises(TaskError, match=r"field 'answer_right_ending': label 3 is not 1..2"):
        parse_row(TASKS["story_cloze"], "validation", {**story, "answer_right_ending": 3}, 0)
    race = {"article": "a", "question": "q", "options": ["1", "2", "3", "4"]}
    with pytest.raises(TaskError, match=r"field 'answer': label 'E' is not one of 'A', 'B', 'C', 'D'"):
        parse_row(TASKS["race"], "train", {**race, "answer": "E"}, 0)
    with pytest.raises(TaskError, match=r"field 'options': expected 4 choices"):
        parse_row(TASKS["race"], "train", {**race, "options": ["1", "2"], "answer": "A"}, 0)
    with pytest.raises(TaskError, match=r"field 'options\[2\]': empty"):
        parse_row(TASKS["race"], "train", {**race, "options": ["1", "2", "", "4"], "answer": "A"}, 0)


def test_task_errors_are_gpt1_errors():
    assert issubclass(TaskError, Gpt1Error)


# ------------------------------------------------------------------------------------------- synthetic data


def _every_split():
    for spec in TASKS.values():
        for config in spec.configs:
            for split in spec.splits:
                yield spec, config, split


def test_every_synthetic_split_is_deterministic_and_parses():
    for spec, config, split in _every_split():
        ds = synthetic_split(spec.path, config, split, rows=40, seed=5, splits=spec.splits)
        assert len(ds) == 40 and ds.features == FEATURES[(spec.path, config)]
        assert ds.to_list() == synthetic_split(spec.path, config, split, rows=40, seed=5, splits=spec.splits).to_list()
        assert ds.to_list() != synthetic_split(spec.path, config, split, rows=40, seed=6, splits=spec.splits).to_list()
        hidden = spec.test_labels == "glue_server" and split.startswith("test")
        if not hidden:
            loaded = load_examples(spec, split, synthetic=True, configs=[config], synthetic_rows=40,
                                   synthetic_seed=5)
            assert len(loaded.examples) + loaded.unlabelled_dropped == 40


def test_synthetic_split_rejects_what_the_hub_lacks():
    with pytest.raises(SyntheticDataError, match=r"has no split 'train'; hub splits: validation, test"):
        synthetic_split("LSDSem/story_cloze", "2016", "train", splits=get_task("story_cloze").splits)
    with pytest.raises(SyntheticDataError, match="no registered task reads"):
        synthetic_split("acme/reviews", None, "train", splits=("train",))


def test_synthetic_data_carries_a_learnable_signal():
    from gpt1.data.synthetic.tasks import POSITIVE

    sst2 = load_examples("sst2", "train", synthetic=True).examples
    assert all((any(w in e.texts[0] for w in POSITIVE)) == (e.label == 1) for e in sst2)
    race = load_examples("race", "train", synthetic=True).examples
    in_article = [[choice in e.texts[0] for choice in e.choices] for e in race]
    assert all(found.count(True) == 1 and found[e.label] for found, e in zip(in_article, race, strict=True))
    stsb = load_examples("stsb", "train", synthetic=True).examples
    same = [len(set(e.texts[0].split()) & set(e.texts[1].split())) for e in stsb]
    assert spearmanr(same, [e.label for e in stsb]).statistic > 0.8  # more shared words, higher score


# ------------------------------------------------------------------------------------------------ mirror


@needs_mirror
def test_synthetic_features_equal_the_mirror_files():
    checked = 0
    for spec, config, split in _every_split():
        file = mirror_file(DatasetRef(spec.path, config, split), SHARED_MIRROR)
        if not file.is_file():
            continue
        mirror_features = datasets.Features.from_arrow_schema(pq.read_schema(file))
        assert synthetic_split(spec.path, config, split, rows=8, splits=spec.splits).features == mirror_features, file
        label = mirror_features[spec.label_field]
        if isinstance(label, datasets.ClassLabel):
            assert tuple(label.names) == spec.label_names, file
        checked += 1
    assert checked >= 20


@needs_mirror
@pytest.mark.parametrize("name", FINETUNE_TASKS)
def test_every_task_loads_from_the_mirror(name, tok):
    spec = TASKS[name]
    for report in spec.reports:
        split = evaluation_split(spec, report, present=["validation", "validation_matched", "validation_mismatched"])
        loaded = load_examples(spec, split, SHARED_MIRROR, max_examples=8, configs=report.configs or None)
        assert len(loaded.examples) == 8 and loaded.rows_read > 8
        assert loaded.description["source"] == "mirror"  # not its folder: the records are the same wherever it is
        out = transform_batch(spec, loaded.examples, tok, n_ctx=64)
        expected = {"similarity": 2, "multiple_choice": spec.num_labels}.get(spec.kind, 1)
        assert all(len(t.sequences) == expected and all(len(s) <= 64 for s in t.sequences) for t in out)


@needs_mirror
def test_mirror_snli_drops_its_158_unlabelled_rows():
    loaded = load_examples("snli", "validation", SHARED_MIRROR, max_examples=5)
    assert loaded.unlabelled_dropped == 158 and loaded.capped == 10000 - 158 - 5
