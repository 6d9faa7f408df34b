"""gpt1.stages.pretrain: schedule, decay groups, snapshots, resume (after a real kill -9), refusals, NaN stop, DDP,
export.

CPU only, tiny models from tests/conftest.py. The subprocess tests (kill + resume, torchrun) are marked slow:
they pay python + torch + mlflow start-up several times."""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, TINY, TinyData, gpt1_command, tiny_config
from safetensors.torch import load_file

from gpt1.data.ids import WindowSampler
from gpt1.modeling.checkpoints import load_pretrained
from gpt1.modeling.model import GPT, LSTMLM, GPTConfig, LSTMConfig, flops_per_token
from gpt1.pipeline import layout
from gpt1.pipeline.errors import Gpt1Error
from gpt1.pipeline.files import file_record, sha256_file
from gpt1.stages.pretrain import declared_outputs, pretrain_stage
from gpt1.training.pretraining import (
    cosine_lr_factor,
    make_optimizer,
    make_plan,
    make_scheduler,
    micro_seed,
    snapshot_steps,
)
from gpt1.training.resume import LATEST

PRETRAIN = tiny_config().section("pretrain")


def read_curves(out: Path) -> list[dict[str, float]]:
    with open(out / "curves.csv") as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)]


def pretrain_args(data: TinyData, out: Path, *overrides: str) -> list[str]:
    """`gpt1 pretrain` with the repository's params.yaml, the smoke profile and --set overrides making it tiny."""
    args = ["pretrain", "--params", str(REPO / "params.yaml"), "--profile", "smoke", "--model", "gpt",
            "--ids", str(data.ids), "--tokenizer", str(data.tokenizer), "--out", str(out)]
    return args + [f"--set={o}" for o in (*TINY, *overrides)]


def run_cli(env: dict[str, str], args: list[str], launcher: list[str] | None = None) -> subprocess.CompletedProcess:
    command = [*launcher, "-m", "gpt1", *args] if launcher else gpt1_command(*args)
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def assert_bit_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.fixture
def one_thread():
    """In-process runs compared bit for bit with single-threaded subprocesses use one thread too."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------------------------------------ pure pieces


def test_lr_warms_up_linearly_from_zero_then_cosine_to_zero() -> None:
    warmup, total = 10, 110
    assert cosine_lr_factor(0, warmup, total) == 0.0
    assert cosine_lr_factor(5, warmup, total) == pytest.approx(0.5)
    assert cosine_lr_factor(warmup, warmup, total) == pytest.approx(1.0)
    assert cosine_lr_factor(60, warmup, total) == pytest.approx(0.5)  # half-way through the cosine
    assert cosine_lr_factor(total, warmup, total) == pytest.approx(0.0, abs=1e-12)
    ramp = [cosine_lr_factor(s, warmup, total) for s in range(warmup + 1)]
    decay = [cosine_lr_factor(s, warmup, total) for s in range(warmup, total + 1)]
    assert ramp == sorted(ramp) and decay == sorted(decay, reverse=True)
    # The scheduler the loop uses gives exactly lr * factor.
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=3e-4)
    sched = make_scheduler(opt, warmup, total)
    seen = []
    for _ in range(total):
        seen.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert seen == pytest.approx([3e-4 * cosine_lr_factor(s, warmup, total) for s in range(total)])


@pytest.mark.parametrize("model", [
    GPT(GPTConfig(vocab_size=50, n_ctx=8, n_embd=16, n_layer=2, n_head=2)),
    LSTMLM(LSTMConfig(vocab_size=50, n_ctx=8, n_embd=16, hidden_size=24)),
])  # fmt: skip
def test_weight_decay_only_on_matrices(model: torch.nn.Module) -> None:
    opt = make_optimizer(model, PRETRAIN, torch.device("cpu"))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == PRETRAIN["weight_decay"] and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(p.dim() >= 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"])  # biases and LayerNorm gains/biases
    assert any(names[id(p)].endswith("bias") for p in no_decay["params"])
    if isinstance(model, GPT):
        assert {names[id(p)] for p in no_decay["params"]} >= {"h.0.ln_1.weight", "h.1.ln_2.weight"}
        assert "tokens_embed.weight" in {names[id(p)] for p in decay["params"]}
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


@pytest.mark.parametrize(("total", "count"), [(1500, 8), (40, 4), (10, 10), (7, 3), (1, 1), (100_000, 10)])
def test_snapshot_steps_are_unique_log_spaced_and_end_at_total(total: int, count: int) -> None:
    steps = snapshot_steps(total, count)
    assert len(steps) == count and steps == sorted(set(steps))
    assert steps[-1] == total and steps[0] >= 1
    if count > 1:
        assert steps[0] == 1
    if total >= 10 ** (count / 4):  # room to be log-spaced: the ratios are about equal
        ratios = [b / a for a, b in itertools.pairwise(steps[1:])]
        expected = total ** (1 / (count - 1))
        assert all(abs(r / expected - 1) < 0.2 for r in ratios)
    assert snapshot_steps(1500, 8) == [1, 3, 8, 23, 65, 186, 528, 1500]


@pytest.mark.parametrize(("world_size", "micro", "accum"), [(1, 32, 2), (2, 32, 1), (4, 16, 1), (8, 8, 1)])
def test_micro_batch_caps_each_process_share(world_size, micro, accum) -> None:
    """The paper profile's 64 sequences (micro-batches of 32) on 1 to 8 GPUs, as docs/operations.md's torchrun lines
    run it."""
    from gpt1.pipeline.config import load_config

    paper = load_config(REPO / "params.yaml", "paper").section("pretrain")
    plan = make_plan(paper, 512, 10**9, world_size)
    assert (plan.batch_size, plan.micro_batch, plan.accum_steps) == (64, micro, accum)
    assert plan.micro_batch * plan.accum_steps * world_size == plan.batch_size


def test_plan_counts_updates_and_names_keys_on_errors() -> None:
    p = dict(PRETRAIN, epochs=2, max_steps=None, batch_size=8, micro_batch_size=2)
    plan = make_plan(p, n_ctx=16, train_tokens=1000, world_size=2)
    assert plan.total_steps == math.floor(2 * 1000 / (8 * 16)) and plan.accum_steps == 2 and plan.per_rank == 4
    assert make_plan(dict(p, max_steps=3), 16, 1000, 1).total_steps == 3
    with pytest.raises(Gpt1Error, match=r"pretrain\.batch_size=8 does not split evenly over 3 processes"):
        make_plan(p, 16, 1000, world_size=3)
    with pytest.raises(Gpt1Error, match=r"pretrain\.micro_batch_size=16 does not divide the 24 sequences"):
        make_plan(dict(p, batch_size=48, micro_batch_size=16), 16, 10_000, world_size=2)
    with pytest.raises(Gpt1Error, match=r"pretrain\.epochs.* = 0 updates"):
        make_plan(p, 16, 50, 1)
    with pytest.raises(Gpt1Error, match=r"pretrain\.snapshots=3 .* has 2"):
        make_plan(dict(p, max_steps=2), 16, 1000, 1)


def test_sampler_state_round_trips_and_flops_formula() -> None:
    a = WindowSampler(1000, 16, seed=3)
    a.draw(5)
    state = a.state_dict()
    expected = a.draw(7)
    b = WindowSampler(1000, 16, seed=99)
    b.load_state_dict(state)
    assert torch.equal(b.draw(7), expected)
    assert int(WindowSampler(17, 16, 0).draw(100).max()) == 0  # 17 tokens: exactly one window of n_ctx + 1
    cfg = GPTConfig(vocab_size=50, n_ctx=8, n_embd=16, n_layer=2, n_head=2)
    model = GPT(cfg)
    n = sum(p.numel() for p in model.parameters()) - 8 * 16  # position embedding: a lookup
    assert flops_per_token(model) == 6 * n + 6 * 2 * 8 * 16


# ------------------------------------------------------------------------------------------------ a finished run


def test_finished_run_leaves_exactly_the_declared_outputs(trained_gpt: Path) -> None:
    files = {p for p in trained_gpt.rglob("*") if p.is_file()}
    assert files == set(declared_outputs(trained_gpt, 3))
    assert not (trained_gpt / layout.RESUME).exists()
    meta = json.loads((trained_gpt / "model.json").read_text())
    assert meta["kind"] == "gpt" and meta["step"] == 12 and meta["tokens"] == 12 * 4 * 16
    assert meta["config"]["n_embd"] == 16
    metrics = json.loads((trained_gpt / "metrics.json").read_text())
    assert metrics["steps"] == 12 and metrics["tokens"] == 768 and metrics["flops"] > 0
    assert metrics["val_perplexity"] == pytest.approx(math.exp(metrics["val_loss"]))
    curves = read_curves(trained_gpt)
    assert [r["step"] for r in curves] == [4, 8, 12]
    index = json.loads((trained_gpt / "snapshots" / "index.json").read_text())
    assert [s["step"] for s in index] == snapshot_steps(12, 3) == [1, 3, 12]
    assert index[-1]["val_loss"] == pytest.approx(metrics["val_loss"])
    # every snapshot is evaluated where it is taken (steps 1 and 3 are no eval_every step): its own loss each
    assert all(math.isfinite(s["val_loss"]) for s in index) and len({s["val_loss"] for s in index}) == 3
    assert_bit_equal(weights(trained_gpt / "snapshots" / "02.safetensors"), weights(trained_gpt / "model.safetensors"))


def test_export_to_hf_gives_the_same_logits(trained_gpt: Path, tmp_path: Path, mlflow_env: str) -> None:
    from transformers import OpenAIGPTLMHeadModel

    from gpt1.modeling.hf import HF_EXPORT_FILES
    from gpt1.stages.export import export_stage

    out = export_stage(tiny_config(), trained_gpt, tmp_path / "hf", "hf")
    assert all((out / name).is_file() for name in HF_EXPORT_FILES)
    hf = OpenAIGPTLMHeadModel.from_pretrained(out).eval()
    ours, _ = load_pretrained(trained_gpt)
    idx = torch.randint(0, ours.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(hf(idx).logits, ours(idx)[0], atol=1e-5)
        back, meta = load_pretrained(out)  # an HF folder loads too
        assert torch.allclose(back(idx)[0], ours(idx)[0], atol=1e-6) and meta["kind"] == "gpt"


def test_lstm_trains_on_its_own_batch_and_refuses_hf_export(
    tiny_data: TinyData, tmp_path: Path, mlflow_env: str
) -> None:
    from gpt1.stages.export import export_stage

    # pretrain.by_model.lstm sets the LSTM's batch and updates; the GPT's (max_steps=9) do not apply to it.
    cfg = tiny_config("pretrain.max_steps=9", "pretrain.snapshots=2",
                      "pretrain.by_model={lstm: {max_steps: 4, batch_size: 2, micro_batch_size: 2}}")
    metrics = pretrain_stage(cfg, "lstm", tiny_data.ids, tiny_data.tokenizer, tmp_path / "lstm")
    assert metrics["steps"] == 4 and math.isfinite(metrics["val_loss"])
    # Where the process's time went (gpt1.pipeline.clock): the stage's phases, the loop's among them (in pytest's
    # process: without the CLI's start and setup)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_env)
    [run] = client.search_runs([e.experiment_id for e in client.search_experiments()],
                               "tags.`gpt1.stage` = 'pretrain-lstm'")
    phases = run.data.tags["gpt1.phases"].split(",")  # in the order first marked: a snapshot follows update 1
    assert phases[:3] == ["load", "open", "first_update"] and phases[-2:] == ["write", "log"]
    assert sorted(phases[3:-2]) == ["evaluate", "save", "update"]
    assert all(run.data.metrics[f"time.{p}_s"] >= 0 for p in [*phases, "process"])
    assert metrics["tokens"] == 4 * 2 * cfg.section("model")["n_ctx"]
    model, meta = load_pretrained(tmp_path / "lstm")
    assert isinstance(model, LSTMLM) and meta["kind"] == "lstm"
    with pytest.raises(Gpt1Error, match="no OpenAIGPT counterpart"):
        export_stage(cfg, tmp_path / "lstm", tmp_path / "hf", "hf")


def test_a_gradient_clip_bounds_the_update_only_when_it_bites(tiny_data: TinyData, tmp_path: Path,
                                                               mlflow_env: str) -> None:
    """pretrain.grad_clip: a bound far above the gradients' norm changes no bit; one far below it shrinks the
    update (the default profile clips at 1.0; smoke does not clip)."""
    def trained(clip: str, lr: str = "1.0e-3") -> dict[str, torch.Tensor]:
        out = tmp_path / f"{clip}-{lr}"
        pretrain_stage(tiny_config("pretrain.max_steps=2", "pretrain.snapshots=2", f"pretrain.grad_clip={clip}",
                                   f"pretrain.lr={lr}", "pretrain.warmup_steps=0"),
                       "gpt", tiny_data.ids, tiny_data.tokenizer, out)
        return weights(out / "model.safetensors")

    initial = trained("null", lr="1.0e-30")  # the initial weights, each within about 1e-30 of them

    def moved(trained_weights: dict[str, torch.Tensor]) -> float:
        return sum(float((trained_weights[k] - initial[k]).abs().sum()) for k in initial)

    unclipped = trained("null")
    assert_bit_equal(trained("1.0e+9"), unclipped)
    # Clipped to 1e-9, the gradients fall far below AdamW's eps (1e-8), so each step is a small part of lr
    assert 0 < moved(trained("1.0e-9")) < moved(unclipped) / 5


# ------------------------------------------------------------------------------------------------ refusals


def _copy_ids(data: TinyData, dest: Path) -> Path:
    shutil.copytree(data.ids, dest)
    return dest


def _edit_header(path: Path, **changes: object) -> None:
    header = json.loads(path.read_text())
    header.update(changes)
    path.write_text(json.dumps(header))


def test_tokenizer_mismatch_is_refused_before_training(tiny_data: TinyData, tmp_path: Path, mlflow_env: str) -> None:
    ids = _copy_ids(tiny_data, tmp_path / "ids")
    _edit_header(ids / "train.json", tokenizer_sha256="0" * 64)
    with pytest.raises(Gpt1Error, match=r"train\.json: encoded with tokenizer 000000000000"):
        pretrain_stage(tiny_config(), "gpt", ids, tiny_data.tokenizer, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_vocabulary_larger_than_the_model_is_refused(tiny_data: TinyData, tmp_path: Path, mlflow_env: str) -> None:
    ids = _copy_ids(tiny_data, tmp_path / "ids")
    _edit_header(ids / "validation.json", vocab_size=60_000)
    with pytest.raises(Gpt1Error, match=r"validation\.bin: header vocab_size 60000 exceeds the model's"):
        pretrain_stage(tiny_config(), "gpt", ids, tiny_data.tokenizer, tmp_path / "out")


def test_ids_shorter_than_one_window_are_refused(tiny_data: TinyData, tmp_path: Path, mlflow_env: str) -> None:
    import numpy as np

    ids = _copy_ids(tiny_data, tmp_path / "ids")
    short = np.fromfile(ids / "validation.bin", dtype=np.uint16)[:10]
    short.tofile(ids / "validation.bin")
    _edit_header(ids / "validation.json", tokens=10, **file_record(ids / "validation.bin"))
    with pytest.raises(Gpt1Error, match=r"validation\.bin: 10 tokens, fewer than one window of model\.n_ctx \+ 1 = 17"):
        pretrain_stage(tiny_config(), "gpt", ids, tiny_data.tokenizer, tmp_path / "out")


def test_invalid_model_config_is_refused(tiny_data: TinyData, tmp_path: Path, mlflow_env: str) -> None:
    with pytest.raises(Gpt1Error, match=r"pretrain\.snapshots=20 .* has 12"):
        pretrain_stage(tiny_config("pretrain.snapshots=20"), "gpt", tiny_data.ids, tiny_data.tokenizer, tmp_path)
    with pytest.raises(Gpt1Error, match="--model 'rnn'"):
        pretrain_stage(tiny_config(), "rnn", tiny_data.ids, tiny_data.tokenizer, tmp_path)


# ------------------------------------------------------------------------------------------------ NaN, checkpoints


@pytest.fixture
def nan_stopped_run(tiny_data: TinyData, tmp_path: Path, mlflow_env: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run whose 6th update gets a NaN loss: it stops with the step named, the checkpoint of step 4 stays."""
    original = GPT.forward
    calls = {"train": 0}

    def poisoned(self, idx, targets=None):
        logits, loss = original(self, idx, targets)
        if self.training:
            calls["train"] += 1
            if calls["train"] == 6:
                loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(GPT, "forward", poisoned)
    out = tmp_path / "out"
    with pytest.raises(Gpt1Error, match=r"step 6: the training loss is nan.*checkpoint \(step 4\) is kept"):
        pretrain_stage(tiny_config(), "gpt", tiny_data.ids, tiny_data.tokenizer, out)
    monkeypatch.setattr(GPT, "forward", original)
    return out


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def finished_copy(trained_gpt: Path, tmp_path: Path) -> Path:
    """A writable copy of a finished run, to be overwritten by a failing one."""
    return Path(shutil.copytree(trained_gpt, tmp_path / "finished"))


def test_corrupt_token_ids_are_refused_and_the_finished_run_kept(
    finished_copy: Path, tiny_data: TinyData, tmp_path: Path, mlflow_env: str
) -> None:
    import numpy as np

    ids = _copy_ids(tiny_data, tmp_path / "ids")
    values = np.fromfile(ids / "train.bin", dtype=np.uint16)
    values[len(values) // 2] = 65_000  # size and header intact, one id past the vocabulary
    values.tofile(ids / "train.bin")
    _edit_header(ids / "train.json", **file_record(ids / "train.bin"))  # even with a matching record
    before = _digests(finished_copy)
    with pytest.raises(Gpt1Error, match=r"train\.bin: holds token id 65000, but the vocabulary has \d+ ids"):
        pretrain_stage(tiny_config(), "gpt", ids, tiny_data.tokenizer, finished_copy)
    assert _digests(finished_copy) == before


def test_changed_token_ids_are_refused_by_their_sha256(tiny_data: TinyData, tmp_path: Path, mlflow_env: str) -> None:
    ids = _copy_ids(tiny_data, tmp_path / "ids")
    data = bytearray((ids / "train.bin").read_bytes())
    data[10] ^= 1
    (ids / "train.bin").write_bytes(bytes(data))
    with pytest.raises(Gpt1Error, match=r"train\.bin: sha256 differs from the one .*train\.json records.*gpt1 encode"):
        pretrain_stage(tiny_config(), "gpt", ids, tiny_data.tokenizer, tmp_path / "out")


def test_nan_loss_keeps_the_finished_run(
    finished_copy: Path, tiny_data: TinyData, mlflow_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _digests(finished_copy)
    original = GPT.forward

    def poisoned(self: GPT, idx: torch.Tensor, targets: torch.Tensor | None = None) -> tuple:
        logits, loss = original(self, idx, targets)
        return logits, loss * float("nan")

    monkeypatch.setattr(GPT, "forward", poisoned)
    with pytest.raises(Gpt1Error, match=r"step 1: the training loss is nan"):
        pretrain_stage(tiny_config(), "gpt", tiny_data.ids, tiny_data.tokenizer, finished_copy)
    assert {k: v for k, v in _digests(finished_copy).items() if not k.startswith(layout.RESUME)} == before


def test_full_disk_while_writing_outputs_keeps_the_finished_run(
    finished_copy: Path, tiny_data: TinyData, mlflow_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    import gpt1.stages.pretrain as pretrain_module

    def full(*_args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    before = _digests(finished_copy)
    monkeypatch.setattr(pretrain_module, "_write_curves", full)  # fails after the weights' temp file is written
    with pytest.raises(OSError, match="No space left"):
        pretrain_stage(tiny_config(), "gpt", tiny_data.ids, tiny_data.tokenizer, finished_copy)
    after = _digests(finished_copy)
    assert {k: v for k, v in after.items() if not k.startswith(layout.RESUME)} == before


def test_nan_loss_stops_the_run_and_keeps_the_last_checkpoint(nan_stopped_run: Path) -> None:
    pointer = json.loads((nan_stopped_run / layout.RESUME / LATEST).read_text())
    assert pointer["step"] == 4
    assert not (nan_stopped_run / "model.safetensors").exists() and not (nan_stopped_run / "metrics.json").exists()


def test_resume_in_process_finishes_like_an_uninterrupted_run(
    nan_stopped_run: Path, tiny_data: TinyData, one_thread: None, tmp_path: Path
) -> None:
    # The uninterrupted reference is made with one thread too (the session's run may have used more).
    reference = tmp_path / "reference"
    pretrain_stage(tiny_config(), "gpt", tiny_data.ids, tiny_data.tokenizer, reference)
    fresh = tmp_path / "fresh"  # the NaN run was made with the session's threads; redo it single-threaded
    shutil.copytree(nan_stopped_run, fresh)
    metrics = pretrain_stage(tiny_config(), "gpt", tiny_data.ids, tiny_data.tokenizer, fresh)
    assert metrics["steps"] == 12 and not (fresh / layout.RESUME).exists()
    for resumed, straight in zip(read_curves(fresh), read_curves(reference), strict=True):
        assert resumed == pytest.approx(straight, rel=1e-5)


@pytest.mark.parametrize(("override", "key", "old", "new"), [
    ("pretrain.lr=0.002", "pretrain.lr", "0.001", "0.002"),
    ("model.n_embd=32", "model.n_embd", "16", "32"),
])  # fmt: skip
def test_checkpoint_of_other_settings_is_refused(
    nan_stopped_run: Path, tiny_data: TinyData, override: str, key: str, old: str, new: str
) -> None:
    with pytest.raises(Gpt1Error, match=rf"made with {key}={old}, this run has {key}={new}"):
        pretrain_stage(tiny_config(override), "gpt", tiny_data.ids, tiny_data.tokenizer, nan_stopped_run)
    assert (nan_stopped_run / layout.RESUME / LATEST).is_file()  # refused, not deleted


@pytest.mark.parametrize("damage", ["truncate-weights", "truncate-state", "flip-state", "garble-pointer"])
def test_truncated_or_corrupt_checkpoint_is_refused(nan_stopped_run: Path, tiny_data: TinyData, damage: str) -> None:
    resume = nan_stopped_run / layout.RESUME
    pointer = json.loads((resume / LATEST).read_text())
    if damage == "garble-pointer":
        (resume / LATEST).write_text('{"step": 4, "sett')
    else:
        path = resume / pointer["weights" if damage == "truncate-weights" else "state"]["name"]
        data = bytearray(path.read_bytes())
        if damage.startswith("truncate"):
            data = data[: len(data) // 2]
        else:
            data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    expected = {"truncate-weights": "truncated", "truncate-state": "truncated", "flip-state": "sha256 differs",
                "garble-pointer": "not valid JSON"}[damage]
    with pytest.raises(Gpt1Error, match=expected):
        pretrain_stage(tiny_config(), "gpt", tiny_data.ids, tiny_data.tokenizer, nan_stopped_run)


# ------------------------------------------------------------------------------------------------ subprocesses


LONG = ["pretrain.max_steps=400", "pretrain.checkpoint_every=20", "pretrain.eval_every=100"]


@pytest.mark.slow
def test_resume_after_kill_9_is_bit_identical(
    tiny_data: TinyData, subprocess_env: dict[str, str], tmp_path: Path, mlflow_env: str, one_thread: None
) -> None:
    out = tmp_path / "killed"
    args = pretrain_args(tiny_data, out, *LONG)
    child = subprocess.Popen(gpt1_command(*args), env=subprocess_env, cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / layout.RESUME / LATEST).exists():
            assert child.poll() is None, f"finished before its first checkpoint: {child.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert not (out / "model.safetensors").exists()  # a killed run leaves nothing that looks finished
    resumed = run_cli(subprocess_env, args)  # the same command again
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    step = int(resumed.stdout.split("resuming from the checkpoint at step ")[1].split()[0])
    assert 0 < step < 400
    reference = tmp_path / "uninterrupted"
    pretrain_stage(tiny_config(*LONG), "gpt", tiny_data.ids, tiny_data.tokenizer, reference)
    assert_bit_equal(weights(out / "model.safetensors"), weights(reference / "model.safetensors"))
    for i in range(3):
        name = f"snapshots/{i:02d}.safetensors"
        assert_bit_equal(weights(out / name), weights(reference / name))
    assert read_curves(out) == read_curves(reference)
    assert {p for p in out.rglob("*") if p.is_file()} == set(declared_outputs(out, 3))


@pytest.mark.slow
@pytest.mark.parametrize("micro", [2, 8])
def test_two_process_ddp_matches_one_process(
    tiny_data: TinyData, subprocess_env: dict[str, str], tmp_path: Path, mlflow_env: str, one_thread: None, micro: int
) -> None:
    # Global batch 8 = 2 processes x 2 micro-steps x 2 sequences, or 1 process x 4 micro-steps x 2 sequences. With
    # micro_batch_size 8 each process takes its share of 4 in one micro-batch (the setting caps a process's share),
    # which is one process's run at micro-batches of 4: dropout masks follow the micro-batches (pretraining.micro_seed).
    batch = ["pretrain.batch_size=8", f"pretrain.micro_batch_size={micro}"]
    same_partition = ["pretrain.batch_size=8", f"pretrain.micro_batch_size={min(micro, 4)}"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    ddp = run_cli(subprocess_env, pretrain_args(tiny_data, tmp_path / "ddp", *batch), launcher=torchrun)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    single = tmp_path / "single"
    pretrain_stage(tiny_config(*same_partition), "gpt", tiny_data.ids, tiny_data.tokenizer, single)
    a, b = read_curves(tmp_path / "ddp"), read_curves(single)
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        for key in ("train_loss", "val_loss"):
            assert ra[key] == pytest.approx(rb[key], rel=1e-5, abs=1e-6), (ra["step"], key)
    wa, wb = weights(tmp_path / "ddp" / "model.safetensors"), weights(single / "model.safetensors")
    for key in wa:
        assert torch.allclose(wa[key], wb[key], atol=1e-5), key
    assert json.loads((tmp_path / "ddp" / "metrics.json").read_text())["world_size"] == 2


def _rank_pid(torchrun: subprocess.Popen, rank: int) -> int | None:
    """The pid of the worker of `rank` that torchrun started (its environment says RANK=`rank`)."""
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = int(next(line for line in status.read_text().splitlines() if line.startswith("PPid:")).split()[1])
            environ = (status.parent / "environ").read_bytes().split(b"\0")
        except (OSError, StopIteration, ValueError):
            continue
        if ppid == torchrun.pid and f"RANK={rank}".encode() in environ:
            return int(status.parent.name)
    return None


@pytest.mark.slow
def test_a_killed_rank_is_restarted_by_torchrun_and_ends_like_an_uninterrupted_run(
    tiny_data: TinyData, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """Data-parallel pre-training (gloo, 2 processes) under `torchrun --max-restarts=1`: rank 1 is killed with
    SIGKILL after the first resumable checkpoint; torchrun restarts the group, both ranks resume from that checkpoint
    (sampler, RNG, optimizer), and the weights are the same bytes as an uninterrupted 2-process run's."""
    settings = [*LONG, "pretrain.batch_size=8", "pretrain.micro_batch_size=2"]
    # The restarted workers must not find the first attempt's addresses in torchrun's rendezvous store, which they
    # share by default (pytorch/pytorch#135712: gloo then connects to a dead rank's port and the restart fails).
    env = {**subprocess_env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}

    def torchrun(out: Path, restarts: int) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                f"--max-restarts={restarts}", "-m", "gpt1", *pretrain_args(tiny_data, out, *settings)]

    killed = tmp_path / "killed"
    group = subprocess.Popen(torchrun(killed, 1), env=env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (killed / layout.RESUME / LATEST).exists():
            assert group.poll() is None, f"finished before its first checkpoint: {group.stdout.read()[-2000:]}"
            assert time.monotonic() < deadline, "no checkpoint within 180 s"
            time.sleep(0.01)
        victim = _rank_pid(group, 1)
        assert victim is not None, "no worker of rank 1 found"
        os.kill(victim, signal.SIGKILL)
        output, _ = group.communicate(timeout=600)
    finally:  # torchrun and its ranks: a failed assertion above leaves none running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group.pid, signal.SIGKILL)
    assert group.returncode == 0, output[-3000:]
    step = int(output.split("resuming from the checkpoint at step ")[1].split()[0])
    assert 0 < step < 400
    reference = tmp_path / "uninterrupted"
    whole = subprocess.run(torchrun(reference, 0), env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=600)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert (killed / "model.safetensors").read_bytes() == (reference / "model.safetensors").read_bytes()
    assert read_curves(killed) == read_curves(reference)


def test_every_micro_batch_of_every_update_draws_its_own_dropout():
    """micro_seed: one seed per (update, micro-batch), so no two micro-batches share dropout masks; and the seed of
    the run moves them all."""
    seeds = {micro_seed(0, step, index) for step in range(50) for index in range(8)}
    assert len(seeds) == 400
    assert seeds.isdisjoint(micro_seed(1, step, index) for step in range(50) for index in range(8))


class RecordingRun:
    """A StageRun's log_steps, recorded: when each write came and what it held; `fail` makes every write raise."""

    def __init__(self, fail: bool = False) -> None:
        self.writes: list[tuple[float, list[tuple[dict[str, float], int]]]] = []
        self.fail = fail

    def log_steps(self, rows, timestamps=None) -> None:
        if self.fail:
            raise RuntimeError("database is locked")
        rows = list(rows)
        self.writes.append((time.monotonic(), [(m, step, stamp) for (m, step), stamp in
                                                zip(rows, timestamps or [None] * len(rows), strict=True)]))


def test_the_metric_sink_writes_seldom_everything_in_order_and_close_writes_the_rest() -> None:
    """At most one write every `every` seconds (the thread sleeps in between, leaving the interpreter to the loop:
    bench/metric_sink.py), each holding all that queued since; close() writes what is left without waiting."""
    from gpt1.pipeline.tracking import MetricSink

    run = RecordingRun()
    sink = MetricSink(run, every=0.2)
    started = time.monotonic()
    for step in range(1, 61):  # ~0.6 s of updates
        sink.log({"train_loss": 1.0 / step}, step)
        time.sleep(0.01)
    tick = time.monotonic()
    sink.close()
    assert time.monotonic() - tick < 0.15 and sink.thread is None
    assert [step for _, rows in run.writes for _, step, _ in rows] == list(range(1, 61))
    assert 2 <= len(run.writes) <= (tick - started) / 0.2 + 2  # one a period, and close()'s
    stamps = [stamp for _, rows in run.writes for _, _, stamp in rows]  # each step's own time, not its write's
    assert stamps == sorted(stamps) and len(set(stamps)) > len(run.writes)
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(run.writes)]
    assert all(gap >= 0.15 for gap in gaps[:-1])  # the last write is close()'s, whenever it comes


def test_the_metric_sink_warns_once_when_mlflow_fails_and_the_loop_goes_on() -> None:
    from gpt1.pipeline.tracking import MetricSink

    sink = MetricSink(RecordingRun(fail=True), every=0.05)
    with pytest.warns(UserWarning, match="MLflow logging failed, training goes on: database is locked") as warned:
        for step in range(1, 11):
            sink.log({"train_loss": 1.0}, step)
            time.sleep(0.02)
        sink.close()
    assert len(warned) == 1


def test_without_a_run_the_metric_sink_starts_no_thread() -> None:
    from gpt1.pipeline.tracking import MetricSink

    sink = MetricSink(None)
    sink.log({"train_loss": 1.0}, 1)
    sink.close()
    assert sink.thread is None
