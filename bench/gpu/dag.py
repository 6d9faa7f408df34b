"""Section dag (issue 43 item 1, issue 44): a profile's whole DAG through Snakemake on this machine, as a user runs
it, its model rules sharing the GPU through Snakemake's `gpu` resource, K jobs at once. Run when named:

    bash bench/gpu_check.sh OUT --sections hardware,dag      # after prepare --dag-results (gpu/dag_prepare.py)
                                                             # and the install calls (bench/gpu_check.py)

1. A checkout in WORK/repo (gpu/checkout.py, as the end-to-end tests make theirs): params.yaml the manifest's
   profile with its --set overrides and top-level lists; git (else DVC without an SCM, said in the record) and DVC
   initialised.
2. The bundle's dag/data.tar.xz unpacked, every file checked against the manifest's sha256, the data stages'
   outputs moved into results/<profile>/; `snakemake --touch` on them marks the data stages done (they cannot run
   there: no mirror, no hub; the copied code is newer than the data, so Snakemake would plan them). A profile that
   reads a mirror gets the carried part of it as GPT1_DATA_MIRROR: the zero-shot stage reads it.
3. `snakemake --cores <all> --scheduler greedy --keep-going --config device=<cuda|cpu> --resources gpu=<K>
   gpu_mem_units=2` (workflow/profiles/gpu's GPU resources; greedy: the ILP scheduler needs PuLP, not carried;
   --keep-going: one device call shows every job that fails), with this Python for the stages, the carried site first
   on PYTHONPATH, the checkout's own MLflow store; stopped at the section's time left. The record follows it as jobs
   finish, and names the rules of failed jobs.
4. Recorded: Snakemake's exit code, wall seconds, jobs done of planned ("N of M steps"), each rule's jobs and span
   (bench/pipeline_times.py on its log), K, `dvc status` (the workflow's last rule runs `dvc commit`: `{}`
   expected), the MLflow runs of the checkout's store by status and stage; OUT/dag.tar.gz holds the tables,
   metrics.json, the jobs' logs, dvc.lock, params.yaml, Snakemake's log and the times table (no weights).

ok when Snakemake exited 0, every planned job ran and `dvc status` is clean.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from bench import pipeline_times
from bench.gpu import checkout
from bench.gpu.dag_prepare import DAG, DATA, DATA_TAR, MANIFEST, MIRROR, gpu_resources, sha256
from bench.gpu.env import REPO, Context
from bench.gpu.report import DAG_TAR, Record, md_table
from bench.job_phases import run_times

STEPS = re.compile(r"^(\d+) of (\d+) steps", re.M)  # Snakemake's progress line
PLANNED = re.compile(r"^total\s+(\d+)$", re.M)  # the last line of its "Job stats" table
FAILED = re.compile(r"^Error in rule (\S+):$", re.M)
NOTHING = "Nothing to be done"
# Modules the DAG imports beyond the stages' (bench/gpu_check.sh checks those): Snakemake and DVC always, spaCy and
# ftfy for a profile whose tokenizer pre-tokenises with spaCy
RUNNERS, SPACY = ("snakemake", "dvc"), ("spacy", "ftfy")
MARGIN_S = 40.0  # after Snakemake: its stop, dvc status, MLflow's store read, the archive
POLL_S = 5.0
STOP_WAIT_S = 15.0  # Snakemake's own clean-up after SIGTERM before the group is killed
TAR_LIMIT = 15 * 2**20
# results/<profile>/ entries the archive keeps (no weights): the default profile's come to ~1.6 MiB gzipped
MODEL_OUTPUTS = ("finetune", "analyses", "pretrain", "tables", "figures", "metrics.json", "logs")


def section_seconds(ctx: Context) -> float:
    """What this section may spend: its limit in bench/gpu_check.py, or what is left of the run's budget."""
    from bench.gpu_check import LIMITS

    return min(LIMITS[ctx.device]["dag"], ctx.remaining())


def read_manifest(ctx: Context) -> dict[str, Any] | None:
    path = ctx.bundle / DAG / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def missing_modules(params: dict[str, Any]) -> list[str]:
    """What this Python cannot import of what the DAG needs (the install calls put them in .gpu-site/)."""
    pretokenizer = params["profiles"][params["profile"]]["bpe"]["pretokenizer"]
    names = (*RUNNERS, *(SPACY if pretokenizer != "fast" else ()))  # every pre-tokeniser but fast runs spaCy
    return [name for name in names if importlib.util.find_spec(name) is None]


# ----------------------------------------------------------------------------------------------------------------
# The checkout and its data


def run_env(ctx: Context, mirror: Path | None) -> dict[str, str]:
    """A user's shell on this machine: this Python for the stages (GPT1_PYTHON), the carried site first on
    PYTHONPATH and no checkout of ours on it (the checkout's own gpt1 runs), no progress bars, the checkout's own
    MLflow store (no MLFLOW_*), no GPT1_* of the run but the carried mirror; `dvc` (the dvc_commit rule) on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "GPT1_", "SNAKEMAKE_"))}
    site = os.environ.get("GPT1_GPU_SITE", "")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in (str(REPO), site)]
    first = [site] if site and Path(site).is_dir() else []
    env.update(PYTHONPATH=os.pathsep.join([*first, *paths]), GPT1_PYTHON=sys.executable, TQDM_DISABLE="1",
               PYTHONUNBUFFERED="1", PATH=os.pathsep.join([str(dvc_command(ctx.work / "bin")), env.get("PATH", "")]))
    if mirror is not None:
        env["GPT1_DATA_MIRROR"] = str(mirror)
    return env


def dvc_command(folder: Path) -> Path:
    """A `dvc` on PATH that is this Python's `-m dvc` (wheels installed with --target leave no working script)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "dvc"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m dvc "$@"\n')
    script.chmod(0o755)
    return folder


def settings(manifest: dict[str, Any]) -> dict[str, Any]:
    """The checkout's params.yaml: the manifest's profile, its --set overrides, then its top-level lists."""
    return checkout.params(manifest["profile"], tuple(manifest["overrides"]), manifest["params"])


def checkout_repo(repo: Path, env: dict[str, str], manifest: dict[str, Any]) -> bool:
    """The checkout in `repo` (gpu/checkout.py) with the manifest's settings; True when git was there."""
    return checkout.make(repo, env, settings(manifest))


def unpack(ctx: Context, manifest: dict[str, Any], repo: Path) -> Path | None:
    """data.tar.xz into WORK/data, every file against the manifest; the data stages' folders moved into the
    checkout's results/<profile>/. Returns the carried mirror (None: the profile makes its own data)."""
    data = ctx.work / "data"
    with tarfile.open(ctx.bundle / DAG / DATA_TAR, "r:xz") as tar:
        tar.extractall(data, filter="data")
    for name, expected in manifest["files"].items():
        found = sha256(data / name) if (data / name).is_file() else "missing"
        if found != expected["sha256"]:
            raise RuntimeError(f"{DATA_TAR}: {name} is {found}, the manifest says {expected['sha256']}")
    results = repo / "results" / manifest["profile"]
    results.mkdir(parents=True)
    for name in DATA:
        shutil.move(data / name, results / name)
    return data / MIRROR if manifest["mirror"] else None


def targets(repo: Path, profile: str) -> list[str]:
    """The unpacked outputs of the data stages, relative to the checkout: what `snakemake --touch` is given."""
    results = repo / "results" / profile
    return sorted(str(p.relative_to(repo)) for name in DATA for p in (results / name).rglob("*") if p.is_file())


def touch(ctx: Context, repo: Path, env: dict[str, str], files: list[str]) -> dict[str, int]:
    """`snakemake --touch` on `files`: the jobs that make them marked done without running. Rule -> jobs touched
    (none where their outputs were already newer than every input)."""
    args = [sys.executable, "-m", "snakemake", "--touch", "--cores", "1", *files, "--config", f"device={ctx.device}"]
    text = checkout.command(args, repo, env)
    (ctx.work / "logs").mkdir(parents=True, exist_ok=True)
    (ctx.work / "logs" / "dag-touch.log").write_text(text)
    if NOTHING in text:
        return {}
    return dict(collections.Counter(m.group(1) for m in map(pipeline_times.START.match, text.splitlines()) if m))


# ----------------------------------------------------------------------------------------------------------------
# The run


def progress(text: str) -> dict[str, int | None]:
    """Jobs done and planned so far, from Snakemake's output (planned from its job table before the first job ends)."""
    steps = STEPS.findall(text)
    planned = PLANNED.search(text)
    if steps:
        return {"done": int(steps[-1][0]), "planned": int(steps[-1][1]), "failed": failed_rules(text)}
    return {"done": 0, "planned": int(planned.group(1)) if planned else None, "failed": failed_rules(text)}


def failed_rules(text: str) -> dict[str, int]:
    """Jobs that failed, per rule (Snakemake's "Error in rule NAME:" blocks)."""
    return dict(collections.Counter(FAILED.findall(text)))


def stop(child: subprocess.Popen) -> None:
    """SIGTERM to Snakemake and its jobs (it marks theirs incomplete), then SIGKILL to whatever is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=STOP_WAIT_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def snakemake(ctx: Context, repo: Path, env: dict[str, str], jobs: int, deadline: float,
              record: Record) -> dict[str, Any]:
    """The whole DAG, until `deadline` (time.monotonic()); the record follows it every POLL_S."""
    args = [sys.executable, "-m", "snakemake", "--cores", str(os.cpu_count()), "--scheduler", "greedy", "--keep-going",
            "--config", f"device={ctx.device}", "--resources", *gpu_resources(jobs)]
    log = ctx.work / "logs" / "dag-snakemake.log"
    record.update(command=" ".join(["python -m snakemake", *args[3:]]))
    tick = time.perf_counter()
    with open(log, "w") as handle:
        child = subprocess.Popen(args, cwd=repo, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    stopped = False
    while child.poll() is None:
        if time.monotonic() > deadline:
            stop(child)
            stopped = True
            break
        record.update(progress={**progress(log.read_text(errors="replace")),
                                "seconds": round(time.perf_counter() - tick)})
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=POLL_S)
    return {"returncode": child.returncode, "seconds": round(time.perf_counter() - tick, 1), "stopped": stopped,
            **progress(log.read_text(errors="replace"))}


def logs(repo: Path) -> frozenset[Path]:
    return frozenset((repo / ".snakemake" / "log").glob("*.snakemake.log"))


def rules(log: Path | None) -> dict[str, dict[str, Any]]:
    """Rule -> its finished jobs, their summed wall seconds and the span from the first start to the last end, from
    the run's log in .snakemake/log."""
    rows = pipeline_times.per_rule(pipeline_times.parse(log)) if log is not None else []
    return {rule: {"jobs": jobs, "seconds": total.total_seconds(), "from": f"{start:%H:%M:%S}", "to": f"{end:%H:%M:%S}"}
            for rule, jobs, total, start, end in rows}


def dvc_status(repo: Path, env: dict[str, str]) -> dict[str, Any] | str:
    """`dvc status --json`: {} when DVC's records match the files; the error's last line when it fails."""
    done = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=repo, env=env, capture_output=True,
                          text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return f"dvc status exited {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:300]}"
    return json.loads(lines[-1])


def mlflow_summary(repo: Path) -> dict[str, Any]:
    """The checkout's MLflow runs: count by status, each stage's statuses (gpu/stages.py's reader), and where its
    finished runs' time went (`run_times`)."""
    from bench.gpu.stages import logged_runs, runs_by_stage

    store = repo / "mlflow.db"
    if not store.is_file():
        return {"runs": {}, "by_status": {}, "registered_versions": 0, "times": {}}
    client, logged = logged_runs(store)
    found = runs_by_stage(client, logged)
    statuses = collections.Counter(s for runs in found["runs"].values() for s in runs)
    return {"runs": found["runs"], "by_status": dict(statuses), "registered_versions": found["registered_versions"],
            "times": run_times(logged)}


def without_weights(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    name = Path(member.name)
    return None if name.suffix == ".safetensors" or name.name == "snapshots" else member


def archive(ctx: Context, repo: Path, profile: str, log: Path | None) -> int:
    """OUT/dag.tar.gz: of results/<profile>/ what the model stages made but their weights (the fine-tuning jobs'
    metrics and predictions, so that `gpt1 compare` tests the run against another paired; the analyses, pre-training's
    records and curves, the tables and figures, metrics.json, the jobs' logs), dvc.lock, params.yaml, Snakemake's log
    of the run and its times table. Its bytes (0: over TAR_LIMIT, left out)."""
    results = repo / "results" / profile
    path = ctx.out / DAG_TAR
    kept = (*(results / name for name in MODEL_OUTPUTS), repo / "dvc.lock", repo / "params.yaml",
            *((log,) if log else ()))
    with tarfile.open(path, "w:gz") as tar:
        for item in kept:
            if item.exists():
                tar.add(item, arcname=str(item.relative_to(repo)), filter=without_weights)
        if log is not None:
            times = ctx.work / "pipeline_times.md"
            times.write_text(pipeline_times.table(log) + "\n")
            tar.add(times, arcname=times.name)
    if path.stat().st_size > TAR_LIMIT:
        path.unlink()
        return 0
    return path.stat().st_size


# ----------------------------------------------------------------------------------------------------------------
# The section


def run(ctx: Context) -> None:
    deadline = time.monotonic() + section_seconds(ctx) - MARGIN_S
    record = Record(ctx, "dag")
    manifest = read_manifest(ctx)
    if manifest is None:
        record.save("skipped", summary=f"no {DAG}/ in the bundle: prepare --dag-results DIR --dag-profile NAME, "
                    f"then carry it (bench/gpu_check.py)")
        return
    profile, jobs = manifest["profile"], manifest["jobs"]
    missing = missing_modules(settings(manifest))
    if missing:
        raise RuntimeError(f"no {', '.join(missing)} here: run bash bench/gpu_check.sh --install first (the install "
                           f"calls of bench/gpu_check.py)")
    record.update(profile=profile, overrides=manifest["overrides"], params=manifest["params"], jobs=jobs)
    repo = ctx.work / "repo"
    mirror = ctx.work / "data" / MIRROR if manifest["mirror"] else None
    env = run_env(ctx, mirror)
    tick = time.perf_counter()
    git = checkout_repo(repo, env, manifest)
    unpack(ctx, manifest, repo)
    touched = touch(ctx, repo, env, targets(repo, profile))
    record.update(git=git, mirror=str(mirror) if mirror else None, touched=touched,
                  setup_seconds=round(time.perf_counter() - tick, 1))
    before = logs(repo)  # the touch's
    record.update(snakemake=snakemake(ctx, repo, env, jobs, deadline, record))
    log = pipeline_times.newest_log(repo / ".snakemake" / "log", exclude=before)
    record.update(rules=rules(log), dvc_status=dvc_status(repo, env), mlflow=mlflow_summary(repo))
    record.update(archive_bytes=archive(ctx, repo, profile, log))
    data = record.data
    ran, clean = data["snakemake"], data["dvc_status"] == {}
    ok = ran["returncode"] == 0 and ran["planned"] is not None and ran["done"] == ran["planned"] and clean
    record.save("ok" if ok else "failed", summary=summary(data), markdown=markdown(data))


def summary(data: dict[str, Any]) -> str:
    ran, statuses = data["snakemake"], data["mlflow"]["by_status"]
    dvc = "clean" if data["dvc_status"] == {} else "NOT clean"
    end = "stopped at the section's limit" if ran["stopped"] else f"exit {ran['returncode']}"
    if ran["failed"]:
        end += " (failed: " + ", ".join(f"{rule} {n}" for rule, n in ran["failed"].items()) + ")"
    return (f"{data['profile']}: {ran['done']} of {ran['planned']} jobs in {ran['seconds']:.0f} s, {end}, K = "
            f"{data['jobs']}; dvc status {dvc}; MLflow runs " + (", ".join(f"{n} {s}" for s, n in statuses.items())
                                                                 or "none"))


def times_text(mlflow: dict[str, Any]) -> str:
    """`run_times` in a line: per stage, its runs' median open span, the job's own wall and its training, and its
    process's phases where it logs them."""
    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} s"

    def phases(found: dict[str, float]) -> str:
        return (" (process: " + ", ".join(f"{phase} {value:.2f} s" for phase, value in found.items()) + ")"
                if found else "")

    return "; ".join(f"{stage} ({t['runs']} runs): run {seconds(t['run_s'])}, job {seconds(t['wall_s'])}, "
                     f"training {seconds(t['train_s'])}{phases(t.get('phases', {}))}"
                     for stage, t in mlflow.get("times", {}).items()) or "none"


def markdown(data: dict[str, Any]) -> str:
    rows = [[rule, r["jobs"], f"{r['seconds']:.0f}", r["from"], r["to"]] for rule, r in data["rules"].items()]
    table = md_table(["rule", "jobs", "wall s (sum over jobs)", "from", "to"], rows)
    touched = ", ".join(f"{rule} {n}" for rule, n in data["touched"].items()) or "none (their outputs were newer)"
    notes = [f"`{data['command']}` in the checkout (profile {data['profile']}, overrides "
             f"{data['overrides'] or 'none'}, top-level {data['params'] or 'none'}), K = {data['jobs']} model jobs "
             f"at once",
             f"data stages marked done by `snakemake --touch` (jobs per rule): {touched}; checkout and data in "
             f"{data['setup_seconds']:.0f} s; " + ("git and DVC" if data["git"] else "no git here: DVC without an SCM")
             + (f"; mirror: the carried part, {data['mirror']}" if data["mirror"] else ""),
             f"dvc status: {json.dumps(data['dvc_status'])[:300]}",
             f"MLflow runs by stage: {data['mlflow']['runs']}; registered model versions: "
             f"{data['mlflow']['registered_versions']}",
             f"where a job's time went (medians over a stage's finished runs): {times_text(data['mlflow'])}",
             f"OUT/{DAG_TAR}: {data['archive_bytes']:,} bytes (tables, metrics.json, logs, dvc.lock, params.yaml, "
             f"Snakemake's log, pipeline_times.md)"]
    return table + "\n\n" + "\n".join(f"- {n}" for n in notes)
