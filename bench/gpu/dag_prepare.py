"""`python -m bench.gpu_check prepare --dag-results DIR --dag-profile NAME [--dag-set KEY=VALUE ...] [--dag-jobs K]`,
here on the CPU: section dag's parts of the bundle (gpu/dag.py runs them on the GPU machine, which has no mirror,
no hub and none of Snakemake, DVC or spaCy):

    dag/manifest.json  the profile, its --set overrides, the top-level lists of the checkout's params.yaml, K (the
                       model jobs that share the GPU), and every packed file with its size and sha256
    dag/data.tar.xz    DIR's data-stage outputs (corpus/, tokenizer/, ids/, and tasks/<task>/ for each of
                       finetune_tasks), xz -6 on every core; for a profile that reads a mirror, mirror/ beside them
                       (`mirror_entries`)
    dag_wheels/        cp312 wheels of Snakemake's and DVC's closure that the GPU machine lacks (bundle.dag_carried)
    spacy_wheels/      the same of spaCy's and ftfy's (bundle.spacy_carried): the profiles' `spacy` pre-tokeniser
    wheels/            the default bundle's, made here if it is missing (call A carries it)

`--dag-set finetune_tasks=[rte]` sets a top-level list of params.yaml (a key it has at its top level); any other key
is relative to the profile, as `gpt1 --set` takes it. Each of these parts is carried by a device call of its own
(`CALLS`; bench/gpu_check.py's docstring): `check_calls` holds each call within the 64 MiB the device tool carries.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.gpu import bundle as default_bundle
from bench.gpu import checkout
from bench.gpu.env import COMMIT_FILE, PARAMS, REPO, write_json
from bench.gpu.env import mirror as data_mirror

DAG, MANIFEST, DATA_TAR = "dag", "manifest.json", "data.tar.xz"
DATA = ("corpus", "tokenizer", "ids", "tasks")  # the data stages' folders under results/<profile>/
MIRROR = "mirror"  # the archive's folder of mirror files
# The device calls of section dag, in order, and the bundle's entries each carries (the GPU machine keeps what a
# call installs in .gpu-site/ while it stays warm: 30 s idle)
CALLS = (("A", ("wheels", "dag_wheels", COMMIT_FILE)), ("A2", ("spacy_wheels", COMMIT_FILE)),
         ("B", (DAG, COMMIT_FILE)))  # fmt: skip
# The zero-shot stage fits CoLA's threshold and SST-2's offset on the train split (gpt1/stages/zeroshot.py's
# prepare_task); tests/test_gpu_check.py holds this to the stage
FITTED_ON_TRAIN = ("cola", "sst2")
GPU_PROFILE_CONFIG = REPO / "workflow" / "profiles" / "gpu" / "config.yaml"


def default_jobs() -> int:
    """K of workflow/profiles/gpu: the model jobs that share the GPU (its `gpu` resource)."""
    return int(yaml.safe_load(GPU_PROFILE_CONFIG.read_text())["resources"]["gpu"])


def gpu_resources(jobs: int) -> list[str]:
    """`--resources` for section dag: workflow/profiles/gpu's GPU resources (`gpu` as K = `jobs`, `gpu_mem_units`),
    not its mem_mb: the GPU's bound the model jobs there."""
    resources = yaml.safe_load(GPU_PROFILE_CONFIG.read_text())["resources"]
    return [f"{name}={jobs if name == 'gpu' else value}" for name, value in resources.items() if name != "mem_mb"]


def split_sets(sets: list[str]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """--dag-set KEY=VALUE: a key params.yaml has at its top level (finetune_tasks, ablation_tasks, ...) sets that
    value; any other is an override relative to the profile. Returns (the overrides, the top-level values)."""
    from gpt1.pipeline.config import parse_override

    top_keys = set(yaml.safe_load(PARAMS.read_text())) - {"profile", "profiles"}
    overrides, top = [], {}
    for text in sets:
        path, value = parse_override(text)
        if len(path) == 1 and path[0] in top_keys:
            top[path[0]] = value
        else:
            overrides.append(text)
    return tuple(overrides), top


def settings(profile: str, overrides: tuple[str, ...], top: dict[str, Any]) -> dict[str, Any]:
    """The checkout's params.yaml (gpu/checkout.py), validated as the workflow validates it: a bad --dag-set fails
    here, not on the GPU machine."""
    from gpt1.pipeline.config import validate
    from gpt1.pipeline.errors import ConfigError

    found = checkout.params(profile, overrides, top)
    try:
        validate(found)
    except ConfigError as err:
        raise SystemExit(f"prepare: params for profile {profile}: {err}") from None
    return found


# ----------------------------------------------------------------------------------------------------------------
# What is packed


def data_entries(results: Path, tasks: list[str]) -> dict[str, Path]:
    """Archive name -> file: the data stages' outputs in `results` (a results/<profile>/ folder), the tasks' of
    `tasks` only (another task has no rule in the checkout, and a target with no rule stops Snakemake)."""
    for name in DATA:
        if not (results / name).is_dir():
            raise SystemExit(f"prepare: {results} has no {name}/; --dag-results takes a results/<profile>/ folder "
                             f"holding the data stages' {', '.join(DATA)}")
    folders = [results / name for name in DATA if name != "tasks"] + [results / "tasks" / task for task in tasks]
    for folder in folders:
        if not folder.is_dir():
            raise SystemExit(f"prepare: {results} has no {folder.relative_to(results)}/ (finetune_tasks: "
                             f"{', '.join(tasks)}); run the data stages of those tasks first")
    return {str(p.relative_to(results)): p for folder in folders for p in sorted(folder.rglob("*")) if p.is_file()}


def zeroshot_splits(mirror: Path) -> dict[str, set[str]]:
    """Task -> the splits of the mirror the zero-shot stage reads: each task's evaluation split as the stage picks
    it from what the mirror holds (the paper's test split where its labels are public and it is there), and the
    train split of FITTED_ON_TRAIN."""
    from gpt1.data.rows import evaluation_split, mirror_splits
    from gpt1.data.tasks import get_task
    from gpt1.evaluation.probes import TASK_ORDER

    found = {}
    for name in TASK_ORDER:
        spec = get_task(name)
        whole = next(r for r in spec.reports if not r.configs)  # the whole task (RACE: middle and high together)
        found[name] = {evaluation_split(spec, whole, mirror_splits(spec, mirror))}
        if name in FITTED_ON_TRAIN:
            found[name].add(spec.train)
    return found


def recorded_splits(results: Path, task: str) -> list[str] | None:
    """The splits of its source that the encode_task stage recorded beside a task's examples (None: the hub)."""
    header = json.loads((results / "tasks" / task / "encoded.json").read_text())
    return header["settings"]["source"]["present"]


def mirror_entries(results: Path, tasks: list[str], mirror: Path) -> dict[str, Path | None]:
    """Archive name -> file of the mirror, or None for an empty stand-in. A fine-tuning job compares the splits its
    mirror holds with those its encoded examples were made from (gpt1.data.rows.data_settings) and reads none of them:
    each split of each task is there, as a stand-in, but the files the zero-shot stage reads, carried whole (its
    held-out perplexity's WikiText-2 among them)."""
    from gpt1.data.rows import mirror_splits
    from gpt1.data.sources import DatasetRef, mirror_file
    from gpt1.data.tasks import get_task
    from gpt1.data.wikitext import WIKITEXT2

    read = zeroshot_splits(mirror)
    entries: dict[str, Path | None] = {}
    for name in dict.fromkeys([*tasks, *read]):
        spec = get_task(name)
        present = mirror_splits(spec, mirror)
        made = recorded_splits(results, name) if name in tasks else present
        if made != present:
            raise SystemExit(f"prepare: {results}/tasks/{name} was made from the splits {made}, the mirror at "
                             f"{mirror} holds {present}; make the data with GPT1_DATA_MIRROR={mirror}")
        for config in spec.configs:
            for split in present:
                file = mirror_file(DatasetRef(spec.path, config, split), mirror)
                entries[f"{MIRROR}/{file.relative_to(mirror)}"] = file if split in read.get(name, ()) else None
    wikitext = mirror_file(WIKITEXT2, mirror)
    entries[f"{MIRROR}/{wikitext.relative_to(mirror)}"] = wikitext
    return entries


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def pack(entries: dict[str, Path | None], target: Path) -> None:
    """`entries` as a tar through `xz -6 -T0` (every core: minutes for the default profile's ~150 MB on 2), in name
    order, owner and mode normalised, each file's mtime kept (Snakemake compares them); a stand-in is empty."""
    xz = shutil.which("xz")
    if xz is None:
        raise SystemExit("prepare: no xz here (xz-utils): section dag's data travels as a tar.xz")
    with open(target, "wb") as out:
        child = subprocess.Popen([xz, "-6", "-T0", "-c"], stdin=subprocess.PIPE, stdout=out)
        with tarfile.open(fileobj=child.stdin, mode="w|") as tar:
            for name, source in sorted(entries.items()):
                info = tar.gettarinfo(source, arcname=name) if source else tarfile.TarInfo(name)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mode = 0o644
                if source is None:
                    tar.addfile(info)
                    continue
                with open(source, "rb") as handle:
                    tar.addfile(info, handle)
        child.stdin.close()
        if child.wait() != 0:
            raise SystemExit(f"prepare: xz exited {child.returncode} on {target}")


def record(entries: dict[str, Path | None]) -> dict[str, dict[str, Any]]:
    """Archive name -> bytes and sha256, what the GPU machine checks each unpacked file against."""
    empty = hashlib.sha256(b"").hexdigest()
    return {name: {"bytes": source.stat().st_size, "sha256": sha256(source)} if source else
            {"bytes": 0, "sha256": empty, "stand_in": True} for name, source in sorted(entries.items())}


# ----------------------------------------------------------------------------------------------------------------
# The parts


def make_dag(folder: Path, results: Path, profile: str, sets: list[str], jobs: int | None) -> dict[str, Any]:
    """dag/: the data archive and its manifest."""
    from gpt1.pipeline.config import makes_its_own_data

    overrides, top = split_sets(sets)
    params = settings(profile, overrides, top)
    tasks = list(params["finetune_tasks"])
    entries: dict[str, Path | None] = {**data_entries(results, tasks)}
    mirror = None if makes_its_own_data(params["profiles"][profile]) else data_mirror()
    if mirror is not None:
        if not mirror.is_dir():
            raise SystemExit(f"prepare: profile {profile} reads a mirror, and there is none at {mirror} (set "
                             f"GPT1_DATA_MIRROR): its zero-shot stage reads it on the GPU machine")
        entries.update(mirror_entries(results, tasks, mirror))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    tick = time.perf_counter()
    pack(entries, folder / DATA_TAR)
    manifest = {"profile": profile, "overrides": list(overrides), "params": top,
                "jobs": default_jobs() if jobs is None else jobs, "results": str(results),
                "mirror": str(mirror) if mirror else None,
                "archive": {"name": DATA_TAR, "bytes": (folder / DATA_TAR).stat().st_size,
                            "sha256": sha256(folder / DATA_TAR), "xz_seconds": round(time.perf_counter() - tick, 1)},
                "files": record(entries)}
    write_json(folder / MANIFEST, manifest)
    return manifest


def make_dag_wheels(bundle: Path) -> dict[str, int]:
    """dag_wheels/ and spacy_wheels/ (and wheels/, the default bundle's, where it is missing); wheels per folder."""
    if not (bundle / "wheels").is_dir():
        default_bundle.make_wheels(bundle / "wheels")
    parts = {"dag_wheels": default_bundle.dag_carried(), "spacy_wheels": default_bundle.spacy_carried()}
    for name, wanted in parts.items():
        shutil.rmtree(bundle / name, ignore_errors=True)
        default_bundle.download(wanted, bundle / name)
    return {name: len(list((bundle / name).glob("*.whl"))) for name in ("wheels", "dag_wheels", "spacy_wheels")}


def prepare(bundle: Path, results: Path, profile: str, sets: list[str], jobs: int | None, wheels: bool) -> None:
    default_bundle.ignored(bundle)
    manifest = make_dag(bundle / DAG, results, profile, sets, jobs)
    archive = manifest["archive"]
    print(f"prepare: {bundle / DAG / DATA_TAR}: {len(manifest['files'])} files, {archive['bytes'] / 2**20:.1f} MiB "
          f"(xz {archive['xz_seconds']:.0f} s); K = {manifest['jobs']}", flush=True)
    if wheels:
        print(f"prepare: wheels per folder: {make_dag_wheels(bundle)}", flush=True)


def check_calls(bundle: Path) -> dict[str, int]:
    """Each call's bytes of the bundle; over bundle.MAX_BYTES (what a call carries beside the repository) fails."""
    sizes = {call: default_bundle.call_size(bundle, names) for call, names in CALLS}
    for call, names in CALLS:
        print(f"prepare: call {call} carries {', '.join(names)}: {sizes[call] / 2**20:.1f} MiB", flush=True)
        if sizes[call] > default_bundle.MAX_BYTES:
            raise SystemExit(f"prepare: call {call} ({', '.join(names)}) is {sizes[call] / 2**20:.1f} MiB, over "
                             f"{default_bundle.MAX_BYTES / 2**20:.0f}")
    return sizes
