"""The commands a user runs by hand, beside the pipeline's stages: `gpt1 sample` (text from a pre-trained model) and
`gpt1 compare` (two results trees, or a DVC experiment against the workspace, cell by cell beyond noise).

They are no stage of either engine, so no stage's code input: cli.py registers them from a function that
gpt1.pipeline.codedeps leaves out of every stage's closure, and adding or changing one here reruns nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpt1.cli.preflight import MAX_SEED, seed
from gpt1.pipeline import layout
from gpt1.pipeline.errors import Gpt1Error, UsageError


def check_device(text: str) -> str:
    """--device: a torch device this machine has (cpu, cuda, cuda:N), named in one line when it is not."""
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        raise UsageError(f"--device {text}: not a torch device; give cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {text}: gpt1 runs on cpu or cuda; give cpu, cuda or cuda:N")
    count = torch.cuda.device_count() if device.type == "cuda" and torch.cuda.is_available() else 0
    if device.type == "cuda" and (count == 0 or (device.index or 0) >= count):
        raise UsageError(f"--device {text}: torch {torch.__version__} sees {count} CUDA device(s); give --device cpu"
                        + (f" or cuda:0..{count - 1}" if count else ""))
    return text


def _int_or_none(text: str) -> int | None:
    if text.lower() in ("none", "0"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number, or 0 (or none) to sample from every "
                                         "token") from None


def register(sub: Any, common: Any) -> None:
    """Add the commands to cli.py's subparsers; `common` adds --params/--profile/--set."""
    sample = sub.add_parser(
        "sample", help="Write text with a pre-trained model: a prompt continued (seeded: the same text every time).",
        description="Continue --prompt with a pre-trained model: a pretrain folder (results/<profile>/pretrain/gpt), "
                    "one of its snapshots (.../snapshots/03.safetensors), a folder of gpt1 export or a Hugging Face "
                    "OpenAIGPT folder or hub id (openai-community/openai-gpt). The same --seed gives the same text; "
                    "on the CPU under a pinned profile, on every host.")
    common(sample)
    sample.add_argument("--model", required=True, help="pretrain folder, snapshot file, HF folder or hub id")
    sample.add_argument("--tokenizer", type=Path, default=None,
                        help="folder of the bpe stage (required for our checkpoints and exports; an HF folder of the "
                             "released model brings its own vocabulary)")
    sample.add_argument("--prompt", default="The", help="text to continue (default: %(default)r)")
    sample.add_argument("--length", type=int, default=60, help="new tokens per sample (default: %(default)s)")
    sample.add_argument("--temperature", type=float, default=1.0, help="0: greedy (default: %(default)s)")
    sample.add_argument("--top-k", type=_int_or_none, default=40,
                        help="keep the k most likely tokens; 0 or none: all (default: %(default)s)")
    sample.add_argument("--seed", type=seed, default=0, help="sample i uses seed + i (default: %(default)s)")
    sample.add_argument("--samples", type=int, default=1, help="how many continuations (default: %(default)s)")
    sample.add_argument("--device", default="cpu", help="torch device (default: cpu, the reproducible one)")
    sample.add_argument("--workers", type=int, default=None, help="torch threads when the profile is not pinned")
    sample.set_defaults(call=_sample, tool=True)

    compare = sub.add_parser(
        "compare", help="Did a change matter beyond noise? Two results trees, job by job and cell by cell.",
        description="Compare results tree B against A (folders such as results/default, or DVC revisions: "
                    "rev:<commit, branch, tag or experiment name> reads --path of that revision from DVC's cache, "
                    "e.g. `gpt1 compare rev:HEAD results/default` after `dvc exp run -S ...`). Each cell (task x "
                    "variant x reported metric) gets B - A, a paired bootstrap on the evaluation examples both "
                    "scored and, with two or more seeds on both sides, a paired t-test across seeds; Holm-adjusted "
                    "over the cells; and a verdict. Also the settings that differ, read from the records.")
    compare.add_argument("a", help="the baseline: a results tree or rev:<revision>")
    compare.add_argument("b", help="the changed one: a results tree or rev:<revision>")
    compare.add_argument("--path", default="results/default",
                         help="the results tree inside a DVC revision (default: %(default)s)")
    compare.add_argument("--alpha", type=float, default=0.05, help="family-wise level (default: %(default)s)")
    compare.add_argument("--out", type=Path, default=None,
                         help="write compare.md, compare.html, compare.tex, cells.csv and settings.csv there")
    compare.set_defaults(call=_compare, tool=True)


def _tokenizer_for(model_arg: str, tokenizer_dir: Path | None, meta: dict[str, Any]) -> tuple[Any, str]:
    from gpt1.data.tokenizer import GPT1Tokenizer
    from gpt1.modeling.backbones import released_tokenizer

    if tokenizer_dir is not None:
        return GPT1Tokenizer.load(tokenizer_dir), str(tokenizer_dir)
    if meta.get("step") is None and not (Path(model_arg) / layout.HF_EXPORT_RECORD).is_file():
        return released_tokenizer(model_arg, None)  # a Hugging Face model: the released vocabulary
    raise Gpt1Error(f"{model_arg}: --tokenizer is required for a gpt1 model: the folder of the bpe stage that made "
                    f"it (e.g. results/default/tokenizer)")


def _trained_with(model_arg: str, meta: dict[str, Any]) -> str | None:
    """The sha256 of the tokenizer the model was trained with: its metadata, or gpt1_export.json beside an export."""
    record = Path(model_arg) / layout.HF_EXPORT_RECORD
    if meta.get("tokenizer_sha256") is None and record.is_file():
        return json.loads(record.read_text()).get("tokenizer_sha256")
    return meta.get("tokenizer_sha256")


def load_sampler(model_arg: str, tokenizer_dir: Path | None, device: str) -> tuple[Any, Any]:
    """(model, tokenizer) checked to belong together, before any text is drawn."""
    from gpt1.evaluation.sampling import check_pair
    from gpt1.modeling.checkpoints import load_pretrained

    model, meta = load_pretrained(model_arg)
    tokenizer, where = _tokenizer_for(model_arg, tokenizer_dir, meta)
    check_pair(model, _trained_with(model_arg, meta), tokenizer, model_arg, where)
    return model.to(device), tokenizer


def _sample(args: argparse.Namespace) -> int:
    from gpt1.pipeline.config import load_config
    from gpt1.training import cores

    cfg = load_config(args.params, args.profile, args.overrides)
    cores.prepare_process("sample", cfg.section("cpu"), args.workers)  # pinned kernels: the same draws everywhere

    from gpt1.evaluation.sampling import SampleSettings, sample_text

    if args.samples < 1:
        raise Gpt1Error(f"--samples {args.samples}: give at least 1")
    if args.seed + args.samples - 1 > MAX_SEED:
        raise UsageError(f"--seed {args.seed} --samples {args.samples}: the last sample's seed passes {MAX_SEED}; "
                        "give a smaller --seed")
    check_device(args.device)
    settings = SampleSettings(length=args.length, temperature=args.temperature, top_k=args.top_k, seed=args.seed)
    model, tokenizer = load_sampler(args.model, args.tokenizer, args.device)
    for i in range(args.samples):
        drawn = SampleSettings(settings.length, settings.temperature, settings.top_k, settings.seed + i)
        if args.samples > 1:
            print(f"--- sample {i + 1} of {args.samples} (seed {drawn.seed}) ---")
        print(sample_text(model, tokenizer, args.prompt, drawn), flush=True)
    return 0


def experiment_commit(name: str) -> str | None:
    """The commit of DVC experiment `name` (its ref refs/exps/.../<name>), or None when no experiment has it."""
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps"],
                          capture_output=True, text=True)
    for line in refs.stdout.splitlines():
        ref, _, commit = line.partition(" ")
        if ref.rsplit("/", 1)[-1] == name:
            return commit
    return None


def materialize(source: str, path: str, scratch: Path) -> Path:
    """A results tree from a folder, or from `rev:<revision>` through `dvc get` (DVC's cache: nothing re-runs)."""
    if not source.startswith("rev:"):
        return Path(source)
    revision = source.removeprefix("rev:")
    commit = experiment_commit(revision) or revision
    out = scratch / revision.replace("/", "_")
    # DVC as a module of this Python: the `dvc` beside it need not be on PATH (`.venv/bin/python -m gpt1 compare`).
    done = subprocess.run([sys.executable, "-m", "dvc", "get", ".", path, "--rev", commit, "-o", str(out)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        reason = next((line for line in lines if line.startswith("ERROR")), lines[0] if lines else "dvc get failed")
        raise Gpt1Error(f"{source}: cannot read {path} of that revision from DVC ({reason}); is it a commit or "
                        f"experiment of this repository whose outputs are in the cache (dvc pull)?")
    return out


def _compare(args: argparse.Namespace) -> int:
    from gpt1.report.compare import compare_trees, render

    if not 0 < args.alpha < 1:
        raise Gpt1Error(f"--alpha {args.alpha}: give a level between 0 and 1, e.g. 0.05")
    with tempfile.TemporaryDirectory(prefix="gpt1-compare-") as scratch:
        a, b = (materialize(source, args.path, Path(scratch)) for source in (args.a, args.b))
        files = render(compare_trees(a, b, args.alpha), args.a, args.b)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (args.out / name).write_text(text, encoding="utf-8")
    print(files["compare.md"], end="")
    return 0


__all__ = ["experiment_commit", "load_sampler", "materialize", "register"]
