"""Section b2 of bench/gpu_check.sh (issue 43, item 4): the levers' losses equal the plain loss (values and
gradients), the levers' variants parse, what counts as paid, and the section's CPU rehearsal through the script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bench import train_step
from bench.gpu import levers
from gpt1.modeling.model import GPT, GPTConfig, mask_padding
from tests.test_gpu_check import run_script

VOCAB, PADDED, ROWS, WIDTH = 50, 64, 37, 16


def logits_and_targets() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden states [ROWS, WIDTH], a padded LM head [PADDED, WIDTH] and targets below VOCAB, two of them ignored."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(ROWS, WIDTH, generator=g, dtype=torch.float64)
    weight = torch.randn(PADDED, WIDTH, generator=g, dtype=torch.float64)
    targets = torch.randint(0, VOCAB, (ROWS,), generator=g)
    targets[[3, 20]] = train_step.IGNORE
    return hidden, weight, targets


def plain(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The unpadded vocabulary's loss: only its VOCAB rows of the LM head."""
    return F.cross_entropy(hidden @ weight[:VOCAB].t(), targets, ignore_index=train_step.IGNORE)


def grads(loss_of, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor):
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = loss_of(h, w, targets)
    loss.backward()
    return loss.detach(), h.grad, w.grad


def test_masked_padding_leaves_the_loss_and_its_gradient_those_of_the_unpadded_vocabulary() -> None:
    def masked(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(mask_padding(h @ w.t(), VOCAB), t, ignore_index=train_step.IGNORE)

    loss, grad_h, grad_w = grads(masked, *logits_and_targets())
    want, want_h, want_w = grads(plain, *logits_and_targets())
    torch.testing.assert_close((loss, grad_h, grad_w), (want, want_h, want_w), rtol=1e-12, atol=1e-12)
    assert not grad_w[VOCAB:].any()  # the padding's rows learn nothing
    unmasked = F.cross_entropy(logits_and_targets()[0] @ logits_and_targets()[1].t(), logits_and_targets()[2],
                               ignore_index=train_step.IGNORE)
    assert abs(unmasked - want) > 0.1  # what the mask is for


@pytest.mark.parametrize("rows", [1, 8, ROWS, 100])
def test_chunked_cross_entropy_equals_f_cross_entropy_in_value_and_gradients(rows: int) -> None:
    def chunked(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return train_step.chunked_cross_entropy(h, w, t, VOCAB, rows) * 3.0  # an upstream gradient other than 1

    loss, grad_h, grad_w = grads(chunked, *logits_and_targets())
    want, want_h, want_w = grads(lambda h, w, t: plain(h, w, t) * 3.0, *logits_and_targets())
    torch.testing.assert_close((loss, grad_h, grad_w), (want, want_h, want_w), rtol=1e-10, atol=1e-12)


def test_a_padded_gpt_with_either_lever_loss_has_the_plain_gpts_loss() -> None:
    torch.manual_seed(0)
    base = GPT(GPTConfig(vocab_size=VOCAB, n_ctx=8, n_embd=16, n_layer=1, n_head=2)).eval()
    padded = train_step.padded_copy(base, 64).eval()
    x = torch.randint(0, VOCAB, (3, 9))
    want = train_step.ours_loss(base, x[:, :-1], x[:, 1:])
    assert (padded.config.vocab_size, padded.logits_multiple, base.logits_multiple) == (VOCAB, 64, 1)
    torch.testing.assert_close(train_step.ours_loss(padded, x[:, :-1], x[:, 1:]), want)
    for model in (base, padded):  # the chunked loss pads the head as the model's forward does
        torch.testing.assert_close(train_step.chunked_loss(model, x[:, :-1], x[:, 1:], VOCAB, rows=5, dtype=None),
                                   want)
    gaps = train_step.loss_check(torch.device("cpu"), None)
    assert gaps == {"padded": pytest.approx(0, abs=1e-6), "chunked": pytest.approx(0, abs=1e-6)}


def test_levers_combine_in_a_variants_name_and_an_unknown_one_is_refused() -> None:
    args = train_step.parse_args(["--variants", "ours,ours+mb64+pad64+chunkce,ours+autotune"])
    chosen = train_step.chosen_recipes(args, torch.device("cpu"))
    assert chosen["ours"].logits_multiple == 1  # the CPU's pre-training pads nothing
    both = chosen["ours+mb64+pad64+chunkce"]
    assert (both.batch, both.logits_multiple, both.loss, both.compiled) == (64, 64, "chunked", False)
    assert chosen["ours+autotune"].compile_mode == train_step.AUTOTUNE_MODE
    assert "not compiled here" in chosen["ours+autotune"].label
    gpu = train_step.chosen_recipes(train_step.parse_args(["--device", "cuda", "--variants", "ours,ours+pad1"]),
                                    torch.device("cuda"))
    assert (gpu["ours"].compiled, gpu["ours"].autocast, gpu["ours"].logits_multiple) == (True, torch.bfloat16, 64)
    assert gpu["ours"].label == "ours, bf16 + compile, vocab padded to 64"  # as pre-training trains on CUDA
    assert (gpu["ours+pad1"].logits_multiple, gpu["ours+pad1"].label) == (1, "ours, bf16 + compile, vocab unpadded")
    combined = train_step.chosen_recipes(train_step.parse_args(["--device", "cuda", "--variants", "ours+mb64+pad1"]),
                                         torch.device("cuda"))["ours+mb64+pad1"]
    assert combined.label == "ours, bf16 + compile, micro-batch 64, vocab unpadded"  # every lever named
    for bad in ("ours+bogus", "hf+mb64", "ours+mask64"):
        with pytest.raises(SystemExit, match=r"^--variants: unknown"):
            train_step.chosen_recipes(train_step.parse_args(["--variants", bad]), torch.device("cpu"))


def fake_run(ratios: dict[str, float], mfu: float | None) -> dict:
    variants = [{"key": key, "name": key, "vs_first_paired": r, "vs_first_range": [r, r], "mfu": mfu and mfu * r,
                 "tokens_s_median": 1000 * r, "peak_memory_gib": None, "warmup_s": 1.0}
                for key, r in {"ours": 1.0, **ratios}.items()]
    return {"status": "ok", "variants": variants, "failed": []}


def test_the_padding_lever_flips_the_current_steps_padding() -> None:
    assert list(levers.levers(cuda=True)) == ["mb64", "pad1", "chunkce"]  # CUDA pads: the lever unpads
    assert list(levers.levers(cuda=False)) == ["mb64", "pad64", "chunkce"]  # the CPU does not: the lever pads


def test_only_levers_above_the_threshold_pay_and_the_verdict_names_the_best() -> None:
    first = fake_run({"ours+mb64": 1.02, "ours+pad1": 1.04, "ours+chunkce": 1.005}, mfu=0.45)
    assert levers.paid(first) == ["mb64", "pad1"]
    runs = {"levers": first, "combination": fake_run({"ours+mb64+pad1": 1.12}, mfu=0.45)}
    ctx = type("Ctx", (), {"cuda": True})()
    summary, figures = levers.verdict(ctx, runs)
    assert figures == {"best_lever": "ours+pad1", "best_overall": "ours+mb64+pad1", "best_mfu": 0.45 * 1.12,
                       "mfu_goal_reached": True}
    assert "best lever ours+pad1 1.040x current, MFU 46.8%" in summary and "50% MFU reached (best 50.4%)" in summary


@pytest.mark.slow
def test_cpu_rehearsal_of_the_levers_section_through_the_script(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_script(str(out), "--device", "cpu", "--sections", "levers", "--work", str(tmp_path / "work"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "levers: run levers: ours,ours+mb64,ours+pad64,ours+chunkce" in done.stdout  # progress
    record = json.loads((out / "results.json").read_text())["sections"]["levers"]
    assert record["status"] == "ok" and record["summary"].startswith("CPU tiny rehearsal")
    runs = record["data"]["runs"]
    assert [v["key"] for v in runs["levers"]["variants"]] == ["ours", "ours+mb64", "ours+pad64", "ours+chunkce"]
    assert [v["key"] for v in runs["combination"]["variants"]] == ["ours", "ours+mb64+pad64+chunkce"]
    assert [v["key"] for v in runs["autotune"]["variants"]] == ["ours", "ours+autotune"]
    first = runs["levers"]
    assert first["shape"]["vocab"] == 500 and first["dropout"] == 0.1 and first["failed"] == []
    assert [v["batch"] for v in first["variants"]] == [4, 64, 4, 4]
    assert max(first["loss_check"].values()) < 1e-6
    assert all(v["mfu"] is None and v["vs_first_paired"] > 0 for run in runs.values() for v in run["variants"])
    assert record["data"]["best_lever"] in {"ours+mb64", "ours+pad64", "ours+chunkce", "ours+autotune"}
    table = record["markdown"].split("\n\n")[0].splitlines()
    assert table[0].startswith("| variant | run | tokens/s median | MFU | vs current") and len(table) == 2 + 8
    assert "b2. levers | ok | CPU tiny rehearsal" in (out / "report.md").read_text()
