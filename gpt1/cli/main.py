"""`gpt1 <stage> ...`: parse arguments, load the config, call one function. Nothing else lives here."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from gpt1.cli.boundary import killable, report
from gpt1.cli.preflight import check_stage, seed
from gpt1.pipeline.clock import PROCESS
from gpt1.pipeline.config import LAYER_TRANSFER_TASKS, finetune_task_names, load_config
from gpt1.training import cores

EPILOG = ("Settings come from params.yaml (the selected profile); --set KEY=VALUE overrides one, "
          "e.g. --set bpe.merges=500.")




class Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one line (no usage block): the stage, the problem, where to look."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stages: dict[str, argparse.ArgumentParser] = {}  # the top parser's subcommands (build_parser)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """As argparse, but an option the subcommand does not know is that subcommand's error, pointing at its own
        --help (argparse leaves it to the top parser: 'see gpt1 --help')."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.stages.get(getattr(parsed, "command", None) or "", self).error(
                f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="params file (default: params.yaml)")
    parser.add_argument("--profile", help="profile to run (default: the `profile` key of params.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting of the profile, e.g. bpe.merges=500 (repeatable)")


def _stage(sub, name: str, help_text: str, call: Callable, *dirs: tuple[str, str]) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOG)
    _common(parser)
    for flag, what in dirs:
        parser.add_argument(flag, type=Path, required=True, help=what)
    if name in cores.POOL_STAGES:
        parser.add_argument("--workers", type=int, default=None, help="processes to use (default: GPT1_WORKERS, "
                            "else OMP_NUM_THREADS, which Snakemake sets to the job's threads, else all cores)")
    elif name in cores.TORCH_STAGES:
        parser.add_argument("--workers", type=int, default=None,
                            help="torch threads when the profile is not pinned (a pinned one computes with "
                                 "cpu.threads; default: GPT1_WORKERS, else torch's own: OMP_NUM_THREADS, which "
                                 "Snakemake sets to the job's threads, else the cores)")
    parser.set_defaults(call=call, workers=None)


def _fetch(cfg, a) -> None:
    from gpt1.stages.corpus import fetch_stage

    fetch_stage(cfg, a.out)


def _clean(cfg, a) -> None:
    from gpt1.stages.corpus import clean_stage

    clean_stage(cfg, a.raw, a.out, a.workers)


def _bpe(cfg, a) -> None:
    from gpt1.stages.bpe import bpe_stage

    bpe_stage(cfg, a.corpus, a.out, a.workers)


def _encode(cfg, a) -> None:
    from gpt1.stages.encode import encode_stage

    encode_stage(cfg, a.tokenizer, a.corpus, a.out, a.workers)


def _pretrain(cfg, a) -> None:
    from gpt1.stages.pretrain import pretrain_stage

    pretrain_stage(cfg, a.model, a.ids, a.tokenizer, a.out)


def _encode_task(cfg, a) -> None:
    from gpt1.stages.encode_task import encode_task_stage

    encode_task_stage(cfg, a.task, a.tokenizer, a.out)


def _finetune(cfg, a) -> None:
    from gpt1.stages.finetune import finetune_stage

    finetune_stage(cfg, a.task, a.variant, a.seed, a.pretrained, a.tokenizer, a.out, transfer_layers=a.transfer_layers,
                   examples_dir=a.examples)


def _layers(cfg, a) -> None:
    from gpt1.stages.layers import layers_stage

    layers_stage(cfg, a.task, a.seed, a.pretrained, a.tokenizer, a.out, a.examples)


def _zeroshot(cfg, a) -> None:
    from gpt1.stages.zeroshot import zeroshot_stage

    zeroshot_stage(cfg, a.model_dir, a.tokenizer, a.out)


def _report(cfg, a) -> None:
    from gpt1.report.stage import report_stage

    report_stage(cfg, a.results, a.out)


def _export(cfg, a) -> None:
    from gpt1.stages.export import export_stage

    export_stage(cfg, a.model_dir, a.out, a.format)


def _show_config(cfg, a) -> None:
    import yaml

    mirror = None if cfg.data_mirror is None else str(cfg.data_mirror)  # null, not the string "None", when unset
    print(yaml.safe_dump({"profile": cfg.profile, "data_mirror": mirror, **cfg.p}, sort_keys=False))


def _tool_commands(sub) -> None:
    """The commands beside the stages (gpt1.cli.commands): gpt1.pipeline.codedeps leaves this function out of every
    stage's code inputs, so a change there reruns no stage."""
    from gpt1.cli.commands import register

    register(sub, _common)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="gpt1", description="The GPT-1 paper as a reproducible pipeline.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<stage>")
    _stage(sub, "fetch", "Stream the corpus into OUT/raw.jsonl with a manifest (counts, bytes, sha256).", _fetch,
           ("--out", "output folder"))
    _stage(sub, "clean", "Clean RAW/raw.jsonl (ftfy, standardisation, dedupe) and split it by document into OUT/.",
           _clean, ("--raw", "folder holding raw.jsonl"), ("--out", "output folder"))
    _stage(sub, "bpe", "Learn the BPE on CORPUS/train.jsonl; write OUT/tokenizer.json and OUT/gpt1_tokenizer.json.",
           _bpe, ("--corpus", "folder holding train.jsonl"), ("--out", "output folder"))
    _stage(sub, "encode", "Encode CORPUS/{train,validation}.jsonl into OUT/{split}.bin (token ids) + .json headers.",
           _encode, ("--tokenizer", "folder of the bpe stage"), ("--corpus", "folder of the clean stage"),
           ("--out", "output folder"))
    _stage(sub, "pretrain", "Pre-train a language model on IDS/train.bin (resumes an interrupted run); write OUT/.",
           _pretrain, ("--ids", "folder of the encode stage"), ("--tokenizer", "folder of the bpe stage"),
           ("--out", "output folder"))
    sub.choices["pretrain"].add_argument("--model", choices=("gpt", "lstm"), default="gpt",
                                         help="the GPT-1 decoder or the LSTM baseline (default: gpt)")
    _stage(sub, "encode-task", "Load, cut, cap, transform and tokenise one task's examples once; write "
           "OUT/examples.jsonl and OUT/encoded.json for its fine-tuning and layer jobs.", _encode_task,
           ("--tokenizer", "folder of the bpe stage"), ("--out", "output folder"))
    task_help = f"one of {', '.join(finetune_task_names())}"
    sub.choices["encode-task"].add_argument("--task", required=True, help=task_help)
    _stage(sub, "finetune", "Fine-tune on one task (one variant, one seed) and evaluate; write OUT/metrics.json, "
           "predictions.jsonl and curves.csv.", _finetune, ("--pretrained", "folder of the pretrain stage"),
           ("--tokenizer", "folder of the bpe stage"), ("--out", "output folder"))
    finetune = sub.choices["finetune"]
    finetune.add_argument("--task", required=True, help=task_help)
    finetune.add_argument("--variant", required=True,
                          help="pretrained | scratch | no_aux | lstm (--pretrained: the LSTM's folder) | released "
                               "(--pretrained: a Hugging Face folder or hub id, e.g. openai-community/openai-gpt)")
    finetune.add_argument("--seed", type=seed, required=True, help="the run's seed (0 .. 2**32 - 1)")

    _stage(sub, "layers", "Layers transferred (Figure 2 left): fine-tune TASK with 0..n_layer pre-trained blocks; "
           "write OUT/layers.json and layers.csv.", _layers, ("--pretrained", "folder of the pretrain stage"),
           ("--tokenizer", "folder of the bpe stage"), ("--out", "output folder"))
    sub.choices["layers"].add_argument("--task", required=True, help=" or ".join(LAYER_TRANSFER_TASKS))
    sub.choices["layers"].add_argument("--seed", type=seed, required=True, help="the run's seed (0 .. 2**32 - 1)")
    finetune.add_argument("--transfer-layers", type=int, default=None, metavar="K",
                          help="keep the embeddings and the first K pre-trained blocks, re-initialise the rest")
    for stage in ("finetune", "layers"):
        sub.choices[stage].add_argument("--examples", type=Path, default=None,
                                        help="folder of the encode-task stage for this task (default: load and "
                                             "tokenise the task's data here)")
    _stage(sub, "zeroshot", "Score the zero-shot heuristics (CoLA, SST-2, RACE, DPRD) and the held-out perplexity "
           "(WikiText-2) on every pre-training snapshot; write OUT/zeroshot.json, zeroshot.csv and heldout.csv.",
           _zeroshot, ("--model-dir", "folder of the pretrain stage"),
           ("--tokenizer", "folder of the bpe stage"), ("--out", "output folder"))
    _stage(sub, "report", "Render the paper's Tables 2-5 and Figure 2 beside ours into OUT/tables and OUT/figures.",
           _report, ("--results", "the profile's results folder"), ("--out", "output folder"))
    _stage(sub, "export", "Export a pre-trained model folder for another library.", _export,
           ("--model-dir", "folder of the pretrain stage"), ("--out", "output folder"))
    sub.choices["export"].add_argument("--format", choices=("hf",), default="hf",
                                       help="hf: a folder OpenAIGPTLMHeadModel.from_pretrained loads")
    _tool_commands(sub)
    show = sub.add_parser("config", help="Validate params.yaml and print the selected profile.",
                          description="Validate params.yaml (its schema and the rules between its settings) and print "
                                      "the selected profile, --set overrides applied.", epilog=EPILOG)
    _common(show)
    show.set_defaults(call=_show_config, workers=None)
    parser.stages = dict(sub.choices)
    return parser


def _run(args: argparse.Namespace) -> int:
    if getattr(args, "tool", False):
        return args.call(args)
    cfg = load_config(args.params, args.profile, args.overrides)
    if args.workers is not None and args.workers < 1:
        print(f"gpt1: --workers {args.workers}: must be at least 1", file=sys.stderr)
        return 2
    args.workers = cores.prepare_process(args.command, cfg.section("cpu"), args.workers, cfg.root["device"])
    check_stage(args)
    PROCESS.lap("setup")
    args.call(cfg, args)
    return 0


def main(argv: list[str] | None = None) -> int:
    PROCESS.lap("start")  # the interpreter and this module's imports
    args = build_parser().parse_args(argv)
    with killable():
        try:
            return _run(args)
        except BaseException as err:  # report() prints one line for what input explains, re-raises bugs
            return report(err, args)


def entry() -> NoReturn:
    """`gpt1` and `python -m gpt1`: `main`, then the exit without the interpreter's last collection, which walks every
    object torch, MLflow and their imports made (1.3-1.7 s of a 10 s smoke fine-tuning job: bench/job_phases.py).
    Frozen, they are left to the OS: atexit's handlers still run and the streams are flushed, but garbage held in
    reference cycles is not finalised, so nothing may leave a file to a __del__ (every output is written and closed
    before)."""
    code = main()
    gc.freeze()
    sys.exit(code)
