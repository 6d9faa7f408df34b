"""gpt1.stages.zeroshot: the four heuristics of §5 on hand-made inputs whose answer is known, under a
hand-set bigram "language model"; then the stage end to end on tiny GPT/LSTM snapshots and synthetic task data."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import TinyData, tiny_config
from torch import nn

from gpt1.data.rows import Example
from gpt1.data.tokenizer import train
from gpt1.evaluation.metrics import accuracy, bootstrap_se, matthews
from gpt1.evaluation.probes import (
    ChoiceProbe,
    Scored,
    Sst2Probe,
    TaskData,
    choose_threshold,
    cola_probe,
    dprd_probe,
    dprd_texts,
    evaluate_cola,
    evaluate_sst2,
    normalise,
    predict_choices,
    pronoun_span,
    race_probe,
    sst2_needs_offset,
    sst2_offset_probe,
    sst2_probe,
    task_result,
)
from gpt1.evaluation.scoring import score_continuations
from gpt1.pipeline.errors import Gpt1Error
from gpt1.pipeline.files import read_sealed_json, verify_file
from gpt1.stages.zeroshot import check_references, zeroshot_stage

WORDS = ["the", "dog", "cat", "chased", "barked", "meowed", "because", "it", "ran", "sat", "park", "went", "to", "what",
         "did", "do", "film", "was", "good", "bad", "very", "positive", "negative", "alpha", "bravo", "charlie",
         "delta", "echo", "foxtrot"]


class BigramLM(nn.Module):
    """logits[b, t] = table[idx[b, t]]: the next token depends on the current one only, as set by hand. Zero
    logits everywhere (uniform) unless `prefer` raises one."""

    def __init__(self, vocab_size: int, n_ctx: int = 64) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(vocab_size, vocab_size), requires_grad=False)
        self.config = SimpleNamespace(n_ctx=n_ctx)

    def prefer(self, current: int, following: int, logit: float = 8.0) -> None:
        self.table.data[current, following] = logit

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        return self.table[idx], None




@pytest.fixture(scope="module")
def tok():
    """A `fast` BPE that has every word of WORDS as one token."""
    tokenizer = train([" ".join(WORDS) + " . ?"] * 8, "fast", merges=400, limit_alphabet=60, min_frequency=1)
    for word in WORDS:
        assert len(tokenizer.encode(word)) == 1, word
    return tokenizer


def tid(tokenizer, word: str) -> int:
    (only,) = tokenizer.encode(word)
    return only


def lm(tokenizer) -> BigramLM:
    return BigramLM(tokenizer.base_vocab_size)


# ------------------------------------------------------------------------------------------------ the scorer




def test_scores_are_the_hand_computed_log_probabilities(tok):
    model = lm(tok)
    v = tok.base_vocab_size
    dog, barked, cat = tid(tok, "dog"), tid(tok, "barked"), tid(tok, "cat")
    model.prefer(dog, barked, 5.0)
    p_barked = math.exp(5.0) / (math.exp(5.0) + v - 1)
    scores = score_continuations(model, [[cat, dog], [cat, dog]], [[barked, cat], [cat]], reduction="sum")
    expected_first = math.log(p_barked) + math.log(1 / v)  # barked after dog, then cat after barked (uniform)
    expected_second = math.log(1 / (math.exp(5.0) + v - 1))  # cat after dog: one of the v - 1 unpreferred tokens
    assert scores == pytest.approx([expected_first, expected_second])
    mean = score_continuations(model, [[cat, dog]], [[barked, cat]])
    assert mean == pytest.approx([expected_first / 2])
    assert score_continuations(model, [[]], [[dog]]) == pytest.approx([0.0])  # nothing scored: log 1






def test_references_must_name_the_metric_each_heuristic_yields():
    refs = tiny_config().root["zeroshot_reference"]
    assert list(check_references(refs)) == ["cola", "sst2", "race", "dprd"]
    with pytest.raises(Gpt1Error, match=r"zeroshot_reference.cola.metric: 'accuracy'.*yields 'mcc'"):
        check_references({**refs, "cola": {**refs["cola"], "metric": "accuracy"}})


def test_normalise_is_zero_at_random_and_one_at_the_state_of_the_art():
    ref = {"metric": "accuracy", "random": 0.5, "sota": 0.932}
    assert normalise(0.5, ref) == 0.0
    assert normalise(0.932, ref) == pytest.approx(1.0)
    assert normalise(0.716, ref) == pytest.approx(0.5)
    assert normalise(0.25, {"random": 0.0, "sota": 0.35}) == pytest.approx(0.25 / 0.35)
    assert normalise(0.4, ref) < 0  # worse than chance stays visible


# ------------------------------------------------------------------------------------------------ heuristics


def example(texts: tuple[str, ...], label: int, choices: tuple[str, ...] | None = None) -> Example:
    return Example(texts, label, choices, 0)


def test_sst2_picks_the_word_the_lm_prefers_after_very(tok):
    examples = [example(("the film was good .",), 1), example(("the film was bad .",), 0)]
    probe = sst2_probe(tok, examples)
    very = tid(tok, "very")
    assert all(p[-1] == very for p in probe.prefixes)
    model = lm(tok)
    model.prefer(very, tid(tok, "positive"))
    assert predict_choices(model, probe).tolist() == [1, 1]
    model = lm(tok)
    model.prefer(very, tid(tok, "negative"))
    assert predict_choices(model, probe).tolist() == [0, 0]


def test_sst2_compares_whole_words_by_their_summed_log_probability(tok):
    """A word of two tokens is as likely as the product of its tokens: the sum, not the mean, is compared."""
    probe = sst2_probe(tok, [example(("the film was good .",), 1)])
    very, neg = tid(tok, "very"), tid(tok, "negative")
    probe = dataclasses.replace(probe, continuations=[[neg, neg], [tid(tok, "positive")]])  # "negative" as 2 tokens
    model = lm(tok)
    model.prefer(very, neg, 6.0)  # the first token of the two-token word is likely after "very" ...
    model.prefer(neg, neg, -4.0)  # ... its second token unlikely: likelier per token, less likely as a word
    sums = score_continuations(model, probe.prefixes, probe.continuations, reduction="sum")
    means = score_continuations(model, probe.prefixes, probe.continuations, reduction="mean")
    assert sums[0] < sums[1] and means[0] > means[1]
    assert predict_choices(model, probe).tolist() == [1]


def biased_sst2(tok, negative_tokens: int = 1):
    """An LM that prefers "positive" after every sentence, more after good ones, and its probe (fit: 4 sentences,
    test: 3); `negative_tokens` 2 spells "negative" as two tokens, as a small vocabulary does."""
    good, bad = example(("the film was good .",), 1), example(("the film was bad .",), 0)
    fit = sst2_probe(tok, [good, bad, good, bad]) if negative_tokens > 1 else None  # `tok` spells it whole
    probe = Sst2Probe(sst2_probe(tok, [good, bad, bad]), fit)
    assert all(p[-1] == tid(tok, "very") for p in probe.test.prefixes)  # the real probe: sentence + " very"
    negative = [tid(tok, "negative"), tid(tok, ".")][:negative_tokens]

    # The bigram LM sees one token back: score the label words right after the sentiment word instead of "very".
    def by_sentiment_word(part):
        return dataclasses.replace(part, prefixes=[[tid(tok, "good") if label else tid(tok, "bad")]
                                                   for label in part.labels for _ in range(part.n_options)],
                                   continuations=[negative, [tid(tok, "positive")]] * len(part.labels))
    probe = dataclasses.replace(probe, fit=probe.fit and by_sentiment_word(probe.fit),
                                test=by_sentiment_word(probe.test))
    model = lm(tok)
    positive = tid(tok, "positive")
    model.prefer(tid(tok, "good"), positive, 6.0)
    model.prefer(tid(tok, "bad"), positive, 2.0)  # the bias: "positive" is likelier even after bad
    return model, probe


def test_sst2_scores_the_papers_rule_where_both_words_are_one_token(tok):
    """The paper's vocabulary: no offset is fitted, and the biased LM calls everything positive, as the paper's
    rule does."""
    model, probe = biased_sst2(tok)
    assert not probe.calibrated
    scored = evaluate_sst2(model, probe)
    assert scored.details == {"offset": 0.0} and scored.raw == pytest.approx(1 / 3)
    assert scored.predictions.tolist() == [1, 1, 1]


def test_sst2_needs_an_offset_only_where_a_label_word_spans_several_tokens(tok):
    """`tok` spells both words as one token (as the paper's 40k vocabulary does); a vocabulary that never saw
    "negative" spells it in pieces."""
    good, bad = example(("the film was good .",), 1), example(("the film was bad .",), 0)
    assert not sst2_needs_offset(tok)
    assert sst2_offset_probe(tok, [good, bad], [good, bad]).fit is None  # a fit split given is left out
    small = train(["the film was very positive ."] * 8, "fast", merges=60, limit_alphabet=60, min_frequency=1)
    assert len(small.encode("positive")) == 1 and len(small.encode("negative")) > 1
    assert sst2_needs_offset(small)
    fitted = sst2_offset_probe(small, [good, bad], [bad, good, bad])
    assert fitted.calibrated and fitted.fit.labels.tolist() == [0, 1, 0]
    assert not sst2_offset_probe(small, [good, bad]).calibrated  # no fit split: the paper's rule


def test_sst2_offset_from_train_undoes_the_bias_of_a_word_of_several_tokens(tok):
    """'negative' in two tokens: the paper's rule (kept as 'uncalibrated') calls everything positive; the offset
    chosen on the fit split separates good from bad on the test split."""
    model, probe = biased_sst2(tok, negative_tokens=2)
    assert probe.calibrated
    scored = evaluate_sst2(model, probe)
    assert scored.details["uncalibrated"] == pytest.approx(1 / 3)  # everything called positive
    assert scored.raw == 1.0 and scored.details["offset_split_accuracy"] == 1.0
    assert scored.predictions.tolist() == scored.labels.tolist() == [1, 0, 0]


def test_race_picks_the_answer_the_lm_likes(tok):
    question = ("the dog ran to the park .", "what did the dog do ?")
    examples = [example(question, 3, ("ran", "sat", "meowed", "barked")),
                example(question, 0, ("barked", "ran", "sat", "meowed"))]
    probe = race_probe(tok, examples)
    assert probe.n_options == 4 and len(probe.prefixes) == 8
    assert probe.prefixes[0] == tok.encode(" ".join(question))  # conditioned on article + question
    model = lm(tok)
    model.prefer(tid(tok, "?"), tid(tok, "barked"))
    assert predict_choices(model, probe).tolist() == [3, 0]


def test_pronoun_span_takes_the_first_occurrence_after_both_candidates():
    sentence = "The workers were told they had been fired by the company, because they could cut costs."
    start, end = pronoun_span(sentence, "they", ["The workers", "the company"])
    assert sentence[start:end] == "they" and sentence[start - 8 : start] == "because "
    sentence = "Raccoons play dead when people come near since they hope they will be ignored."
    start, _ = pronoun_span(sentence, "they", ["Raccoons", "people"])
    assert sentence[start:].startswith("they hope")
    assert pronoun_span("Ann met Bo. He smiled.", "he", ["Ann", "Bo"]) == (12, 14)  # whole word, any case
    with pytest.raises(Gpt1Error, match="pronoun 'she'"):
        pronoun_span("Ann met Bo.", "she", ["Ann", "Bo"])


def test_dprd_texts_substitute_each_candidate_and_keep_the_rest():
    pairs = dprd_texts("The dog chased the cat because it barked.", "it", ["The dog", "the cat"])
    assert pairs == [("The dog chased the cat because The dog", " barked."),
                     ("The dog chased the cat because the cat", " barked.")]
    pairs = dprd_texts("Jimbo hit Bob because his car was new.", "his", ["Jimbo", "Bob"])
    assert [p for p, _ in pairs] == ["Jimbo hit Bob because Jimbo's", "Jimbo hit Bob because Bob's"]


def test_dprd_picks_the_candidate_after_which_the_rest_is_likely(tok):
    candidates = ("the dog", "the cat")
    examples = [example(("the dog chased the cat because it barked .", "it"), 0, candidates),
                example(("the dog chased the cat because it meowed .", "it"), 1, candidates)]
    probe = dprd_probe(tok, examples)
    assert probe.continuations[0] == probe.continuations[1]  # the same tokens, differently conditioned
    model = lm(tok)
    model.prefer(tid(tok, "dog"), tid(tok, "barked"))
    model.prefer(tid(tok, "cat"), tid(tok, "meowed"))
    assert predict_choices(model, probe).tolist() == [0, 1]


def test_choose_threshold_maximises_mcc():
    threshold, mcc = choose_threshold(np.array([-1.0, -2.0, -3.0, -4.0]), np.array([1, 1, 0, 0]))
    assert (threshold, mcc) == (-2.5, 1.0)
    threshold, mcc = choose_threshold(np.array([-1.0, -1.0]), np.array([1, 0]))  # nothing separates them
    assert mcc == 0.0 and threshold < -1.0
    # 1.5 and 3.5 both give 3 of 4 right: the tie goes to the lowest
    assert choose_threshold(np.array([1.0, 2.0, 3.0, 4.0]), np.array([0, 1, 0, 1]), metric=accuracy) == (1.5, 0.75)


def test_cola_threshold_comes_from_the_separate_split_and_mcc_from_the_reported_one(tok):
    """One-word sentences whose log-probability after '.' falls from alpha to foxtrot. The fit split puts the
    best threshold between charlie and delta (MCC 1/3 on the reported split); the reported split's own best one
    would sit between bravo and charlie (MCC 0.707): a threshold leaking from the reported split would show."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    model = lm(tok)
    for logit, word in zip((6, 5, 4, 3, 2, 1), words, strict=True):
        model.prefer(tid(tok, "."), tid(tok, word), float(logit))
    fit = [example((w,), label) for w, label in zip(words, (1, 1, 1, 0, 0, 0), strict=True)]
    test = [example((w,), label) for w, label in zip(words, (1, 1, 0, 1, 0, 0), strict=True)]
    probe = cola_probe(tok, fit, test)
    assert probe.context == tok.encode(".")
    result = evaluate_cola(model, probe)
    scores = score_continuations(model, [probe.context] * 6, probe.fit_sentences)
    assert result.details["threshold"] == pytest.approx((scores[2] + scores[3]) / 2)
    assert result.details["threshold_split_mcc"] == pytest.approx(1.0)
    assert result.predictions.tolist() == [1, 1, 1, 0, 0, 0] and result.labels.tolist() == [1, 1, 0, 1, 0, 0]
    assert result.raw == pytest.approx(1 / 3)
    assert result.raw == pytest.approx(matthews([1, 1, 0, 1, 0, 0], [1, 1, 1, 0, 0, 0]))
    assert choose_threshold(scores, probe.test_labels)[1] == pytest.approx(1 / math.sqrt(2))


def test_a_points_result_carries_its_standard_error_and_its_test_against_the_first():
    labels = np.array([1, 0] * 20)
    first = Scored(0.5, labels, np.ones(40, dtype=int), {})
    better = Scored(0.9, labels, np.where(np.arange(40) < 36, labels, 1 - labels), {"offset": 0.25})
    task = TaskData("sst2", sst2_probe_of(labels), "validation", {})
    reference = {"metric": "accuracy", "random": 0.5, "sota": 0.9}
    start, end = task_result(task, reference, first, None), task_result(task, reference, better, first)
    assert start["p_vs_first"] is None and start["normalised"] == 0.0
    assert start["se"] == pytest.approx(bootstrap_se("accuracy", labels, first.predictions, n=1000, seed=0))
    assert end["se"] == pytest.approx(bootstrap_se("accuracy", labels, better.predictions, n=1000, seed=0))
    assert 0.03 < end["se"] < 0.07  # sqrt(0.9 * 0.1 / 40) = 0.047
    assert end["normalised_se"] == pytest.approx(end["se"] / 0.4)
    assert end["p_vs_first"] < 0.01 and end["offset"] == 0.25  # 0.5 -> 0.9 on 40 examples is no accident
    assert task_result(task, reference, first, first)["p_vs_first"] == 1.0  # the same predictions


def sst2_probe_of(labels: np.ndarray) -> ChoiceProbe:
    return ChoiceProbe([[0]] * (2 * len(labels)), [[1]] * (2 * len(labels)), 2, labels, "sum")


# ------------------------------------------------------------------------------------------------ the stage


def write_pretrain_folder(out: Path, kind: str, cfg, tokenizer_dir: Path, steps: tuple[int, ...], final: int) -> None:
    """A pretrain out_dir as gpt1.stages.pretrain writes it: snapshots/NN.safetensors + index.json, model.safetensors +
    model.json; every file a differently seeded tiny model."""
    from gpt1.data.tokenizer import GPT1Tokenizer
    from gpt1.modeling.checkpoints import build_model, model_config, save_weights, weights_metadata
    from gpt1.pipeline.files import file_record

    tokenizer = GPT1Tokenizer.load(tokenizer_dir)
    config, sha = model_config(kind, cfg.section("model"), tokenizer.base_vocab_size), tokenizer.fingerprint()
    per_step = 4 * config.n_ctx
    (out / "snapshots").mkdir(parents=True)
    index = []
    for i, step in enumerate(steps):
        torch.manual_seed(i)
        save_weights(build_model(kind, config), out / "snapshots" / f"{i:02d}.safetensors",
                     weights_metadata(kind, config, sha, step, step * per_step))
        index.append({"index": i, "step": step, "tokens": step * per_step, "val_loss": 5.0 - i,
                      **file_record(out / "snapshots" / f"{i:02d}.safetensors")})
    (out / "snapshots" / "index.json").write_text(json.dumps(index))
    torch.manual_seed(99)
    save_weights(build_model(kind, config), out / "model.safetensors", weights_metadata(kind, config, sha, final,
                                                                                        final * per_step))
    meta = {"kind": kind, "config": dataclasses.asdict(config), "tokenizer_sha256": sha, "step": final,
            "tokens": final * per_step, "weights": file_record(out / "model.safetensors")}
    (out / "model.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("kind", ["gpt", "lstm"])
def test_stage_scores_every_snapshot_and_the_final_model(kind, tiny_data: TinyData, mlflow_env, tmp_path):
    cfg = tiny_config("zeroshot.max_examples=6")
    model_dir, out = tmp_path / "pretrain", tmp_path / "zeroshot"
    write_pretrain_folder(model_dir, kind, cfg, tiny_data.tokenizer, steps=(1, 5), final=12)
    report = zeroshot_stage(cfg, model_dir, tiny_data.tokenizer, out)

    assert sorted(p.name for p in out.iterdir()) == ["heldout.csv", "zeroshot.csv", "zeroshot.json"]  # no temp
    saved = read_sealed_json(out / "zeroshot.json", "zeroshot")  # sealed, and it records the CSVs beside it
    files = saved.pop("files")
    for name in ("zeroshot.csv", "heldout.csv"):
        verify_file(out / name, files[name], "zeroshot", out / "zeroshot.json")
    assert saved == json.loads(json.dumps(report))
    assert saved["model_kind"] == kind
    entries = saved["snapshots"]
    assert [(e["index"], e["step"], e["final"]) for e in entries] == [(0, 1, False), (1, 5, False), (None, 12, True)]
    refs = cfg.root["zeroshot_reference"]
    for entry in entries:
        assert sorted(entry["tasks"]) == ["cola", "dprd", "race", "sst2"]
        for task, r in entry["tasks"].items():
            assert r["examples"] == 6 and r["metric"] == refs[task]["metric"]
            assert r["normalised"] == pytest.approx(normalise(r["raw"], refs[task]))
            scale = refs[task]["sota"] - refs[task]["random"]
            assert r["se"] >= 0 and r["normalised_se"] == pytest.approx(r["se"] / scale)
            assert (r["p_vs_first"] is None) == (entry is entries[0])
        assert entry["tasks"]["dprd"]["split"] == "train"
        assert entry["tasks"]["cola"]["split"] == "validation" and "threshold" in entry["tasks"]["cola"]
    assert saved["tasks"]["cola"]["threshold_split"] == "train"
    assert saved["references"] == refs
    assert any("threshold" in note and "train split" in note for note in saved["notes"])

    with open(out / "zeroshot.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["model", "step", "task", "metric", "raw", "se", "normalised", "normalised_se",
                             "p_vs_first"]
    assert [r["p_vs_first"] == "" for r in rows[::4]] == [True, False, False]
    assert len(rows) == 12 and {r["model"] for r in rows} == {kind}
    assert [int(r["step"]) for r in rows[::4]] == [1, 5, 12]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_env)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              f"tags.`gpt1.stage` = 'zeroshot' and tags.`gpt1.model_kind` = '{kind}'")
    history = client.get_metric_history(runs[0].info.run_id, "race_normalised")
    assert sorted(m.step for m in history) == [1, 5, 12]
    history = client.get_metric_history(runs[0].info.run_id, "heldout_perplexity")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (e["step"], pytest.approx(e["heldout_lm"]["perplexity"])) for e in entries]

    # The held-out perplexity at every point, from the per-article losses heldout.csv keeps.
    info = saved["heldout_lm"]
    assert info["data"] == "synthetic WikiText-style articles" and info["articles"] == len(info["titles"]) >= 2
    with open(out / "heldout.csv") as handle:
        articles = list(csv.DictReader(handle))
    assert list(articles[0]) == ["model", "step", "tokens", "article", "scored_tokens", "words", "nll"]
    assert len(articles) == 3 * info["articles"] and {r["model"] for r in articles} == {kind}
    for entry in entries:
        mine = [r for r in articles if int(r["step"]) == entry["step"]]
        assert {int(r["tokens"]) for r in mine} == {entry["tokens"]}
        tokens = sum(int(r["scored_tokens"]) for r in mine)
        assert tokens == info["scored_tokens"] == entry["heldout_lm"]["scored_tokens"]
        loss = sum(float(r["nll"]) for r in mine) / tokens
        assert entry["heldout_lm"]["loss"] == pytest.approx(loss)
        assert entry["heldout_lm"]["perplexity"] == pytest.approx(math.exp(loss))
        assert 0 < entry["heldout_lm"]["loss_se"] < loss
    assert entries[0]["heldout_lm"]["loss"] != entries[-1]["heldout_lm"]["loss"]  # each point its own weights


def test_stage_skips_a_final_model_equal_to_the_last_snapshot(tiny_data: TinyData, mlflow_env, tmp_path):
    cfg = tiny_config("zeroshot.max_examples=2")
    model_dir = tmp_path / "pretrain"
    write_pretrain_folder(model_dir, "gpt", cfg, tiny_data.tokenizer, steps=(3,), final=3)
    report = zeroshot_stage(cfg, model_dir, tiny_data.tokenizer, tmp_path / "out")
    assert [(e["index"], e["step"]) for e in report["snapshots"]] == [(0, 3)]
    rows = list(csv.DictReader((tmp_path / "out" / "zeroshot.csv").read_text().splitlines()))
    assert [(r["model"], r["step"]) for r in rows] == [("gpt", "3")] * 4


def test_stage_refuses_a_folder_without_snapshots_or_of_another_tokenizer(tiny_data: TinyData, tmp_path):
    cfg = tiny_config()
    model_dir, out = tmp_path / "pretrain", tmp_path / "out"
    write_pretrain_folder(model_dir, "gpt", cfg, tiny_data.tokenizer, steps=(1,), final=2)
    (model_dir / "snapshots" / "index.json").rename(model_dir / "index.json.away")
    with pytest.raises(Gpt1Error, match=r"snapshots/index.json: missing; run the pretrain stage"):
        zeroshot_stage(cfg, model_dir, tiny_data.tokenizer, out)
    (model_dir / "index.json.away").rename(model_dir / "snapshots" / "index.json")
    meta = json.loads((model_dir / "model.json").read_text())
    (model_dir / "model.json").write_text(json.dumps({**meta, "tokenizer_sha256": "0" * 64}))
    with pytest.raises(Gpt1Error, match=r"tokenizer_sha256 0{64} differs"):
        zeroshot_stage(cfg, model_dir, tiny_data.tokenizer, out)
    assert not out.exists()


def test_truncated_rows_are_counted_in_every_part_of_a_probe():
    """zeroshot.json's truncated_rows: rows whose prefix lost its beginning to n_ctx, over the fit split too."""
    from gpt1.evaluation.probes import ColaProbe, Sst2Probe, count_truncated

    short, long = [1, 1], [1] * 10  # with a 2-token continuation: 4 tokens fit 8, 12 do not
    choice = ChoiceProbe([short, long, short, short], [[2, 2]] * 4, 2, np.array([0, 1]), "sum")
    assert count_truncated(choice, 8) == 1
    assert count_truncated(Sst2Probe(fit=choice, test=choice), 8) == 2
    assert count_truncated(Sst2Probe(test=choice), 8) == 1
    cola = ColaProbe([5], [long], np.array([1]), [short, long, long], np.array([0, 1, 1]))
    assert count_truncated(cola, 8) == 3
    assert count_truncated(cola, 64) == count_truncated(choice, 64) == 0


def test_sst2_reads_its_train_split_only_where_an_offset_is_fitted(tok, monkeypatch):
    """With both label words one token each the stage scores the paper's rule and never loads SST-2's train split
    (zeroshot.json names no threshold split); with a word in pieces it fits the offset on train and says so."""
    from gpt1.data.rows import load_examples
    from gpt1.stages import zeroshot

    read: list[str] = []

    def load(cfg, name: str, split: str):
        read.append(split)
        return load_examples(name, split, None, max_examples=4, synthetic=True)

    monkeypatch.setattr(zeroshot, "_load", load)
    cfg = SimpleNamespace(data_mirror=None, synthetic=True)
    paper_rule = zeroshot.prepare_task(cfg, tok, "sst2", 64)
    assert read == [paper_rule.split] and not paper_rule.probe.calibrated
    assert "threshold_split" not in paper_rule.info

    read.clear()
    small = train(["the film was very positive ."] * 8, "fast", merges=60, limit_alphabet=60, min_frequency=1)
    fitted = zeroshot.prepare_task(cfg, small, "sst2", 64)
    assert read == [fitted.split, "train"] and fitted.probe.calibrated
    assert fitted.info["threshold_split"] == "train" and fitted.info["threshold_examples"] == 4
