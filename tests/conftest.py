"""Shared fixtures: a tiny tokenizer and token-id folder made from the synthetic corpus, a throwaway MLflow store,
tiny configs of the repository's params.yaml, and the environment for `python -m gpt1` subprocesses."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpt1.training.numerics import PINNED_ENV

# Before any test module imports gpt1 (and so tqdm, which reads this once, at import): progress bars would be lines
# in the stderr that tests read. Set here, it holds whatever the order of the test files, for every test of the
# session and for the pipelines they start (their logs then hold no progress bars).
os.environ.setdefault("TQDM_DISABLE", "1")
# The kernels of the pinned profiles (gpt1.training.numerics), set before anything imports torch: the tests that run
# stages in this process compute as the `gpt1` children do, on whatever host the suite runs.
os.environ.update(PINNED_ENV)

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"

# The smoke profile shrunk further: a 1-layer, 16-wide model on 16-token windows, 12 updates of 4 sequences.
TINY = [
    "model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.n_ctx=16", "model.lstm_hidden=16",
    "pretrain.batch_size=4", "pretrain.micro_batch_size=4", "pretrain.max_steps=12", "pretrain.warmup_steps=2",
    "pretrain.eval_every=4", "pretrain.eval_batches=2", "pretrain.checkpoint_every=4", "pretrain.snapshots=3",
]  # fmt: skip


@dataclass(frozen=True)
class TinyData:
    tokenizer: Path  # folder of GPT1Tokenizer.save
    ids: Path  # folder with {train,validation}.{bin,json}
    corpus: Path  # folder with {train,validation}.jsonl


def _write_jsonl(path: Path, records: list[dict]) -> None:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="session", autouse=True)
def _pinned_process() -> None:
    """This process computes as a pinned profile's stage does (oneDNN off, one thread), so what the tests make in
    process is what a `gpt1` child of the smoke profile would make, and reads as such."""
    from gpt1.training import numerics

    numerics.apply(True, 1)


@pytest.fixture(autouse=True)
def _own_phases() -> None:
    """Each test's stage runs log their own phases: the process clock (gpt1.pipeline.clock) belongs to the process,
    and pytest's runs many stages, some of which stop before they log theirs."""
    from gpt1.pipeline.clock import PROCESS

    PROCESS.phases.clear()


@pytest.fixture
def products_on_torch():
    """For a test about something else that multiplies in bf16 on the CPU (which the pinned mode refuses): its
    matrix products on torch's own kernels while it runs."""
    from gpt1.training import cpu_matmul

    cpu_matmul.disable()
    yield
    cpu_matmul.enable()


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> TinyData:
    """30 synthetic stories (24 train, 6 validation, ~25k tokens), a 200-merge `fast` BPE, and their ids."""
    from gpt1.data.ids import encode_split
    from gpt1.data.synthetic.corpus import synthetic_corpus
    from gpt1.data.tokenizer import train

    root = tmp_path_factory.mktemp("tiny_data")
    docs = list(synthetic_corpus(30, seed=1))
    corpus, tokenizer, ids = root / "corpus", root / "tokenizer", root / "ids"
    corpus.mkdir()
    _write_jsonl(corpus / "train.jsonl", docs[:24])
    _write_jsonl(corpus / "validation.jsonl", docs[24:])
    train([d["text"] for d in docs[:24]], "fast", merges=200, limit_alphabet=100).save(tokenizer)
    for split in ("train", "validation"):
        encode_split(tokenizer, corpus / f"{split}.jsonl", ids / f"{split}.bin", ids / f"{split}.json",
                     dtype="uint16", chunk_chars=20_000, workers=1)
    return TinyData(tokenizer, ids, corpus)


def throwaway_store(folder: Path) -> str:
    """A sqlite store in `folder` whose experiment is made here with its artifacts beside the store (a stage
    would now put them beside it too, gpt1.pipeline.mlflow_store.artifact_location; made here, the store's seconds
    of creation are paid once, not by the first stage)."""
    import yaml
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    experiment = yaml.safe_load(PARAMS.read_text())["mlflow"]["experiment"]
    MlflowClient(uri).create_experiment(experiment, artifact_location=(folder / "artifacts").as_uri())
    return uri


@pytest.fixture(scope="session")
def new_store() -> Callable[[Path], str]:
    """throwaway_store, for a test or fixture that wants a store of its own."""
    return throwaway_store


@pytest.fixture(scope="session")
def mlflow_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One sqlite store for the session: creating a store costs seconds, so tests share it."""
    return throwaway_store(tmp_path_factory.mktemp("mlflow"))


@pytest.fixture
def mlflow_env(monkeypatch: pytest.MonkeyPatch, mlflow_db: str) -> str:
    """Stages run in this test log into the throwaway store, never into the repository's mlflow.db."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_db)
    return mlflow_db


def tiny_lm(kind: str, vocab_size: int, n_ctx: int, n_layer: int = 1, n_embd: int = 16):
    """A randomly initialised language model of `kind`: a GPT of n_layer blocks, n_embd wide, 2 heads; or a 16-unit
    single-layer LSTM (n_layer and n_embd are the GPT's). Seed torch first for the same weights."""
    from gpt1.modeling.model import GPT, LSTMLM, GPTConfig, LSTMConfig

    if kind == "gpt":
        return GPT(GPTConfig(vocab_size=vocab_size, n_ctx=n_ctx, n_embd=n_embd, n_layer=n_layer, n_head=2))
    return LSTMLM(LSTMConfig(vocab_size=vocab_size, n_ctx=n_ctx, n_embd=16, hidden_size=16))


def tiny_config(*overrides: str, profile: str = "smoke"):
    """The repository's params.yaml, `profile`, shrunk by TINY and then `overrides`."""
    from gpt1.pipeline.config import load_config

    return load_config(PARAMS, profile, overrides=[*TINY, *overrides])


@pytest.fixture
def make_config() -> Callable:
    return tiny_config


@pytest.fixture(scope="session")
def subprocess_env(mlflow_db: str) -> dict[str, str]:
    """For `python -m gpt1 ...` children: one thread each, the throwaway store, the repository importable."""
    env = dict(os.environ)
    env.update({
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "GPT1_WORKERS": "1", "MLFLOW_TRACKING_URI": mlflow_db,
        "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "TQDM_DISABLE": "1",
    })  # fmt: skip
    return env


def gpt1_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpt1", *args]


@pytest.fixture(scope="session")
def trained_gpt(tiny_data: TinyData, mlflow_db: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The out_dir of one finished tiny GPT pre-training run (in-process), shared by read-only tests."""
    from gpt1.stages.pretrain import pretrain_stage

    out = tmp_path_factory.mktemp("trained_gpt") / "pretrain"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", mlflow_db)
        pretrain_stage(tiny_config(), "gpt", tiny_data.ids, tiny_data.tokenizer, out)
    return out


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """docs/operations.md's `tools/mlflow_server.py up STATE` (PostgreSQL and `mlflow server` on 127.0.0.1); `down
    STATE` at the end of the session, whatever happened, unless a test stopped it already. Skips where they cannot
    start."""
    import json

    from pipeline_repo import mlflow_server_command

    pytest.importorskip("psycopg2", reason="psycopg2 is not installed (./setup.sh, or pip install -e '.[test]')")
    state = tmp_path_factory.mktemp("mlflow-server")
    started = mlflow_server_command("up", state)
    if started.returncode != 0:
        pytest.skip(f"PostgreSQL and mlflow server cannot start here: {started.stderr.strip()[-500:]}")
    try:  # from here the servers run: a failed check below stops them too
        recorded = json.loads((state / "server.json").read_text())
        assert started.stdout.strip() == f"export MLFLOW_TRACKING_URI={recorded['uri']}"
        yield {**recorded, "state": state}
    finally:
        if (state / "server.json").exists():
            mlflow_server_command("down", state)


@pytest.fixture(scope="session")
def server_smoke_run(mlflow_server: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke pipeline's checkout after a run that logged to `mlflow_server`: every stage, fine-tuning on the
    layer-transfer tasks and RTE (its ablations) only (SERVER_RUN_TASKS; CI time: the whole run is
    tests/test_workflow.py's). tests/test_mlflow_server.py holds it to the server and to the committed bytes."""
    from pipeline_repo import SERVER_RUN_TASKS, smoke_repo

    return smoke_repo(tmp_path_factory.mktemp("server-repo"), {"MLFLOW_TRACKING_URI": mlflow_server["uri"]},
                      finetune_tasks=SERVER_RUN_TASKS)[0]


# Under `pytest -n` a worker runs whole files (pyproject.toml: `--dist loadfile`), handed out in the collection's
# order. The longest files, longest first (each 10-20 min of a worker in CI on 2 cores: `--durations`), go before
# the rest, one to each worker, so that none starts late while the other workers have run dry.
LONGEST_FIRST = ("test_workflow.py", "test_gpu_check.py", "test_mlflow_server.py", "test_faults.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker per core, at most 4: a worker's pipeline tests hold 2-3 GB and run jobs on 2 cores each.
    A worker more than the cores did not pay on 2 cores (3 workers 0.88x and 1.05x the time of 2 in two pairs: two
    CI runs, then bench/suite_workers.py; BENCHMARKS.md "The test suite")."""
    return max(1, min(4, os.cpu_count() or 1))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files (LONGEST_FIRST) first, then the others holding a `slow` test (pipelines, minutes each),
    then the rest: a worker takes the next unit when it is nearly done, so the long ones start at once and short
    files fill in beside them, rather than a long one starting last while the other workers idle. The sort is
    stable: the order within a unit holds."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> tuple[int, bool]:
        name = item.path.name
        return (LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST), item.path not in slow)

    items.sort(key=rank)
