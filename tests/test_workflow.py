"""End to end: the smoke profile through Snakemake, then DVC agrees nothing is left to do, and MLflow has the runs."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def run(args: list[str], cwd: Path, env: dict) -> str:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout + out.stderr


def smoke_repo(root: Path, env_extra: dict[str, str] | None = None) -> tuple[Path, dict, str]:
    """A copy of the repository in `root` with params.yaml selecting smoke, after one `snakemake --cores 2`;
    `env_extra` (e.g. MLFLOW_TRACKING_URI) is added to the otherwise cleaned environment."""
    for name in ("workflow", "gpt1"):
        shutil.copytree(REPO / name, root / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "environment.yml"):
        shutil.copy(REPO / name, root / name)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    # Every task and both variants (each transformation and metric), but one ablation task: CI time.
    params.update(profile="smoke", ablation_tasks=["rte"])
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "GPT1_", "SNAKEMAKE_"))}
    # A user's shell: the virtual environment not activated (the workflow puts its Python first on PATH itself)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if Path(p) != Path(sys.executable).parent)
    env.update(env_extra or {})
    run(["git", "init", "-q"], root, env)
    run([sys.executable, "-m", "dvc", "init", "-q"], root, env)
    shutil.copy(REPO / ".dvc" / "config", root / ".dvc" / "config")
    log = run([sys.executable, "-m", "snakemake", "--cores", "2"], root, env)
    return root, env, log


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    return smoke_repo(tmp_path_factory.mktemp("repo"))


def output_digests(root: Path) -> dict[str, str]:
    """sha256 of every file of results/smoke but the logs (they hold timings and progress bars)."""
    import hashlib

    results = root / "results" / "smoke"
    return {str(p.relative_to(results)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(results.rglob("*")) if p.is_file() and p.relative_to(results).parts[0] != "logs"}


def test_a_second_run_in_a_fresh_folder_gives_the_same_bytes(smoke_run, tmp_path_factory):
    """Bit-for-bit reproducible on CPU: every output file of the whole smoke pipeline, run again from nothing."""
    first = output_digests(smoke_run[0])
    second = output_digests(smoke_repo(tmp_path_factory.mktemp("again"))[0])
    assert len(first) > 100 and first.keys() == second.keys()
    differing = [name for name in first if first[name] != second[name]]
    assert differing == [], f"{len(differing)} files differ, e.g. {differing[:12]}"


def test_snakemake_builds_the_data_stages(smoke_run):
    root, _, _ = smoke_run
    header = json.loads((root / "results/smoke/ids/train.json").read_text())
    assert header["tokens"] > 10_000 and header["pretokenizer"] == "spacy"
    assert (root / "results/smoke/ids/train.bin").stat().st_size == 2 * header["tokens"]
    assert (root / "results/smoke/logs/encode.log").read_text()


def test_dvc_recorded_everything(smoke_run):
    root, env, _ = smoke_run
    status = run([sys.executable, "-m", "dvc", "status", "--json"], root, env)
    assert json.loads(status.strip().splitlines()[-1]) == {}
    assert "didn't change, skipping" in run([sys.executable, "-m", "dvc", "repro"], root, env)
    # The DVC cache links rather than copies the outputs (cache.type hardlink first).
    assert (root / "results/smoke/ids/train.bin").stat().st_nlink == 2


def test_second_snakemake_does_nothing(smoke_run):
    root, env, _ = smoke_run
    assert "Nothing to be done" in run([sys.executable, "-m", "snakemake", "--cores", "2"], root, env)


def test_mlflow_in_the_repo_root_lists_every_stage(smoke_run):
    from mlflow.tracking import MlflowClient

    root, _, _ = smoke_run
    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    experiment = client.get_experiment_by_name("gpt1")
    runs = client.search_runs([experiment.experiment_id])
    assert {r.data.tags["gpt1.stage"] for r in runs} >= {"fetch", "clean", "bpe", "encode"}
    assert all(r.info.status == "FINISHED" and r.data.tags["gpt1.profile"] == "smoke" for r in runs)
    encode = next(r for r in runs if r.data.tags["gpt1.stage"] == "encode")
    assert encode.data.metrics["train_tokens"] > 10_000 and "gpt1.tokenizer_sha256" in encode.data.tags


def test_lint_is_clean():
    out = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=REPO, capture_output=True, text=True)
    assert "Congratulations, your workflow is in a good condition!" in out.stdout + out.stderr


def test_report_rendered_every_table_and_figure(smoke_run):
    root, _, _ = smoke_run
    for table in ("table2", "table3", "table4", "table5"):
        for ext in ("md", "tex", "csv"):
            assert (root / f"results/smoke/tables/{table}.{ext}").stat().st_size > 0
    for figure in ("figure2_left", "figure2_right", "pretraining"):
        assert (root / f"results/smoke/figures/{figure}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Transformer w/ aux LM (full)" in (root / "results/smoke/tables/table5.md").read_text()


def test_dvc_metrics_and_plots_show(smoke_run):
    root, env, _ = smoke_run
    metrics = json.loads(run([sys.executable, "-m", "dvc", "metrics", "show", "--json"], root, env))
    files = next(iter(metrics.values()))["data"]  # one revision: the workspace ("" before the first commit)
    assert "results/smoke/tables/summary.json" in files
    assert "results/smoke/pretrain/gpt/metrics.json" in files
    plots = json.loads(run([sys.executable, "-m", "dvc", "plots", "show", "--json"], root, env))
    assert "results/smoke/pretrain/gpt/curves.csv" in plots["data"]
    assert any(key.endswith("figure2_left.png") for key in plots["data"])


def test_snakemake_report_html(smoke_run, tmp_path):
    root, env, _ = smoke_run
    run([sys.executable, "-m", "snakemake", "--report", str(tmp_path / "report.html")], root, env)
    html = (tmp_path / "report.html").read_text(errors="replace")
    assert "figure2_left" in html and "table5" in html


def test_mlflow_ui_lists_the_runs_grouped_under_the_report(smoke_run):
    """`mlflow ui` in the repo root: its REST API lists every stage's run, the report run parent of the rest."""
    import socket
    import time
    import urllib.request

    root, env, _ = smoke_run
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--host", "127.0.0.1", "--port", str(port)],
                              cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}/api/2.0/mlflow"
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"{base}/experiments/get-by-name?experiment_name=gpt1", timeout=2) as r:
                    experiment = json.load(r)["experiment"]
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise AssertionError("mlflow ui did not answer within 60 s")
        body = json.dumps({"experiment_ids": [experiment["experiment_id"]], "max_results": 1000}).encode()
        request = urllib.request.Request(f"{base}/runs/search", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as r:
            runs = json.load(r)["runs"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    tags = [{t["key"]: t["value"] for t in run_["data"].get("tags", [])} for run_ in runs]
    stages = {t["gpt1.stage"] for t in tags}
    expected = {"fetch", "bpe", "encode", "pretrain-gpt", "pretrain-lstm", "finetune", "zeroshot", "layers", "report"}
    assert expected <= stages
    report_ids = {r["info"]["run_id"] for r, t in zip(runs, tags, strict=True) if t["gpt1.stage"] == "report"}
    # Each invocation's runs hang under that invocation's report run.
    assert report_ids and all(t.get("mlflow.parentRunId") in report_ids for t in tags if t["gpt1.stage"] != "report")
