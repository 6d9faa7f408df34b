"""GPU-hours of a whole profile on one GPU, from FLOPs: an ESTIMATE, each of its speeds assumed or measured.

    GPT1_DATA_MIRROR=../shared/data .venv/bin/python -m bench.gpu_budget --profile gpu
    .venv/bin/python -m bench.gpu_budget --profile gpu-minutes --lengths bench/results/gpu_budget_lengths.json \
        --measured bench/results/gpu_speeds_h100.json --jobs-at-once 8 --max-minutes 8   # the plan of issue 44
    ... --peak-tflops 989 --mfu 0.40 --lstm-mfu 0.20 --update-ms 10     # the assumptions, all changeable
    ... --set layers.max_train_examples=null                            # a setting changed
    ... --save-lengths lengths.json                                     # keep the measured token counts
    .venv/bin/python -m bench.gpu_budget --lengths lengths.json --measured measured.json   # no mirror needed

--measured takes the speeds a GPU measured (bench/gpu_check.py, section e writes the file): any of peak_tflops
(the bf16 matmul peak), mfu (pre-training, ours compiled), finetune_mfu and update_ms (fine-tuning updates: FLOPs
at that MFU plus that fixed cost, fitted to update times at the gpu profile's shapes) replaces its assumption, and
the output marks each figure measured (with the GPU and date) or assumed. --lengths reads the token counts
--save-lengths wrote (bench/gpu_check.sh --prepare carries them to the GPU machine, which has no mirror).

FLOPs per token are gpt1.modeling.model.flops_per_token's: 6N + 6 n_layer n_ctx n_embd for a training token (N without
the position embedding; the tied LM head counted once), a third of that for a forward pass. Split into its parts
so that fine-tuning can be costed: the blocks (every padded position), attention (6 n_layer L n_embd at padded
length L), the LM head (only the real tokens the auxiliary loss reads; forward only when λ = 0).

Counted per fine-tuning job: 3 epochs over the training set (batches padded to their longest sequence, as
gpt1.stages.finetune collates them), the forward pass over the evaluation splits, and over the training set again (the
train metrics). Token counts per example are measured on the mirror with the released GPT-1 vocabulary (40,478
tokens, the paper's; the profile's own 40,000-merge BPE trained on books gives similar counts), on a seeded sample
per task; the examples per task are the hub's full splits (HUB_SPLITS). Time = FLOPs / (peak x MFU) + updates x
a fixed cost per update (kernel launches, the optimizer, Python batching: what dominates small fine-tuning batches):
the CUDA-graph path's where the profile's finetune.cuda_graphs is on (auto or true), else the eager loop's.

The plan (the last table): the DAG in three phases, each stage's planned seconds. Data: the CPU stages, carried
in or run before (not GPU time). Pre-training: both models at once on the GPU, after a job's start and compile.
The fan-out (zero-shot, layers, fine-tuning, ablations) with --jobs-at-once jobs sharing the GPU: each job pays
its start (process, CUDA, checkpoint, data), the compile and capture when CUDA graphs are on, its fixed costs
(host-bound: they overlap across jobs) and its FLOPs (GPU-bound: they add up), so the phase takes the larger of
the GPU's sum and the jobs' sum over the jobs at once. Then the report and `dvc commit`. --max-minutes makes the
command fail when the plan exceeds it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import MIRROR, REPO, machine
from bench.gpu.dag_prepare import default_jobs
from gpt1.data.rows import eval_cap, layer_caps, load_examples, mirror_splits, train_cap
from gpt1.data.tasks import get_task
from gpt1.data.tokenizer import GPT1Tokenizer, load_released
from gpt1.data.transforms import transform_batch
from gpt1.modeling.model import GPT, LSTMLM, GPTConfig, LSTMConfig, flops_per_token
from gpt1.pipeline.config import LAYER_TRANSFER_TASKS, Config, load_config, pretrain_settings

RELEASED = REPO.parent / "shared" / "reference" / "openai-gpt1-bpe"
RELEASED_VOCAB = 40478
GLUE8 = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")
# Labelled examples of the hub's full splits: (training, evaluated). Evaluated: validation plus the public-label
# test split where there is one (an upper bound: the pipeline scores test when present, else validation). Story
# Cloze trains on 80% of its 1,871 validation stories (the profile's train cut), less a 10% selection slice.
HUB_SPLITS = {
    "snli": (549_367, 9_842 + 9_824), "mnli": (392_702, 9_815 + 9_832), "qnli": (104_743, 5_463),
    "scitail": (23_097, 1_304 + 2_126), "rte": (2_490, 277), "race": (87_866, 4_887 + 4_934),
    "story_cloze": (1_347, 374 + 1_871), "mrpc": (3_668, 408), "qqp": (363_846, 40_430), "stsb": (5_749, 1_500),
    "sst2": (67_349, 872), "cola": (8_551, 1_043),
}
MIRROR_BOOK_CHARS = 52_377_526  # the mirror's 99 novels (books/gutenberg/README.md)
WIKITEXT2_TOKENS = 240_533  # WikiText-2 validation's 60 articles, released vocabulary (gpt1.evaluation.perplexity)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="gpu")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="change a setting of the profile, as gpt1 --set does")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100 SXM datasheet)")
    parser.add_argument("--mfu", type=float, default=0.40, help="assumed model FLOPs utilisation, GPT")
    parser.add_argument("--lstm-mfu", type=float, default=0.20, help="assumed MFU of the LSTM (sequential recurrence)")
    parser.add_argument("--update-ms", type=float, default=10.0,
                        help="assumed fixed cost per fine-tuning update through CUDA graphs, ms")
    parser.add_argument("--update-ms-eager", type=float, default=30.0,
                        help="assumed fixed cost per eager fine-tuning update (finetune.cuda_graphs: false), ms")
    parser.add_argument("--job-start-s", type=float, default=15.0,
                        help="assumed start of a GPU job: process, CUDA, checkpoint and data, s")
    parser.add_argument("--compile-s", type=float, default=30.0,
                        help="assumed torch.compile at pre-training's start, s")
    parser.add_argument("--graphs-compile-s", type=float, default=45.0,
                        help="assumed compile and capture at a fine-tuning job's start with CUDA graphs on, s")
    parser.add_argument("--jobs-at-once", type=int, default=default_jobs(),
                        help="fan-out jobs sharing the GPU (default: the slots of workflow/profiles/gpu's gpu "
                             "resource, a model job takes one)")
    parser.add_argument("--data-s", type=float, default=0.0,
                        help="wall seconds of the data stages before pre-training (0: prepared on a CPU and carried)")
    parser.add_argument("--report-s", type=float, default=60.0, help="assumed report and dvc commit, s")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="fail (exit 1) when the planned wall time of the whole DAG exceeds this")
    parser.add_argument("--sample", type=int, default=1000, help="examples per task whose token counts are measured")
    parser.add_argument("--book-chars", type=int, default=2_000_000, help="characters of the mirror's novels encoded")
    parser.add_argument("--lengths", type=Path, default=None,
                        help="token counts saved by --save-lengths (instead of measuring them on the mirror)")
    parser.add_argument("--save-lengths", type=Path, default=None, help="write the measured token counts here")
    parser.add_argument("--measured", type=Path, default=None,
                        help="speeds measured on a GPU (bench/gpu_check.py): they replace the assumptions")
    return parser.parse_args(argv)


MEASURABLE = {"peak_tflops": "bf16 peak TFLOP/s", "mfu": "MFU (GPT pre-training)", "lstm_mfu": "MFU (LSTM)",
              "finetune_mfu": "MFU (fine-tuning)", "update_ms": "ms fixed cost per fine-tuning update (CUDA graphs)",
              "update_ms_eager": "ms fixed cost per fine-tuning update (eager)",
              "job_start_s": "s to start a GPU job", "compile_s": "s of compile at pre-training's start",
              "graphs_compile_s": "s of compile and capture at a fine-tuning job's start (CUDA graphs)"}


def speeds(args: argparse.Namespace) -> dict[str, tuple[float, str]]:
    """Each speed with where it comes from: 'measured (<source>)' from --measured, else 'assumed'. Fine-tuning's
    MFU is pre-training's unless measured apart."""
    measured = json.loads(args.measured.read_text()) if args.measured else {}
    sources = measured.get("sources") or {}  # a file that gathers several runs names each figure's

    def source(key: str) -> str:
        return f"measured ({sources.get(key) or measured.get('source', args.measured)})"

    found = {key: (float(measured[key]), source(key)) if measured.get(key) is not None else
             (float(getattr(args, key)), "assumed") for key in MEASURABLE if key != "finetune_mfu"}
    found["finetune_mfu"] = ((float(measured["finetune_mfu"]), source("finetune_mfu"))
                             if measured.get("finetune_mfu") is not None
                             else (found["mfu"][0], f"{found['mfu'][1]}: pre-training's"))
    return found


@dataclass(frozen=True)
class Costs:
    """FLOPs per token of one model's parts, training (forward + backward); a forward pass is a third."""

    blocks: int  # every position
    attention_per_ctx: int  # times the padded length
    head: int  # the LM head, real tokens only
    mfu: float
    n_ctx: int

    @property
    def per_token(self) -> int:
        """flops_per_token: a training token of a full context."""
        return self.blocks + self.attention_per_ctx * self.n_ctx + self.head

    @classmethod
    def of(cls, model: GPT | LSTMLM, mfu: float) -> Costs:
        total = flops_per_token(model)
        if isinstance(model, GPT):
            c = model.config
            attention, head = 6 * c.n_layer * c.n_embd, 6 * model.tokens_embed.weight.numel()
            return cls(total - attention * c.n_ctx - head, attention, head, mfu, c.n_ctx)
        head = 6 * sum(p.numel() for p in model.lm_head.parameters())
        return cls(total - head, 0, head, mfu, model.config.n_ctx)

    def train(self, x: Lengths, lm_weight: float) -> float:
        """One example, trained on in a shuffled batch padded to its longest sequence."""
        head = self.head if lm_weight else self.head / 3  # λ = 0: L1 is still computed, without a graph
        return x.padded * self.blocks + x.padded_sq * self.attention_per_ctx + x.real * head

    def score(self, x: Lengths, lm_head: bool = False) -> float:
        """One example, forward only, in a batch of similar lengths (scoring sorts by length): no padding."""
        return (x.real * (self.blocks + (self.head if lm_head else 0)) + x.real_sq * self.attention_per_ctx) / 3


@dataclass(frozen=True)
class Lengths:
    """Per example: sequences, tokens, and the sums of squared lengths attention costs, real and padded to the
    longest sequence of a shuffled training batch."""

    sequences: float
    real: float
    real_sq: float
    padded: float
    padded_sq: float


def measure_lengths(task: str, tokenizer: GPT1Tokenizer, n_ctx: int, batch: int, sample: int) -> Lengths:
    spec = get_task(task)
    present = mirror_splits(spec, MIRROR)
    split = spec.train if spec.train in present else spec.reports[0].validation
    examples = load_examples(spec, split, MIRROR, max_examples=sample, seed=0).examples
    rows = [[len(s) for s in t.sequences] for t in transform_batch(spec, examples, tokenizer, n_ctx)]
    random.Random(0).shuffle(rows)
    padded = padded_sq = 0
    for start in range(0, len(rows), batch):
        group = rows[start : start + batch]
        top, count = max(max(r) for r in group), sum(len(r) for r in group)
        padded, padded_sq = padded + top * count, padded_sq + top * top * count
    n = len(rows)
    return Lengths(sum(map(len, rows)) / n, sum(map(sum, rows)) / n, sum(x * x for r in rows for x in r) / n,
                   padded / n, padded_sq / n)


@dataclass
class Line:
    what: str
    jobs: int = 0
    updates: float = 0.0
    tokens: float = 0.0
    flops: float = 0.0
    flop_seconds: float = 0.0  # the GPU's arithmetic
    fixed_seconds: float = 0.0  # the updates' fixed costs (launches, optimizer, batching)
    longest: float = 0.0  # the longest job's seconds (arithmetic and fixed costs)

    @property
    def seconds(self) -> float:
        return self.flop_seconds + self.fixed_seconds

    def add(self, updates: float, tokens: float, flops: float, mfu: float, args: argparse.Namespace,
            fixed_cost: bool = True) -> None:
        """`fixed_cost`: updates pay the profile's fixed cost each (fine-tuning), else FLOPs alone (compiled
        pre-training, 32k tokens an update)."""
        self.updates += updates
        self.tokens += tokens
        self.flops += flops
        self.flop_seconds += flops / (args.peak_tflops * 1e12 * mfu)
        self.fixed_seconds += fixed_cost * updates * args.fixed_ms / 1e3


def finetune_cost(line: Line, costs: Costs, lengths: Lengths, train: int, evaluated: int, ft: dict[str, Any],
                  lm_weight: float, args: argparse.Namespace, new_job: bool = True) -> float:
    """One fine-tuning: epochs over `train` examples, then forward over the evaluated and the training sets. A job of
    its own unless `new_job` is false (the layer runs: n_layer + 1 fine-tunings in one job). Returns its seconds."""
    updates = ft["epochs"] * -(-train // ft["batch_size"])
    seen = ft["epochs"] * train
    flops = seen * costs.train(lengths, lm_weight) + (train + evaluated) * costs.score(lengths)
    before = line.seconds
    line.jobs += new_job
    line.add(updates, seen * lengths.padded, flops, costs.mfu, args)
    if new_job:
        line.longest = max(line.longest, line.seconds - before)
    return line.seconds - before


def capped(n: int, cap: int | None) -> int:
    return n if cap is None else min(n, cap)


def pretrain_lines(cfg: Config, gpt: Costs, lstm: Costs, args: argparse.Namespace) -> tuple[list[Line], int]:
    """Each model's pre-training with its own settings (pretrain.by_model laid over the shared ones)."""
    n_ctx, lines, tokens = cfg.p["model"]["n_ctx"], [], 0
    for kind, costs in (("gpt", gpt), ("lstm", lstm)):
        p = pretrain_settings(cfg, kind)
        steps, per_step = p["max_steps"], p["batch_size"] * n_ctx
        evals = steps // p["eval_every"] + p["snapshots"]
        line = Line(f"pretrain {kind}", jobs=1)
        train = steps * per_step * costs.per_token
        val = evals * p["eval_batches"] * per_step * costs.per_token / 3
        line.add(steps, steps * per_step, train + val, costs.mfu, args, fixed_cost=False)
        line.longest = line.seconds
        lines.append(line)
        tokens = tokens or steps * per_step
    return lines, tokens


def save_lengths(path: Path, lengths: dict[str, Lengths], mirror_tokens: float, args: argparse.Namespace) -> None:
    path.write_text(json.dumps({"tasks": {t: dataclasses.asdict(x) for t, x in lengths.items()},
                                "mirror_tokens": mirror_tokens, "sample": args.sample, "book_chars": args.book_chars,
                                "tokenizer": "the released GPT-1 vocabulary"}, indent=1))


def load_lengths(path: Path) -> tuple[dict[str, Lengths], float]:
    data = json.loads(path.read_text())
    return {t: Lengths(**x) for t, x in data["tasks"].items()}, data["mirror_tokens"]


def token_counts(cfg: Config, args: argparse.Namespace) -> tuple[dict[str, Lengths], float]:
    """Per task, the token counts of its examples, and the mirror's novels in tokens: from --lengths, or measured
    on the mirror with the released vocabulary (and saved with --save-lengths)."""
    if args.lengths:
        return load_lengths(args.lengths)
    model, ft = cfg.p["model"], cfg.p["finetune"]
    tokenizer = load_released(RELEASED, "spacy")  # the profiles' pre-tokeniser, as the saved lengths were measured
    lengths = {t: measure_lengths(t, tokenizer, model["n_ctx"], ft["batch_size"], args.sample) for t in HUB_SPLITS}
    mirror_tokens = book_tokens(tokenizer, args.book_chars)
    if args.save_lengths:
        save_lengths(args.save_lengths, lengths, mirror_tokens, args)
    return lengths, mirror_tokens


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    found = speeds(args)
    for key, (value, _) in found.items():
        setattr(args, key, value)
    cfg = load_config(REPO / "params.yaml", args.profile, overrides=args.set)
    model, ft = cfg.p["model"], cfg.p["finetune"]
    if any(pretrain_settings(cfg, kind)["max_steps"] is None for kind in ("gpt", "lstm")):
        raise SystemExit(f"profile {args.profile}: pretrain.max_steps is null; this estimate needs a step count")
    if ft["cuda_graphs"] == "capture":
        raise SystemExit(f"profile {args.profile}: finetune.cuda_graphs: capture has no GPU speed yet (bash "
                         f"bench/gpu_check.sh --sections finetune_graphs times it); estimate with auto or false")
    args.graphs = ft["cuda_graphs"] in ("auto", True)  # auto: on, on CUDA
    args.fixed_ms = args.update_ms if args.graphs else args.update_ms_eager
    gpt_model = GPT(GPTConfig(vocab_size=RELEASED_VOCAB, n_ctx=model["n_ctx"], n_embd=model["n_embd"],
                              n_layer=model["n_layer"], n_head=model["n_head"]))
    lstm_model = LSTMLM(LSTMConfig(vocab_size=RELEASED_VOCAB, n_ctx=model["n_ctx"], n_embd=model["n_embd"],
                                   hidden_size=model["lstm_hidden"]))
    gpt, lstm = Costs.of(gpt_model, args.mfu), Costs.of(lstm_model, args.lstm_mfu)
    tuned = dataclasses.replace(gpt, mfu=args.finetune_mfu)  # the GPT as fine-tuning runs it
    lengths, mirror_tokens = token_counts(cfg, args)

    lines, pretrain_tokens = pretrain_lines(cfg, gpt, lstm, args)
    finetune, no_aux, lstm_line = Line("finetune (12 tasks x 2 variants)"), Line("ablation_no_aux"), Line(
        "ablation_lstm")
    for task, (train, evaluated) in HUB_SPLITS.items():
        train_n, eval_n = capped(train, train_cap(get_task(task), ft)), capped(evaluated, ft["max_eval_examples"])
        for _ in range(2):  # pretrained, scratch: the same work
            finetune_cost(finetune, tuned, lengths[task], train_n, eval_n, ft, ft["lm_weight"], args)
        if task in GLUE8:
            finetune_cost(no_aux, tuned, lengths[task], train_n, eval_n, ft, 0.0, args)
            finetune_cost(lstm_line, lstm, lengths[task], train_n, eval_n, ft, ft["lm_weight"], args)
    layers = Line(f"layers (MNLI, RACE x {model['n_layer'] + 1})")
    for task in LAYER_TRANSFER_TASKS:
        train, evaluated = HUB_SPLITS[task]
        caps = layer_caps(cfg.section("layers"), cfg.section("finetune"), task)  # null: finetune's
        train_n = capped(capped(train, train_cap(get_task(task), ft)), caps["max_train_examples"])
        eval_n = capped(capped(evaluated, eval_cap(ft)), caps["max_eval_examples"])
        job = sum(finetune_cost(layers, tuned, lengths[task], train_n, eval_n, ft, ft["lm_weight"], args, False)
                  for _ in range(model["n_layer"] + 1))
        layers.jobs, layers.longest = layers.jobs + 1, max(layers.longest, job)  # one job: its k one after another
    zeroshot = zeroshot_line(cfg, gpt, lstm, lengths, args)
    lines += [finetune, no_aux, lstm_line, layers, zeroshot]
    print(render(lines, cfg, found, lengths, pretrain_tokens, mirror_tokens, {"GPT": gpt, "LSTM": lstm}))
    phases = plan(lines, args)
    print("\n" + render_plan(phases, args))
    total = sum(phase.wall for phase in phases)
    if args.max_minutes is not None and total > args.max_minutes * 60:
        raise SystemExit(f"the plan takes {total:.0f} s, over --max-minutes {args.max_minutes:g} "
                         f"({args.max_minutes * 60:.0f} s): lower the profile's steps or caps")


@dataclass
class Phase:
    """A step of the DAG's plan: what runs at once, and for how long."""

    what: str
    jobs: int
    gpu_seconds: float  # the GPU busy with arithmetic and fixed costs
    job_seconds: float  # the jobs' own time, starts and compiles included
    wall: float
    how: str


def plan(lines: list[Line], args: argparse.Namespace) -> list[Phase]:
    """The DAG's wall time on one GPU: data, pre-training (both models at once), the fan-out (--jobs-at-once at
    once: the larger of the GPU's arithmetic, the jobs' time over the jobs at once and the longest job), the report."""
    pretrain = [x for x in lines if x.what.startswith("pretrain")]
    fan_out = [x for x in lines if not x.what.startswith("pretrain")]
    start = args.job_start_s + args.compile_s
    gpu = sum(x.seconds for x in pretrain)
    phases = [Phase("data stages", 0, 0.0, args.data_s, args.data_s,
                    "prepared on a CPU and carried" if not args.data_s else "on the GPU machine's cores"),
              Phase("pre-training", len(pretrain), gpu, gpu + start * len(pretrain), start + gpu,
                    "both models at once: a start and compile, then the GPU's sum")]

    def per_job(line: Line) -> float:
        return args.job_start_s + (args.graphs_compile_s if args.graphs and line.updates else 0.0)

    rows = [Phase(x.what, x.jobs, x.seconds, x.seconds + x.jobs * per_job(x), 0.0, "in the fan-out") for x in fan_out]
    arithmetic = sum(x.flop_seconds for x in fan_out)
    shared = sum(x.job_seconds for x in rows) / args.jobs_at_once
    longest = max(x.longest + per_job(x) for x in fan_out)
    wall = max(arithmetic, shared, longest)
    how = (f"{args.jobs_at_once} at once: the largest of the GPU's arithmetic ({arithmetic:,.0f} s), the jobs' time "
           f"over {args.jobs_at_once} ({shared:,.0f} s) and the longest job ({longest:,.0f} s)")
    phases += [*rows, Phase("fan-out", 0, 0.0, 0.0, wall, how),
               Phase("report, dvc commit", 2, 0.0, args.report_s, args.report_s, "on the CPU")]
    return phases


def render_plan(phases: list[Phase], args: argparse.Namespace) -> str:
    total = sum(x.wall for x in phases)
    fixed = (f"CUDA graphs on: {args.update_ms:g} ms an update, {args.graphs_compile_s:g} s compile and capture a "
             f"job" if args.graphs else f"eager: {args.update_ms_eager:g} ms an update")
    out = [f"The plan: the whole DAG on one GPU, {args.jobs_at_once} fan-out jobs at once; fine-tuning {fixed}; "
           f"{args.job_start_s:g} s to start a job", "",
           "| phase | jobs | GPU s | job s | planned wall s | how |", "|---|---:|---:|---:|---:|---|"]
    out += [f"| {x.what} | {x.jobs or ''} | {x.gpu_seconds:,.0f} | {x.job_seconds:,.0f} | "
            f"{f'{x.wall:,.0f}' if x.wall or x.how != 'in the fan-out' else ''} | {x.how} |" for x in phases]
    limit = "" if args.max_minutes is None else f" (limit {args.max_minutes * 60:,.0f} s)"
    out.append(f"| **whole DAG** | {sum(x.jobs for x in phases)} | {sum(x.gpu_seconds for x in phases):,.0f} | "
               f"{sum(x.job_seconds for x in phases):,.0f} | **{total:,.0f}**{limit} | |")
    return "\n".join(out)


def zeroshot_line(cfg: Config, gpt: Costs, lstm: Costs, lengths: dict[str, Lengths], args: argparse.Namespace) -> Line:
    """Forward passes with the LM head over every position: CoLA and SST-2 (train, for the threshold and offset,
    and validation, SST-2 twice: two label words), RACE validation (4 answers), WikiText-2's articles (the held-out
    perplexity: windows of n_ctx overlapping by one); DPRD is small and left out."""
    cap = cfg.p["zeroshot"]["max_examples"]
    scored = {"cola": HUB_SPLITS["cola"][0] + capped(HUB_SPLITS["cola"][1], cap),
              "sst2": 2 * (HUB_SPLITS["sst2"][0] + capped(HUB_SPLITS["sst2"][1], cap)),
              "race": capped(4_887, cap)}
    points = cfg.p["pretrain"]["snapshots"]
    line = Line(f"zeroshot (2 models x {points} snapshots)", jobs=2)
    n_ctx = cfg.p["model"]["n_ctx"]
    window = Lengths(1, n_ctx, n_ctx**2, n_ctx, n_ctx**2)
    windows = math.ceil(WIKITEXT2_TOKENS / (n_ctx - 1))
    for costs in (gpt, lstm):
        tokens = points * (sum(n * lengths[t].real for t, n in scored.items()) + windows * n_ctx)
        flops = points * (sum(n * costs.score(lengths[t], lm_head=True) for t, n in scored.items())
                          + windows * costs.score(window, lm_head=True))
        before = line.seconds
        line.add(0, tokens, flops, costs.mfu, args)
        line.longest = max(line.longest, line.seconds - before)
    return line


def book_tokens(tokenizer: GPT1Tokenizer, chars: int) -> float:
    """Tokens per character of the mirror's novels under the released vocabulary, times their characters."""
    from gpt1.data.sources import DatasetRef, load_split

    ds = load_split(DatasetRef("books/gutenberg", "default", "train"), MIRROR, columns=["text"])
    text = "".join(row["text"] for row in ds.select(range(0, 99, 9)))[:chars]
    return len(tokenizer.encode_batch([text])[0]) / len(text) * MIRROR_BOOK_CHARS


def render(lines: list[Line], cfg: Config, found: dict[str, tuple[float, str]], lengths: dict[str, Lengths],
           pretrain_tokens: int, mirror_tokens: float, costs: dict[str, Costs]) -> str:
    shown = {k: f"{v:.1%}" if "mfu" in k else f"{v:g}" for k, (v, _) in found.items()}
    out = [f"profile {cfg.profile}; {machine()}; the speeds this estimate divides by:", "",
           "| speed | value | source |", "|---|---:|---|"]
    out += [f"| {MEASURABLE[k]} | {shown[k]} | {source} |" for k, (_, source) in found.items()]
    out += ["", "| stage | jobs | updates | tokens (padded) | PFLOP | GPU-hours |", "|---|---:|---:|---:|---:|---:|"]
    for line in lines:
        out.append(f"| {line.what} | {line.jobs} | {line.updates:,.0f} | {line.tokens / 1e9:,.2f}B | "
                   f"{line.flops / 1e15:,.0f} | {line.seconds / 3600:.2f} |")
    total = sum(line.seconds for line in lines)
    out.append(f"| **total** | | | | {sum(x.flops for x in lines) / 1e15:,.0f} | **{total / 3600:.2f}** |")
    out += ["", "| task | sequences/example | real tokens/example | padded tokens/example (batch "
            f"{cfg.p['finetune']['batch_size']}) |", "|---|---:|---:|---:|"]
    out += [f"| {t} | {x.sequences:.0f} | {x.real:.0f} | {x.padded:.0f} |" for t, x in lengths.items()]
    out.append("")
    for name, c in costs.items():
        out.append(f"{name}: {c.per_token:,} FLOPs per training token at n_ctx {cfg.p['model']['n_ctx']} "
                   f"(blocks {c.blocks:,}, attention {c.attention_per_ctx:,} x n_ctx, LM head {c.head:,})")
    out += ["", f"pre-training tokens per model: {pretrain_tokens:,} = {pretrain_tokens / mirror_tokens:.1f} epochs "
            f"of the mirror's 99 novels (~{mirror_tokens / 1e6:.1f}M tokens with the released vocabulary)"]
    return "\n".join(out)


if __name__ == "__main__":
    main()
