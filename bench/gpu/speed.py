"""Section b: bench/train_step.py at the paper's shape (12 x 768, 12 heads, context 512, vocabulary 40,478) and the
gpu profile's micro-batch: ours compiled (what pre-training runs on CUDA) and eager against transformers'
OpenAIGPTLMHeadModel eager, the same weights and batch; tokens/s, MFU over the measured peak (section a) and over
the datasheet's 989 TFLOP/s, peak memory; below 55% MFU a torch.profiler table of one step (OUT/profile_step.txt).
Section b+ (last, if time is left): ours compiled against HF compiled (the padded vocabulary, once measured here, is
the current step's since 2026-11-29: section b2 measures it against the unpadded one).

On the CPU: a tiny shape, ours and HF eager (torch.compile's speed and MFU mean something on CUDA only)."""

from __future__ import annotations

import json
import sys
from typing import Any

from bench.gpu.env import REPO, Context, Finished, run_one
from bench.gpu.report import PROFILE_TABLE, Record, md_table

MFU_TARGET, HF_TARGET = 0.55, 3.0  # the targets: MFU of ours compiled, and ours over HF eager
TINY_SHAPE = ("--n-layer", "2", "--n-embd", "64", "--n-head", "2", "--n-ctx", "64", "--vocab", "512", "--batch", "4")
EXTRA_SECONDS = 150  # b+ starts only with this much of the budget left


def gpu_profile(section: str) -> dict[str, Any]:
    """One section of params.yaml's gpu profile (what pre-training on a GPU trains with)."""
    from gpt1.pipeline.config import load_config

    return load_config(REPO / "params.yaml", "gpu").section(section)


def micro_batch() -> int:
    """The gpu profile's pre-training micro-batch (sequences per forward pass)."""
    return gpu_profile("pretrain")["micro_batch_size"]


def recorded_peak(ctx: Context) -> float | None:
    """The bf16 matmul peak section a measured on this machine, TFLOP/s (None: it did not run)."""
    return (ctx.read_record("hardware") or {}).get("data", {}).get("matmul_peak_tflops")


def command(ctx: Context, variants: str, json_path: str, profile: bool, extra: tuple[str, ...] = ()) -> list[str]:
    """bench/train_step.py at the paper's shape and the gpu profile's micro-batch and dropout (tiny on the CPU);
    `extra` last (argparse keeps the last of an option given twice)."""
    args = [sys.executable, "-m", "bench.train_step", "--device", ctx.device, "--variants", variants,
            "--json", json_path, "--dropout", str(gpu_profile("model")["dropout"])]
    if ctx.tiny or not ctx.cuda:
        args += [*TINY_SHAPE, "--repeats", "3", "--warmup", "1"]
    else:
        args += ["--batch", str(micro_batch()), "--repeats", "10", "--warmup", "3"]
    peak = recorded_peak(ctx)
    if ctx.cuda and peak:
        args += ["--peak-tflops", str(peak)]
    if profile:
        args += ["--profile-table", str(ctx.out / PROFILE_TABLE), "--profile-below", str(MFU_TARGET)]
    return [*args, *extra]


def train_step(ctx: Context, tag: str, variants: str, timeout: float, profile: bool = False,
               extra: tuple[str, ...] = ()) -> tuple[Finished, dict[str, Any] | None]:
    """bench/train_step.py in a child (its log WORK/logs/train_step-TAG.log), killed after `timeout` seconds: how it
    ended, and its figures (None when it wrote none)."""
    path = ctx.work / f"{tag}.json"
    done = run_one(ctx, f"train_step-{tag}", command(ctx, variants, str(path), profile, extra), timeout)
    return done, json.loads(path.read_text()) if done.returncode == 0 and path.is_file() else None


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def rows(found: dict[str, Any]) -> list[list[str]]:
    out = []
    for v in found["variants"]:
        memory = "-" if v["peak_memory_gib"] is None else f"{v['peak_memory_gib']:.1f}"
        paired = "-" if v["vs_hf_paired"] is None else f"{v['vs_hf_paired']:.2f}x"
        out.append([v["name"], f"{v['tokens_s_median']:,.0f}", f"{v['tokens_s_best']:,.0f}", percent(v["mfu"]),
                    percent(v["mfu_datasheet"]), memory, paired])
    return out


HEAD = ["variant", "tokens/s median", "tokens/s best", "MFU (measured peak)", "MFU (989 TFLOP/s)", "peak GiB",
        "vs HF eager (paired)"]


def measure(ctx: Context, record: Record, variants: str, profile: bool, timeout: float) -> dict[str, Any]:
    done, found = train_step(ctx, record.name, variants, timeout, profile)
    done.check()
    record.update(command=done.command.replace(str(REPO) + "/", ""), seconds_child=round(done.seconds, 1), **found)
    return found


def verdict(found: dict[str, Any], cuda: bool) -> str:
    ours = found["variants"][0]
    if not cuda:
        return (f"CPU tiny: ours {ours['tokens_s_median']:,.0f} tok/s, {ours['vs_hf_paired'] or 0:.2f}x HF; "
                f"compile and MFU skipped (CUDA only)")
    mfu, vs_hf = ours["mfu"], ours["vs_hf_paired"]
    met = f"MFU target {'met' if mfu >= MFU_TARGET else 'MISSED'}, 3x HF {'met' if vs_hf >= HF_TARGET else 'MISSED'}"
    return (f"{ours['name']}: {ours['tokens_s_median']:,.0f} tok/s, MFU {mfu:.1%} (measured peak) / "
            f"{ours['mfu_datasheet']:.1%} (989), {vs_hf:.2f}x HF eager; {met}")


def run(ctx: Context) -> None:
    record = Record(ctx, "speed")
    variants = "ours,ours-eager,hf" if ctx.cuda else "ours,hf"
    found = measure(ctx, record, variants, profile=True, timeout=max(30.0, ctx.remaining() - 5))
    notes = [f"shape {found['shape']}, {found['flops_per_token']:,} FLOPs per token, {found['repeats']} timed steps "
             f"per variant interleaved, {found['warmup']} untimed first (compile happens there)"]
    if not ctx.cuda:
        notes.append("skipped on the CPU: ours compiled (torch.compile's speed is a CUDA question here), MFU and "
                     "peak memory (no GPU peak to divide by)")
    if "profile" in found:
        prof = found["profile"]
        top = "; ".join(f"{t['op'][:60]} {t['share']:.0%}" for t in prof["top"][:5])
        notes.append(f"profile of one step of {prof['variant']} in {PROFILE_TABLE} ({prof['total_ms']:,.1f} ms by "
                     f"{prof['sorted_by']}): {top}; attention ops: {', '.join(prof['attention_ops']) or 'none seen'}")
    record.save("ok", summary=verdict(found, ctx.cuda),
                markdown=md_table(HEAD, rows(found)) + "\n\n" + "\n".join(f"- {n}" for n in notes))


def run_extra(ctx: Context) -> None:
    record = Record(ctx, "speed_extra")
    if not ctx.cuda:
        record.save("skipped", summary="CUDA only: HF compiled")
        return
    if ctx.remaining() < EXTRA_SECONDS:
        record.save("skipped", summary=f"{ctx.remaining():.0f} s of the budget left, under {EXTRA_SECONDS}")
        return
    found = measure(ctx, record, "ours,hf-compile", profile=False, timeout=ctx.remaining() - 5)
    ours, hf = found["variants"]
    summary = f"ours compiled {ours['tokens_s_median'] / hf['tokens_s_median']:.2f}x HF compiled"
    record.save("ok", summary=summary, markdown=md_table(HEAD, rows(found)))
