"""Every bad input is one line on stderr naming the file or setting and the fix, a non-zero exit code, no traceback,
and no finished output touched (the whole case folder is hashed before and after).

Cases run in-process through `gpt1.cli.main.main` on a copy of one small world of finished smoke outputs (made once from
conftest's tiny_data and trained_gpt); their names start with their class: params, cli, dataset, corpus, artifact,
mlflow, fs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import PARAMS, REPO, TINY, gpt1_command, tiny_config

from gpt1.cli.main import main

BASE = ["--params", str(PARAMS), "--profile", "smoke", *(arg for s in TINY for arg in ("--set", s))]
MIRROR_CORPUS = ("--set", "corpus.source=hub",
                 "--set", "corpus.dataset={path: books/gutenberg, name: default, split: train, text_field: text}")
RTE = ("nyu-mll", "glue", "rte")
# Finished outputs of the stages the world has no real run of (their file names, stand-in contents).
PREVIOUS = {"finetune": ("metrics.json", "predictions.jsonl", "curves.csv"),
            "zeroshot": ("zeroshot.json", "zeroshot.csv"),
            "hf": ("config.json", "model.safetensors", "gpt1_export.json")}


# ------------------------------------------------------------------------------------------------ the world


def _mirror(root: Path, docs: list[dict]) -> None:
    """A data mirror in the hub's layout: the corpus, and RTE's train and validation splits (project-made rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpt1.data.synthetic.tasks import synthetic_split
    from gpt1.data.tasks import get_task

    books = root / "books/gutenberg/default"
    books.mkdir(parents=True)
    pq.write_table(pa.table({"text": [d["text"] for d in docs]}), books / "train.parquet")
    for split in ("train", "validation"):
        rows = synthetic_split("nyu-mll/glue", "rte", split, rows=12, splits=get_task("rte").splits)
        rows.to_parquet(str(rte_file(root, split)))


def rte_file(mirror: Path, split: str) -> Path:
    path = mirror.joinpath(*RTE, f"{split}.parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def world(tiny_data, trained_gpt, tmp_path_factory) -> Path:
    """Finished outputs of every stage a case needs, each folder where the stage would write it again."""
    from gpt1.pipeline import layout
    from gpt1.pipeline.files import read_jsonl
    from gpt1.stages import corpus as stages

    root = tmp_path_factory.mktemp("world")
    corpus = tiny_config("corpus.synthetic_documents=12").section("corpus")
    stages.fetch(corpus, None, root / "raw/raw.jsonl", root / "raw/raw.manifest.json")
    splits = {s: root / f"corpus/{s}.jsonl" for s in layout.SPLITS}
    stages.clean(root / "raw/raw.jsonl", corpus, splits, root / "corpus/manifest.json")
    shutil.copytree(tiny_data.tokenizer, root / "tokenizer")
    shutil.copytree(tiny_data.ids, root / "ids")
    shutil.copytree(trained_gpt, root / "pretrain")
    for stage, names in PREVIOUS.items():  # earlier results that a failed run must leave alone
        (root / stage).mkdir()
        for name in names:
            (root / stage / name).write_text(f"previous {name}\n")
    _mirror(root / "mirror", list(read_jsonl(root / "raw/raw.jsonl")))
    return root


def digest(root: Path) -> dict[str, str]:
    """Every folder, file (sha256) and link under `root`, but a pre-training's resume state: the last good
    checkpoint that a stopped run keeps on purpose, not a finished output."""
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        if "resume" in rel.parts:
            continue
        found[f"{rel}/"] = "folder"
        for name in dirs + files:
            path = Path(folder, name)
            if path.is_symlink():
                found[str(rel / name)] = f"link to {os.readlink(path)}"
            elif path.is_file():
                found[str(rel / name)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def run_cli(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:  # argparse
        return int(exit_.code)


PROGRESS_BAR = re.compile(r"^[^:]*:\s+\d+%\|")  # tqdm's: pre-training draws one even with TQDM_DISABLE set


def assert_one_line(err: str, pattern: str) -> str:
    """The failure is one line on stderr (a progress bar drawn before it is not a message), holding `pattern`."""
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if not PROGRESS_BAR.match(line)]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    assert pattern in lines[0], f"{pattern!r} not in {lines[0]!r}"
    return lines[0]


# ------------------------------------------------------------------------------------------------ case helpers


def _nothing(w: Path) -> None:
    pass


def write(rel: str, data: bytes | str) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        path = w / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)

    return setup


def recorded(setup: Callable[[Path], None], rel: str, manifest: str, key: str | None) -> Callable[[Path], None]:
    """`setup`, then the file's size and sha256 written into its stage's manifest (under `key`), as if that stage
    had made the bad file: the reader's deeper check is what the case is about, not the record."""
    from gpt1.pipeline.files import file_record

    def both(w: Path) -> None:
        setup(w)
        data = json.loads((w / manifest).read_text())
        (data if key is None else data[key]).update(file_record(w / rel))
        (w / manifest).write_text(json.dumps(data))

    return both


def edit_json(rel: str, edit: Callable[[Any], None]) -> Callable[[Path], None]:
    """An earlier stage's JSON file with one value changed by hand."""
    def setup(w: Path) -> None:
        data = json.loads((w / rel).read_text())
        edit(data)
        (w / rel).write_text(json.dumps(data))

    return setup


def drop_lines(rel: str, keep: float = 0.5) -> Callable[[Path], None]:
    """Whole lines removed from the end: every line left is valid."""

    def setup(w: Path) -> None:
        lines = (w / rel).read_text(encoding="utf-8").splitlines(keepends=True)
        (w / rel).write_text("".join(lines[: max(1, int(len(lines) * keep))]), encoding="utf-8")

    return setup


def truncate(rel: str, keep: float = 0.5) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        path = w / rel
        path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])

    return setup


def params(edit: Callable[[str], str]) -> Callable[[Path], None]:
    """{w}/params.yaml: the repository's, edited as text (so YAML itself can be wrong). Keys the tests' TINY
    overrides set are set again by them: edit others."""
    return lambda w: (w / "params.yaml").write_text(edit(PARAMS.read_text()), encoding="utf-8")


def smoke_line(old: str, new: str) -> Callable[[str], str]:
    """Replace the first `old` inside the smoke profile."""

    def edit(text: str) -> str:
        head, smoke = text.split("  smoke:\n", 1)
        assert old in smoke
        return f"{head}  smoke:\n{smoke.replace(old, new, 1)}"

    return edit


def pickle_file(rel: str) -> Callable[[Path], None]:
    """A pickle whose loading would run code (it never must)."""

    def setup(w: Path) -> None:
        import torch

        (w / rel).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"weights": Evil()}, w / rel)

    return setup


class Evil:
    """Unpickling it runs a command that leaves a file: each case checks the file is not there."""

    def __reduce__(self):
        return (os.system, ("touch /tmp/gpt1-unpickled-code-ran",))


def parquet(rel: str, table: Callable) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        import pyarrow.parquet as pq

        pq.write_table(table(), w / rel)

    return setup


def _table(**columns: list) -> Callable:
    def make():
        import pyarrow as pa

        # An empty column needs a type; the others are inferred.
        return pa.table({k: pa.array(v, pa.string() if v == [] else None) for k, v in columns.items()})

    return make


def chain(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        for one in setups:
            one(w)

    return setup


def hf_folder_with_pickle(w: Path) -> None:
    from gpt1.modeling.hf import hf_config_from
    from gpt1.modeling.model import GPTConfig

    hf_config_from(GPTConfig(vocab_size=50, n_ctx=16, n_embd=16, n_layer=1, n_head=2)).save_pretrained(w / "released")
    pickle_file("released/pytorch_model.bin")(w)


def store_copy(w: Path) -> None:
    """{w}/mlflow.db: a copy of the session's MLflow store."""
    shutil.copy(os.environ["GPT1_TEST_STORE"].removeprefix("sqlite:///"), w / "mlflow.db")


def flip_bit(rel: str) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        data = bytearray((w / rel).read_bytes())
        data[-5] ^= 0x10  # inside the last tensor, header and size intact
        (w / rel).write_bytes(bytes(data))

    return setup


def ids_out_of_vocab(w: Path) -> None:
    import numpy as np

    ids = np.memmap(w / "ids/train.bin", dtype="uint16", mode="r+")
    ids[::7] = 65000  # far above the tiny vocabulary; size and header unchanged
    ids.flush()


def resume_state_pickle(w: Path) -> None:
    """A resumable checkpoint whose state file is a code-running pickle, its size and sha256 in latest.json."""
    from gpt1.pipeline.files import sha256_file

    make_checkpoint(w)
    pointer = json.loads((w / "pretrain/resume/latest.json").read_text())
    state = w / "pretrain/resume" / pointer["state"]["name"]
    pickle_file(str(state.relative_to(w)))(w)
    pointer["state"].update(bytes=state.stat().st_size, sha256=sha256_file(state))
    (w / "pretrain/resume/latest.json").write_text(json.dumps(pointer))


def make_checkpoint(w: Path) -> None:
    """pretrain/resume/ of a run stopped after its first checkpoint (made once per module, then copied)."""
    stopped = Path(os.environ["GPT1_TEST_SCRATCH"]) / "stopped"
    if not stopped.exists():
        shutil.copytree(w, stopped)
        stop_after_first_checkpoint(stopped)
    shutil.copytree(stopped / "pretrain/resume", w / "pretrain/resume")


def stop_after_first_checkpoint(w: Path) -> None:
    import gpt1.stages.pretrain as pretrain
    import gpt1.training.pretraining as pretraining

    real = pretraining.save_checkpoint

    def save_then_stop(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pretraining, "save_checkpoint", save_then_stop)
        with contextlib.suppress(KeyboardInterrupt):
            pretrain.pretrain_stage(tiny_config(), "gpt", w / "ids", w / "tokenizer", w / "pretrain")


@contextlib.contextmanager
def dev_full(rel: str) -> Iterator[None]:
    """The stage's temp file for `rel` is /dev/full: its writes fail with ENOSPC, like a full disk."""
    from gpt1.pipeline.files import temp_path

    path = temp_path(Path(os.environ["GPT1_TEST_WORLD"]) / rel)
    path.symlink_to("/dev/full")
    yield  # not removed here: the failing stage must remove its temp file, and the case's digest checks it did


@contextlib.contextmanager
def locked_store() -> Iterator[None]:
    """Another process's exclusive lock on {w}/mlflow.db for the whole call."""
    holder = sqlite3.connect(Path(os.environ["GPT1_TEST_WORLD"]) / "mlflow.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# ------------------------------------------------------------------------------------------------ stage commands


def fetch(*extra: str) -> list[str]:
    return ["fetch", "--out", "{w}/raw", *extra]


def clean(*extra: str) -> list[str]:
    return ["clean", "--raw", "{w}/raw", "--out", "{w}/corpus", *extra]


def bpe(*extra: str) -> list[str]:
    return ["bpe", "--corpus", "{w}/corpus", "--out", "{w}/tokenizer", "--set", "bpe.pretokenizer=fast", *extra]


def encode(*extra: str) -> list[str]:
    return ["encode", "--tokenizer", "{w}/tokenizer", "--corpus", "{w}/corpus", "--out", "{w}/ids", *extra]


def pretrain(*extra: str) -> list[str]:
    return ["pretrain", "--model", "gpt", "--ids", "{w}/ids", "--tokenizer", "{w}/tokenizer", "--out", "{w}/pretrain",
            *extra]


def finetune(*extra: str, variant: str = "pretrained", pretrained: str = "{w}/pretrain") -> list[str]:
    return ["finetune", "--task", "rte", "--variant", variant, "--seed", "0", "--pretrained", pretrained,
            "--tokenizer", "{w}/tokenizer", "--out", "{w}/finetune", *extra]


def zeroshot(*extra: str) -> list[str]:
    return ["zeroshot", "--model-dir", "{w}/pretrain", "--tokenizer", "{w}/tokenizer", "--out", "{w}/zeroshot", *extra]


def export(*extra: str) -> list[str]:
    return ["export", "--model-dir", "{w}/pretrain", "--out", "{w}/hf", *extra]


def config(*extra: str) -> list[str]:
    return ["config", *extra]


def mirror_finetune(*extra: str) -> list[str]:
    return finetune(*MIRROR_CORPUS, *extra)


# ------------------------------------------------------------------------------------------------ the cases


@dataclass(frozen=True)
class Case:
    name: str  # class/what
    argv: list[str]  # the stage and its folders; "{w}" is the case's copy of the world
    expect: str  # in the one line: the file or setting, and what is wrong
    setup: Callable[[Path], None] = _nothing
    extra: tuple[str, ...] = ()  # after the common --params/--profile/--set, so they win
    code: int = 1
    env: dict[str, str] = field(default_factory=dict)
    during: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    seconds: float | None = None  # a bound on the whole call, only where the behaviour is a time-out
    marks: tuple = ()


YAML_TAB = "profile: smoke\nprofiles:\n\tsmoke: {}\n"
# A time-out case's bound on its whole call (start-up included): under what it bounds (a call that waited our lock's
# 60 s default, or MLflow's ~4 min of retries, takes longer than that wait), with room for a start-up slowed by the
# other tests on the cores (pytest -n)
BOUND = 55
CASES = [
    # params.yaml and its settings
    Case("params/file-missing", config(), "{w}/nope.yaml: params file not found", extra=("--params", "{w}/nope.yaml"),
         code=2),
    Case("params/a-folder", config(), "{w}/corpus: a folder, not a params file", extra=("--params", "{w}/corpus"),
         code=2),
    Case("params/not-yaml", config(), "{w}/params.yaml: not valid YAML (found character '\\t'",
         write("params.yaml", YAML_TAB), extra=("--params", "{w}/params.yaml"), code=2),
    Case("params/a-list", config(), "{w}/params.yaml: expected a mapping", write("params.yaml", "- 1\n- 2\n"),
         extra=("--params", "{w}/params.yaml"), code=2),
    Case("params/latin1", config(), "{w}/params.yaml: not UTF-8 text",
         lambda w: (w / "params.yaml").write_bytes(b"# caf\xe9\n" + PARAMS.read_bytes()),
         extra=("--params", "{w}/params.yaml"), code=2),
    Case("params/duplicate-key", config(), "key 'lr' is given twice",
         params(smoke_line("      lr: 1.0e-3\n", "      lr: 1.0e-3\n      lr: 1.0e-2\n")),
         extra=("--params", "{w}/params.yaml"), code=2),
    Case("params/no-profiles-section", config(), "config error: <top level>: 'data_mirror' is a required property",
         write("params.yaml", "profile: smoke\n"), extra=("--params", "{w}/params.yaml"), code=2),
    Case("params/unknown-profile", config(), "profile: 'huge' is not defined; valid: smoke",
         extra=("--profile", "huge"), code=2),
    Case("params/unknown-key", config(), "unknown key profiles.smoke.bpe.merge: valid keys here are",
         params(smoke_line("      merges: 300\n", "      merge: 300\n      merges: 300\n")),
         extra=("--params", "{w}/params.yaml"), code=2),
    Case("params/wrong-type", config(), "profiles.smoke.bpe.limit_alphabet: 'all' has the wrong type, expected "
         "integer", params(smoke_line("limit_alphabet: 200", "limit_alphabet: all")),
         extra=("--params", "{w}/params.yaml"), code=2),
    Case("params/negative-lr", config(), "profiles.smoke.pretrain.lr: -0.001 is less than or equal to the minimum",
         params(smoke_line("lr: 1.0e-3", "lr: -1e-3")), extra=("--params", "{w}/params.yaml"), code=2),
    Case("params/nan-lr", config(), "profiles.smoke.pretrain.lr: not a finite number",
         params(smoke_line("lr: 1.0e-3", "lr: .nan")), extra=("--params", "{w}/params.yaml"), code=2),
    Case("params/float-count", config(), "profiles.smoke.bpe.merges: 1000.0 has the wrong type, expected integer "
         "(write 1000)", params(smoke_line("merges: 300", "merges: 1e3")), extra=("--params", "{w}/params.yaml"),
         code=2),
    Case("params/heads-do-not-divide", config(), "profiles.smoke.model.n_embd: 16 is not divisible by n_head=3",
         extra=("--set", "model.n_head=3"), code=2),
    Case("params/vocab-over-uint16", config(), "profiles.smoke.bpe.merges: a vocabulary of up to",
         extra=("--set", "bpe.merges=70000"), code=2),
    Case("params/ablation-without-lstm", config(), "ablation_tasks: the LSTM ablation needs lstm in pretrain_models",
         params(lambda t: t.replace("pretrain_models: [gpt, lstm]", "pretrain_models: [gpt]")),
         extra=("--params", "{w}/params.yaml"), code=2),
    Case("params/empty-experiment", config(), "mlflow.experiment: '' should be non-empty",
         params(lambda t: t.replace("experiment: gpt1", "experiment: ''")), extra=("--params", "{w}/params.yaml"),
         code=2),
    Case("params/max-bytes-zero", fetch(), "profiles.smoke.corpus.max_bytes: 0 is less than the minimum of 1",
         extra=("--set", "corpus.max_bytes=0"), code=2),
    # command-line arguments
    Case("cli/set-into-an-unset-section", config(), "--set pretrain.by_model.gpt.lr=1e-3: 'by_model' is not a section "
         "of profiles.smoke; a setting unset here is given whole: --set 'pretrain.by_model={gpt: {lr: 0.001}}'",
         extra=("--set", "pretrain.by_model.gpt.lr=1e-3"), code=2),
    Case("params/cuda-graphs-maybe", config(), "profiles.smoke.finetune.cuda_graphs: 'maybe' is not one of True, "
         "False, auto, capture", extra=("--set", "finetune.cuda_graphs=maybe"), code=2),
    Case("args/finetune-from-a-snapshot-file", finetune(pretrained="{w}/pretrain/snapshots/00.safetensors"),
         "--pretrained {w}/pretrain/snapshots/00.safetensors: a file; fine-tuning starts from the folder gpt1 pretrain "
         "wrote (here perhaps {w}/pretrain)"),
    Case("args/sample-model-path-mistyped", ["sample", "--model", "{w}/pretrian"], "{w}/pretrian: no such file or "
         "folder; give a pretrain folder, a .safetensors snapshot, a Hugging Face folder or a hub id (org/name)"),
    Case("cli/set-without-value", config(), "--set 'bpe.merges': expected KEY=VALUE", extra=("--set", "bpe.merges"),
         code=2),
    Case("cli/set-bad-yaml", config(), "--set 'corpus.files=[': the value is not valid YAML",
         extra=("--set", "corpus.files=["), code=2),
    Case("cli/set-empty-key-part", config(), "--set 'bpe..merges=3': empty key", extra=("--set", "bpe..merges=3"),
         code=2),
    Case("cli/set-unknown-section", config(), "--set nosuch.key=1: 'nosuch' is not a section of profiles.smoke",
         extra=("--set", "nosuch.key=1"), code=2),
    Case("cli/set-section-to-scalar", config(), "profiles.smoke.model: 3 has the wrong type, expected object",
         extra=("--set", "model=3"), code=2),
    Case("cli/set-word-for-number", config(), "profiles.smoke.pretrain.lr: 'fast' has the wrong type",
         extra=("--set", "pretrain.lr=fast"), code=2),
    Case("cli/seed-negative", finetune(), "gpt1 finetune: error: argument --seed: -1 is outside 0..4294967295",
         extra=("--seed", "-1"), code=2),
    Case("cli/seed-too-large", finetune(), "argument --seed: 4294967296 is outside 0..4294967295",
         extra=("--seed", "4294967296"), code=2),
    Case("cli/seed-not-a-number", ["layers", "--task", "race", "--seed", "x", "--pretrained", "{w}/pretrain",
         "--tokenizer", "{w}/tokenizer", "--out", "{w}/layers"], "argument --seed: 'x' is not an integer", code=2),
    Case("cli/workers-zero", encode(), "--workers 0: must be at least 1", extra=("--workers", "0"), code=2),
    Case("cli/workers-env-not-a-number", encode(), "GPT1_WORKERS='all': expected a number of cores to use",
         env={"GPT1_WORKERS": "all"}, code=2),
    Case("cli/workers-not-a-number", encode(), "argument --workers: invalid int value: 'many'",
         extra=("--workers", "many"), code=2),
    Case("cli/unknown-model", pretrain(), "argument --model: invalid choice: 'bert'", extra=("--model", "bert"),
         code=2),
    Case("cli/unknown-stage", ["pretrian"], "argument <stage>: invalid choice: 'pretrian'", code=2),
    Case("cli/missing-argument", ["bpe", "--corpus", "{w}/corpus"], "the following arguments are required: --out",
         code=2),
    Case("cli/unknown-variant", finetune(variant="bogus"), "--variant 'bogus' is unknown; valid:", code=2),
    Case("cli/unknown-task", finetune(), "--task 'winograd' is unknown; valid: snli", extra=("--task", "winograd"),
         code=2),
    Case("cli/analysis-task", finetune(), "--task 'dprd' is an analysis dataset (zero-shot), not fine-tuned",
         extra=("--task", "dprd"), code=2),
    Case("cli/layers-unknown-task", ["layers", "--task", "sst2", "--seed", "0", "--pretrained", "{w}/pretrain",
         "--tokenizer", "{w}/tokenizer", "--out", "{w}/layers"], "--task 'sst2': the layer-transfer analysis covers",
         code=2),
    Case("cli/transfer-too-many-layers", finetune(), "transfer_layers=9: valid values are 0..1",
         extra=("--transfer-layers", "9")),
    Case("cli/tokenizer-is-a-file", encode(), "--tokenizer {w}/tokenizer/tokenizer.json: a file; pass the folder",
         extra=("--tokenizer", "{w}/tokenizer/tokenizer.json")),
    Case("cli/ids-folder-missing", pretrain(), "{w}/nowhere/train.bin: missing; run the encode stage",
         extra=("--ids", "{w}/nowhere")),
    Case("cli/model-dir-not-pretrain", export(), "{w}/ids: no model.json; pass the output folder of gpt1 pretrain",
         extra=("--model-dir", "{w}/ids")),
    # datasets: the data mirror's parquet files
    Case("dataset/corpus-0-rows", fetch(*MIRROR_CORPUS), "{w}/mirror/books/gutenberg/default/train.parquet: 0 rows",
         parquet("mirror/books/gutenberg/default/train.parquet", _table(text=[])),
         env={"GPT1_DATA_MIRROR": "{w}/mirror"}),
    Case("dataset/corpus-garbage", fetch(*MIRROR_CORPUS),
         "{w}/mirror/books/gutenberg/default/train.parquet: not a readable parquet file",
         write("mirror/books/gutenberg/default/train.parquet", b"PAR1" + bytes(range(256)) * 8),
         env={"GPT1_DATA_MIRROR": "{w}/mirror"}),
    Case("dataset/corpus-wrong-column", fetch(*MIRROR_CORPUS), "missing column(s) text; present: body",
         parquet("mirror/books/gutenberg/default/train.parquet", _table(body=["a b c", "d e f"])),
         env={"GPT1_DATA_MIRROR": "{w}/mirror"}),
    Case("dataset/corpus-numbers-for-text", fetch(*MIRROR_CORPUS), "row 0, column text holds int 1, not text",
         parquet("mirror/books/gutenberg/default/train.parquet", lambda: __import__("pyarrow").table({"text": [1]})),
         env={"GPT1_DATA_MIRROR": "{w}/mirror"}),
    Case("dataset/corpus-not-in-mirror", fetch(*MIRROR_CORPUS), "books/gutenberg (default, split train): dataset "
         "not in mirror", lambda w: shutil.rmtree(w / "mirror/books"), env={"GPT1_DATA_MIRROR": "{w}/mirror"}),
    Case("dataset/mirror-missing", fetch(*MIRROR_CORPUS), "data mirror {w}/elsewhere does not exist",
         env={"GPT1_DATA_MIRROR": "{w}/elsewhere"}),
    Case("dataset/task-0-rows", mirror_finetune(), "{w}/mirror/nyu-mll/glue/rte/validation.parquet: 0 rows",
         parquet("mirror/nyu-mll/glue/rte/validation.parquet", _table(sentence1=[], sentence2=[], label=[], idx=[])),
         env={"GPT1_DATA_MIRROR": "{w}/mirror"}),
    Case("dataset/task-garbage", mirror_finetune(), "rte/train.parquet: not a readable parquet file",
         write("mirror/nyu-mll/glue/rte/train.parquet", b"garbage, not parquet\n" * 50),
         env={"GPT1_DATA_MIRROR": "{w}/mirror"}),
    Case("dataset/task-wrong-columns", mirror_finetune(),
         "task rte, split train, field 'sentence1': column missing from the data (columns: premise)",
         parquet("mirror/nyu-mll/glue/rte/train.parquet", _table(premise=["a", "b"])),
         env={"GPT1_DATA_MIRROR": "{w}/mirror"}),
    # corpus files
    Case("corpus/latin1-file", fetch("--set", "corpus.source=files", "--set", "corpus.files=[{w}/books/*.txt]"),
         "{w}/books/b.txt: not UTF-8 text (byte 3)",
         chain(write("books/a.txt", "Plain text.\n"), write("books/b.txt", "Caf\xe9 cr\xe8me.\n".encode("latin-1")))),
    Case("corpus/files-match-nothing", fetch("--set", "corpus.source=files", "--set", "corpus.files=[{w}/no/*.txt]"),
         "corpus.files: pattern '{w}/no/*.txt' matches no file"),
    Case("corpus/zero-documents-clean", clean(), "corpus: 0 document(s) after cleaning",
         recorded(write("raw/raw.jsonl", ""), "raw/raw.jsonl", "raw/raw.manifest.json", None)),
    Case("corpus/zero-documents-bpe", bpe(), "{w}/corpus/train.jsonl: no documents; re-run gpt1 clean",
         recorded(write("corpus/train.jsonl", ""), "corpus/train.jsonl", "corpus/manifest.json", "train")),
    Case("corpus/zero-documents-encode", encode(), "{w}/corpus/validation.jsonl: no documents",
         recorded(write("corpus/validation.jsonl", ""), "corpus/validation.jsonl", "corpus/manifest.json",
                  "validation")),
    Case("corpus/raw-not-json-lines", clean(), "{w}/raw/raw.jsonl:2: not a JSON line",
         recorded(write("raw/raw.jsonl", '{"id": "a", "text": "x"}\nnot json\n'), "raw/raw.jsonl",
                  "raw/raw.manifest.json", None)),
    Case("corpus/raw-changed", clean(), "{w}/raw/raw.jsonl: sha256 differs from the one",
         lambda w: (w / "raw/raw.jsonl").write_bytes((w / "raw/raw.jsonl").read_bytes().replace(b"e", b"a", 1))),
    Case("corpus/train-cut-mid-line", encode(), "{w}/corpus/train.jsonl: 14579 bytes, but "
         "{w}/corpus/manifest.json records 29159; the file was changed or truncated, re-run the clean stage",
         truncate("corpus/train.jsonl")),
    Case("corpus/raw-missing", clean(), "{w}/raw/raw.jsonl: missing; run the fetch stage",
         lambda w: (w / "raw/raw.jsonl").unlink()),
    Case("corpus/raw-lines-dropped", clean(), "{w}/raw/raw.jsonl: 13042 bytes, but "
         "{w}/raw/raw.manifest.json records 36136; the file was changed or truncated, re-run the fetch stage",
         drop_lines("raw/raw.jsonl")),
    # artifacts of earlier stages
    Case("artifact/ids-header-garbage", pretrain(), "{w}/ids/train.json: not valid JSON",
         write("ids/train.json", "{x")),
    Case("artifact/model-json-garbage", export(), "{w}/pretrain/model.json: not valid JSON",
         write("pretrain/model.json", "{not json")),
    Case("artifact/model-json-garbage-finetune", finetune(), "{w}/pretrain/model.json: not valid JSON",
         write("pretrain/model.json", "")),
    Case("artifact/snapshot-index-garbage", zeroshot(), "{w}/pretrain/snapshots/index.json: not valid JSON",
         write("pretrain/snapshots/index.json", "[{")),
    Case("artifact/gpt1-tokenizer-garbage", encode(), "{w}/tokenizer/gpt1_tokenizer.json: not valid JSON",
         write("tokenizer/gpt1_tokenizer.json", "{garbage")),
    Case("artifact/gpt1-tokenizer-keys-missing", encode(), "{w}/tokenizer/gpt1_tokenizer.json: lacks pretokenizer",
         write("tokenizer/gpt1_tokenizer.json", "{}")),
    Case("artifact/tokenizer-truncated", encode(), "{w}/tokenizer/tokenizer.json: not valid JSON",
         truncate("tokenizer/tokenizer.json")),
    Case("artifact/tokenizer-not-a-tokenizer", pretrain(), "{w}/tokenizer/tokenizer.json: not a tokenizers file",
         write("tokenizer/tokenizer.json", '{"version": "1.0"}')),
    Case("artifact/ids-header-a-text-count", pretrain(), "{w}/ids/train.json: key 'vocab_size' is '367', expected "
         "an integer; re-run gpt1 encode", edit_json("ids/train.json", lambda h: h.update(vocab_size="367"))),
    Case("artifact/ids-header-a-number-for-a-digest", pretrain(), "{w}/ids/train.json: key 'tokenizer_sha256' is "
         "12345, expected text", edit_json("ids/train.json", lambda h: h.update(tokenizer_sha256=12345))),
    Case("artifact/snapshot-index-a-text-index", zeroshot(), "{w}/pretrain/snapshots/index.json: key 'index' is "
         "'0', expected an integer; re-run gpt1 pretrain",
         edit_json("pretrain/snapshots/index.json", lambda entries: entries[0].update(index="0"))),
    Case("artifact/raw-manifest-a-number-for-the-source", clean(), "{w}/raw/raw.manifest.json: key 'source' is 5, "
         "expected text; re-run gpt1 fetch", edit_json("raw/raw.manifest.json", lambda m: m.update(source=5))),
    Case("artifact/raw-manifest-keys-missing", clean(), "{w}/raw/raw.manifest.json: records no size and sha256 for "
         "raw.jsonl; re-run the fetch stage", write("raw/raw.manifest.json", "{}")),
    Case("artifact/corpus-manifest-a-list", bpe(), "{w}/corpus/manifest.json: lacks train",
         write("corpus/manifest.json", "[]")),
    Case("artifact/model-json-a-list", zeroshot(), "{w}/pretrain/model.json: not the model.json gpt1 pretrain writes",
         write("pretrain/model.json", "[]")),
    Case("artifact/snapshot-index-empty", zeroshot(), "{w}/pretrain/snapshots/index.json: not a list of snapshots",
         write("pretrain/snapshots/index.json", "{}")),
    Case("artifact/ids-header-bad-dtype", pretrain(), "{w}/ids/train.json: dtype 'float7' is not one of uint16, uint32",
         lambda w: (w / "ids/train.json").write_text(
             json.dumps({**json.loads((w / "ids/train.json").read_text()), "dtype": "float7"}))),
    Case("artifact/ids-header-big-endian", pretrain(), "{w}/ids/train.json: dtype '>u2' is not one of uint16, uint32 "
         "(encode.dtype); re-run gpt1 encode", edit_json("ids/train.json", lambda h: h.update(dtype=">u2"))),
    Case("artifact/ids-truncated", pretrain(), "{w}/ids/train.bin: 21883 bytes, header says 21883 "
         "uint16 tokens (43766 bytes); the file is truncated or stale, re-run gpt1 encode", truncate("ids/train.bin")),
    Case("artifact/weights-truncated", finetune(), "{w}/pretrain/model.safetensors: 16900 bytes, but "
         "{w}/pretrain/model.json records 33800; the file was changed or truncated, re-run the pretrain stage",
         truncate("pretrain/model.safetensors")),
    Case("artifact/weights-truncated-unrecorded", finetune(), "{w}/pretrain/model.safetensors: not a readable "
         "safetensors file", chain(truncate("pretrain/model.safetensors"), recorded(
             lambda w: None, "pretrain/model.safetensors", "pretrain/model.json", "weights"))),
    Case("artifact/snapshot-truncated", zeroshot(), "{w}/pretrain/snapshots/01.safetensors: 16900 bytes, but "
         "{w}/pretrain/snapshots/index.json records", truncate("pretrain/snapshots/01.safetensors")),
    Case("artifact/weights-are-a-pickle", finetune(), "{w}/pretrain/model.safetensors: 1313 bytes, but",
         pickle_file("pretrain/model.safetensors")),
    Case("artifact/hf-folder-pickle", finetune(variant="released", pretrained="{w}/released"),
         "{w}/released: only pytorch_model.bin (pickled weights), no model.safetensors", hf_folder_with_pickle),
    Case("artifact/resume-state-pickle", pretrain(), ".pt: refused to unpickle it", resume_state_pickle),
    Case("artifact/resume-pointer-garbage", pretrain(), "{w}/pretrain/resume/latest.json: not valid JSON",
         write("pretrain/resume/latest.json", "{")),
    # Recorded, so that the sha256 check passes and the id check is what refuses it.
    Case("artifact/ids-out-of-vocabulary", pretrain(), "{w}/ids/train.bin: holds token id 65000, but the vocabulary "
         "has", recorded(ids_out_of_vocab, "ids/train.bin", "ids/train.json", None)),
    Case("artifact/ids-changed", pretrain(), "{w}/ids/train.bin: sha256 differs from the one", ids_out_of_vocab),
    Case("artifact/weights-bit-flipped", export(), "{w}/pretrain/model.safetensors: sha256 differs from the one",
         flip_bit("pretrain/model.safetensors"),
         ),
    Case("artifact/snapshot-bit-flipped", zeroshot(), "{w}/pretrain/snapshots/00.safetensors: sha256 differs from",
         flip_bit("pretrain/snapshots/00.safetensors")),
    Case("artifact/nan-loss", pretrain(), "the training loss is nan; stopped, no checkpoint had been written yet; "
         "lower pretrain.lr or set pretrain.grad_clip", extra=("--set", "pretrain.lr=1.0e+30"),
         ),
    # the MLflow store (BOUND: the capped retries and the short lock wait, not MLflow's ~4 min nor our 60 s default)
    Case("mlflow/dead-server", bpe(), "MLflow server http://127.0.0.1:9 is unreachable (Connection refused)",
         env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}, seconds=BOUND),
    Case("mlflow/dead-database", bpe(), "MLflow database postgresql://me:***@127.0.0.1:9/mlflow is unreachable "
         "(Connection refused); start it", env={"MLFLOW_TRACKING_URI": "postgresql://me:secret@127.0.0.1:9/mlflow"},
         seconds=BOUND),
    Case("mlflow/database-port-not-a-number", bpe(), "MLFLOW_TRACKING_URI=mysql+pymysql://127.0.0.1:db/mlflow: not a "
         "database address", env={"MLFLOW_TRACKING_URI": "mysql+pymysql://127.0.0.1:db/mlflow"}),
    Case("mlflow/file-store", bpe(), "; MLflow 3 keeps runs in a database: set MLFLOW_TRACKING_URI=sqlite:///mlflow.db",
         env={"MLFLOW_TRACKING_URI": "file://{w}/mlruns"}),
    Case("mlflow/garbage-sqlite", encode(), "{w}/mlflow.db: the MLflow store is not an SQLite database",
         write("mlflow.db", bytes(range(256)) * 40), env={"MLFLOW_TRACKING_URI": "sqlite:///{w}/mlflow.db"}),
    Case("mlflow/truncated-sqlite", encode(), "{w}/mlflow.db: the MLflow store is truncated",
         chain(store_copy, truncate("mlflow.db")), env={"MLFLOW_TRACKING_URI": "sqlite:///{w}/mlflow.db"}),
    Case("mlflow/header-only-sqlite", encode(), "{w}/mlflow.db: the MLflow store is corrupt",
         chain(store_copy, lambda w: _scramble_after_header(w / "mlflow.db")),
         env={"MLFLOW_TRACKING_URI": "sqlite:///{w}/mlflow.db"}),
    Case("mlflow/locked-sqlite", encode(), "{w}/mlflow.db: the MLflow store is locked by another process "
         "(waited 0.5 s)",
         store_copy, env={"MLFLOW_TRACKING_URI": "sqlite:///{w}/mlflow.db", "GPT1_MLFLOW_LOCK_TIMEOUT": "0.5"},
         during=locked_store, seconds=BOUND),
    Case("mlflow/store-is-a-folder", encode(), "{w}/store.db: the MLflow store is not a file",
         lambda w: (w / "store.db").mkdir(), env={"MLFLOW_TRACKING_URI": "sqlite:///{w}/store.db"}),
    Case("mlflow/server-uri-without-host", encode(), "MLFLOW_TRACKING_URI=http://:5000: not a server address",
         env={"MLFLOW_TRACKING_URI": "http://:5000"}),
    Case("mlflow/dead-server-password-hidden", bpe(), "MLflow server http://me:***@127.0.0.1:9 is unreachable",
         env={"MLFLOW_TRACKING_URI": "http://me:secret@127.0.0.1:9"}, seconds=BOUND),
    Case("mlflow/pipeline-name-with-a-quote", bpe(), "GPT1_PIPELINE_RUN=\"run'1\": quotes and backslashes cannot be "
         "searched for", env={"GPT1_PIPELINE_RUN": "run'1"}),
    Case("mlflow/lock-timeout-not-a-number", encode(), "GPT1_MLFLOW_LOCK_TIMEOUT='soon': not a number of seconds",
         store_copy, env={"MLFLOW_TRACKING_URI": "sqlite:///{w}/mlflow.db", "GPT1_MLFLOW_LOCK_TIMEOUT": "soon"}),
    # the file system
    Case("fs/out-is-a-file", bpe(), "--out {w}/corpus/train.jsonl: is a file, not a folder",
         extra=("--out", "{w}/corpus/train.jsonl")),
    Case("fs/out-under-a-file", encode(), "--out {w}/corpus/train.jsonl/ids: is inside {w}/corpus/train.jsonl, "
         "which is a file", extra=("--out", "{w}/corpus/train.jsonl/ids")),
    Case("fs/out-is-its-input", export(), "--out {w}/pretrain: is the --model-dir folder, which this stage reads; "
         "choose another --out", extra=("--out", "{w}/pretrain")),
    Case("fs/out-is-its-model-spelled-otherwise", zeroshot(), "--out {w}/corpus/../pretrain: is the --model-dir "
         "folder", extra=("--out", "{w}/corpus/../pretrain")),
    Case("fs/out-is-the-model-it-fine-tunes", finetune(), "--out {w}/pretrain: is the --pretrained folder",
         extra=("--out", "{w}/pretrain")),
    Case("args/sample-device-not-torchs", ["sample", "--model", "{w}/pretrain", "--device", "gpu"],
         "--device gpu: not a torch device; give cpu, cuda or cuda:N", code=2),
    Case("args/sample-device-absent", ["sample", "--model", "{w}/pretrain", "--device", "cuda:7"],
         "--device cuda:7: torch ", code=2),
    Case("args/sample-seed-too-large", ["sample", "--model", "{w}/pretrain", "--seed", "18446744073709551616"],
         "argument --seed: 18446744073709551616 is outside 0..4294967295", code=2),
    Case("args/sample-seeds-pass-the-largest", ["sample", "--model", "{w}/pretrain", "--seed", "4294967295",
                                                "--samples", "2"], "the last sample's seed passes 4294967295", code=2),
    Case("fs/out-a-link-to-its-model", export(), "--out {w}/link: is the --model-dir folder",
         lambda w: (w / "link").symlink_to(w / "pretrain"), extra=("--out", "{w}/link")),
    Case("args/report-results-a-file", ["report", "--results", "{w}/raw/raw.jsonl", "--out", "{w}/report"],
         "--results {w}/raw/raw.jsonl: a file; pass the pipeline's results folder (results/<profile>)"),
    Case("args/sample-weights-file-mistyped", ["sample", "--model", "snapshots/07.safetensors"],
         "snapshots/07.safetensors: no such file or folder"),
    Case("args/report-results-missing", ["report", "--results", "{w}/nowhere", "--out", "{w}/report"],
         "--results {w}/nowhere: no such folder; pass the pipeline's results folder (results/<profile>)"),
    Case("fs/out-under-a-device", fetch(), "--out /dev/null/raw: is inside /dev/null, which is a file",
         extra=("--out", "/dev/null/raw")),
    Case("fs/out-symlink-loop", encode(), "--out {w}/loop: {w}/loop is a broken or looping symbolic link",
         lambda w: (w / "loop").symlink_to("loop"), extra=("--out", "{w}/loop")),
    Case("fs/out-name-too-long", clean(), "is longer than 255 bytes; choose a shorter one",
         extra=("--out", "{w}/" + "x" * 300)),
    Case("fs/disk-full-encode", encode(), "No space left on device while writing to {w}/ids; the disk is full",
         during=lambda: dev_full("ids/train.bin")),
    Case("fs/disk-full-bpe", bpe(), "No space left on device while writing to {w}/tokenizer; the disk is full",
         during=lambda: dev_full("tokenizer/tokenizer.json")),
    Case("fs/disk-full-fetch", fetch(), "No space left on device while writing to {w}/raw; the disk is full",
         during=lambda: dev_full("raw/raw.jsonl")),
    Case("fs/disk-full-pretrain", pretrain(), "No space left on device while writing to {w}/pretrain; the disk is full",
         during=lambda: dev_full("pretrain/metrics.json")),
]


def _scramble_after_header(path: Path) -> None:
    """A valid 100-byte header, garbage in the schema page after it."""
    data = bytearray(path.read_bytes())
    data[100:4096] = bytes((i * 37) % 251 for i in range(3996))
    path.write_bytes(bytes(data))


def _params(case: Case) -> object:
    return pytest.param(case, id=case.name, marks=case.marks)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """For what cases make once and share (a stopped run's checkpoint)."""
    return tmp_path_factory.mktemp("scratch")


@pytest.mark.parametrize("case", [_params(c) for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(case, world, scratch, tmp_path, capsys, monkeypatch, mlflow_env):
    w = tmp_path / "w"
    shutil.copytree(world, w, symlinks=True)
    monkeypatch.setenv("GPT1_TEST_WORLD", str(w))
    monkeypatch.setenv("GPT1_TEST_SCRATCH", str(scratch))
    monkeypatch.setenv("GPT1_WORKERS", "1")
    monkeypatch.setenv("GPT1_TEST_STORE", mlflow_env)
    for key, value in case.env.items():
        monkeypatch.setenv(key, value.replace("{w}", str(w)))
    case.setup(w)
    capsys.readouterr()  # what making the case printed is not the stage's
    before = digest(w)
    argv = [arg.replace("{w}", str(w)) for arg in [*case.argv, *BASE, *case.extra]]
    started = time.perf_counter()
    with case.during():
        code = run_cli(argv)
    seconds = time.perf_counter() - started
    assert_one_line(capsys.readouterr().err, case.expect.replace("{w}", str(w)))
    assert code == case.code
    assert digest(w) == before
    assert case.seconds is None or seconds < case.seconds
    assert not Path("/tmp/gpt1-unpickled-code-ran").exists()


# ------------------------------------------------------------------------------------------------ permissions


NOBODY = 65534


@contextlib.contextmanager
def as_nobody() -> Iterator[None]:
    """Root writes anywhere: drop to nobody for the call (back to root after). Others are refused by the modes."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@pytest.fixture
def readonly(mlflow_db: str) -> Iterator[Path]:
    """A root-owned folder others may enter but not write, in /tmp (nobody cannot enter pytest's own folders): a
    finished output inside, a params file only root may read, an MLflow store nobody may write, and one folder
    anyone may write."""
    folder = Path(tempfile.mkdtemp(prefix="gpt1-readonly-"))
    try:
        (folder / "out").mkdir()
        (folder / "out/raw.jsonl").write_text('{"id": "previous", "text": "finished"}\n')
        shutil.copy(PARAMS, folder / "params.yaml")
        (folder / "params.yaml").chmod(0o600)
        shutil.copy(mlflow_db.removeprefix("sqlite:///"), folder / "mlflow.db")
        (folder / "mlflow.db").chmod(0o644)
        (folder / "writable").mkdir(mode=0o777)
        (folder / "writable").chmod(0o777)
        for path in (folder, folder / "out"):
            path.chmod(0o555)
        yield folder
    finally:
        for path in (folder, folder / "out"):
            path.chmod(0o755)
        shutil.rmtree(folder)


PERMISSION_CASES = [
    Case("fs/unwritable-out", fetch(), "--out {ro}/out: cannot write in {ro}/out (Permission denied)",
         extra=("--out", "{ro}/out")),
    Case("fs/unwritable-out-parent", fetch(), "--out {ro}/out/new/raw: cannot write in {ro}/out (Permission denied)",
         extra=("--out", "{ro}/out/new/raw")),
    Case("params/unreadable", config(), "{ro}/params.yaml: cannot be read (Permission denied)",
         extra=("--params", "{ro}/params.yaml"), code=2),
    Case("mlflow/read-only-store", fetch(), "{ro}/mlflow.db: the MLflow store is read-only",
         extra=("--out", "{ro}/writable/raw"), env={"MLFLOW_TRACKING_URI": "sqlite:///{ro}/mlflow.db"}),
]


def nobody_reads_the_checkout() -> bool:
    """Whether nobody can read the project and its environment: not where the checkout sits under a folder only
    root may enter (`mktemp -d` makes them mode 700), and there dropping privileges cannot test permissions."""
    import mlflow

    try:
        with as_nobody():
            for path in (PARAMS, Path(mlflow.__file__)):
                path.read_bytes()
    except PermissionError:
        return False
    return True


@pytest.mark.parametrize("case", [_params(c) for c in PERMISSION_CASES])
def test_permissions_are_one_line_and_change_nothing(case, readonly, world, capsys, monkeypatch, mlflow_env):
    if not nobody_reads_the_checkout():
        pytest.skip("user nobody cannot read this checkout or its virtual environment (a folder of mode 700 above)")
    def place(text: str) -> str:
        return text.replace("{w}", str(world)).replace("{ro}", str(readonly))

    for key, value in case.env.items():
        monkeypatch.setenv(key, place(value))
    before = digest(readonly)
    with as_nobody():
        code = run_cli([place(a) for a in [*case.argv, *BASE, *case.extra]])
    assert_one_line(capsys.readouterr().err, place(case.expect))
    assert code == case.code
    assert digest(readonly) == before


# ------------------------------------------------------------------------------------------------ YAML 1.2 floats


def test_yaml12_floats_in_params_and_overrides(tmp_path):
    from gpt1.pipeline.config import load_config, yaml12_floats

    edit = smoke_line("lr: 1.0e-3", "lr: 1e-3")
    (tmp_path / "params.yaml").write_text(edit(PARAMS.read_text()).replace("eps: 1.0e-8", "eps: 1E-8"))
    cfg = load_config(tmp_path / "params.yaml", "smoke")
    assert cfg.p["pretrain"]["lr"] == 1e-3 and cfg.p["pretrain"]["eps"] == 1e-8
    assert load_config(PARAMS, "smoke", ["pretrain.lr=1e-4", "finetune.lr=2.5E-4"]).p["finetune"]["lr"] == 2.5e-4
    assert main(["config", "--params", str(tmp_path / "params.yaml"), "--profile", "smoke"]) == 0
    # What Snakemake's configfile (YAML 1.1) gives, made what params.yaml says; a quoted word stays a word.
    assert yaml12_floats({"a": ["1e-3", "2.5e-4", "x1e3", "7"], "b": 1}) == {"a": [1e-3, 2.5e-4, "x1e3", "7"], "b": 1}


def test_snakemake_reads_yaml12_floats(tmp_path):
    """`configfile:` reads `lr: 1e-3` as a string; the workflow makes it the number before validating."""
    for name in ("workflow", "gpt1"):
        shutil.copytree(REPO / name, tmp_path / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    text = smoke_line("lr: 1.0e-3", "lr: 1e-3")(PARAMS.read_text()).replace("profile: default", "profile: smoke", 1)
    (tmp_path / "params.yaml").write_text(text)
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--quiet"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_bad_snakemake_config_names_the_override_it_came_with(tmp_path):
    """The value may come from `--config`, not from params.yaml: the line says which were given."""
    for name in ("workflow", "gpt1"):
        shutil.copytree(REPO / name, tmp_path / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PARAMS, tmp_path / "params.yaml")
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--config", "profile=nope"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    said = "params.yaml with --config profile=nope: profile: 'nope' is not defined; valid: smoke,"
    assert said in out.stdout + out.stderr


# ------------------------------------------------------------------------------------------------ MLflow runs


def _runs(uri: str, pipeline_run: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("gpt1")
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], f"tags.`gpt1.pipeline_run` = '{pipeline_run}'")


def test_a_failing_stage_marks_its_run_failed(world, tmp_path, capsys, monkeypatch, mlflow_env):
    w = tmp_path / "w"
    shutil.copytree(world, w)
    monkeypatch.setenv("GPT1_TEST_WORLD", str(w))
    monkeypatch.setenv("GPT1_PIPELINE_RUN", f"failing-{tmp_path.name}")
    with dev_full("ids/train.bin"):
        assert run_cli([a.replace("{w}", str(w)) for a in [*encode(), *BASE]]) == 1
    assert_one_line(capsys.readouterr().err, f"No space left on device while writing to {w}/ids; the disk is full")
    assert [r.info.status for r in _runs(mlflow_env, f"failing-{tmp_path.name}")] == ["FAILED"]


# Every stage, and the folder its outputs go to (stand-ins there, so that any publication would show).
STAGES_TO_THE_END = {
    "fetch": fetch(),
    "clean": clean(),
    "bpe": bpe(),
    "encode": encode(),
    "pretrain": pretrain(),
    "encode-task": ["encode-task", "--task", "rte", "--tokenizer", "{w}/tokenizer", "--out", "{w}/tasks/rte"],
    "finetune": finetune(),
    "layers": ["layers", "--task", "race", "--seed", "0", "--pretrained", "{w}/pretrain", "--tokenizer",
               "{w}/tokenizer", "--out", "{w}/layers"],
    "zeroshot": zeroshot(),
    "export": export(),
    "report": ["report", "--results", "{w}", "--out", "{w}/report"],
}


@pytest.mark.parametrize("command", STAGES_TO_THE_END.values(), ids=STAGES_TO_THE_END.keys())
def test_a_store_failing_at_a_stages_very_end_leaves_its_earlier_outputs(command, world, tmp_path, capsys,
                                                                          monkeypatch, mlflow_env):
    """Outputs are published only once MLflow holds the whole run: a store that fails at the last call, marking the
    run FINISHED, after all the work and logging, leaves every finished output as it was and no temporary file."""
    import errno

    from mlflow.tracking import MlflowClient

    w = tmp_path / "w"
    shutil.copytree(world, w)
    argv = [a.replace("{w}", str(w)) for a in [*command, *BASE]]
    out = Path(argv[argv.index("--out") + 1])
    for path in [p for p in out.rglob("*") if p.is_file()]:
        path.write_text(f"previous {path.name}\n")
    before = digest(w)
    ended, set_terminated = [], MlflowClient.set_terminated

    def store_fails_at_the_end(self, run_id, status=None, end_time=None):
        if status == "FINISHED":
            ended.append(run_id)
            raise OSError(errno.ENOSPC, "No space left on device", "mlflow.db")
        return set_terminated(self, run_id, status, end_time)

    monkeypatch.setattr(MlflowClient, "set_terminated", store_fails_at_the_end)
    capsys.readouterr()
    assert run_cli(argv) == 1
    err = capsys.readouterr().err  # after what the stage says on its way (MLflow's registry notes, say)
    assert "Traceback" not in err and "No space left on device" in err.strip().splitlines()[-1], err
    assert len(ended) == 1  # the stage did all its work and logging
    files = {path: kind for path, kind in digest(w).items() if kind != "folder"}  # the folders made for them may stay
    assert files == {path: kind for path, kind in before.items() if kind != "folder"}
    client = MlflowClient(mlflow_env)
    assert client.get_run(ended[0]).info.status == "FAILED"
    artifacts = _artifact_paths(client, ended[0])
    assert artifacts and not [a for a in artifacts if ".tmp" in a], artifacts  # logged under the outputs' own names
    if command[0] == "pretrain":  # the trained model is not lost: the rerun, from the kept resume folder, publishes
        monkeypatch.setattr(MlflowClient, "set_terminated", set_terminated)  # the bytes of an uninterrupted run
        assert run_cli(argv) == 0
        assert [(w / "pretrain" / name).read_bytes() == (world / "pretrain" / name).read_bytes()
                for name in ("model.safetensors", "model.json", "metrics.json", "curves.csv")] == [True] * 4


def test_every_stage_is_a_case_of_the_store_failing_at_its_end():
    """The stages are the commands that take the profile's settings and write an --out folder: each one is above."""
    from gpt1.cli.main import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    stages = {name for name, parser in commands.items()
              if {"--out OUT", "--set KEY=VALUE"} <= set(re.findall(r"--[a-z-]+ [A-Z=]+", parser.format_help()))}
    assert stages == set(STAGES_TO_THE_END)


def _artifact_paths(client, run_id: str, folder: str | None = None) -> list[str]:
    found = []
    for item in client.list_artifacts(run_id, folder):
        found += _artifact_paths(client, run_id, item.path) if item.is_dir else [item.path]
    return found


def _wait_for_run(uri: str, pipeline_run: str, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if _runs(uri, pipeline_run):
            return
        time.sleep(0.5)
    raise AssertionError(f"no MLflow run appeared (exit code {proc.poll()})")


def test_sigterm_marks_the_run_killed_in_one_line(world, tmp_path, subprocess_env, mlflow_db):
    """A stage stopped by SIGTERM (Snakemake, SLURM and torchrun stop jobs so) ends its run KILLED, says so in one
    line, exits 143 and leaves no temp file."""
    pipeline_run = f"killed-{tmp_path.name}"
    env = {**subprocess_env, "GPT1_PIPELINE_RUN": pipeline_run}
    long_run = ["--set", "pretrain.max_steps=1000000", "--set", "pretrain.epochs=1000", "--set",
                "pretrain.eval_every=100000", "--set", "pretrain.checkpoint_every=100000"]
    args = [*pretrain(), *BASE, *long_run]
    command = gpt1_command(*(a.replace("{w}", str(world)).replace(f"{world}/pretrain", str(tmp_path / "out"))
                             for a in args))
    proc = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_run(mlflow_db, pipeline_run, proc)
        time.sleep(1)  # into the training loop
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert_one_line(err, "gpt1 pretrain: stopped by SIGTERM; no half-written output was left")
    assert proc.returncode == 128 + signal.SIGTERM
    assert [r.info.status for r in _runs(mlflow_db, pipeline_run)] == ["KILLED"]
    assert not list((tmp_path / "out").rglob(".*.tmp*"))


# ------------------------------------------------------------------------------------------------ the boundary


def test_gpt1_debug_keeps_the_traceback(world, capsys, monkeypatch, mlflow_env):
    monkeypatch.setenv("GPT1_DEBUG", "1")
    code = run_cli([a.replace("{w}", str(world)) for a in [*encode(), *BASE, "--tokenizer", "{w}/raw"]])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback (most recent call last)" in err
    assert err.strip().splitlines()[-1].startswith(f"gpt1 encode: error: {world}/raw/tokenizer.json: missing")


def test_a_bug_keeps_its_traceback(world, monkeypatch, mlflow_env):
    """An error no input explains is gpt1's own: it is not hidden behind one line."""
    import gpt1.stages.encode

    def broken(*args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr(gpt1.stages.encode, "encode_stage", broken)
    with pytest.raises(TypeError, match="a bug"):
        main([a.replace("{w}", str(world)) for a in [*encode(), *BASE, "--out", "{w}/scratch-ids"]])
