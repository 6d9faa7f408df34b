"""Section h (issue 42 item 2): the GPU machine's CPU as a second vendor's host for the numerics probe.

../shared/reference/numerics-probe/probe.py hashes ~30 torch and numpy operations of a training step; its files
there were made on an AMD EPYC. This section runs it on the GPU machine's processor in each of MODES (one thread,
no GPU, numpy 2.4.6 as on the AMD host, from a private --target folder that only the probe's processes see) and
names the operations whose hashes differ from the AMD file of the same settings. Every probe JSON goes into the
record (OUT/results.json), with `lscpu`.

The probe and its AMD files live beside the repository, which the GPU machine does not get: `prepare` (called by
`bench/gpu_check.sh --prepare`) copies them, and numpy's wheel, into the bundle's probe/ folder.
On the CPU (the rehearsal) the first mode alone, with this environment's numpy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.gpu.env import REPO, Context, command_output, cpu_model
from bench.gpu.report import Record, md_table

SOURCE = REPO.parent / "shared" / "reference" / "numerics-probe"  # probe.py and the AMD host's JSON files
FOLDER = "probe"  # in the bundle
NUMPY = "numpy==2.4.6"  # the AMD files' numpy (OpenBLAS 0.3.31); the GPU image has numpy 2.5
# Variables whose values on the host matter to the hashes (the AMD host had OPENBLAS_L2_SIZE=512 set)
HOST_VARIABLES = ("OPENBLAS", "MKL", "ATEN", "ONEDNN", "NPY", "OMP", "GOMP")


@dataclass(frozen=True)
class Mode:
    name: str
    script: str  # "shared": the bundle's copy of the shared probe; "project": the repository's tools/numerics_probe.py
    args: tuple[str, ...]  # the script's arguments; the first pair picks the mode (--env X, --mode X)
    reference: str | None = None  # a repository file to compare with; None: the AMD file of the same settings

    def path(self, folder: Path) -> Path:
        return folder / "probe.py" if self.script == "shared" else REPO / "tools" / "numerics_probe.py"


# What runs, in this order; a mode whose script or choice is not there (yet) is left out and said so. The shared
# probe's modes are those of the AMD files; "project-pinned" is issue 42's pinned mode (products through numpy's
# OpenBLAS at a fixed core type, gpt1.training.cpu_matmul), against its hashes committed from the AMD host.
MODES = (
    Mode("pinned", "shared", ("--env", "pinned")),
    Mode("pinned-mkl-compatible", "shared", ("--env", "pinned", "--set", "MKL_CBWR=COMPATIBLE")),
    Mode("unpinned", "shared", ("--env", "none")),
    Mode("project-pinned", "project", ("--mode", "pinned"), "tests/fixtures/numerics_probe.json"),
)


# ----------------------------------------------------------------------------------------------------------------
# Here, at prepare time


def prepare(bundle: Path, wheels: bool) -> str:
    """probe.py and the AMD files into BUNDLE/probe/, and numpy's cp312 wheel unless --no-wheels."""
    from bench.gpu.bundle import pip

    folder = bundle / FOLDER
    shutil.rmtree(folder, ignore_errors=True)
    if not (SOURCE / "probe.py").is_file():  # a clone without the shared folder: every other section still runs
        return f"no probe/: no numerics probe at {SOURCE} (section h will fail)"
    folder.mkdir(parents=True)
    for path in [SOURCE / "probe.py", *sorted(SOURCE.glob("*.json"))]:
        shutil.copy2(path, folder / path.name)
    if wheels:
        platforms = [arg for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
                     for arg in ("--platform", p)]
        args = [*pip(), "download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                "--implementation", "cp", *platforms, "-d", str(folder), NUMPY]
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"prepare: pip download {NUMPY} failed: {done.stderr[-2000:]}")
    return f"probe/: probe.py, {len(list(folder.glob('*.json')))} AMD files, {len(list(folder.glob('*.whl')))} wheel"


# ----------------------------------------------------------------------------------------------------------------
# There


def offered(mode: Mode, folder: Path) -> bool:
    """Whether the mode's script is there and offers its choice (argparse's usage line; a wide COLUMNS keeps it on
    one line)."""
    script = mode.path(folder)
    if not script.is_file():
        return False
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "400"})
    found = re.search(rf"{mode.args[0]} \{{([^}}]*)\}}", done.stdout)
    return bool(found) and mode.args[1] in found.group(1).split(",")


def install_numpy(folder: Path, site: Path) -> str:
    """numpy's wheel into `site`, for the probe's processes only; without one (the rehearsal) this Python's numpy."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = sorted(folder.glob(f"numpy-*-{tag}-*.whl"))
    if not wheels:  # the rehearsal here (Python 3.11) with a bundle made for the GPU machine's 3.12
        return f"this Python's numpy (no {tag} wheel in the bundle)"
    args = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
            "--target", str(site), str(wheels[-1])]
    subprocess.run(args, check=True, capture_output=True, text=True)
    return f"{wheels[-1].name} in a private folder"


def probe_env(site: Path) -> dict[str, str]:
    """One BLAS thread, no GPU; the private numpy first on the path (the probes' processes alone see it)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    if site.is_dir():
        env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    return env


def start(mode: Mode, folder: Path, env: dict[str, str], logs: Path) -> subprocess.Popen:
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{mode.name}.json", "w") as out, open(logs / f"{mode.name}.log", "w") as err:
        return subprocess.Popen([sys.executable, str(mode.path(folder)), *mode.args], env=env, stdout=out,
                                stderr=err)


def references(folder: Path) -> dict[str, dict[str, Any]]:
    """The AMD files (and any other host's) by name."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "hashes" in data:
            found[path.name] = data
    return found


def reference(mode: Mode, mine: dict[str, Any], refs: dict[str, dict[str, Any]]) -> tuple[str | None, dict]:
    """(name, contents) of the file to compare with: the mode's own, else the AMD file of the same settings (its
    variables and oneDNN)."""
    if mode.reference is not None:
        path = REPO / mode.reference
        return (mode.reference, json.loads(path.read_text())) if path.is_file() else (None, {})
    same = [name for name, ref in refs.items()
            if ref.get("env") == mine.get("env") and ref.get("onednn") == mine.get("onednn")]
    return (same[0], refs[same[0]]) if same else (None, {})


def compare(mode: Mode, mine: dict[str, Any], refs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The operations whose hashes differ from the reference's, and those it lacks."""
    name, found = reference(mode, mine, refs)
    if name is None:
        return {"reference": None}
    ref = found["hashes"]
    hashes = mine["hashes"]
    return {"reference": name, "reference_host": found.get("host"),
            "equal": sorted(k for k in hashes if ref.get(k) == hashes[k]),
            "differ": sorted(k for k in hashes if k in ref and ref[k] != hashes[k]),
            "not_in_reference": sorted(k for k in hashes if k not in ref)}


def finish(mode: Mode, child: subprocess.Popen, logs: Path, refs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    child.wait()
    if child.returncode != 0:
        return {"args": [mode.script, *mode.args], "error": (logs / f"{mode.name}.log").read_text()[-2000:]}
    mine = json.loads((logs / f"{mode.name}.json").read_text())
    return {"args": [mode.script, *mode.args], **compare(mode, mine, refs), "probe": mine}


def describe(name: str, run: dict[str, Any]) -> tuple[list[Any], str]:
    """(a row of the table, a phrase of the summary) for one mode."""
    if "error" in run:
        return [name, "-", "-", "failed", "-"], f"{name}: FAILED"
    probe = run["probe"]
    blas = ", ".join(f"{b.get('internal_api')} {b.get('architecture')}" for b in probe["blas"]) \
        if isinstance(probe["blas"], list) else probe["blas"]
    if run["reference"] is None:
        return [name, "no file of these settings", "-", "-", f"{probe.get('numpy')}; {blas}"], \
            f"{name}: no file to compare"
    differ = run["differ"]
    listed = ", ".join(differ) or "none"
    shown = ", ".join(differ[:5]) + (", ..." if len(differ) > 5 else "")
    row = [name, run["reference"], f"{len(run['equal'])} / {len(probe['hashes'])}", listed,
           f"{probe.get('numpy')}; {blas}"]
    return row, f"{name}: {len(differ)} of {len(probe['hashes'])} differ{' (' + shown + ')' if differ else ''}"


def run(ctx: Context) -> None:
    record = Record(ctx, "host_probe")
    folder = ctx.bundle / FOLDER
    probe = folder / "probe.py"
    if not probe.is_file():
        raise RuntimeError(f"no {probe}: run bash bench/gpu_check.sh --prepare here first")
    host = {k: v for k, v in os.environ.items() if k.startswith(HOST_VARIABLES)}
    record.update(cpu=cpu_model(), lscpu=command_output("lscpu"), host_variables=host)
    there = [m for m in MODES if offered(m, folder)]
    modes = there if ctx.cuda else there[:1]  # the rehearsal: one mode
    site = ctx.work / "probe-site"
    numpy = install_numpy(folder, site)
    record.update(numpy=numpy, modes=[m.name for m in modes], not_offered=[m.name for m in MODES if m not in there])
    env, logs, refs = probe_env(site), ctx.work / "probe", references(folder)
    # One thread each: on the GPU machine's cores the modes run side by side
    children = {mode: start(mode, folder, env, logs) for mode in modes}
    runs: dict[str, Any] = {}
    for mode, child in children.items():
        runs[mode.name] = finish(mode, child, logs, refs)
        record.update(runs=runs)
    described = [describe(name, one) for name, one in runs.items()]
    failed = [name for name, one in runs.items() if "error" in one]
    summary = f"{record.data['cpu']}: " + "; ".join(phrase for _, phrase in described)
    torch_version = next(iter(runs.values()), {}).get("probe", {}).get("torch", "?")
    notes = [f"numpy's wheel: {numpy} (a probe that sets its own path may run the image's numpy: see the column). "
             f"torch {torch_version} here, 2.13.0+cpu in the AMD files: a torch operation may differ by release as "
             f"well as by processor; numpy's products at the same numpy by processor alone.",
             f"Modes not run (script or choice missing): {', '.join(record.data['not_offered']) or 'none'}."]
    table = md_table(["mode", "compared with (made on an AMD EPYC)", "equal", "differ", "numpy; its BLAS"],
                     [row for row, _ in described])
    record.save("failed" if failed else "ok", summary=summary, markdown="\n\n".join([table, *notes]))
