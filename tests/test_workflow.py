"""End to end: the smoke profile through Snakemake, then DVC agrees nothing is left to do, and MLflow has the runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_repo import (
    REPO,
    assert_outputs_committed,
    commit_all,
    free_port,
    link_venv,
    output_digests,
    run,
    smoke_repo,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    return smoke_repo(tmp_path_factory.mktemp("repo"))


def test_outputs_equal_the_committed_ones(smoke_run):
    """Behaviour unchanged, proven: every output of the smoke pipeline has the bytes committed in
    tests/fixtures/smoke_digests.json, so a refactor that changes any result fails here. After a change that is
    meant to change results, `tools/smoke_digests.py` writes the new digests (never this test)."""
    assert_outputs_committed(smoke_run[0])


def test_digests_are_written_by_a_command_that_ci_refuses():
    done = subprocess.run([sys.executable, str(REPO / "tools" / "smoke_digests.py")], env={**os.environ, "CI": "1"},
                          capture_output=True, text=True)
    assert done.returncode == 2 and "refused under CI" in done.stderr


def test_snakemake_builds_the_data_stages(smoke_run):
    root, _, _ = smoke_run
    header = json.loads((root / "results/smoke/ids/train.json").read_text())
    assert header["tokens"] > 10_000 and header["pretokenizer"] == "spacy"
    assert (root / "results/smoke/ids/train.bin").stat().st_size == 2 * header["tokens"]
    # The log exists. It holds no progress bars here: conftest sets TQDM_DISABLE for the session, and the pipeline
    # inherits it (before, only some orders of the test files did, so the log was empty in some runs and not others).
    assert (root / "results/smoke/logs/encode.log").is_file()


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
    assert {r.data.tags["gpt1.stage"] for r in runs} >= {"fetch", "clean", "bpe", "encode", "pretrain-gpt",
                                                        "pretrain-lstm", "encode_task", "finetune", "zeroshot",
                                                        "layers", "report"}
    assert all(r.info.status == "FINISHED" and r.data.tags["gpt1.profile"] == "smoke" for r in runs)
    encode = next(r for r in runs if r.data.tags["gpt1.stage"] == "encode")
    assert encode.data.metrics["train_tokens"] > 10_000 and "gpt1.tokenizer_sha256" in encode.data.tags


def test_lint_is_clean(tmp_path):
    # From a folder of its own (with the config the Snakefile names), so that Snakemake's log lands there, not in
    # the repository's .snakemake/
    (tmp_path / "params.yaml").symlink_to(REPO / "params.yaml")
    out = subprocess.run([sys.executable, "-m", "snakemake", "--lint", "-s", str(REPO / "workflow" / "Snakefile")],
                         cwd=tmp_path, capture_output=True, text=True)
    assert "Congratulations, your workflow is in a good condition!" in out.stdout + out.stderr


def test_report_rendered_every_table_and_figure(smoke_run):
    root, _, _ = smoke_run
    for table in ("table2", "table3", "table4", "table5"):
        for ext in ("md", "tex", "csv"):
            assert (root / f"results/smoke/tables/{table}.{ext}").stat().st_size > 0
    for figure in ("figure2_left", "figure2_right", "pretraining"):
        assert (root / f"results/smoke/figures/{figure}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Transformer w/ aux LM (full)" in (root / "results/smoke/tables/table5.md").read_text()


def dvc(root: Path) -> list[str]:
    """docs/pipeline.md's `.venv/bin/dvc`, from a shell where nothing is activated."""
    return [str(root / ".venv" / "bin" / "dvc")]


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_dvc_metrics_are_the_curated_few(smoke_run):
    """One small metrics file, a few keys per stage, readable in a terminal."""
    from gpt1.report.stage import CURATED_METRICS

    root, env, _ = smoke_run
    metrics = json.loads(run([*dvc(root), "metrics", "show", "--json"], root, env))
    files = next(iter(metrics.values()))["data"]  # one revision: the workspace ("" before the first commit)
    assert list(files) == ["results/smoke/metrics.json"]
    written = json.loads((root / "results/smoke/metrics.json").read_text())
    assert list(written) == [*CURATED_METRICS, "gaps"] and written["ppl_gpt"] > 1 and isinstance(written["gaps"], int)
    # DVC leaves out a null (Table 5's averages: this run fine-tunes the ablations on one of their 8 tasks)
    assert files["results/smoke/metrics.json"]["data"] == {k: v for k, v in written.items() if v is not None}
    assert widest(run([*dvc(root), "metrics", "show"], root, env)) <= 200


def test_dvc_plots_show_works_offline(smoke_run):
    """The plots are the report's images: the page DVC writes shows them from its own folder, which git ignores."""
    root, env, _ = smoke_run
    run([*dvc(root), "plots", "show"], root, env)
    page = (root / "dvc_plots" / "index.html").read_text()
    images = sorted((root / "dvc_plots").rglob("*.png"))
    assert len(images) == 3 and all(str(p.relative_to(root / "dvc_plots")) in page for p in images)
    assert run(["git", "check-ignore", "dvc_plots"], root, env).strip() == "dvc_plots"


def test_changing_the_data_mirror_reruns_nothing_in_smoke(smoke_run):
    """The smoke profile makes its data itself: setting GPT1_DATA_MIRROR leaves every job up to date."""
    root, env, _ = smoke_run
    out = run([sys.executable, "-m", "snakemake", "-n", "--cores", "2"], root,
              {**env, "GPT1_DATA_MIRROR": str(root / "some-mirror")})
    assert "Nothing to be done" in out


@pytest.fixture(scope="module")
def teammate(smoke_run, tmp_path_factory) -> tuple[Path, dict]:
    """A teammate's clone: the smoke run committed, its outputs pushed to a local DVC remote, then `git clone` and
    `dvc pull`, all with `.venv/bin/dvc`."""
    root, env, _ = smoke_run
    remote = tmp_path_factory.mktemp("dvc-remote")
    run([*dvc(root), "remote", "add", "-d", "shared", str(remote)], root, env)
    run([*dvc(root), "push"], root, env)
    commit_all(root, env, "smoke run")
    clone = tmp_path_factory.mktemp("teammate") / "gpt1"
    run(["git", "clone", "-q", str(root), str(clone)], root.parent, env)
    link_venv(clone)
    run([*dvc(clone), "pull"], clone, env)
    return clone, env


def test_a_teammate_pulls_every_output_and_has_nothing_to_run(smoke_run, teammate):
    clone, env = teammate
    # but Snakemake's own files: its flag and the timestamps it leaves in directory() outputs (.dvcignore'd)
    made = {k: v for k, v in output_digests(smoke_run[0]).items()
            if k != "dvc_commit.done" and not k.endswith(".snakemake_timestamp")}  # fmt: skip
    assert output_digests(clone) == made
    assert json.loads(run([*dvc(clone), "status", "--json"], clone, env).strip().splitlines()[-1]) == {}
    out = run([*dvc(clone), "repro"], clone, env)
    assert "Running stage" not in out and "Data and pipelines are up to date" in out


def test_an_experiment_shows_its_params_and_metrics(teammate):
    """`dvc exp run -S` (stages run by DVC from an unactivated shell), then exp show, params diff, metrics diff."""
    clone, env = teammate
    run([*dvc(clone), "exp", "run", "-n", "race-sota", "-S", "zeroshot_reference.race.sota=0.6"], clone, env)
    rows = json.loads(run([*dvc(clone), "exp", "show", "--json"], clone, env))
    baseline, experiment = next((row, rev) for row in rows for exp in row.get("experiments") or []
                                for rev in exp["revs"] if rev["name"] == "race-sota")
    metrics, baseline = (r["data"]["metrics"]["results/smoke/metrics.json"]["data"] for r in (experiment, baseline))
    assert metrics["zs_gpt"] != baseline["zs_gpt"] and metrics["glue"] == baseline["glue"]
    table = run([*dvc(clone), "exp", "show", "--no-pager", "--only-changed"], clone, {**env, "COLUMNS": "200"})
    assert "race-sota" in table and "zs_gpt" in table and widest(table) <= 200
    assert "zeroshot_reference.race.sota" in run([*dvc(clone), "params", "diff"], clone, env)
    assert "zs_gpt" in run([*dvc(clone), "metrics", "diff"], clone, env)


def test_snakemake_report_html(smoke_run, tmp_path):
    root, env, _ = smoke_run
    run([sys.executable, "-m", "snakemake", "--report", str(tmp_path / "report.html")], root, env)
    html = (tmp_path / "report.html").read_text(errors="replace")
    assert "figure2_left" in html and "table5" in html


def test_mlflow_ui_lists_the_runs_grouped_under_the_report(smoke_run):
    """`mlflow ui` in the repo root: its REST API lists every stage's run, the report run parent of the rest."""
    import time
    import urllib.request

    root, env, _ = smoke_run
    port = free_port()
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
    expected = {"fetch", "clean", "bpe", "encode", "pretrain-gpt", "pretrain-lstm", "encode_task", "finetune",
                "zeroshot", "layers", "report"}
    assert expected <= stages
    report_ids = {r["info"]["run_id"] for r, t in zip(runs, tags, strict=True) if t["gpt1.stage"] == "report"}
    # Each invocation's runs hang under that invocation's report run.
    assert report_ids and all(t.get("mlflow.parentRunId") in report_ids for t in tags if t["gpt1.stage"] != "report")


def test_the_job_phases_bench_times_a_pipeline_job_phase_by_phase(smoke_run, tmp_path):
    """bench/job_phases.py on the smoke run: a fine-tuning job through the CLI, its phases from the OS's start of the
    process (gpt1.pipeline.clock) within its wall timed from outside, beside the import-only baseline."""
    from bench.job_phases import markdown, measure

    root, _, _ = smoke_run
    found = measure(root / "results" / "smoke", "smoke", "rte", 1, tmp_path)
    for kind in ("job", "collected"):  # the CLI's exit (gpt1.cli.main.entry), and a plain sys.exit(main())
        phases = found[kind]["phases"]
        assert list(phases) == ["start", "setup", "load", "open", "train", "evaluate", "write", "log", "process"]
        assert sum(v for p, v in phases.items() if p != "process") == pytest.approx(phases["process"], abs=0.05)
        assert 0 < phases["process"] < found[kind]["wall_s"] and found[kind]["runs"] == 1
        assert 0 < found["baseline_s"] < found[kind]["wall_s"]
    table = markdown(found)
    assert "| train | " in table and "| after the last mark: the run's end, the exit | " in table
    assert "exiting through the last collection takes" in table


def test_the_job_phases_bench_says_what_is_missing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.job_phases", "--results", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip() == (f"job_phases: {tmp_path}/pretrain/gpt, {tmp_path}/tasks/rte missing: run the "
                                   "pipeline first (e.g. snakemake --cores all --config profile=smoke), or give "
                                   "--results")


def test_the_metric_sink_bench_times_the_loop_with_each_sink(smoke_run, tmp_path):
    """bench/metric_sink.py on the smoke run: the GPT's own pre-training loop, once with each sink, in this process."""
    from bench.metric_sink import SINKS, markdown, measure

    root, _, _ = smoke_run
    found = measure(root / "results" / "smoke", 20, 1, tmp_path)
    assert set(found["speeds"]) == set(SINKS) and all(len(v) == 1 and v[0] > 0 for v in found["speeds"].values())
    assert found["ratio"] > 0 and "MetricSink / EagerSink: **" in markdown(found)
