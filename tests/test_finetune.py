"""gpt1.stages.finetune: variants, decoding, the schedule, splits and cuts, outputs, refusals (heads: test_heads.py).

CPU only: a 200-merge tokenizer and a 2-layer, 32-wide GPT (and a 32-unit LSTM) saved the way `gpt1 pretrain` saves
them, synthetic task data (the smoke profile), 16 training examples per job."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import gpt1.modeling.backbones as backbones
import gpt1.training.finetune_loop as finetune_loop
import gpt1.training.finetuning as finetuning
from gpt1.data.rows import Cut, Example, LoadedSplit, cut_positions
from gpt1.data.taskdata import Part
from gpt1.data.tasks import get_task
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.data.transforms import Transformed
from gpt1.modeling.checkpoints import save_weights, weights_metadata
from gpt1.modeling.heads import decode
from gpt1.modeling.model import GPT, LSTMLM, GPTConfig, LSTMConfig
from gpt1.pipeline.config import finetune_settings, load_config
from gpt1.pipeline.errors import Gpt1Error
from gpt1.pipeline.files import file_record, without_timings, write_json
from gpt1.stages.finetune import CURVE_FIELDS, declared_outputs, finetune_stage
from gpt1.training.finetune_loop import Trainer, chunks, epoch_batches, linear_lr_factor
from gpt1.training.finetuning import finetune_run, prepare_job

REPO = Path(__file__).resolve().parents[1]
SMALL = ["finetune.max_train_examples=16", "finetune.max_eval_examples=16", "finetune.batch_size=8",
         "finetune.eval_batch_size=16"]  # fmt: skip
METRIC_KEYS = {"task", "kind", "variant", "seed", "transfer_layers", "reports", "train", "train_metrics",
               "train_metrics_examples", "train_accuracy", "selection", "epochs", "updates", "warmup_updates",
               "lm_weight", "tokens", "model", "tokenizer", "data"}  # fmt: skip; timings go to MLflow only
REPORT_KEYS = {"metrics", "paper_metric", "split", "evaluated_on", "complement_of_train_cut", "paper_split",
               "is_paper_split", "counts", "description"}  # fmt: skip
COUNT_KEYS = {"train", "eval", "rows_read", "unlabelled_dropped", "capped", "truncated"}


@dataclasses.dataclass(frozen=True)
class Assets:
    tokenizer: Path
    gpt: Path
    lstm: Path
    root: Path


def save_pretrained(model: torch.nn.Module, kind: str, tok: GPT1Tokenizer, out: Path) -> Path:
    """Exactly what `gpt1 pretrain` leaves: model.safetensors (with metadata) + model.json."""
    out.mkdir(parents=True, exist_ok=True)
    save_weights(model, out / "model.safetensors", weights_metadata(kind, model.config, tok.fingerprint(), 0, 0))
    write_json(out / "model.json", {"kind": kind, "config": dataclasses.asdict(model.config),
                                    "tokenizer_sha256": tok.fingerprint(), "step": 0, "tokens": 0,
                                    "weights": file_record(out / "model.safetensors")})
    return out


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Assets:
    from gpt1.data.synthetic.corpus import synthetic_corpus
    from gpt1.data.tokenizer import train

    root = tmp_path_factory.mktemp("finetune")
    tok = train([d["text"] for d in synthetic_corpus(24, seed=1)], "fast", merges=200, limit_alphabet=100)
    tok.save(root / "tokenizer")
    torch.manual_seed(1234)  # not a job seed: the scratch variant must not redraw these very weights
    gpt = GPT(GPTConfig(vocab_size=tok.base_vocab_size, n_ctx=64, n_embd=32, n_layer=2, n_head=2))
    lstm = LSTMLM(LSTMConfig(vocab_size=tok.base_vocab_size, n_ctx=64, n_embd=32, hidden_size=32))
    return Assets(root / "tokenizer", save_pretrained(gpt, "gpt", tok, root / "gpt"),
                  save_pretrained(lstm, "lstm", tok, root / "lstm"), root)


@pytest.fixture(scope="module")
def tok(assets: Assets) -> GPT1Tokenizer:
    return GPT1Tokenizer.load(assets.tokenizer)


def config(*overrides: str):
    return load_config(REPO / "params.yaml", "smoke", overrides=[*SMALL, *overrides])






# ------------------------------------------------------------------------------------------ decoding and schedule


def test_regression_predictions_are_clipped_to_the_score_range() -> None:
    decoded = decode(get_task("stsb"), np.array([[-1.0], [2.5], [7.0]]))
    assert decoded.predictions.tolist() == [0.0, 2.5, 5.0] and decoded.probabilities is None


def test_multiple_choice_probabilities_are_a_softmax_over_the_answers() -> None:
    scores = np.array([[0.5, -1.0, 2.0, 0.0], [3.0, 3.0, -2.0, 1.0]])
    decoded = decode(get_task("race"), scores)
    softmax = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(decoded.probabilities, softmax, rtol=1e-6)
    assert decoded.predictions.tolist() == [2, 0]


def test_lr_warms_up_then_decays_linearly_to_zero() -> None:
    factors = [linear_lr_factor(u, 2, 6) for u in range(6)]
    assert factors == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25])
    assert linear_lr_factor(0, 0, 4) == 1.0


def _part_of_lengths(lengths: list[int]) -> Part:
    examples = [Example(("x",), 0, None, i) for i in range(len(lengths))]
    return Part(LoadedSplit(examples, len(examples), 0, 0), [Transformed([[1] * n], False) for n in lengths],
                "train", None)


def _padded_tokens(part: Part, groups: list[list[int]]) -> int:
    return sum(len(g) * max(len(part.transformed[i].sequences[0]) for i in g) for g in groups)


def test_plain_batches_are_slices_of_one_permutation() -> None:
    """length_group_batches 1 keeps the batches shuffled training always had, draw for draw."""
    part = _part_of_lengths(list(range(1, 38)))
    expected = chunks(torch.randperm(37, generator=torch.Generator().manual_seed(3)).tolist(), 8)
    assert epoch_batches(part, 8, torch.Generator().manual_seed(3), 1) == expected


def test_length_grouped_batches_cover_the_epoch_once_and_pad_less() -> None:
    lengths = [int(n) for n in np.random.default_rng(0).integers(3, 120, size=203)]
    part = _part_of_lengths(lengths)
    plain = epoch_batches(part, 16, torch.Generator().manual_seed(0), 1)
    grouped = epoch_batches(part, 16, torch.Generator().manual_seed(0), 4)
    assert sorted(i for g in grouped for i in g) == list(range(203))  # every example once
    assert len(grouped) == len(plain) == 13 and sum(len(g) < 16 for g in grouped) == 1
    assert _padded_tokens(part, grouped) < 0.8 * _padded_tokens(part, plain)
    again = epoch_batches(part, 16, torch.Generator().manual_seed(0), 4)
    assert grouped == again  # the generator decides everything
    assert grouped != epoch_batches(part, 16, torch.Generator().manual_seed(1), 4)


def test_a_task_in_lr_by_task_trains_at_its_own_rate_in_every_variant(assets: Assets) -> None:
    cfg = finetune_settings(config("finetune.lr=1.0e-3", "finetune.lr_by_task={sst2: 3.0e-4}"))
    for variant in ("pretrained", "scratch", "no_aux"):
        assert prepare_job(cfg, "sst2", variant, 0, assets.gpt, assets.tokenizer).recipe.lr == 3.0e-4
    assert prepare_job(cfg, "rte", "pretrained", 0, assets.gpt, assets.tokenizer).recipe.lr == 1.0e-3


def test_variants_set_lambda_and_weights(assets: Assets) -> None:
    cfg = finetune_settings(config())
    assert prepare_job(cfg, "sst2", "pretrained", 0, assets.gpt, assets.tokenizer).recipe.lm_weight == 0.5
    assert prepare_job(cfg, "sst2", "no_aux", 0, assets.gpt, assets.tokenizer).recipe.lm_weight == 0.0
    # The pretrained variant loads the checkpoint; scratch only its architecture.
    pretrained = prepare_job(cfg, "sst2", "pretrained", 0, assets.gpt, assets.tokenizer).model.lm
    scratch = prepare_job(cfg, "sst2", "scratch", 0, assets.gpt, assets.tokenizer).model.lm
    assert isinstance(pretrained, GPT) and isinstance(scratch, GPT)
    assert pretrained.config == scratch.config
    from safetensors.torch import load_file

    on_disk = load_file(str(assets.gpt / "model.safetensors"))["h.0.attn.c_attn.weight"]
    torch.testing.assert_close(pretrained.h[0].attn.c_attn.weight.detach(), on_disk)
    assert not torch.equal(scratch.h[0].attn.c_attn.weight.detach(), on_disk)
    lstm = prepare_job(cfg, "sst2", "lstm", 0, assets.lstm, assets.tokenizer).model
    assert isinstance(lstm.lm, LSTMLM) and lstm.head.linear.in_features == 32


# ------------------------------------------------------------------------------------------------ end to end


def read_outputs(out: Path) -> tuple[dict, list[dict], list[dict]]:
    metrics = json.loads((out / "metrics.json").read_text())
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    with open(out / "curves.csv") as handle:
        curves = list(csv.DictReader(handle))
    return metrics, predictions, curves


@pytest.mark.parametrize(("task", "variant"), [("sst2", "pretrained"), ("rte", "no_aux"), ("stsb", "scratch"),
                                               ("race", "lstm")])
def test_stage_writes_metrics_predictions_and_curves(assets: Assets, mlflow_env: str, tmp_path: Path,
                                                     task: str, variant: str) -> None:
    out = tmp_path / task
    source = assets.lstm if variant == "lstm" else assets.gpt
    finetune_stage(config(), task, variant, 0, source, assets.tokenizer, out)
    metrics, predictions, curves = read_outputs(out)
    spec = get_task(task)
    assert metrics.keys() >= METRIC_KEYS
    assert (metrics["task"], metrics["variant"], metrics["seed"]) == (task, variant, 0)
    assert set(metrics["reports"]) == {r.name for r in spec.reports}
    for name, block in metrics["reports"].items():
        assert block.keys() >= REPORT_KEYS and block["counts"].keys() >= COUNT_KEYS
        assert set(block["metrics"]) == set(spec.metrics)
        # GLUE's test labels are hidden: validation; RACE's are public and synthetic data has every hub split.
        paper = spec.test_labels == "public"
        assert block["split"] == ("test" if paper else "validation") and block["is_paper_split"] is paper
        lines = [p for p in predictions if p["report"] == name]
        assert len(lines) == block["counts"]["eval"] > 0
    assert len(predictions) == sum(b["counts"]["eval"] for b in metrics["reports"].values())
    assert metrics["train"]["examples"] == 16 and metrics["train"]["cut"] is None
    assert metrics["updates"] == 2 == len(curves) and list(curves[0]) == list(CURVE_FIELDS)
    assert metrics["tokens"] > 0 and not {"wall_seconds", "train_seconds", "tokens_per_second"} & metrics.keys()
    if variant == "no_aux":
        assert metrics["lm_weight"] == 0.0
        assert all(float(c["loss"]) == pytest.approx(float(c["clf_loss"])) for c in curves)
    if task == "stsb":
        assert all(0.0 <= p["prediction"] <= 5.0 and "output" in p for p in predictions)
    else:
        assert all(abs(sum(p["probabilities"]) - 1) < 1e-4 for p in predictions)
    if task == "sst2":  # one MLflow run, tagged, with the loss curve per update and the final metrics
        from mlflow.tracking import MlflowClient

        client = MlflowClient(mlflow_env)
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                  "tags.`gpt1.stage` = 'finetune' and tags.`gpt1.task` = 'sst2'")
        assert len(runs) == 1 and runs[0].data.tags["gpt1.variant"] == "pretrained"
        assert runs[0].data.tags["gpt1.split"] == "validation"
        assert len(client.get_metric_history(runs[0].info.run_id, "loss")) == 2
        assert runs[0].data.metrics["sst2.accuracy"] == metrics["reports"]["sst2"]["metrics"]["accuracy"]
        # Where the process's time went (gpt1.pipeline.clock): the stage's phases (run here in pytest's process, not
        # the CLI's, so without its start and setup; the load holds the time since the test's last mark)
        times = {k: v for k, v in runs[0].data.metrics.items() if k.startswith("time.")}
        phases = ["load", "open", "train", "evaluate", "write", "log"]
        assert sorted(times) == sorted(f"time.{p}_s" for p in [*phases, "process"])
        assert runs[0].data.tags["gpt1.phases"] == ",".join(phases)  # their order: MLflow keeps none
        assert all(v >= 0 for v in times.values()) and times["time.train_s"] > 0
        assert sum(times[f"time.{p}_s"] for p in phases) <= times["time.process_s"] + 0.01  # rounded
    if task == "race":  # RACE-m and RACE-h are the middle and high parts of the one evaluated split
        counts = {r: metrics["reports"][r]["counts"]["eval"] for r in ("race_m", "race_h", "race")}
        assert counts["race_m"] + counts["race_h"] == counts["race"]
        assert {p["config"] for p in predictions if p["report"] == "race_m"} == {"middle"}
        assert metrics["train"]["truncated"] > 0  # articles exceed n_ctx = 64


def test_story_cloze_evaluates_the_complement_of_its_training_cut(assets: Assets) -> None:
    # As with the mirror (Story Cloze's test split absent): train on validation[0:80%], score validation[80%:100%].
    result = finetune_run(finetune_settings(config("finetune.epochs=2")), "story_cloze", "pretrained", 0, assets.gpt,
                          assets.tokenizer, present=("validation",))
    metrics = result.metrics
    report = metrics["reports"]["story_cloze"]
    assert report["split"] == "validation" and report["complement_of_train_cut"] is True
    assert report["evaluated_on"].startswith("validation[80%:100%]")
    assert metrics["train"]["cut"] == {"split": "validation", "fraction": 0.8, "seed": 0,
                                       "description": str(Cut("validation", 0.0, 0.8, 0))}
    trained_rows = set(cut_positions(64, Cut("validation", 0.0, 0.8, 0)).tolist())  # synthetic splits: 64 rows
    evaluated = {p["index"] for p in result.predictions}
    assert evaluated and not evaluated & trained_rows
    assert len(evaluated) == report["counts"]["eval"] == 64 - len(trained_rows)
    selection = metrics["selection"]  # the best epoch on a slice carved from the training examples
    assert selection["best_epoch"] in (1, 2) and len(selection["epoch_scores"]) == 2
    assert metrics["train"]["selection_slice"] == selection["slice_examples"] >= 1
    assert metrics["train"]["examples"] + selection["slice_examples"] == 16


def test_story_cloze_keeps_the_best_epochs_weights(assets: Assets, monkeypatch: pytest.MonkeyPatch) -> None:
    """Selection on the slice: the first of the best-scoring epochs wins, and the report is scored with its weights."""
    slice_scores = iter([0.9, 0.3, 0.9])  # epochs 1-3 on the selection slice: epoch 1 is the first of equals
    states: list[dict[str, torch.Tensor]] = []
    real_predict, real_score = finetune_loop.predict, finetune_loop.score

    def recording_predict(model, *args, **kwargs):
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return real_predict(model, *args, **kwargs)

    def scripted_score(spec, examples, decoded):
        value = next(slice_scores, None)
        return {spec.paper_metric: value} if value is not None else real_score(spec, examples, decoded)

    for module in (finetune_loop, finetuning):  # the loop selects the epoch, the job scores the reports
        monkeypatch.setattr(module, "predict", recording_predict)
        monkeypatch.setattr(module, "score", scripted_score)
    result = finetune_run(finetune_settings(config("finetune.epochs=3")), "story_cloze", "pretrained", 0, assets.gpt,
                          assets.tokenizer, present=("validation",))
    assert result.metrics["selection"]["epoch_scores"] == [0.9, 0.3, 0.9]
    assert result.metrics["selection"]["best_epoch"] == 1
    after_epoch_1, after_epoch_3, reported = states[0], states[2], states[3]
    assert all(torch.equal(reported[k], after_epoch_1[k]) for k in reported)
    assert not all(torch.equal(reported[k], after_epoch_3[k]) for k in reported)


def test_a_cut_of_one_report_split_leaves_the_other_whole(assets: Assets) -> None:
    cut = "finetune.train_cuts.mnli={split: validation_matched, fraction: 0.5, seed: 3}"
    result = finetune_run(finetune_settings(config(cut)), "mnli", "pretrained", 0, assets.gpt, assets.tokenizer)
    reports = result.metrics["reports"]
    assert reports["mnli_m"]["complement_of_train_cut"] and reports["mnli_m"]["evaluated_on"].startswith(
        "validation_matched[50%:100%]")
    assert not reports["mnli_mm"]["complement_of_train_cut"]
    assert reports["mnli_mm"]["evaluated_on"] == "validation_mismatched"
    assert result.metrics["selection"] is None


def test_same_seed_same_run_and_transfer_is_recorded(assets: Assets) -> None:
    cfg = finetune_settings(config())
    runs = [finetune_run(cfg, "sst2", "pretrained", 7, assets.gpt, assets.tokenizer, transfer_layers=1)
            for _ in range(2)]
    assert runs[0].curves == runs[1].curves and runs[0].predictions == runs[1].predictions
    transfer = runs[0].metrics["transfer"]
    assert runs[0].metrics["transfer_layers"] == 1
    assert all(n.startswith("h.1.") for n in transfer["reinitialised"]) and "h.0.ln_1.weight" in transfer["kept"]


@pytest.mark.parametrize("task", ["mrpc", "story_cloze"])
def test_a_job_on_the_encoded_examples_is_the_job_that_loads_them(assets: Assets, mlflow_env: str, tmp_path: Path,
                                                                  task: str) -> None:
    from gpt1.stages.encode_task import encode_task_stage

    cfg = config("model.n_ctx=64")  # the tiny checkpoint's context
    encode_task_stage(cfg, task, assets.tokenizer, tmp_path / "examples")
    loaded = finetune_run(finetune_settings(cfg), task, "pretrained", 3, assets.gpt, assets.tokenizer)
    encoded = finetune_run(finetune_settings(cfg), task, "pretrained", 3, assets.gpt, assets.tokenizer,
                           examples_dir=tmp_path / "examples")
    assert encoded.predictions == loaded.predictions and encoded.curves == loaded.curves
    assert without_timings(encoded.metrics) == without_timings(loaded.metrics)


def test_narrowed_runs_train_and_score_on_fewer_examples(assets: Assets) -> None:
    run = finetune_run(finetune_settings(config()), "sst2", "pretrained", 0, assets.gpt, assets.tokenizer,
                       max_train_examples=6, max_eval_examples=5)
    assert run.metrics["train"]["examples"] == 6 and run.metrics["reports"]["sst2"]["counts"]["eval"] == 5
    assert run.metrics["train_metrics_examples"] == 5 and run.metrics["train"]["capped"] >= 10


# ------------------------------------------------------------------------------------------------ refusals


def assert_refused(out: Path, match: str, *args, **kwargs) -> None:
    with pytest.raises(Gpt1Error, match=match):
        finetune_stage(config(), *args, out_dir=out, **kwargs)
    assert not any(path.exists() for path in declared_outputs(out))
    assert not out.exists() or not any(out.iterdir())


def test_bad_input_is_refused_before_training_and_leaves_no_output(assets: Assets, tmp_path: Path) -> None:
    out = tmp_path / "out"
    common = {"seed": 0, "tokenizer_dir": assets.tokenizer}
    assert_refused(out, "valid: .*sst2", "sst3", "pretrained", pretrained_dir=assets.gpt, **common)
    assert_refused(out, "not fine-tuned", "dprd", "pretrained", pretrained_dir=assets.gpt, **common)
    assert_refused(out, "valid: pretrained, scratch", "sst2", "pretrain", pretrained_dir=assets.gpt, **common)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_refused(out, r"model\.json: missing; run the pretrain stage", "sst2", "pretrained", pretrained_dir=empty,
                   **common)
    assert_refused(out, "needs 'lstm'", "sst2", "lstm", pretrained_dir=assets.gpt, **common)
    assert_refused(out, "gpt1 bpe", "sst2", "pretrained", 0, assets.gpt, tmp_path / "no_tokenizer")
    assert_refused(out, "transfer_layers", "sst2", "scratch", pretrained_dir=assets.gpt, transfer_layers=1,
                   **common)


def test_a_loss_that_is_not_finite_stops_the_job_and_names_the_setting(assets: Assets, mlflow_env: str,
                                                                        tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(Gpt1Error, match=r"update \d+: the loss is (nan|inf|-inf); lower finetune\.lr"):
        finetune_stage(config("finetune.lr=1.0e30"), "sst2", "pretrained", 0, assets.gpt, assets.tokenizer, out)
    assert not out.exists() or not any(out.iterdir())


def test_mlflow_failing_after_training_leaves_the_earlier_outputs_as_they_were(
    assets: Assets, mlflow_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    import gpt1.stages.finetune as stage

    out = tmp_path / "out"
    finetune_stage(config(), "sst2", "pretrained", 0, assets.gpt, assets.tokenizer, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "mlruns/model")

    monkeypatch.setattr(stage, "_log_model", full_disk)
    with pytest.raises(OSError, match="No space left"):
        finetune_stage(config("finetune.lr=2.0e-3"), "sst2", "pretrained", 0, assets.gpt, assets.tokenizer, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # other results, never published


def test_vocabulary_mismatch_is_refused(assets: Assets, tok: GPT1Tokenizer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    for extra, match in ((-1, "use the tokenizer the model was pre-trained with"), (3, "no room for the specials")):
        model = GPT(GPTConfig(vocab_size=tok.base_vocab_size + extra, n_ctx=64, n_embd=32, n_layer=1, n_head=2))
        folder = save_pretrained(model, "gpt", tok, tmp_path / f"vocab{extra}")
        assert_refused(out, match, "sst2", "pretrained", 0, folder, assets.tokenizer)
    # Same size, other tokenizer: the fingerprint in model.json gives it away.
    meta = json.loads((assets.gpt / "model.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    for name in ("model.safetensors",):
        (other / name).write_bytes((assets.gpt / name).read_bytes())
    write_json(other / "model.json", {**meta, "tokenizer_sha256": "0" * 64})
    with pytest.raises(Gpt1Error, match="tokenizer sha256"):
        finetune_stage(config(), "sst2", "scratch", 0, other, assets.tokenizer, out)


def test_a_checkpoint_the_specials_cannot_fit_is_refused(tok: GPT1Tokenizer) -> None:
    model = GPT(GPTConfig(vocab_size=tok.base_vocab_size, n_ctx=3, n_embd=32, n_layer=1, n_head=2))
    with pytest.raises(Gpt1Error, match=r"m\.json: n_ctx=3 leaves no room for text beside the 3 specials"):
        backbones.check_pair(model, {}, tok, "m.json", "tok/")
    moved = SimpleNamespace(base_vocab_size=tok.base_vocab_size, specials={n: i for i, n in enumerate(tok.specials)})
    with pytest.raises(Gpt1Error, match=r"tok/: the tokenizer's specials are .* expected .* right after its"):
        backbones.check_pair(model, {}, moved, "m.json", "tok/")


def test_story_cloze_needs_an_example_beyond_its_selection_slice() -> None:
    from gpt1.data.taskdata import carve_selection

    with pytest.raises(Gpt1Error, match=r"task story_cloze: 1 training example.* leave none after the 1-example "
                                        r"selection slice; raise finetune\.max_train_examples"):
        carve_selection(get_task("story_cloze"), _part_of_lengths([5]))
    train, selection = carve_selection(get_task("story_cloze"), _part_of_lengths([5] * 20))
    assert (len(train.examples), len(selection.examples)) == (18, 2)


def test_a_failure_during_the_run_keeps_the_previous_outputs(assets: Assets, mlflow_env: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs are replaced only by the final renames: a run that fails leaves an earlier run's files as they were,
    and no temp file."""
    import gpt1.training.finetuning as finetuning

    out = tmp_path / "out"
    out.mkdir()
    for path in declared_outputs(out):
        path.write_text("old")

    def broken(job):
        raise RuntimeError("killed during evaluation")

    monkeypatch.setattr(finetuning, "evaluate_reports", broken)
    with pytest.raises(RuntimeError, match="killed"):
        finetune_stage(config(), "sst2", "pretrained", 0, assets.gpt, assets.tokenizer, out)
    assert sorted(out.iterdir()) == sorted(declared_outputs(out))
    assert all(path.read_text() == "old" for path in declared_outputs(out))


def test_bad_task_data_is_refused(assets: Assets, tmp_path: Path) -> None:
    # A cut of a split the task does not have: rows.load_examples names the task and the valid splits.
    cut = "finetune.train_cuts.sst2={split: dev, fraction: 0.5, seed: 0}"
    with pytest.raises(Gpt1Error, match="task sst2: split 'dev'"):
        finetune_stage(config(cut), "sst2", "pretrained", 0, assets.gpt, assets.tokenizer, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_released_variant_reads_a_hugging_face_folder_and_the_released_bpe(tmp_path: Path) -> None:
    from gpt1.modeling.backbones import reference_bpe
    from gpt1.modeling.hf import save_hf_dir

    reference = reference_bpe()
    if not reference.is_dir():
        pytest.skip(f"{reference} is absent")
    torch.manual_seed(0)
    tiny = GPT(GPTConfig(vocab_size=40478, n_ctx=64, n_embd=16, n_layer=1, n_head=2))
    hf_dir = save_hf_dir(tiny, tmp_path / "hf")
    result = finetune_run(finetune_settings(config()), "sst2", "released", 0, hf_dir, None)
    assert result.metrics["tokenizer"]["source"] == str(reference)
    assert result.metrics["model"]["config"]["vocab_size"] == 40478 + 3
    assert result.metrics["reports"]["sst2"]["counts"]["eval"] == 16



SHARED_MIRROR = REPO.parent / "shared" / "data"


@pytest.mark.mirror
@pytest.mark.skipif(not SHARED_MIRROR.is_dir(), reason="the shared data mirror is absent")
def test_story_cloze_on_the_mirror_scores_the_rest_of_validation(assets: Assets, monkeypatch) -> None:
    import pyarrow.parquet as pq

    # The mirror holds no Story Cloze test split: train on validation[0:80%], score validation[80%:100%].
    monkeypatch.setenv("GPT1_DATA_MIRROR", str(SHARED_MIRROR))
    cfg = load_config(REPO / "params.yaml", "default", overrides=SMALL)
    result = finetune_run(finetune_settings(cfg), "story_cloze", "pretrained", 0, assets.gpt, assets.tokenizer)
    report = result.metrics["reports"]["story_cloze"]
    assert report["evaluated_on"].startswith("validation[80%:100%]") and not report["is_paper_split"]
    rows = pq.read_metadata(SHARED_MIRROR / "LSDSem" / "story_cloze" / "2016" / "validation.parquet").num_rows
    trained = set(cut_positions(rows, Cut("validation", 0.0, 0.8, 0)).tolist())
    assert result.predictions and not {p["index"] for p in result.predictions} & trained


def test_finetune_dropout_replaces_the_pretrained_models_or_keeps_it(assets: Assets) -> None:
    kept = prepare_job(finetune_settings(config()), "sst2", "pretrained", 0, assets.gpt, assets.tokenizer).model.lm
    pretrained_p = kept.config.resid_pdrop
    assert all(m.p == pretrained_p for m in kept.modules() if isinstance(m, torch.nn.Dropout))
    cfg = finetune_settings(config("finetune.dropout=0.35"))
    for variant, folder in (("pretrained", assets.gpt), ("scratch", assets.gpt), ("lstm", assets.lstm)):
        lm = prepare_job(cfg, "sst2", variant, 0, folder, assets.tokenizer).model.lm
        assert {m.p for m in lm.modules() if isinstance(m, torch.nn.Dropout)} == {0.35}, variant


def test_the_trainer_groups_batches_as_the_profile_says_and_steps_with_fused_adamw(assets: Assets,
                                                                                   monkeypatch) -> None:
    job = prepare_job(finetune_settings(config("finetune.length_group_batches=3")), "sst2", "pretrained", 0,
                      assets.gpt, assets.tokenizer)
    assert job.recipe.length_group_batches == 3
    trainer = Trainer(job.model, job.recipe, job.train, 0)
    assert trainer.optimizer.defaults["fused"] is True  # CPU: the fused kernels (bench/optimizer_step.py)
    seen: list[list[int]] = []
    # Record the batches the trainer forms, without training on them.
    monkeypatch.setattr(finetune_loop, "batches", lambda part, groups, regression: seen.extend(groups) or iter(()))
    trainer.epoch(0, 0, "test")
    assert seen == epoch_batches(job.train, job.recipe.batch_size, torch.Generator().manual_seed(0), 3)


# ------------------------------------------------------------------------------------------ the CPU path, pinned

# sha256 of a job's record (timings aside), predictions, curves and final weights in the pinned mode, computed
# before the CUDA fast path existed (the LSTM's again since its layer Function, 2026-11-27): the CPU path must keep its
# bits whatever the fast path does and whatever the vendor of the x86-64 (written on an AMD EPYC; issue 42).
CPU_DIGESTS = {
    ("sst2", "pretrained"): "0501bd151ed8a620c7a2e8df3a015796681d39927db653725446ea486aa39d08",
    ("race", "pretrained"): "5ca2cfacef9810e75787c36b7c901be0556f0a7dbec3bf5bc967d7e3ca4ce331",
    ("stsb", "scratch"): "7010c9eef4af4848ffb84e3f1b2a0ebc6a013e877547daaf42d2118119b9adf1",
    ("rte", "no_aux"): "a1551527c29243e8bfc402fccafbaa4e5d24d181b86077a864e50783517e5c3f",
    ("mrpc", "lstm"): "3c080c3ea699c6731b09cb59991806e1be97dbc484a0a22c1b3ad637f31c0ba1",
}
DIGEST_SETTINGS = ("finetune.max_train_examples=20", "finetune.epochs=2", "finetune.length_group_batches=2")


def job_digest(job: finetuning.FinetuneJob) -> str:
    """The job trained and scored, hashed: its scores (the record's other keys name the test's temporary folders),
    predictions, curves, then its weights."""
    result = finetuning.finetune_job(job)
    scores = {key: result.metrics[key] for key in ("reports", "train_metrics", "updates", "tokens", "final_loss")}
    digest = hashlib.sha256(json.dumps([scores, result.predictions, result.curves], sort_keys=True).encode())
    for name, tensor in sorted(job.model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize(("task", "variant"), sorted(CPU_DIGESTS))
def test_the_cpu_path_keeps_its_bits(assets: Assets, task: str, variant: str) -> None:
    folder = assets.lstm if variant == "lstm" else assets.gpt
    job = prepare_job(finetune_settings(config(*DIGEST_SETTINGS)), task, variant, 0, folder, assets.tokenizer)
    assert job_digest(job) == CPU_DIGESTS[task, variant]


def test_a_job_takes_the_fast_path_only_where_asked_and_it_runs_whole(assets: Assets, monkeypatch) -> None:
    """The profile's finetune.cuda_graphs (absent: auto, CUDA only) reaches the trainer; forced on a CPU the job
    trains through dynamo (tests/test_finetune_graphs.py) and writes a record, curves and predictions of the same
    shape (their numbers differ by the dropout's draws)."""
    took_fast_path = []

    class Recording(finetuning.Trainer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            took_fast_path.append(self.fast is not None)

    monkeypatch.setattr(finetuning, "Trainer", Recording)
    job = prepare_job(finetune_settings(config(*DIGEST_SETTINGS)), "sst2", "pretrained", 0, assets.gpt,
                      assets.tokenizer)
    assert job.graphs == finetuning.CUDA_GRAPHS_DEFAULT == "auto"
    eager = finetuning.finetune_job(job)
    forced = prepare_job(finetune_settings(config(*DIGEST_SETTINGS)), "sst2", "pretrained", 0, assets.gpt,
                         assets.tokenizer)
    fast = finetuning.finetune_job(dataclasses.replace(forced, graphs=True))
    assert took_fast_path == [False, True]
    assert set(fast.metrics) == set(eager.metrics) and len(fast.predictions) == len(eager.predictions)
    assert [list(r) for r in fast.curves] == [list(r) for r in eager.curves]
    assert [r["lr"] for r in fast.curves] == [r["lr"] for r in eager.curves]
    # not the same losses: the fast path draws its dropout masks inside the graph, from other random numbers
    assert [r["loss"] for r in fast.curves] == pytest.approx([r["loss"] for r in eager.curves], rel=0.05)
