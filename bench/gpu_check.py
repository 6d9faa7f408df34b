"""The project on a GPU, in one command (issues 33, 43): every section writes into OUT as it goes, so a time-out
still leaves what was measured, and the last thing printed is a short table.

    bash bench/gpu_check.sh --prepare                  # first, here on the CPU: bench/gpu_bundle/ (see gpu/bundle.py)
    bash bench/gpu_check.sh OUT                        # on the GPU machine: the default sections, <= 9 min on an H100
    bash bench/gpu_check.sh OUT --sections all         # every section, as far as the budget goes
    bash bench/gpu_check.sh OUT --device cpu           # the rehearsal: the sections at a tiny size on this CPU

bench/gpu_check.sh installs the bundle's wheels where the packages are missing (into GPT1_GPU_SITE, default
.gpu-site/ in the repository, git-ignored: an ignored path of the tree is what the GPU machine keeps between two
calls) and runs this module, with that site, if it exists, then the repository on PYTHONPATH:

    python -m bench.gpu_check prepare [--bundle DIR] [--no-wheels] [--gpu-profile] [--sample N] [--book-chars N]
    python -m bench.gpu_check prepare --dag-results DIR --dag-profile NAME [--dag-set KEY=VALUE ...] [--dag-jobs K]
                                      [--bundle DIR] [--no-wheels]
    python -m bench.gpu_check run OUT [--device auto|cuda|cpu] [--tiny] [--budget-s S] [--work DIR] [--bundle DIR]
                                      [--sections NAME,...|all]

`prepare` builds gpu/bundle.py's bundle, then adds what travels beside it: probe/ (section h: the shared numerics
probe, its AMD files and numpy 2.4.6's wheel) and commit.txt (the commit it was prepared at: the GPU machine's copy
of the tree has no .git). Every report names the machine (GPU, CPU, host) and the commit, whatever ran.

Section i (dag, gpu/dag.py) needs more than one call carries (64 MiB, the tree's ~4 included), so `prepare
--dag-results` makes its parts (gpu/dag_prepare.py) and three device calls follow one another at once (the machine
keeps .gpu-site/ only while it stays warm, 30 s idle):

    call A   carry bench/gpu_bundle/wheels, bench/gpu_bundle/dag_wheels, bench/gpu_bundle/commit.txt
             bash bench/gpu_check.sh --install                  # MLflow & co., Snakemake, DVC into .gpu-site/
    call A2  carry bench/gpu_bundle/spacy_wheels, bench/gpu_bundle/commit.txt
             bash bench/gpu_check.sh --install                  # spaCy and ftfy (the spacy and openai pre-tokenisers)
    call B   carry bench/gpu_bundle/dag, bench/gpu_bundle/commit.txt
             bash bench/gpu_check.sh $OUT --sections hardware,dag

Observed once, 2026-11-27 (no benchmark keeps these): wheels/ 23.0 MiB (47 wheels), dag_wheels/ 16.5 MiB (89),
spacy_wheels/ 54.5 MiB (17: blis and spaCy's compiled modules, no room beside the others), dag/ of the default
profile ~46 MiB (43.4 of data, 8 min of xz on 2 busy cores, and 2.7 of the mirror).
A bundle holding dag's parts is carried by parts in the default sections' call too: its data, wheels, probe,
lengths.json, manifest.json, commit.txt (and gpu_profile).

Sections (gpu/report.py SECTIONS, in the order they run; each in a child process of its own, killed with its
children at its time limit). The default, issue 43's:
  a. hardware        GPU, driver, torch; the measured bf16 matmul peak and device copy bandwidth
  h. host_probe      the GPU machine's CPU through the numerics probe in each mode, against the AMD host's hashes
  g. dropout         which SDPA backend trains with p = 0.1 (bf16, compiled) and every dropout's measured rate
  b. speed           bench/train_step.py at the paper's shape: ours compiled and eager against HF eager, MFU
  b2. levers         pre-training MFU levers, each against the current step (gpu/levers.py)
  e. finetune_speed  fine-tuning update times at the gpu profile's shapes; bench/gpu_budget.py from measured speeds
  e2. finetune_graphs fine-tuning with static shapes and CUDA graphs against today's update
Run on an H100 on 2026-11-26, and again when named (or with `all`):
  c. stages          every CUDA path of the stages through `python -m gpt1`, killed and resumed, outputs verified
  d. precision       CPU fp32 against GPU fp32 / TF32 / bf16; two identical GPU pre-trainings
  b+. speed_extra    if time is left: ours compiled against HF compiled
  f. pretrain_minutes the gpu profile's own pre-training for ~3 minutes on the mirror's novels (prepare
                     --gpu-profile), stopped with SIGTERM; its loss curve from MLflow into OUT/pretrain_curve.csv
Run when named (issue 43 item 1, issue 44; skipped where the bundle has no dag/):
  i. dag             a profile's whole DAG through Snakemake, its model rules K at a time on the GPU, its data
                     stages carried; jobs, MLflow runs, `dvc status`; OUT/dag.tar.gz

OUT receives at most 8 files (what the device tool brings back): results.json (every record, the probe's JSON
files among them), report.md (every table), log.txt (bench/gpu_check.sh), profile_step.txt (section b, below 55%
MFU), stages.tar.gz (section c's small outputs, logs and MLflow store), pretrain_curve.csv (section f), dag.tar.gz
(section i's tables, dvc.lock, logs). Everything else goes to --work (default: a new folder under /tmp).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.gpu import report
from bench.gpu.env import BUNDLE, MACHINE_FILE, Context, child_env, provenance, write_commit, write_json

RUNS = {"hardware": "bench.gpu.hardware:run", "host_probe": "bench.gpu.host_probe:run",
        "dropout": "bench.gpu.dropout:run", "speed": "bench.gpu.speed:run", "levers": "bench.gpu.levers:run",
        "finetune_speed": "bench.gpu.finetune_speed:run", "finetune_graphs": "bench.gpu.finetune_speed:run_graphs",
        "stages": "bench.gpu.stages:run", "precision": "bench.gpu.precision:run",
        "speed_extra": "bench.gpu.speed:run_extra", "pretrain_minutes": "bench.gpu.pretrain_minutes:run",
        "dag": "bench.gpu.dag:run"}  # fmt: skip
# What a run without --sections does (issue 43's sections and the host probe; all of them ran on an H100 in run 3,
# bench/results/gpu_check_2026-11-27_h100_run3). The others ran on an H100 on 2026-11-26
# (bench/results/gpu_check_2026-11-26_h100) and run again when named, or with `--sections all`.
DEFAULT = ("hardware", "host_probe", "dropout", "speed", "levers", "finetune_speed", "finetune_graphs")
# Each section's time limit, seconds (the whole run's budget caps them too)
LIMITS = {"cuda": {"hardware": 60, "host_probe": 90, "dropout": 120, "speed": 170, "levers": 200,
                   "finetune_speed": 100, "finetune_graphs": 190, "stages": 200, "precision": 100,
                   "speed_extra": 200, "pretrain_minutes": 330, "dag": 480},
          "cpu": {"hardware": 90, "host_probe": 240, "dropout": 120, "speed": 120, "levers": 120,
                  "finetune_speed": 120, "finetune_graphs": 120, "stages": 420, "precision": 120,
                  "speed_extra": 30, "pretrain_minutes": 150, "dag": 420}}  # fmt: skip
# The whole run; on an H100 the install and start-up come on top. The default sections took (a, b, e on 2026-11-26)
# or are expected to take about 15 + 30 + 75 + 55 + 200 + 30 + 190 s there (b2 and e2 at most their limits); a run
# of issue 43's new sections alone (--sections hardware,host_probe,dropout,levers,finetune_graphs --budget-s 530)
# leaves e2 its 190 s. 540 s leaves the device tool's 600 s command limit room for the wheels' install. On 2 busy
# cores section c's ten `gpt1` processes (each loading torch and MLflow) take minutes.
BUDGET = {"cuda": 540.0, "cpu": 720.0}
LEAST = 10.0  # a section is not started with less than this left


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="build the bundle here, on the CPU")
    prep.add_argument("--bundle", type=Path, default=BUNDLE)
    prep.add_argument("--no-wheels", dest="wheels", action="store_false", help="leave the wheels out")
    prep.add_argument("--gpu-profile", action="store_true", help="also the gpu profile's tokenizer and the novels' "
                      "ids for section f (its fetch, clean, bpe and encode: ~35 min on 2 cores; GPT1_DATA_MIRROR)")
    prep.add_argument("--sample", type=int, default=1000, help="examples per task for the token counts")
    prep.add_argument("--book-chars", type=int, default=2_000_000, help="characters of novels for the token counts")
    prep.add_argument("--dag-results", type=Path, help="section dag's parts instead (gpu/dag_prepare.py): the "
                      "results/<profile>/ folder whose data stages' outputs travel")
    prep.add_argument("--dag-profile", help="section dag: the profile those outputs are of")
    prep.add_argument("--dag-set", action="append", default=[], metavar="KEY=VALUE", help="section dag: a top-level "
                      "list of params.yaml (finetune_tasks=[rte]) or a setting of the profile (model.n_layer=2)")
    prep.add_argument("--dag-jobs", type=int, help="section dag: K, the model jobs that share the GPU (default: "
                      "workflow/profiles/gpu's)")
    run = sub.add_parser("run", help="every section, into OUT")
    run.add_argument("out", type=Path)
    run.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    run.add_argument("--tiny", action="store_true", help="tiny shapes in sections b, d and e (always on the CPU)")
    run.add_argument("--budget-s", type=float, default=None, help="seconds for the whole run (cuda 540, cpu 720)")
    run.add_argument("--work", type=Path, default=None, help="stage outputs and records (default: a new /tmp folder)")
    run.add_argument("--bundle", type=Path, default=BUNDLE)
    run.add_argument("--sections", default=",".join(DEFAULT), type=sections,
                     help=f"comma-separated sections to run, in the table's order, or `all` (default: "
                     f"{','.join(DEFAULT)})")
    section = sub.add_parser("section", help="one section (what `run` starts in a child)")
    section.add_argument("name", choices=RUNS)
    section.add_argument("--work", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "prepare" and (args.dag_results is None) != (args.dag_profile is None):
        parser.error("--dag-results and --dag-profile go together")
    return args


def sections(text: str) -> list[str]:
    """The named sections; the word `all` stands for every one."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if "all" in names:
        names = [*RUNS, *(n for n in names if n != "all")]
    unknown = sorted(set(names) - set(RUNS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown section(s) {', '.join(unknown) or '(none)'}; "
                                         f"choose from {', '.join(RUNS)}")
    return names


def pick_device(asked: str) -> str:
    if asked != "auto":
        return asked
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_section(ctx: Context, name: str) -> None:
    """`section NAME` in a child of its own session; at its limit the child and its children are killed."""
    limit = min(LIMITS[ctx.device][name], ctx.remaining())
    if limit < LEAST:
        report.write_record(ctx, report.fallback_record(ctx, name, "skipped", "the run's budget was spent"))
        return
    print(f"gpu_check: section {name} (limit {limit:.0f} s)", flush=True)
    args = [sys.executable, "-m", "bench.gpu_check", "section", name, "--work", str(ctx.work)]  # child_env: the repo
    child, tick = subprocess.Popen(args, env=child_env(ctx), cwd=ctx.work, start_new_session=True), time.perf_counter()
    try:
        child.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        report.write_record(ctx, report.fallback_record(ctx, name, "timeout", f"stopped at its limit, {limit:.0f} s"))
        return
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)  # whatever it left running
    saved = ctx.read_record(name)
    if child.returncode != 0 and (saved is None or saved["status"] == "running"):
        saved = report.fallback_record(ctx, name, "failed", f"the section's process exited {child.returncode}")
    if saved is not None:  # its wall time, start-up and imports included
        report.write_record(ctx, {**saved, "seconds": round(time.perf_counter() - tick, 1)})


def run(args: argparse.Namespace) -> int:
    device = pick_device(args.device)
    if args.work and args.work.exists() and any(args.work.iterdir()):
        raise SystemExit(f"gpu_check: --work {args.work} is not empty; give a new folder (or none: one under /tmp)")
    work = args.work or Path(tempfile.mkdtemp(prefix="gpt1-gpu-check-"))
    ctx = Context(out=args.out.resolve(), work=work.resolve(), bundle=args.bundle.resolve(), device=device,
                  tiny=args.tiny or device == "cpu", started=time.time(), budget_s=args.budget_s or BUDGET[device])
    ctx.out.mkdir(parents=True, exist_ok=True)
    ctx.save()
    write_json(ctx.work / MACHINE_FILE, provenance(ctx))  # every report names the machine and commit, whatever ran
    command = " ".join(["bench/gpu_check.sh", *sys.argv[2:]])
    print(f"gpu_check: device {device}, work {ctx.work}, bundle {ctx.bundle}, budget {ctx.budget_s:.0f} s", flush=True)
    table = report.write(ctx, command)
    for name, _, _ in report.SECTIONS:
        if name in args.sections:
            run_section(ctx, name)
        table = report.write(ctx, command)
    print("\n" + table, flush=True)
    return 0 if all(r["status"] in ("ok", "skipped") for r in report.records(ctx)) else 1


def section(args: argparse.Namespace) -> int:
    """One section in this process; an exception is written into its record (what it saved before stays)."""
    ctx = Context.load(args.work.resolve())
    module, function = RUNS[args.name].split(":")
    try:
        getattr(importlib.import_module(module), function)(ctx)
    except BaseException as err:
        text = "".join(traceback.format_exception(err)[-8:])
        print(text, file=sys.stderr)
        report.write_record(ctx, report.fallback_record(ctx, args.name, "failed", text))
        return 1
    return 0


def prepare_all(args: argparse.Namespace) -> None:
    """gpu/bundle.py's bundle, then what travels beside it: the numerics probe (section h) and the commit. With
    --dag-results, section dag's parts instead (gpu/dag_prepare.py) and the commit. Each size is what one call
    carries."""
    from bench.gpu import host_probe
    from bench.gpu.bundle import MAX_BYTES, call_size, default_call, prepare

    bundle = args.bundle.resolve()
    if args.dag_results is not None:
        from bench.gpu import dag_prepare

        dag_prepare.prepare(bundle, args.dag_results.resolve(), args.dag_profile, args.dag_set, args.dag_jobs,
                            args.wheels)
        print(f"prepare: commit {write_commit(bundle)}", flush=True)
        dag_prepare.check_calls(bundle)
        return
    prepare(bundle, args.wheels, args.sample, args.book_chars, args.gpu_profile)
    print(f"prepare: {host_probe.prepare(bundle, args.wheels)}; commit {write_commit(bundle)}", flush=True)
    total = call_size(bundle, default_call(bundle))
    print(f"prepare: {bundle}: {total / 2**20:.1f} MiB in the default sections' call", flush=True)
    if total > MAX_BYTES:
        raise SystemExit(f"prepare: the default sections' call ({bundle} but section dag's parts) is "
                         f"{total / 2**20:.1f} MiB, over {MAX_BYTES / 2**20:.0f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "prepare":
        prepare_all(args)
        return 0
    return run(args) if args.command == "run" else section(args)


if __name__ == "__main__":
    sys.exit(main())
