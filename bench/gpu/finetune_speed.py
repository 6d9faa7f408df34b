"""Section e: the time of one fine-tuning update at the gpu profile's real shapes, through gpt1.training.finetune_loop's
own loop (`Trainer.epoch`: collation, the copy to the device, bf16 autocast, L3, fused AdamW, the schedule), on the
paper's model: MNLI (batch 32, one sequence each), QQP (both orders: two sequences each), RACE (4 answers x 512
tokens each), and a near-empty update (one 8-token sequence: the fixed cost, mostly AdamW over 117M parameters).
Sequence lengths are each task's mean padded length in a shuffled batch (bench/gpu_budget.py's counts on the
mirror, carried in the bundle's lengths.json). From them: the fixed cost per update and fine-tuning's MFU, which
bench/gpu_budget.py then divides by (with the peak of section a and pre-training's MFU of section b) to recompute
the gpu profile's GPU-hours, each figure marked measured or assumed.

Section e measures the eager loop (`Trainer(graphs=False)`), the one every update ran before the CUDA fast path;
section e2 (`run_graphs`) measures that loop and the two fast paths interleaved at the same shapes: the one
`finetune.cuda_graphs: auto` takes (`gpt1.training.finetune_graphs.GraphedUpdates`: bucketed shapes, the loss through
torch.compile's CUDA graphs, capturable fused AdamW, no host sync per update) and `capture`'s (`CapturedUpdates`:
each bucket's whole update, AdamW included, recorded by torch.cuda.graph without a compiler), each with its set-up
time at a job's start, and the GPU-hours again from the compiled path's speed.

On the CPU: the tiny model and tiny shapes, the same code; the figures are no GPU's."""

from __future__ import annotations

import datetime as dt
import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from bench.gpu.env import REPO, Context, run_one, write_json
from bench.gpu.report import Record, md_table
from gpt1.data.rows import Example, LoadedSplit
from gpt1.data.taskdata import Part
from gpt1.data.tasks import get_task
from gpt1.data.tokenizer import FINETUNE_SPECIALS
from gpt1.data.transforms import Transformed
from gpt1.modeling.heads import FinetuneModel
from gpt1.modeling.model import GPT, GPTConfig
from gpt1.pipeline.config import load_config
from gpt1.training.finetune_graphs import bucket_length
from gpt1.training.finetune_loop import Recipe, Trainer

PAPER = GPTConfig(vocab_size=40478, n_ctx=512, n_embd=768, n_layer=12, n_head=12)
TINY = GPTConfig(vocab_size=512, n_ctx=64, n_embd=64, n_layer=2, n_head=2)
SEQUENCES = {"mnli": 1, "qqp": 2, "race": 4}  # per example: entailment, similarity (both orders), 4 choices
ASSUMED_LENGTHS = {"mnli": 48, "qqp": 32, "race": 512}  # when the bundle has no lengths.json


def shapes(ctx: Context, cfg: GPTConfig, batch: int) -> dict[str, tuple[int, int, int]]:
    """task -> (examples per batch, sequences per example, tokens per sequence); 'fixed' is the near-empty update."""
    path = ctx.bundle / "lengths.json"
    lengths = {t: x["padded"] / x["sequences"] for t, x in json.loads(path.read_text())["tasks"].items()
               if t in SEQUENCES} if path.is_file() else ASSUMED_LENGTHS
    scale = cfg.n_ctx / PAPER.n_ctx  # the tiny model: the same shapes, shrunk to its context
    found = {t: (batch, s, max(8, min(cfg.n_ctx, round(lengths[t] * scale)))) for t, s in SEQUENCES.items()}
    return {"fixed": (1, 1, 8), **found}


def part(task: str, examples: int, sequences: int, length: int, vocab: int) -> Part:
    """`examples` examples of random ids, each `sequences` sequences of `length` tokens (no padding)."""
    rng = random.Random(0)
    spec = get_task(task)
    labels = spec.num_labels if spec.kind != "multiple_choice" else sequences
    items = [Example(("x",), rng.randrange(labels), None, i) for i in range(examples)]
    transformed = [Transformed([[rng.randrange(vocab) for _ in range(length)] for _ in range(sequences)], False)
                   for _ in range(examples)]
    return Part(LoadedSplit(items, examples, 0, 0), transformed, "train", None)


def update_seconds(model: FinetuneModel, recipe: Recipe, data: Part, batches: int, device: torch.device) -> float:
    """Seconds per update over `batches` updates of one epoch of the eager loop, after a warm-up epoch."""
    trainer = Trainer(model, recipe, data, seed=0, graphs=False)
    trainer.epoch(0, 0, "warm-up")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    tick = time.perf_counter()
    _, updates, _ = trainer.epoch(1, 0, "timed")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - tick) / updates if updates == batches else float("nan")


def flops_per_update(cfg: GPTConfig, examples: int, sequences: int, length: int, lm_weight: float) -> float:
    """bench/gpu_budget.py's count: blocks and attention at every position, the LM head on the real tokens."""
    from bench.gpu_budget import Costs, Lengths

    costs = Costs.of(GPT(cfg), mfu=1.0)
    tokens = sequences * length
    each = Lengths(sequences, tokens, sequences * length**2, tokens, sequences * length**2)
    return examples * costs.train(each, lm_weight)


def recipe_task(shape: str) -> str:
    """The task whose head a shape trains: the near-empty update is MNLI's."""
    return "mnli" if shape == "fixed" else shape


def build(cfg: GPTConfig, finetune: dict[str, Any], task: str, examples: int,
          device: torch.device) -> tuple[FinetuneModel, Recipe]:
    """The paper's model (or the tiny one) with `task`'s head, seeded, and the gpu profile's recipe for it."""
    torch.manual_seed(0)
    lm = GPT(cfg)
    lm.resize_token_embeddings(cfg.vocab_size + len(FINETUNE_SPECIALS))
    spec = get_task(recipe_task(task))
    model = FinetuneModel(lm, spec, finetune["clf_dropout"]).to(device)
    return model, Recipe.from_section({**finetune, "batch_size": examples}, spec.name, None)


def measure(ctx: Context, record: Record) -> dict[str, Any]:
    device = torch.device(ctx.device)
    cfg = TINY if ctx.tiny or not ctx.cuda else PAPER
    finetune = load_config(REPO / "params.yaml", "gpu").section("finetune")
    batches = 4 if ctx.cuda else 2
    found = {}
    for task, (examples, sequences, length) in shapes(ctx, cfg, finetune["batch_size"]).items():
        model, recipe = build(cfg, finetune, task, examples, device)
        seconds = update_seconds(model, recipe, part(recipe_task(task), examples * batches, sequences, length,
                                                     cfg.vocab_size), batches, device)
        flops = flops_per_update(cfg, examples, sequences, length, recipe.lm_weight)
        found[task] = {"examples": examples, "sequences": sequences, "length": length, "ms": seconds * 1e3,
                       "tflop": flops / 1e12}
        record.update(updates=found)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return found


def fit(found: dict[str, Any], peak_tflops: float) -> dict[str, float]:
    """The fixed cost (the near-empty update) and fine-tuning's MFU: each shape's FLOPs over its time beyond the
    fixed cost, weighted by FLOPs."""
    fixed = found["fixed"]["ms"]
    shaped = [x for t, x in found.items() if t != "fixed"]
    busy = sum(max(x["ms"] - fixed, 1e-6) for x in shaped) / 1e3
    mfu = sum(x["tflop"] for x in shaped) / (busy * peak_tflops)
    return {"update_ms": fixed, "finetune_mfu": mfu}


def budget(ctx: Context, measured: dict[str, Any], name: str = "measured.json") -> str:
    """bench/gpu_budget.py on the gpu profile with these speeds (and the bundle's token counts)."""
    path = ctx.work / name
    write_json(path, measured)
    lengths = ctx.bundle / "lengths.json"
    if not lengths.is_file():
        return "skipped: the bundle has no lengths.json (made by --prepare where the data mirror is)"
    args = [sys.executable, "-m", "bench.gpu_budget", "--profile", "gpu", "--lengths", str(lengths),
            "--measured", str(path)]
    done = run_one(ctx, "gpu_budget", args, max(30.0, ctx.remaining())).check()
    return done.log.read_text()


def run(ctx: Context) -> None:
    record = Record(ctx, "finetune_speed")
    found = measure(ctx, record)
    hardware = (ctx.read_record("hardware") or {}).get("data", {})
    speed = (ctx.read_record("speed") or {}).get("data", {})
    peak = hardware.get("matmul_peak_tflops") or 1.0
    fitted = fit(found, peak)
    ours = next((v for v in speed.get("variants", []) if v["name"].startswith("ours")), {})
    when = dt.date.today().isoformat()
    source = f"{hardware.get('gpu', 'CPU rehearsal, not a GPU figure')}, {when}"
    measured = {"source": source, "peak_tflops": hardware.get("matmul_peak_tflops") if ctx.cuda else None,
                "mfu": ours.get("mfu") if ctx.cuda and not ctx.tiny else None, **fitted}
    if not ctx.cuda or ctx.tiny:  # no GPU figure may reach the estimate as measured
        measured.update(finetune_mfu=None, update_ms=None)
    record.update(fit=fitted, measured=measured)
    text = budget(ctx, measured)
    rows = [[t, x["examples"], x["sequences"], x["length"], f"{x['tflop']:.3f}", f"{x['ms']:.1f}",
             f"{x['tflop'] / max(x['ms'] / 1e3, 1e-9) / peak:.1%}"] for t, x in found.items()]
    table = md_table(["shape", "examples", "sequences each", "tokens each", "TFLOP", "ms per update",
                      "MFU (measured peak)"], rows)
    total = next((line for line in text.splitlines() if line.startswith("| **total**")), "")
    hours = total.split("**")[-2] if total.count("**") >= 4 else "?"
    record.update(budget=text)
    summary = (f"fixed {fitted['update_ms']:.1f} ms/update, fine-tuning MFU {fitted['finetune_mfu']:.1%}; "
               f"gpu profile {hours} GPU-hours" + ("" if ctx.cuda and not ctx.tiny else " (assumed speeds: rehearsal)"))
    record.save("ok", summary=summary,
                markdown=f"{table}\n\npython -m bench.gpu_budget --profile gpu --measured:\n\n{text}")


# ----------------------------------------------------------------------------------------------------------------
# Section e2: the fast path against the eager loop

# Within the section's 120 s limit, which also counts the start and imports: no shape starts after this, nor with
# less than LEAST_SHAPE_SECONDS left of it (a compile of the paper's model takes tens of seconds)
GRAPHS_SECONDS = 175.0
LEAST_SHAPE_SECONDS = 30.0
GRAPH_ORDER = ("mnli", "fixed", "qqp", "race")  # the target shape first, then what the fit needs
ROUNDS = {"cuda": 5, "cpu": 2}  # interleaved timed epochs of each loop per shape, after a warm-up epoch each
BATCHES = {"cuda": 4, "cpu": 2}  # updates per epoch: the warm-up's compile, first run and capture need 3
CPU_EXAMPLES = 8  # examples per batch in the CPU rehearsal (the gpu profile's 32 on a GPU): the section's 120 s
# Tokens per update above which the two loops are timed one after the other: RACE's 65k tokens hold ~45 GB of
# activations and logits in each loop, and the graphs keep theirs in a pool of their own
TOGETHER_TOKENS = 16_384


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def epoch_ms(trainer: Trainer, device: torch.device) -> float:
    """Milliseconds per update of one epoch of `trainer`'s loop, the device drained before and after (not within:
    the fast path's point is that the host runs ahead)."""
    sync(device)
    tick = time.perf_counter()
    _, updates, _ = trainer.epoch(0, 0, "timed")
    sync(device)
    return (time.perf_counter() - tick) * 1e3 / updates


def release(device: torch.device) -> None:
    """Drop the compiled code and its CUDA graphs' memory before the next shape builds its model."""
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def timed_paths(makers: dict[str, Callable[[], Trainer]], rounds: int, device: torch.device) -> dict[str, Any]:
    """Each loop's warm-up epoch (for the fast path: compile and capture), then `rounds` timed epochs of each in
    turn, so that a drift of the machine (clocks, another process) falls on both alike."""
    trainers = {name: make() for name, make in makers.items()}
    warm = {name: epoch_ms(trainer, device) for name, trainer in trainers.items()}
    times: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(rounds):
        for name, trainer in trainers.items():
            times[name].append(epoch_ms(trainer, device))
    return {"warmup_ms": warm, "epochs_ms": times}


def compare_shape(makers: dict[str, Callable[[], Trainer]], rounds: int, device: torch.device,
                  together: bool) -> dict[str, Any]:
    """Both loops interleaved; where the two together would not fit the GPU's memory (`together` False, or an
    attempt ran out of it), one after the other."""
    note = f"one after the other: more than {TOGETHER_TOKENS:,} tokens an update"
    if together:
        try:
            return {**timed_paths(makers, rounds, device), "order": "interleaved"}
        except torch.cuda.OutOfMemoryError as err:
            note = f"one after the other: interleaved ran out of memory ({str(err).splitlines()[0][:100]})"
        release(device)  # outside the handler: the failed attempt's frames and tensors are gone
    found: dict[str, Any] = {"warmup_ms": {}, "epochs_ms": {}, "order": note}
    for name, make in makers.items():
        alone = timed_paths({name: make}, rounds, device)
        found["warmup_ms"].update(alone["warmup_ms"])
        found["epochs_ms"].update(alone["epochs_ms"])
        release(device)
    return found


def graph_shape(ctx: Context, cfg: GPTConfig, finetune: dict[str, Any], task: str, shape: tuple[int, int, int],
                device: torch.device) -> dict[str, Any]:
    """One shape: a model, the eager loop against the compiled fast path on it (sharing its weights: only time is
    measured), then against the captured one (`captured`), whose failure keeps the first comparison's figures."""
    examples, sequences, length = shape
    model, recipe = build(cfg, finetune, task, examples, device)
    batches = BATCHES[ctx.device]
    data = part(recipe_task(task), examples * batches, sequences, length, cfg.vocab_size)
    together = examples * sequences * length <= TOGETHER_TOKENS

    def maker(graphs: bool | str) -> Callable[[], Trainer]:
        return lambda: Trainer(model, recipe, data, seed=0, graphs=graphs)

    found = compare_shape({"today": maker(False), "graphs": maker(True)}, ROUNDS[ctx.device], device, together)
    ms = {name: statistics.median(times) for name, times in found["epochs_ms"].items()}
    release(device)
    return {"examples": examples, "sequences": sequences, "length": length,
            "bucket": bucket_length(length, cfg.n_ctx), "tflop": flops_per_update(cfg, examples, sequences, length,
                                                                                  recipe.lm_weight) / 1e12,
            "today_ms": ms["today"], "graphs_ms": ms["graphs"],
            "graphs_warmup_s": found["warmup_ms"]["graphs"] * batches / 1e3, **found,
            **captured({"today": maker(False), "capture": maker("capture")}, ROUNDS[ctx.device], device, together,
                       batches)}


def captured(makers: dict[str, Callable[[], Trainer]], rounds: int, device: torch.device, together: bool,
             batches: int) -> dict[str, Any]:
    """The captured update (finetune.cuda_graphs: capture) against the eager loop, interleaved as the compiled one
    was: its ms per update, the eager loop's in the same rounds (`capture_today_ms`), its warm-up and capture
    seconds; or why it failed (`capture_failed`), never costing the shape the figures measured before it."""
    try:
        found = compare_shape(makers, rounds, device, together)
    except Exception as err:  # a capture that fails on this GPU is a finding, not the end of the section
        release(device)
        return {"capture_failed": f"{type(err).__name__}: {str(err).strip()[:300]}"}
    ms = {name: statistics.median(times) for name, times in found["epochs_ms"].items()}
    return {"capture_ms": ms["capture"], "capture_today_ms": ms["today"],
            "capture_warmup_s": found["warmup_ms"]["capture"] * batches / 1e3,
            "capture_epochs_ms": found["epochs_ms"]}


def dynamo_snapshot() -> dict[str, Any]:
    """Dynamo's counters now: they are the process's, so a section counts from a snapshot taken at its start (a
    process that compiled before, a test suite, must not lend its breaks to the section)."""
    from torch._dynamo.utils import counters

    return {"breaks": dict(counters["graph_break"]), "skips": counters["inductor"].get("cudagraph_skips", 0)}


def section_counters(before: dict[str, Any]) -> dict[str, Any]:
    """What says whether the graphs ran as meant, since `before`: graph breaks, and the times Inductor skipped CUDA
    graphs."""
    from collections import Counter

    now = dynamo_snapshot()
    breaks = Counter(now["breaks"]) - Counter(before["breaks"])
    return {"graph_breaks": sum(breaks.values()), "cudagraph_skips": now["skips"] - before["skips"],
            "break_reasons": sorted(breaks)[:5]}


def measure_graphs(ctx: Context, record: Record, deadline: float) -> None:
    """Shape by shape, each written up at once (the fit and the GPU-hours too, from the second on): a time-out
    keeps what was measured before it."""
    device = torch.device(ctx.device)
    cfg = TINY if ctx.tiny or not ctx.cuda else PAPER
    finetune = load_config(REPO / "params.yaml", "gpu").section("finetune")
    all_shapes = shapes(ctx, cfg, finetune["batch_size"] if ctx.cuda else CPU_EXAMPLES)
    found: dict[str, Any] = {}
    before = dynamo_snapshot()
    for task in GRAPH_ORDER:
        if deadline - time.monotonic() < LEAST_SHAPE_SECONDS:
            found[task] = {"skipped": f"the section's {GRAPHS_SECONDS:.0f} s were spent"}
            record.update(updates=found)
            continue
        try:
            found[task] = graph_shape(ctx, cfg, finetune, task, all_shapes[task], device)
        except Exception as err:  # one shape's failure (a compile error) must not lose the others' figures
            found[task] = {"failed": f"{type(err).__name__}: {str(err).strip()[:300]}"}
        release(device)
        record.update(updates=found, counters=section_counters(before))
        write_up(ctx, record, found)
    if "skipped" in found[GRAPH_ORDER[-1]]:  # the write-up after the last shape measured did not list these
        write_up(ctx, record, found)


def graphs_fit(found: dict[str, Any], peak: float, path: str = "graphs") -> dict[str, float] | None:
    """`fit` on a fast path's times (`graphs`: the compiled one, `capture`: the recorded one); None without the
    near-empty update and one other shape."""
    done = {t: {"ms": x[f"{path}_ms"], "tflop": x["tflop"]} for t, x in found.items() if f"{path}_ms" in x}
    return fit(done, peak) if "fixed" in done and len(done) > 1 else None


def compile_hours(text: str, seconds: float) -> str:
    """The fast path's compile and capture, which bench/gpu_budget.py does not count: once per fine-tuning job."""
    jobs = sum(int(line.split("|")[2]) for line in text.splitlines()
               if line.startswith(("| finetune", "| ablation_", "| layers")) and line.split("|")[2].strip())
    return (f"compile and capture: {seconds:.0f} s at a job's start, not in the estimate above: {jobs} fine-tuning "
            f"jobs x {seconds:.0f} s = {jobs * seconds / 3600:.2f} GPU-hours where nothing else fills the GPU then")


def capture_cells(x: dict[str, Any]) -> list[str]:
    """The captured update's ms and its speed-up over the eager loop of its own rounds; blank where it failed."""
    if "capture_ms" not in x:
        return ["", ""]
    return [f"{x['capture_ms']:.1f}", f"{x['capture_today_ms'] / x['capture_ms']:.2f}x"]


def capture_note(x: dict[str, Any]) -> str:
    if "capture_ms" not in x:
        return f"captured update failed: {x.get('capture_failed', 'not run')}"
    return f"captured update's warm-up and capture {x['capture_warmup_s']:.1f} s"


def graphs_table(found: dict[str, Any], peak: float) -> str:
    rows = []
    for task, x in found.items():
        if "graphs_ms" not in x:
            rows.append([task, "", "", "", "", "", "", x.get("skipped") or x.get("failed", "")])
            continue
        rows.append([task, x["examples"], f"{x['sequences']} x {x['length']} -> {x['bucket']}", f"{x['tflop']:.3f}",
                     f"{x['today_ms']:.1f}", f"{x['graphs_ms']:.1f}", f"{x['today_ms'] / x['graphs_ms']:.2f}x",
                     *capture_cells(x), f"MFU {x['tflop'] / max(x['graphs_ms'] / 1e3, 1e-9) / peak:.1%} compiled; "
                     f"compile+capture {x['graphs_warmup_s']:.0f} s; {capture_note(x)}; {x['order']}"])
    return md_table(["shape", "examples", "sequences x tokens -> bucket", "TFLOP", "eager ms/update",
                     "compiled graphs ms/update", "speed-up", "captured update ms", "speed-up", "notes"], rows)


def run_graphs(ctx: Context) -> None:
    """Section e2: ms per update (median of the interleaved epochs) of the eager loop and of the fast path at the
    gpu profile's shapes, the fit of the fast path's fixed cost and MFU, and the gpu profile's GPU-hours from it."""
    record = Record(ctx, "finetune_graphs")
    measure_graphs(ctx, record, time.monotonic() + min(GRAPHS_SECONDS, max(ctx.remaining() - 5.0, 0.0)))


BUDGETS: dict[str, str] = {}  # measured speeds -> bench/gpu_budget.py's text: a write-up with no new fit reruns none


def write_up(ctx: Context, record: Record, found: dict[str, Any]) -> None:
    """The record's fit, GPU-hours, summary and tables from the shapes measured so far."""
    hardware = (ctx.read_record("hardware") or {}).get("data", {})
    speed = (ctx.read_record("speed") or {}).get("data", {})
    peak = hardware.get("matmul_peak_tflops") or 1.0
    gpu = ctx.cuda and not ctx.tiny
    fitted = graphs_fit(found, peak)
    text, hours = "skipped: no fit (the near-empty update and one other shape are needed)", "?"
    if fitted is not None:
        ours = next((v for v in speed.get("variants", []) if v["name"].startswith("ours")), {})
        source = f"{hardware.get('gpu', 'CPU rehearsal, not a GPU figure')}, {dt.date.today().isoformat()}, " \
                 "fine-tuning through CUDA graphs"
        measured = {"source": source, "peak_tflops": hardware.get("matmul_peak_tflops") if ctx.cuda else None,
                    "mfu": ours.get("mfu") if gpu else None, **(fitted if gpu else {})}
        record.update(fit=fitted, measured=measured)
        key = json.dumps(measured, sort_keys=True)
        text = BUDGETS[key] = BUDGETS.get(key) or budget(ctx, measured, "measured_graphs.json")
        total = next((line for line in text.splitlines() if line.startswith("| **total**")), "")
        hours = total.split("**")[-2] if total.count("**") >= 4 else "?"
        if "| finetune" in text and "mnli" in found and "graphs_warmup_s" in found["mnli"]:
            text += "\n\n" + compile_hours(text, found["mnli"]["graphs_warmup_s"])
    record.update(budget=text)
    mnli = found.get("mnli", {})
    head = (f"MNLI {mnli['today_ms']:.1f} -> {mnli['graphs_ms']:.1f} ms/update" if "graphs_ms" in mnli
            else f"MNLI {next(iter(mnli.values()), 'not measured')}")
    captured = graphs_fit(found, peak, "capture")
    record.update(capture_fit=captured)
    fixed = f", fixed cost {fitted['update_ms']:.1f} ms" if fitted else ""
    if captured:
        fixed += f" (captured whole: {captured['update_ms']:.1f} ms)"
    if "capture_ms" in mnli:
        head += f" (captured whole: {mnli['capture_ms']:.1f})"
    summary = (f"{head}{fixed}; gpu profile {hours} GPU-hours" +
               ("" if gpu else " (CPU rehearsal: no GPU's figures, assumed speeds)"))
    markdown = (f"{graphs_table(found, peak)}\n\npython -m bench.gpu_budget --profile gpu --measured (fast path):"
                f"\n\n{text}")
    record.save("ok" if "graphs_ms" in mnli else "failed", summary=summary, markdown=markdown)
