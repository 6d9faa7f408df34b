"""`bench/gpu_check.sh --prepare`, run here on the CPU with the project's .venv: the folder bench/gpu_bundle/ that
travels to the GPU machine (`carry`; it ignores itself through its own .gitignore):

    data/        the smoke profile's CPU stages with SMALL (gpu.env), through the gpt1 CLI: tokenizer/ (a `fast`
                 BPE: no spaCy or ftfy there), ids/, and tasks/<task>/ for the four tasks of section c
    lengths.json each task's token counts on the mirror with the released vocabulary (bench/gpu_budget.py
                 --save-lengths): section e's shapes and the budget's counts (the GPU machine has no mirror)
    wheels/      cp312 manylinux wheels of what the stages import and the GPU image lacks (mlflow-skinny,
                 datasets, jsonschema, SQLAlchemy and alembic for MLflow's sqlite store, ...), at this .venv's
                 versions; bench/gpu_check.sh installs them with `pip --no-index --no-deps --target`
    manifest.json what was made, with which settings and sizes

`prepare --dag-results DIR --dag-profile NAME` makes section dag's parts instead (gpu/dag_prepare.py): dag/ (a
profile's data-stage outputs), dag_wheels/ (Snakemake's and DVC's closure) and spacy_wheels/ (the `spacy`
pre-tokeniser's), each carried by a device call of its own (DAG_PARTS; bench/gpu_check.py's docstring).

Options: --no-wheels (the rehearsal in an environment that has the packages), --sample and --book-chars (fewer
examples and characters for the token counts: the test's quick bundle).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

from bench.gpu.env import PARAMS, PROFILE, SMALL, TASKS, with_repo, write_json
from bench.gpu.env import mirror as data_mirror

MAX_BYTES = 58 * 2**20  # of the 64 MiB that travel, the repository takes ~4 (wheels ~23, gpu_profile/ ~26)
# What the stages import beyond what the GPU machine is sure to have: the roots whose dependency closure, less what
# is there for sure, becomes wheels/. sqlalchemy + alembic: MLflow's sqlite store.
ROOTS = ("mlflow-skinny", "mlflow-tracing", "datasets", "jsonschema", "sqlalchemy", "alembic")
# Issue 33's list of the GPU machine's packages. What they need here AND the image is said to hold (device/KINDS.md,
# read 2026-11-17) is there for sure; everything else travels: a carried copy of a package that is there too is
# harmless, a missing one stops the run (typer needs pydantic here, for one, and the image lists no pydantic).
BASE = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "pandas", "pyarrow", "scipy", "pytest", "tqdm")
IMAGE_PACKAGES = """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson
ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
numba-cuda numpy numpyro onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx
optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest
pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex
requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio
torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions
typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
"""
ON_GPU = frozenset(IMAGE_PACKAGES.split())
# The GPU machine's Python, for evaluating requirement markers
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "os_name": "posix",
          "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
          "platform_python_implementation": "CPython", "extra": ""}
PLATFORMS = [*(f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34)), "manylinux2014_x86_64",
             "manylinux1_x86_64"]
NO_WHEEL = re.compile(r"No matching distribution found for ([A-Za-z0-9_.-]+)==")  # pip's words for an sdist only
# Section dag (gpu/dag.py): the roots of dag_wheels/, Snakemake and DVC, which run the DAG there; of spacy_wheels/,
# what the `spacy` pre-tokeniser imports (the smoke, default and gpu-minutes profiles' tokenizers: zero-shot's probes
# and the report's samples encode text on the GPU machine). Not pulp: Snakemake's ILP scheduler's; dag runs the
# greedy one.
DAG_ROOTS = ("snakemake", "dvc")
SPACY_ROOTS = ("spacy", "ftfy")
NOT_CARRIED = frozenset({"pulp"})
# What a device call carries (`carry`: 64 MiB a call, the repository's ~4 included). Section dag's parts, each too
# large to share a call with the others, travel in calls of their own (bench/gpu_check.py's docstring); every other
# entry of the bundle in the call of the default sections.
DAG_PARTS = ("dag", "dag_wheels", "spacy_wheels")


def normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


# ----------------------------------------------------------------------------------------------------------------
# data/: the CPU stages through the gpt1 CLI


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def gpt1(stage: str, *args: str) -> None:
    """`python -m gpt1 STAGE ...` in a child (the real CLI: parsing, config, boundary), smoke profile with SMALL."""
    sets = [f"--set={o}" for o in SMALL]
    command = [sys.executable, "-m", "gpt1", stage, "--params", str(PARAMS), "--profile", PROFILE, *sets, *args]
    code = subprocess.run(command, env=with_repo(dict(os.environ))).returncode
    if code != 0:
        raise SystemExit(f"prepare: gpt1 {stage} exited {code}")


def make_data(data: Path) -> None:
    """fetch, clean, bpe, encode and encode-task (four tasks) in a scratch folder (its MLflow store and artifacts
    too); keep what section c reads."""
    with tempfile.TemporaryDirectory(prefix="gpt1-bundle-") as scratch, contextlib.chdir(scratch), \
            environment(MLFLOW_TRACKING_URI=f"sqlite:///{scratch}/mlflow.db", TQDM_DISABLE="1", GPT1_WORKERS="1"):
        root = Path(scratch)
        gpt1("fetch", "--out", str(root / "corpus"))
        gpt1("clean", "--raw", str(root / "corpus"), "--out", str(root / "corpus"))
        gpt1("bpe", "--corpus", str(root / "corpus"), "--out", str(data / "tokenizer"))
        gpt1("encode", "--tokenizer", str(data / "tokenizer"), "--corpus", str(root / "corpus"), "--out",
             str(data / "ids"))
        for task in TASKS.values():
            gpt1("encode-task", "--task", task, "--tokenizer", str(data / "tokenizer"), "--out",
                 str(data / "tasks" / task))


def make_lengths(bundle: Path, sample: int, book_chars: int) -> str:
    """bench/gpu_budget.py's token counts on the mirror, saved; or why not."""
    mirror = data_mirror()
    if not mirror.is_dir():
        return f"no lengths.json: no data mirror at {mirror} (set GPT1_DATA_MIRROR)"
    args = [sys.executable, "-m", "bench.gpu_budget", "--profile", "gpu", "--sample", str(sample),
            "--book-chars", str(book_chars), "--save-lengths", str(bundle / "lengths.json")]
    done = subprocess.run(args, env=with_repo({**os.environ, "GPT1_DATA_MIRROR": str(mirror)}), capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"prepare: python -m bench.gpu_budget failed: {done.stderr[-2000:]}")
    return f"lengths.json: {sample} examples per task, {book_chars:,} characters of novels"


# ----------------------------------------------------------------------------------------------------------------
# wheels/: what the GPU image lacks


def requirements(name: str) -> list[str]:
    """`name`'s requirements on the GPU machine (markers evaluated for it; extras left out)."""
    from packaging.requirements import Requirement

    found = []
    for text in distribution(name).requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(TARGET):
            found.append(normal(req.name))
    return found


def closure(roots: tuple[str, ...], leave_out: frozenset[str] = frozenset()) -> dict[str, str]:
    """name -> this environment's version, for the roots and everything they need, but `leave_out`."""
    wanted: dict[str, str] = {}
    todo = [normal(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in wanted or name in leave_out:
            continue
        try:
            wanted[name] = distribution(name).version
        except PackageNotFoundError as err:
            raise SystemExit(f"prepare: {name} is needed on the GPU machine but not installed here") from err
        todo += requirements(name)
    return dict(sorted(wanted.items()))


def pip() -> list[str]:
    """A pip to download with: GPT1_PIP, else this Python's, else python3's."""
    if os.environ.get("GPT1_PIP"):
        return os.environ["GPT1_PIP"].split()
    for python in (sys.executable, "python3"):
        if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0:
            return [python, "-m", "pip"]
    raise SystemExit("prepare: no pip to download the wheels with; set GPT1_PIP")


@functools.cache
def sure() -> frozenset[str]:
    """What the GPU machine has for sure: what BASE needs here AND the image is said to hold."""
    return frozenset(closure(BASE)) & ON_GPU


@functools.cache
def carried() -> dict[str, str]:
    """What wheels/ holds: ROOTS and what they need, less what is there for sure (see BASE)."""
    return closure(ROOTS, leave_out=sure())


@functools.cache
def dag_carried() -> dict[str, str]:
    """What dag_wheels/ holds: DAG_ROOTS and what they need, less what is there for sure, what wheels/ carries and
    NOT_CARRIED."""
    return closure(DAG_ROOTS, leave_out=sure() | frozenset(carried()) | NOT_CARRIED)


def spacy_carried() -> dict[str, str]:
    """What spacy_wheels/ holds: SPACY_ROOTS and what they need, less what the GPU machine has by then."""
    return closure(SPACY_ROOTS, leave_out=sure() | frozenset(carried()) | frozenset(dag_carried()) | NOT_CARRIED)


def built_wheel(dest: Path, name: str, version: str) -> Path | None:
    """The wheel of `name` `version` in `dest`, if there is one (a wheel's file name spells the name its own way)."""
    for path in dest.glob("*.whl"):
        parts = path.name.split("-")
        if normal(parts[0]) == name and parts[1] == version:
            return path
    return None


def build(name: str, version: str, dest: Path) -> Path:
    """A wheel of a package PyPI has only as an sdist, built here (`pip wheel --no-deps`); it must be pure Python,
    the only kind that installs on the GPU machine's Python whatever builds it."""
    done = subprocess.run([*pip(), "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dest), f"{name}=={version}"],
                          capture_output=True, text=True)
    wheel = built_wheel(dest, name, version)
    if done.returncode != 0 or wheel is None:
        raise SystemExit(f"prepare: pip wheel {name}=={version} failed: {done.stderr[-2000:]}")
    if not wheel.name.endswith("-none-any.whl"):
        raise SystemExit(f"prepare: {wheel.name} is not pure Python; the GPU machine cannot install it")
    return wheel


def download(wanted: dict[str, str], dest: Path) -> list[str]:
    """cp312 manylinux wheels of `wanted` (name -> version) into `dest`; a package PyPI has no wheel of (an sdist
    only: antlr4-python3-runtime 4.9.3 and connection-pool 0.0.3, which DVC and Snakemake need) is built instead.
    Returns the names built. pip stops at the first package it finds no wheel of: each such one is set aside and
    the download run again."""
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    binary, built = dict(wanted), []
    while binary:
        args = [*pip(), "download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                "--implementation", "cp", *platforms, "--dest", str(dest), *(f"{n}=={v}" for n, v in binary.items())]
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode == 0:
            break
        missing = [normal(name) for name in NO_WHEEL.findall(done.stderr) if normal(name) in binary]
        if not missing:
            raise SystemExit(f"prepare: pip download failed: {done.stderr[-3000:]}")
        for name in missing:
            built.append(name)
            del binary[name]
    for name in built:
        build(name, wanted[name], dest)
    return built


def make_wheels(wheels: Path) -> dict[str, str]:
    """wheels/: what `carried()` names."""
    wanted = carried()
    download(wanted, wheels)
    return wanted


# ----------------------------------------------------------------------------------------------------------------
# The bundle


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def call_size(bundle: Path, names: list[str] | tuple[str, ...]) -> int:
    """Bytes of the bundle's entries `names` that exist: what one device call carries of it."""
    paths = [bundle / name for name in names if (bundle / name).exists()]
    return sum(size(path) if path.is_dir() else path.stat().st_size for path in paths)


def default_call(bundle: Path) -> list[str]:
    """The entries the default sections' call carries: every one but section dag's parts."""
    return sorted(path.name for path in bundle.iterdir() if path.name not in DAG_PARTS)


def ignored(bundle: Path) -> None:
    """The bundle's folder, git-ignored by a .gitignore of its own (it is made, not committed)."""
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / ".gitignore").write_text("# made by bench/gpu_check.sh --prepare; carried to the GPU machine\n*\n")


def make_gpu_profile(folder: Path) -> None:
    """The gpu profile's tokenizer and the novels' ids, by its own CPU stages (section f); the corpus stays here."""
    import os
    import tempfile

    if not os.environ.get("GPT1_DATA_MIRROR"):
        raise SystemExit("prepare --gpu-profile: set GPT1_DATA_MIRROR (e.g. ../shared/data): the novels come from it")
    shutil.rmtree(folder, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="gpt1-gpu-corpus-") as corpus:
        steps = [("fetch", "--out", corpus), ("clean", "--raw", corpus, "--out", corpus),
                 ("bpe", "--corpus", corpus, "--out", str(folder / "tokenizer")),
                 ("encode", "--tokenizer", str(folder / "tokenizer"), "--corpus", corpus, "--out", str(folder / "ids"))]
        for stage, *args in steps:
            command = [sys.executable, "-m", "gpt1", stage, "--params", str(PARAMS), "--profile", "gpu", *args]
            print("prepare:", " ".join(command), flush=True)
            subprocess.run(command, check=True)


def prepare(bundle: Path, wheels: bool, sample: int, book_chars: int, gpu_profile: bool = False) -> dict[str, Any]:
    for name in ("data", "wheels", "lengths.json", "manifest.json"):
        path = bundle / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    ignored(bundle)
    make_data(bundle / "data")
    lengths = make_lengths(bundle, sample, book_chars)
    packages = make_wheels(bundle / "wheels") if wheels else {}
    if gpu_profile:
        make_gpu_profile(bundle / "gpu_profile")
    manifest = {"small": list(SMALL), "profile": PROFILE, "tasks": TASKS, "lengths": lengths, "wheels": packages,
                "bytes": {name: call_size(bundle, [name]) for name in default_call(bundle)}}
    write_json(bundle / "manifest.json", manifest)
    total = call_size(bundle, default_call(bundle))
    print(json.dumps(manifest["bytes"]), f"\nprepare: {bundle}: {total / 2**20:.1f} MiB; {lengths}; "
          f"{len(packages)} wheels")
    if total > MAX_BYTES:
        raise SystemExit(f"prepare: {bundle} is {total / 2**20:.1f} MiB, over {MAX_BYTES / 2**20:.0f}")
    return manifest
