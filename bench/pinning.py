"""What the pinned mode costs (gpt1.training.numerics), and which matrix-product kernels it should use: seconds per
training update at the default profile's shapes for each candidate, against the pinned mode before products left MKL.

    .venv/bin/python -m bench.pinning [--rounds 3] [--steps 6] [--threads 1] [--arms a,b,...]

Arms: the pinned mode with its products through numpy's OpenBLAS at Haswell (gpt1.training.cpu_matmul, the mode now);
the same pins with the products left to MKL on its AVX2 branch (the mode until 2026-11-27, the baseline: on AMD MKL
ignores that branch), or on its COMPATIBLE branch (the one every vendor takes); unpinned fp32 and bf16 (the host's
own kernels); pinned bf16 (refused by gpt1.pipeline.config, measured to say why). Each arm runs in a process of its own
(the pins are read when torch loads), and the arms are interleaved A B C D A B C D ... so that the machine's drift hits
them alike; the table gives each arm's median seconds per update and its ratio to the baseline, measured in the same
run. Workloads: the GPT's pre-training update (4 x 256, context 128, batch 8, 8,400-token vocabulary), the LSTM's
(512 units, batch 32) and a fine-tuning-sized GPT update (batch 16 of 64 tokens), each forward + backward + AdamW,
threads as a Snakemake job of the default profile gets them (1). bf16 under the pin has no AVX2 kernel: it runs in
the first round only, one untimed update and `--slow-steps` timed ones.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpt1.training.numerics import PINNED_ENV  # imports no torch

ROOT = Path(__file__).resolve().parents[1]  # the children run `python -m bench.pinning` from here

ARMS = {  # name: (pinned, precision, products: openblas = gpt1.training.cpu_matmul, else MKL with this MKL_CBWR)
    "pinned fp32 mkl-avx2": (True, "fp32", "AVX2"),  # the pinned mode before 2026-11-27: the baseline
    "pinned fp32 openblas": (True, "fp32", "openblas"),  # the pinned mode now
    "pinned fp32 mkl-compatible": (True, "fp32", "COMPATIBLE"),
    "unpinned fp32": (False, "fp32", None),
    "unpinned bf16": (False, "bf16", None),  # the default profile before any pin
    "pinned bf16": (True, "bf16", "openblas"),  # refused by gpt1.pipeline.config; measured to say why
}
BASELINE = "pinned fp32 mkl-avx2"
SLOW = "pinned bf16"
WORKLOADS = {  # name: (model kind, batch, tokens per sequence)
    "pretrain gpt": ("gpt", 8, 128),
    "pretrain lstm": ("lstm", 32, 128),
    "finetune gpt": ("gpt", 16, 64),
}
VOCAB = 8400


def child(arm: str, workload: str, steps: int, threads: int) -> list[float]:
    """Seconds of each of `steps` updates after untimed ones (2; 1 for the slow arm), in this (fresh) process."""
    import torch

    from gpt1.modeling.model import GPT, LSTMLM, GPTConfig, LSTMConfig
    from gpt1.training import numerics

    pinned, precision, products = ARMS[arm]
    numerics.apply(pinned, threads)
    if pinned and products != "openblas":
        from gpt1.training import cpu_matmul

        cpu_matmul.disable()  # the products back on MKL, on the branch arm_env asked for
    kind, batch, tokens = WORKLOADS[workload]
    torch.manual_seed(0)
    if kind == "gpt":
        model = GPT(GPTConfig(vocab_size=VOCAB, n_ctx=128, n_embd=256, n_layer=4, n_head=4))
    else:
        model = LSTMLM(LSTMConfig(vocab_size=VOCAB, n_ctx=128, n_embd=256, hidden_size=512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, VOCAB, (batch, tokens + 1))

    def update() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            _, loss = model(x[:, :-1], x[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(1 if arm == SLOW else 2):
        update()
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        update()
        seconds.append(time.perf_counter() - start)
    return seconds


def arm_env(arm: str, threads: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PINNED_ENV}
    pinned, _, products = ARMS[arm]
    if pinned:
        env.update(PINNED_ENV)
        if products != "openblas":
            env["MKL_CBWR"] = products
    env.update(OMP_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))
    return env


def run_arm(arm: str, workload: str, steps: int, threads: int) -> list[float]:
    args = [sys.executable, "-m", "bench.pinning", "--child", arm, workload, str(steps), str(threads)]
    out = subprocess.run(args, env=arm_env(arm, threads), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every arm (default 3)")
    parser.add_argument("--steps", type=int, default=6, help="timed updates per arm and round (default 6)")
    parser.add_argument("--slow-steps", type=int, default=1, help="timed updates of pinned bf16 (default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every arm (default 1)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list of " + ", ".join(WORKLOADS))
    parser.add_argument("--arms", default=",".join(ARMS), help="comma list of " + ", ".join(ARMS) + " (the "
                        "baseline is always run)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        arm, workload, steps, threads = args.child
        print(json.dumps(child(arm, workload, int(steps), int(threads))))
        return
    workloads = args.workloads.split(",")
    arms = [BASELINE] + [a for a in args.arms.split(",") if a != BASELINE]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"--arms: unknown {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    times: dict[tuple[str, str], list[float]] = {(w, a): [] for w in workloads for a in arms}
    for round_ in range(args.rounds):
        for workload in workloads:
            for arm in arms:
                if arm == SLOW and round_ > 0:
                    continue
                steps = args.slow_steps if arm == SLOW else args.steps
                times[workload, arm] += run_arm(arm, workload, steps, args.threads)
    processor = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), platform.processor())
    print(f"{processor}, {args.threads} thread(s), {dt.date.today()}, {args.rounds} interleaved rounds\n")
    print(f"| workload | arm | median s per update | updates timed | x baseline ({BASELINE}) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for workload in workloads:
        base = statistics.median(times[workload, BASELINE])
        for arm in arms:
            median = statistics.median(times[workload, arm])
            print(f"| {workload} | {arm} | {median:.3f} | {len(times[workload, arm])} | {median / base:.2f} |")


if __name__ == "__main__":
    main()
