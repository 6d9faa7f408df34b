"""The CUDA fast path of fine-tuning (gpt1.training.finetune_graphs) where a CPU can check it: the bucket
lengths, collation to a bucket, the static-shape loss against the eager one, the switch (a CPU keeps the eager loop
unless forced; tests/test_finetune.py's digests keep its bits), the forced loop on a CPU through dynamo, and section e2
of bench/gpu_check.py (`run_graphs`) rehearsed as its `section` command runs it."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_lm

from gpt1.data.rows import Example, LoadedSplit
from gpt1.data.taskdata import Part
from gpt1.data.tasks import get_task
from gpt1.data.transforms import Transformed
from gpt1.modeling.heads import FinetuneModel, collate, compute_losses, static_losses
from gpt1.modeling.model import set_dropout
from gpt1.training.finetune_graphs import CapturedUpdates, GraphedUpdates, bucket_length, fast_path
from gpt1.training.finetune_loop import Recipe, Trainer, batches

REPO = Path(__file__).resolve().parents[1]
VOCAB = 100
CPU = torch.device("cpu")


def model_for(task: str, dropout: float = 0.0, kind: str = "gpt") -> FinetuneModel:
    torch.manual_seed(0)
    lm = tiny_lm(kind, vocab_size=VOCAB, n_ctx=64, n_layer=2, n_embd=32)
    set_dropout(lm, dropout)
    return FinetuneModel(lm, get_task(task), dropout)


def part_for(task: str, n: int, seed: int = 0) -> Part:
    """`n` examples of `task`'s shape (its sequences per example, its labels) with random ids of random lengths."""
    rng, spec = random.Random(seed), get_task(task)
    sequences = {"similarity": 2, "multiple_choice": 4}.get(spec.kind, 1)
    labels = [rng.uniform(0, 5) if spec.encoding == "float" else
              rng.randrange(sequences if spec.kind == "multiple_choice" else spec.num_labels) for _ in range(n)]
    transformed = [Transformed([[rng.randrange(VOCAB) for _ in range(rng.randrange(3, 50))] for _ in range(sequences)],
                               False) for _ in range(n)]
    return Part(LoadedSplit([Example(("x",), y, None, i) for i, y in enumerate(labels)], n, 0, 0), transformed,
                "train", None)


RECIPE = Recipe(lr=1e-3, batch_size=8, epochs=2, warmup_fraction=0.1, lm_weight=0.5, weight_decay=0.01,
                eval_batch_size=16)


# ------------------------------------------------------------------------------------------------ buckets


def test_bucket_lengths_are_few_and_pad_little() -> None:
    lengths = {longest: bucket_length(longest, 512) for longest in range(1, 513)}
    assert len(set(lengths.values())) == 32 and max(lengths.values()) == 512
    assert all(bucket >= longest and bucket % 8 == 0 for longest, bucket in lengths.items())
    assert max(bucket - longest for longest, bucket in lengths.items() if longest <= 64) == 7
    assert max((bucket - longest) / longest for longest, bucket in lengths.items() if longest > 64) <= 0.125
    assert [bucket_length(n, 512) for n in (48, 49, 65, 129, 300)] == [48, 56, 72, 144, 320]
    assert bucket_length(60, 60) == 60 and bucket_length(57, 60) == 60  # never past the context


def test_collation_pads_to_the_bucket_and_keeps_every_real_token() -> None:
    part = part_for("qqp", 8)
    plain = collate(part.transformed, [e.label for e in part.examples], False)
    padded = collate(part.transformed, [e.label for e in part.examples], False, width=64)
    assert padded.tokens.shape == (16, 64) and plain.tokens.shape[1] < 64
    assert torch.equal(padded.tokens[:, : plain.tokens.shape[1]], plain.tokens)
    assert not padded.tokens[:, plain.tokens.shape[1]:].any()  # pad id 0
    assert torch.equal(padded.lengths, plain.lengths) and padded.real_tokens == plain.real_tokens
    narrower = collate(part.transformed, [e.label for e in part.examples], False, width=4)
    assert torch.equal(narrower.tokens, plain.tokens)  # a width below the longest changes nothing
    (_, bucketed), = batches(part, [list(range(8))], False, n_ctx=64)
    assert bucketed.tokens.shape[1] == bucket_length(plain.tokens.shape[1], 64)


@pytest.mark.parametrize(("task", "lm_weight", "kind"), [("mnli", 0.5, "gpt"), ("qqp", 0.5, "gpt"),
                                                         ("race", 0.5, "gpt"), ("stsb", 0.5, "gpt"),
                                                         ("sst2", 0.0, "gpt"), ("mrpc", 0.5, "lstm")])
def test_the_static_loss_with_bucket_padding_is_the_eager_loss(task: str, lm_weight: float, kind: str) -> None:
    model = model_for(task, kind=kind).eval()
    part = part_for(task, 6)
    labels, regression = [e.label for e in part.examples], model.regression
    eager, _ = compute_losses(model, collate(part.transformed, labels, regression), lm_weight)
    static = static_losses(model, collate(part.transformed, labels, regression, width=64), lm_weight)
    for name in ("total", "clf", "lm"):
        torch.testing.assert_close(getattr(static, name), getattr(eager, name), rtol=1e-5, atol=1e-6)
    assert static.total.requires_grad and static.lm.requires_grad == bool(lm_weight)


# ------------------------------------------------------------------------------------------------ the switch


def test_auto_is_the_fast_path_on_cuda_only() -> None:
    cuda = torch.device("cuda")
    assert fast_path("auto", cuda) == "compile" and fast_path("auto", CPU) is None
    assert fast_path(True, CPU) == "compile" and fast_path(False, cuda) is None
    assert fast_path("capture", cuda) == fast_path("capture", CPU) == "capture"
    trainer = Trainer(model_for("mnli"), RECIPE, part_for("mnli", 8), 0)
    assert trainer.fast is None and isinstance(trainer.scheduler, torch.optim.lr_scheduler.LambdaLR)


@pytest.mark.parametrize("kind", ["gpt", "lstm"])
def test_the_fast_loop_forced_on_a_cpu_trains_as_the_eager_one(kind: str) -> None:
    """Without dropout the two loops see the same batches at the same rates: the curves agree to float rounding
    (L1's mean over the same tokens, in another order), the last batch (4 of 20) takes the eager update. The
    GPT's loss goes through dynamo, the LSTM's stays eager (`GraphedUpdates`)."""
    data = part_for("mnli", 20)
    curves, weights = {}, {}
    for graphs in (False, True):
        model = model_for("mnli", kind=kind)
        trainer = Trainer(model, RECIPE, data, 0, graphs=graphs)
        assert (trainer.fast is not None) == graphs
        rows, step, _ = trainer.epoch(0, 0, "test")
        more, step, tokens = trainer.epoch(1, step, "test")
        curves[graphs], weights[graphs] = rows + more, model.head.linear.weight.detach().clone()
        assert step == 6 and tokens == sum(len(t.sequences[0]) for t in data.transformed)
    fast = Trainer(model_for("mnli", kind=kind), RECIPE, data, 0, graphs=True).fast
    assert isinstance(fast, GraphedUpdates) and (fast.losses != fast.graph_losses) == (kind == "gpt")
    assert [{k: r[k] for k in ("step", "epoch", "lr")} for r in curves[True]] == \
        [{k: r[k] for k in ("step", "epoch", "lr")} for r in curves[False]]
    for fast, eager in zip(curves[True], curves[False], strict=True):
        assert list(fast) == list(eager)
        assert fast["loss"] == pytest.approx(eager["loss"], rel=1e-5)
    torch.testing.assert_close(weights[True], weights[False], rtol=1e-4, atol=1e-6)


def train_two_epochs(graphs: bool | str, data: Part, kind: str = "gpt", dropout: float = 0.1,
                     **kwargs: int) -> tuple[list[dict[str, float]], dict[str, torch.Tensor], Trainer]:
    """Two epochs of a fresh model seeded alike: the curves, the weights, the trainer."""
    model = model_for("mnli", dropout=dropout, kind=kind)
    trainer = Trainer(model, RECIPE, data, 0, graphs=graphs)
    if kwargs and isinstance(trainer.fast, CapturedUpdates):
        trainer.fast.warmup = kwargs["warmup"]
    torch.manual_seed(1)  # the dropout masks: the same stream for each path
    rows, step, _ = trainer.epoch(0, 0, "test")
    more, _, _ = trainer.epoch(1, step, "test")
    return rows + more, {k: v.detach().clone() for k, v in model.state_dict().items()}, trainer


@pytest.mark.parametrize("kind", ["gpt", "lstm"])
def test_the_captured_updates_train_bit_for_bit_as_the_compiled_path(kind: str) -> None:
    """On a CPU `CapturedUpdates` runs what it would record (gradients zeroed in place, L3, backward, AdamW) with its
    warm-up before each new bucket shape, and then puts the parameters, AdamW's state and the RNG back: with dropout
    on, two epochs give the curves and every weight of the compiled path (its dynamo-traced loss, the same batches
    and buckets) bit for bit, so the warm-up leaves no trace and the shared gradients start from zero each update."""
    data = part_for("mnli", 20)
    compiled_curves, compiled_weights, _ = train_two_epochs(True, data, kind)
    curves, weights, trainer = train_two_epochs("capture", data, kind)
    fast = trainer.fast
    assert isinstance(fast, CapturedUpdates) and fast.records == (kind == "gpt")
    assert curves == compiled_curves
    for name, value in compiled_weights.items():
        assert torch.equal(weights[name], value), name
    if kind == "gpt":  # several bucket shapes, each recorded once; the last, smaller batch is not recorded
        assert len(fast.recorded) >= 2 and all(key[0][0] == RECIPE.batch_size for key in fast.recorded)
    else:
        assert not fast.recorded
    trainer.fast.close()
    assert not fast.recorded and all(p.grad is None for p in fast.params)


def test_the_warm_up_before_a_capture_leaves_no_trace() -> None:
    """Without warm-up updates and with five, the same curves and weights: the state put back is the state before."""
    data = part_for("mnli", 20)
    none_curves, none_weights, _ = train_two_epochs("capture", data, warmup=0)
    curves, weights, _ = train_two_epochs("capture", data, warmup=5)
    assert curves == none_curves
    assert all(torch.equal(weights[k], v) for k, v in none_weights.items())


@pytest.mark.parametrize("graphs", [False, True, "capture"])
def test_every_fine_tuning_forward_takes_fine_tunings_attention_kernels(graphs: bool | str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each loop's training forwards, the epoch's last smaller batch and `predict` run inside
    attention_kernels(device, varying=True), the order whose dropout is p (on a CPU it is empty: nothing changes)."""
    import contextlib

    from gpt1.training import finetune_graphs, finetune_loop

    calls: list[tuple[str, bool]] = []

    def recorded(device: torch.device, varying: bool = False) -> contextlib.AbstractContextManager:
        calls.append((device.type, varying))
        return contextlib.nullcontext()

    monkeypatch.setattr(finetune_graphs, "attention_kernels", recorded)  # forward_context's too
    data = part_for("mnli", 20)  # batches of 8: two full, one of 4
    Trainer(model_for("mnli"), RECIPE, data, 0, graphs=graphs).epoch(0, 0, "test")
    # one an update; the captured path's warm-up before each new shape adds its own
    assert set(calls) == {("cpu", True)} and (len(calls) == 3) == (graphs != "capture") and len(calls) >= 3
    calls.clear()
    finetune_loop.predict(model_for("mnli"), data, 16)
    assert calls == [("cpu", True)] * 2


def test_the_fast_loop_stops_on_a_loss_that_is_not_finite() -> None:
    from gpt1.pipeline.errors import FinetuneError

    model = model_for("mnli")
    with torch.no_grad():
        model.head.linear.weight.fill_(float("nan"))
    with pytest.raises(FinetuneError, match=r"update 1: the loss is nan; lower finetune.lr"):
        Trainer(model, RECIPE, part_for("mnli", 8), 0, graphs=True).epoch(0, 0, "test")


# ------------------------------------------------------------------------------------------------ section e2


def test_section_e2_rehearses_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, products_on_torch) -> None:
    """`run_graphs` in a Context loaded from its folder, as `python -m bench.gpu_check section finetune_graphs` runs it.
    Its products on torch's kernels, as in the GPU process it rehearses: the pinned mode's numpy products are
    outside what Dynamo traces, and each would count as a graph break."""
    from bench.gpu.env import Context

    work = tmp_path / "work"
    Context(out=tmp_path / "out", work=work, bundle=tmp_path / "bundle", device="cpu", tiny=True,
            started=time.time(), budget_s=720.0).save()
    ctx = Context.load(work)
    from bench import gpu_check

    if "finetune_graphs" in gpu_check.RUNS:  # registered: through the section command itself
        assert gpu_check.main(["section", "finetune_graphs", "--work", str(work)]) == 0
    else:
        from bench.gpu.finetune_speed import run_graphs

        run_graphs(ctx)
    record = json.loads(ctx.record("finetune_graphs").read_text())
    assert record["status"] == "ok", record
    updates = record["data"]["updates"]
    assert list(updates) == ["mnli", "fixed", "qqp", "race"]
    for shape in updates.values():
        assert shape["today_ms"] > 0 and shape["graphs_ms"] > 0 and shape["bucket"] >= shape["length"]
        assert shape["capture_ms"] > 0 and shape["capture_today_ms"] > 0 and shape["capture_warmup_s"] > 0
        assert len(shape["epochs_ms"]["today"]) == len(shape["epochs_ms"]["graphs"]) == 2
        assert len(shape["capture_epochs_ms"]["capture"]) == len(shape["capture_epochs_ms"]["today"]) == 2
    assert record["data"]["counters"]["graph_breaks"] == 0, record["data"]["counters"]
    assert "no GPU's figures" in record["summary"] and "| mnli | 8 |" in record["markdown"]
    assert "captured whole" in record["summary"] and record["data"]["capture_fit"]["update_ms"] > 0


def test_a_capture_that_fails_keeps_the_shapes_other_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Section e2 times the captured update after the compiled one: where its capture raises (a GPU that cannot
    record it), the shape keeps the eager and compiled figures and says why the captured one is missing."""
    from bench.gpu import finetune_speed
    from bench.gpu.env import Context

    def refuse(self: CapturedUpdates, batch: object) -> None:
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(CapturedUpdates, "record", refuse)
    ctx = Context(out=Path("/nonexistent"), work=Path("/nonexistent"), bundle=Path("/nonexistent"), device="cpu",
                  tiny=True, started=time.time(), budget_s=60.0)
    finetune = {"lr": 1e-3, "batch_size": 4, "epochs": 1, "warmup_fraction": 0.1, "lm_weight": 0.5,
                "weight_decay": 0.01, "eval_batch_size": 4, "precision": "auto", "length_group_batches": 1,
                "clf_dropout": 0.1}
    shape = finetune_speed.graph_shape(ctx, finetune_speed.TINY, finetune, "mnli", (4, 1, 16), CPU)
    assert shape["today_ms"] > 0 and shape["graphs_ms"] > 0 and "capture_ms" not in shape
    assert shape["capture_failed"] == "RuntimeError: operation not permitted when stream is capturing"
    table = finetune_speed.graphs_table({"mnli": shape}, 1.0)
    assert "captured update failed: RuntimeError: operation not permitted" in table


def test_the_section_counts_only_its_own_graph_breaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dynamo's counters are the process's: breaks from before the section (an earlier test that compiled) are not
    the section's, the ones during it are."""
    from collections import Counter

    from torch._dynamo.utils import counters

    from bench.gpu.finetune_speed import dynamo_snapshot, section_counters

    monkeypatch.setitem(counters, "graph_break", Counter({"earlier break": 7}))
    before = dynamo_snapshot()
    assert section_counters(before)["graph_breaks"] == 0
    counters["graph_break"]["the section's break"] += 2
    counts = section_counters(before)
    assert counts["graph_breaks"] == 2 and counts["break_reasons"] == ["the section's break"]
