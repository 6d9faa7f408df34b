"""Section b2 (issue 43, item 4): pre-training's levers towards 50% MFU, each timed against the current step in the
same process, interleaved (A B A B ...), at the paper's shape (12 x 768, 12 heads, context 512, vocabulary 40,478)
with the gpu profile's dropout, under bf16 autocast. MFU counts the real vocabulary's FLOPs over section a's
measured peak (else the 2026-11-26 H100's).

bench/train_step.py (the command of gpu/speed.py) runs in a child up to three times, each with its own "current":
  1. levers       ours (the gpu profile's micro-batch, compiled as pre-training compiles it, its LM head's
                  vocabulary padded to 64 and masked since 2026-11-29) against ours+mb64 (micro-batch 64),
                  ours+pad1 (the vocabulary unpadded: what the padding buys, inverted; on the CPU, which does not
                  pad, ours+pad64 instead) and ours+chunkce (LM head and cross-entropy in chunks of positions,
                  gradients made in the forward pass: the whole logits never exist)
  2. combination  ours against the levers that paid (median paired ratio >= PAID) together, when two or more did
  3. autotune     ours against ours+autotune (torch.compile's max-autotune, no CUDA graphs), last: its compile
                  takes what is left of the section's time, and the record says when it did not finish
The section's time (bench/gpu_check.py's limit, 200 s on CUDA) is spent in that order: run 1 takes what it needs
(estimated 110-130 s on an H100: torch's import and four compiles of ~25-35 s), run 2 starts only with LEAST_S left,
and run 3 gets the rest, killed at the section's end.
On the CPU (the rehearsal): a tiny shape, uncompiled, every lever, and the combination of them all: CPU speeds decide
nothing here; the run shows that every path works and what the record holds.
"""

from __future__ import annotations

import time
from typing import Any

from bench.gpu.env import REPO, Context
from bench.gpu.report import Record, md_table
from bench.gpu.speed import percent, recorded_peak, train_step

AUTOTUNE = "autotune"
PAID = 1.01  # a lever pays when its median paired ratio to the current step is at least this
MFU_GOAL = 0.50
H100_PEAK_TFLOPS = 780.5  # measured on 2026-11-26 (bench/results/gpu_check_2026-11-26_h100): without section a
# Seconds a child needs to be worth starting. On CUDA: torch's import, the current step's compile (cached after the
# first child) and the variant's own compile (~25-35 s each on the H100 of 2026-11-26, where section b took 53 s in
# all); max-autotune's compile benchmarks kernels for every matmul and takes longer. On the CPU nothing compiles.
LEAST_S = {"cuda": {"combination": 40.0, "autotune": 60.0}, "cpu": {"combination": 15.0, "autotune": 15.0}}
MARGIN_S = 5.0  # for the record after the last child
# The tiny shape's vocabulary (speed.TINY_SHAPE's 512 is a multiple of 64) and chunk: padding and chunks exercised
TINY_LEVERS = ("--vocab", "500", "--ce-rows", "64")


def levers(cuda: bool) -> dict[str, str]:
    """Each lever's token and name. The padding lever flips the current step's padding (runtime.logits_multiple):
    on CUDA pre-training pads, so the lever is the unpadded vocabulary; on the CPU it does not, so the lever pads."""
    padding = {"pad1": "vocabulary unpadded"} if cuda else {"pad64": "vocabulary padded to 64, masked"}
    return {"mb64": "micro-batch 64", **padding, "chunkce": "chunked LM head + CE"}


def section_seconds(ctx: Context) -> float:
    """What this section may spend: its limit in bench/gpu_check.py, or what is left of the run's budget."""
    from bench.gpu_check import LIMITS

    return min(LIMITS[ctx.device]["levers"], ctx.remaining())


def variant(levers: list[str]) -> str:
    return "+".join(["ours", *levers])


def measure(ctx: Context, tag: str, levers: list[list[str]], timeout: float) -> dict[str, Any]:
    """One child: the current step and each of `levers` (a list of levers each); its figures, or why there are none.
    Prints its progress: the warm-up (compile) of each variant as the child's log has it."""
    names = ",".join(variant(v) for v in [[], *levers])
    print(f"levers: run {tag}: {names}, up to {timeout:.0f} s", flush=True)
    extra = TINY_LEVERS if ctx.tiny or not ctx.cuda else ()
    if ctx.cuda and not recorded_peak(ctx):
        extra = (*extra, "--peak-tflops", str(H100_PEAK_TFLOPS))
    done, found = train_step(ctx, f"levers-{tag}", names, timeout, extra=extra)
    for line in done.tail(20_000).splitlines():
        if line.startswith("# warm-up") or line.startswith("- FAILED"):
            print(f"levers:   {line.lstrip('#- ')}", flush=True)
    if found is not None:
        return {"status": "ok", "seconds": round(done.seconds, 1), **found}
    timed_out = done.seconds >= timeout - 1
    status = "timeout" if timed_out else "failed"
    why = f"did not finish in {timeout:.0f} s" if timed_out else f"exit {done.returncode}: {done.tail(800)}"
    print(f"levers: run {tag} {status}: {why[:300]}", flush=True)
    return {"status": status, "seconds": round(done.seconds, 1), "reason": why,
            "command": done.command.replace(str(REPO) + "/", "")}


def skipped(reason: str) -> dict[str, Any]:
    print(f"levers: skipped: {reason}", flush=True)
    return {"status": "skipped", "reason": reason}


def paid(run: dict[str, Any]) -> list[str]:
    """The levers of run 1 whose median paired ratio to the current step reached PAID, in the run's order."""
    return [v["key"].removeprefix("ours+") for v in run.get("variants", [])[1:] if v["vs_first_paired"] >= PAID]


def combination(ctx: Context, first: dict[str, Any]) -> list[str]:
    """The levers to combine: those that paid (on the CPU all: its speeds decide nothing)."""
    return list(levers(False)) if not ctx.cuda else paid(first)


# ----------------------------------------------------------------------------------------------------------------
# The record


HEAD = ["variant", "run", "tokens/s median", "MFU", "vs current (paired: median, range)", "peak GiB", "warm-up s"]


def rows(runs: dict[str, dict[str, Any]]) -> list[list[str]]:
    out = []
    for tag, run in runs.items():
        for i, v in enumerate(run.get("variants", [])):
            low, high = v["vs_first_range"]
            memory = "-" if v["peak_memory_gib"] is None else f"{v['peak_memory_gib']:.1f}"
            name = f"current: {v['name']}" if i == 0 else v["name"]
            out.append([name, tag, f"{v['tokens_s_median']:,.0f}", percent(v["mfu"]),
                        f"{v['vs_first_paired']:.3f}x ({low:.3f}-{high:.3f})", memory, f"{v['warmup_s']:.0f}"])
        out += [[f["name"], tag, "failed", "-", "-", "-", f"{f['warmup_s']:.0f}"] for f in run.get("failed", [])]
        if run["status"] != "ok":
            out.append([f"({run['status']})", tag, "-", "-", "-", "-", run["reason"][:120].replace("|", "/")])
    return out


def levers_measured(runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every variant measured but the current steps, with its run."""
    return [{**v, "run": tag} for tag, run in runs.items() for v in run.get("variants", [])[1:]]


def best(measured: list[dict[str, Any]], single: bool) -> dict[str, Any] | None:
    """The fastest against its current step: among single levers (`single`) or among all."""
    pool = [v for v in measured if not single or v["key"].count("+") == 1]
    return max(pool, key=lambda v: v["vs_first_paired"], default=None)


def describe(v: dict[str, Any] | None) -> str:
    if v is None:
        return "none measured"
    mfu = f", MFU {percent(v['mfu'])}" if v["mfu"] is not None else ""
    return f"{v['key']} {v['vs_first_paired']:.3f}x current{mfu}"


def verdict(ctx: Context, runs: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The summary line and its figures: the best lever, the best of all (a combination included), 50% MFU."""
    measured = levers_measured(runs)
    lever, overall = best(measured, single=True), best(measured, single=False)
    mfus = [v["mfu"] for run in runs.values() for v in run.get("variants", []) if v["mfu"] is not None]
    top = max(mfus, default=None)
    reached = None if top is None else top >= MFU_GOAL
    goal = ("MFU not measured (CPU)" if top is None else
            f"{MFU_GOAL:.0%} MFU {'reached' if reached else 'NOT reached'} (best {top:.1%})")
    where = "" if ctx.cuda else "CPU tiny rehearsal (uncompiled; speeds decide nothing): "
    summary = f"{where}best lever {describe(lever)}; best overall {describe(overall)}; {goal}"
    return summary, {"best_lever": lever and lever["key"], "best_overall": overall and overall["key"],
                     "best_mfu": top, "mfu_goal_reached": reached}


def notes(ctx: Context, runs: dict[str, dict[str, Any]], combined: list[str]) -> list[str]:
    first = runs["levers"]
    found = [f"each run times its variants interleaved in rotating order ({first.get('repeats', '-')} steps each, "
             f"after {first.get('warmup', '-')} untimed: compile happens there); 'vs current': the median over "
             f"rounds of the variant's tokens/s over the current step's in the same round, and its range",
             f"MFU: {first.get('flops_per_token', 0):,} FLOPs per token (the real vocabulary's, whatever a variant "
             f"pads to) over {first.get('peak_tflops') or '-'} TFLOP/s; dropout {first.get('dropout', '-')} "
             f"everywhere; shape {first.get('shape', '-')}",
             f"a lever pays at a median paired ratio >= {PAID}; combined: {' + '.join(combined) or 'none'}",
             "peak GiB: the most allocated during a variant's timed steps, the weights and optimizer states of its "
             "run's other variants included (the same in every row of a run)",
             "max-autotune runs last on its own (mode max-autotune-no-cudagraphs: a ~40 ms step hides launch "
             "overhead), in what is left of the section's time, and is not in the combination"]
    checks = first.get("loss_check")
    if checks:
        found.append("the padded and the chunked loss of a small GPT against its plain loss on this device: "
                     + ", ".join(f"{k} |diff| {v:.1e}" for k, v in checks.items()))
    if not ctx.cuda:
        found.append("on the CPU: uncompiled (max-autotune is the current step again here), tiny shape with a "
                     "vocabulary of 500 padded to 512, chunks of 64 positions; no MFU or peak memory")
    return found


def save(record: Record, ctx: Context, runs: dict[str, dict[str, Any]], combined: list[str], status: str) -> None:
    summary, figures = verdict(ctx, runs)
    record.update(runs=runs, combined=combined, paid_at=PAID, **figures)
    markdown = md_table(HEAD, rows(runs)) + "\n\n" + "\n".join(f"- {n}" for n in notes(ctx, runs, combined))
    record.save(status, summary=summary, markdown=markdown)


def run(ctx: Context) -> None:
    record = Record(ctx, "levers")
    deadline = time.monotonic() + section_seconds(ctx) - MARGIN_S

    def left() -> float:
        return deadline - time.monotonic()

    least = LEAST_S[ctx.device]
    runs = {"levers": measure(ctx, "levers", [[lever] for lever in levers(ctx.cuda)], left())}
    if runs["levers"]["status"] != "ok":
        save(record, ctx, runs, [], "failed")
        return
    combined = combination(ctx, runs["levers"])
    save(record, ctx, runs, combined, "running")
    if len(combined) < 2:
        runs["combination"] = skipped(f"{len(combined)} lever(s) paid: the best is measured alone in run levers")
    elif left() < least["combination"]:
        runs["combination"] = skipped(f"{left():.0f} s left, under {least['combination']:.0f}")
    else:
        runs["combination"] = measure(ctx, "combination", [combined], left())
    save(record, ctx, runs, combined, "running")
    if left() < least["autotune"]:
        runs["autotune"] = skipped(f"{left():.0f} s left, under {least['autotune']:.0f}: max-autotune's compile "
                                   "needs more")
    else:
        runs["autotune"] = measure(ctx, "autotune", [[AUTOTUNE]], left())
    save(record, ctx, runs, combined, "ok")
