"""Each stage's code inputs are derived from the package's imports (gpt1.pipeline.codedeps), and both engines declare
exactly them: Snakemake computes them (common.smk's `code()`), dvc.yaml lists them (tools/dvc_code_deps.py writes
them)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_dag import snakemake_stages, workspace

from gpt1.pipeline.codedeps import cli_commands, import_closure, stage_code
from gpt1.pipeline.errors import CodeDepsError

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "dvc_code_deps.py"
PROFILE = yaml.safe_load((REPO / "params.yaml").read_text())["profile"]
# what every `python -m gpt1 <stage>` imports
CLI_BASE = ["__init__.py", "__main__.py", "cli/boundary.py", "cli/main.py", "cli/preflight.py", "pipeline/config.py",
            "pipeline/errors.py", "pipeline/files.py", "pipeline/mlflow_store.py", "pipeline/params.schema.yaml",
            "pipeline/tracking.py"]  # the folders' __init__.py are empty: no code input


def load_tool():
    spec = importlib.util.spec_from_file_location("dvc_code_deps", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "gpt1"


def toy_package(tmp_path: Path) -> Path:
    """A package named gpt1 with one import of every kind the closure must follow, and files it must not reach."""
    return write_package(tmp_path, {
        "gpt1/__init__.py": "VERSION = 1\n",
        "gpt1/__main__.py": "from gpt1.cli.main import main\n",
        "gpt1/cli/__init__.py": "",
        "gpt1/cli/main.py": (
            "from gpt1 import base\n\n"
            "def _one(cfg, a):\n    from gpt1.one import run\n\n"
            "def _two(cfg, a):\n    import gpt1.two\n\n"
            "def build(sub):\n    _stage(sub, 'one', 'help', _one)\n    _stage(sub, 'two', 'help', _two)\n"
        ),
        "gpt1/base.py": "X = 1\n",
        "gpt1/one.py": "def run():\n    from gpt1.sub.leaf import f  # lazy\n    from gpt1 import lazy_sibling\n",
        "gpt1/lazy_sibling.py": "Y = 2\n",
        "gpt1/sub/__init__.py": "",
        "gpt1/sub/leaf.py": "from . import near\nfrom ..far import g\n",
        "gpt1/sub/near.py": "Z = 3\n",
        "gpt1/far.py": "import gpt1.reads_data as r\nimport json\n",
        "gpt1/reads_data.py": "from pathlib import Path\nDATA = Path(__file__).with_name('table.yaml')\n",
        "gpt1/table.yaml": "a: 1\n",
        "gpt1/two.py": "W = 4\n",
        "gpt1/unused.py": "",
    })  # fmt: skip


def test_closure_follows_lazy_relative_and_package_imports(tmp_path):
    package = toy_package(tmp_path)
    assert cli_commands(package) == {"one": "_one", "two": "_two"}
    assert stage_code("one", package) == sorted(f"gpt1/{name}" for name in [
        "__init__.py", "__main__.py", "cli/main.py", "base.py", "one.py", "lazy_sibling.py", "sub/leaf.py",
        "sub/near.py", "far.py", "reads_data.py", "table.yaml"])  # fmt: skip
    # (cli/ and sub/ __init__.py are empty: they run nothing, no code input; the closure itself has them)
    # the other command's dispatch function is not followed
    assert "gpt1/two.py" in stage_code("two", package)
    assert "gpt1/one.py" not in stage_code("two", package)
    assert import_closure(["gpt1.sub.near"], package) == ["gpt1/__init__.py", "gpt1/sub/__init__.py",
                                                          "gpt1/sub/near.py"]
    with pytest.raises(CodeDepsError, match="no such stage command"):
        stage_code("three", package)


def test_every_stage_runs_the_cli_and_its_own_module():
    own = {"fetch": "stages/corpus.py", "clean": "stages/corpus.py", "bpe": "stages/bpe.py",
           "encode": "stages/encode.py", "pretrain": "stages/pretrain.py", "encode-task": "stages/encode_task.py",
           "finetune": "stages/finetune.py", "layers": "stages/layers.py", "zeroshot": "stages/zeroshot.py",
           "report": "report/stage.py", "export": "stages/export.py"}  # fmt: skip
    for command, module in own.items():
        files = stage_code(command)
        assert {f"gpt1/{m}" for m in [*CLI_BASE, module]} <= set(files), command
        assert all((REPO / f).is_file() for f in files), command
    assert "gpt1/report/paper.yaml" in stage_code("report")


def mismatch(name: str, listed: list[str], derived: list[str]) -> str:
    missing, extra = sorted(set(derived) - set(listed)), sorted(set(listed) - set(derived))
    return f"{name}: missing {missing}, extra {extra} (refresh dvc.yaml: python {TOOL.relative_to(REPO)} --write)"


def test_dvc_code_deps_are_the_derived_closure():
    tool = load_tool()
    text = (REPO / "dvc.yaml").read_text()
    listed, commands = tool.code_deps(text), tool.stage_commands(text)
    assert commands["ablation_lstm"] == "finetune" and commands["encode_task"] == "encode-task"
    for name, command in commands.items():
        derived = stage_code(command)
        assert listed[name] == derived, mismatch(name, listed[name], derived)


def test_snakemake_code_inputs_are_the_derived_closure(tmp_path):
    tool = load_tool()
    stages = snakemake_stages(workspace(tmp_path, PROFILE), PROFILE)
    rules = {name.partition("@")[0] for name in stages}
    assert rules == set(tool.stage_commands((REPO / "dvc.yaml").read_text()))
    for name, stage in stages.items():
        code = sorted(dep for dep in stage["deps"] if dep.startswith("gpt1/"))
        derived = stage_code(tool.command_of(stage["cmd"]))
        assert code == derived, mismatch(name, code, derived)


def test_an_import_without_its_file_fails_the_check(tmp_path):
    """Adding one import to tokenizer.py puts its file in the closure of every stage that runs tokenizer.py, and
    dvc.yaml then misses it until --write."""
    package = tmp_path / "gpt1"
    shutil.copytree(REPO / "gpt1", package, ignore=shutil.ignore_patterns("__pycache__"))
    with (package / "data" / "tokenizer.py").open("a") as handle:
        handle.write("\n\ndef _added() -> None:\n    from gpt1.evaluation import significance  # noqa: F401\n")
    assert "gpt1/evaluation/significance.py" in stage_code("bpe", package)
    tool = load_tool()
    text = (REPO / "dvc.yaml").read_text()
    found = tool.differences(text, package)
    for stage in ("bpe", "encode"):  # significance.py and the metrics.py it imports (their folder's __init__ is empty)
        assert found[stage] == (["gpt1/evaluation/metrics.py", "gpt1/evaluation/significance.py"], []), stage
    assert not {"fetch", "clean", "report"} & set(found)  # they do not run tokenizer.py
    assert tool.differences(tool.rewrite(text, package), package) == {}


def test_tool_check_and_write_keep_the_rest_of_dvc_yaml(tmp_path):
    original = (REPO / "dvc.yaml").read_text()
    broken = original.replace("      - gpt1/data/textnorm.py\n", "", 1).replace(
        "      - gpt1/pipeline/errors.py\n", "      - gpt1/pipeline/errors.py\n      - gpt1/stages/layers.py\n", 1)
    path = tmp_path / "dvc.yaml"
    path.write_text(broken)
    run = [sys.executable, str(TOOL), "--dvc-yaml", str(path)]
    check = subprocess.run([*run, "--check"], capture_output=True, text=True)
    assert check.returncode == 1
    assert "stage fetch: missing ['gpt1/data/textnorm.py'], extra ['gpt1/stages/layers.py']" in check.stderr
    subprocess.run([*run, "--write"], check=True)
    assert path.read_text() == original
    assert subprocess.run([*run, "--check"]).returncode == 0


def test_tool_lock_re_records_the_changed_code_alone_in_dvcs_format(tmp_path):
    """--lock: dvc.lock's gpt1/ entries from the tree (md5, size), the data's entries and every other byte kept."""
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "gpt1", tree / "gpt1", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "dvc.lock"):
        shutil.copy(REPO / name, tree / name)
    run = [sys.executable, str(TOOL), "--dvc-yaml", str(tree / "dvc.yaml"), "--lock"]
    subprocess.run(run, check=True, capture_output=True)  # as this tree's code now is
    recorded, written = yaml.safe_load((tree / "dvc.lock").read_text()), (tree / "dvc.lock").read_bytes()
    again = subprocess.run(run, check=True, capture_output=True, text=True)
    assert again.stdout.strip().endswith("0 code entries re-recorded")
    assert (tree / "dvc.lock").read_bytes() == written  # DVC's own format, byte for byte
    with open(tree / "gpt1" / "stages" / "bpe.py", "a") as handle:
        handle.write("# a comment\n")
    moved = subprocess.run(run, check=True, capture_output=True, text=True)
    assert moved.stdout.strip().endswith(": 1 code entries re-recorded")  # the bpe stage's alone imports it
    after = yaml.safe_load((tree / "dvc.lock").read_text())
    changed = {(stage, d["path"]) for stage in after["stages"] for d, was in
               zip(after["stages"][stage]["deps"], recorded["stages"][stage]["deps"], strict=True) if d != was}
    assert changed == {("bpe", "gpt1/stages/bpe.py")}
    entry = next(d for d in after["stages"]["bpe"]["deps"] if d["path"] == "gpt1/stages/bpe.py")
    data = (tree / "gpt1" / "stages" / "bpe.py").read_bytes()
    assert entry == {"path": "gpt1/stages/bpe.py", "hash": "md5", "md5": hashlib.md5(data).hexdigest(),
                     "size": len(data)}
    assert {k: v for k, v in after.items() if k != "stages"} == {k: v for k, v in recorded.items() if k != "stages"}


def test_tool_lock_refuses_a_locked_stage_dvc_yaml_no_longer_has(tmp_path):
    lock = yaml.safe_load((REPO / "dvc.lock").read_text())
    lock["stages"]["gone@x"] = lock["stages"]["bpe"]
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    shutil.copytree(REPO / "gpt1", tmp_path / "gpt1", ignore=shutil.ignore_patterns("__pycache__"))
    before = (tmp_path / "dvc.lock").read_bytes()
    done = subprocess.run([sys.executable, str(TOOL), "--dvc-yaml", str(tmp_path / "dvc.yaml"), "--lock"],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip() == (f"{tmp_path / 'dvc.lock'}: stage gone@x is not in {tmp_path / 'dvc.yaml'}: "
                                   "`dvc repro` or `dvc remove` it first")
    assert (tmp_path / "dvc.lock").read_bytes() == before


def test_tool_lock_refuses_a_dvc_yaml_whose_lists_are_stale(tmp_path):
    path = tmp_path / "dvc.yaml"
    path.write_text((REPO / "dvc.yaml").read_text().replace("      - gpt1/data/textnorm.py\n", "", 1))
    shutil.copy(REPO / "dvc.lock", tmp_path / "dvc.lock")
    shutil.copytree(REPO / "gpt1", tmp_path / "gpt1", ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, str(TOOL), "--dvc-yaml", str(path), "--lock"], capture_output=True,
                          text=True)
    assert done.returncode == 1 and "list other code than they import; run --write first" in done.stderr
    assert (tmp_path / "dvc.lock").read_bytes() == (REPO / "dvc.lock").read_bytes()


def test_editing_the_tokenizer_reruns_bpe_but_not_fetch_or_clean_in_both_engines(tmp_path):
    """gpt1/data/tokenizer.py holds the tokenizer only (the text standardisation is gpt1/data/textnorm.py, the pool
    helper gpt1/data/pool.py): it is a code input of bpe and not of fetch or clean, in dvc.yaml and in Snakemake, which
    plans bpe again once tokenizer.py is newer than its outputs and leaves the corpus alone (a dry run over stand-in
    files: nothing runs)."""
    dvc = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for stage in ("fetch", "clean"):
        assert "gpt1/data/tokenizer.py" not in stage_code(stage) and "gpt1/data/tokenizer.py" not in dvc[stage]["deps"]
    assert "gpt1/data/tokenizer.py" in stage_code("bpe") and "gpt1/data/tokenizer.py" in dvc["bpe"]["deps"]
    assert "gpt1/data/textnorm.py" in dvc["clean"]["deps"] and "gpt1/data/textnorm.py" in dvc["bpe"]["deps"]
    root = workspace(tmp_path, "smoke")
    results = root / "results" / "smoke"
    names = ["corpus/raw.jsonl", "corpus/raw.manifest.json", "corpus/train.jsonl", "corpus/validation.jsonl",
             "corpus/manifest.json", "tokenizer/tokenizer.json", "tokenizer/gpt1_tokenizer.json"]
    for age, name in enumerate(names):  # each file newer than the one before: everything up to date
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text("{}\n")
        os.utime(results / name, (1_000_000 + age, 1_000_000 + age))
    for path in root.joinpath("gpt1").rglob("*"):
        os.utime(path, (999_000, 999_000))

    def planned(target: str) -> str:
        dry_run = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--rerun-triggers", "mtime", "--", target]
        out = subprocess.run(dry_run, cwd=root, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        return out.stdout + out.stderr

    tokenizer = "results/smoke/tokenizer/tokenizer.json"
    assert "Nothing to be done" in planned(tokenizer)
    os.utime(root / "gpt1" / "data" / "tokenizer.py")  # edited now
    assert "Nothing to be done" in planned("results/smoke/corpus/train.jsonl")
    plan = planned(tokenizer)
    assert "rule bpe:" in plan and "gpt1/data/tokenizer.py" in plan and "rule clean:" not in plan
