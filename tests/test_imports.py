"""The package's import graph (module-level and function-level imports, read by gpt1.pipeline.codedeps): no cycle, and no
stage module imports another stage module (a stage's shared code lives in a library). Only cli.py and __main__.py
may import stages; the stage modules are those holding a CLI command's stage function.

Beside the package, bench/ (speed and memory) and experiments/ (the studies) are packages run as `python -m
bench.<module>` and `python -m experiments.<study>`: none of their modules imports a stage module or the CLI (they use
the libraries, and run a stage as `python -m gpt1 <stage>` in a child) or touches sys.path, bench imports nothing of
experiments, and every module with a `main` imports as a package module."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from gpt1.pipeline.codedeps import find_cycle, import_graph, stage_modules

ENTRY_POINTS = {"gpt1.cli.main", "gpt1.__main__"}  # they dispatch to stages
REPO = Path(__file__).resolve().parents[1]
ROOMS = ("bench", "experiments")


def stage_imports(package_dir: Path | None = None) -> list[str]:
    """'importer -> imported' for every stage module importing another, outside the entry points."""
    kwargs = {} if package_dir is None else {"package_dir": package_dir}
    graph, stages = import_graph(**kwargs), set(stage_modules(**kwargs).values())
    return [f"{module} -> {other}" for module in sorted(stages) for other in sorted(graph.get(module, set()) & stages)]


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_no_stage_module_imports_another():
    stages = set(stage_modules().values())
    assert {"gpt1.stages.finetune", "gpt1.stages.layers", "gpt1.stages.pretrain", "gpt1.stages.export", "gpt1.report.stage"} <= stages
    offending = stage_imports()
    assert not offending, f"a stage module imports another stage module: {'; '.join(offending)}"


def fake_package(root: Path, modules: dict[str, str]) -> Path:
    package = root / "gpt1"
    package.mkdir()
    for name, source in {"__init__": "", **modules}.items():
        (package / f"{name}.py").write_text(source)
    return package


def test_the_checks_find_a_cycle_and_a_stage_importing_a_stage(tmp_path: Path):
    package = fake_package(tmp_path, {
        "cli": "def _one(cfg, a):\n    from gpt1.one import one_stage\n\n\n"
               "def _two(cfg, a):\n    from gpt1.two import two_stage\n\n\n"
               "def build(sub):\n    _stage(sub, 'one', 'help', _one)\n    _stage(sub, 'two', 'help', _two)\n",
        "one": "from gpt1.lib import helper\n\n\ndef one_stage():\n    from gpt1.two import two_stage\n",
        "two": "def two_stage():\n    pass\n",
        "lib": "def helper():\n    from gpt1 import deep\n",
        "deep": "from gpt1.lib import helper\n",
    })  # fmt: skip
    graph = import_graph(package)
    assert graph["gpt1.one"] == {"gpt1.lib", "gpt1.two"} and graph["gpt1.lib"] == {"gpt1", "gpt1.deep"}
    assert find_cycle(graph) == ["gpt1.lib", "gpt1.deep", "gpt1.lib"]
    assert stage_modules(package) == {"one": "gpt1.one", "two": "gpt1.two"}
    assert stage_imports(package) == ["gpt1.one -> gpt1.two"]
    (package / "deep.py").write_text("")
    assert find_cycle(import_graph(package)) is None


# --- bench/ and experiments/ ----------------------------------------------------------------------------------------


def room_modules(repo: Path = REPO) -> list[Path]:
    return sorted(path for room in ROOMS for path in (repo / room).rglob("*.py"))


def imported_names(node: ast.AST) -> list[str]:
    """The modules an import statement may load: `from a import b` loads a, and a.b where b is a module."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return []


def room_offences(forbidden: set[str], repo: Path = REPO) -> list[str]:
    """'file:line: what' for each import of a `forbidden` module (the stage modules and the CLI), each use of
    sys.path, and each import of experiments from bench, in the modules of bench/ and experiments/."""
    found = []
    for path in room_modules(repo):
        name = path.relative_to(repo).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for module in imported_names(node):
                if module in forbidden or module == "sys.path":
                    found.append((name, node.lineno, f"imports {module}"))
                elif name.startswith("bench/") and module.split(".")[0] == "experiments":
                    found.append((name, node.lineno, f"bench imports {module}"))
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
                found.append((name, node.lineno, "sys.path"))
    return [f"{name}:{line}: {what}" for name, line, what in sorted(found)]


def defines_main(path: Path) -> bool:
    return any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in ast.parse(path.read_text()).body)


def main_modules(repo: Path = REPO) -> list[str]:
    """bench.x, experiments.y, ...: every module of the two rooms that defines main()."""
    return [".".join(path.relative_to(repo).with_suffix("").parts) for path in room_modules(repo) if defines_main(path)]


def test_bench_and_experiments_import_no_stage_or_cli_and_leave_sys_path_alone():
    offending = room_offences(set(stage_modules().values()) | ENTRY_POINTS)
    assert not offending, ("bench/ and experiments/ use the libraries (a stage runs as `python -m gpt1 <stage>`), "
                           f"import as packages and bench imports no study: {'; '.join(offending)}")


@pytest.mark.parametrize("module", main_modules())
def test_every_module_with_a_main_imports_as_a_package_module(module: str):
    assert callable(importlib.import_module(module).main)


def test_the_room_checks_find_a_stage_the_cli_sys_path_and_bench_importing_a_study(tmp_path: Path):
    for room in ROOMS:
        (tmp_path / room).mkdir()
        (tmp_path / room / "__init__.py").write_text("")
    (tmp_path / "bench" / "fine.py").write_text(
        "import sys\nfrom gpt1 import layout\nfrom bench.common import REPO\n\n\ndef main():\n    print(sys.argv)\n")
    (tmp_path / "bench" / "bad.py").write_text("import sys\nsys.path.insert(0, '.')\nfrom experiments import study\n")
    (tmp_path / "experiments" / "study.py").write_text(
        "from bench.common import REPO\nfrom gpt1 import pretrain\n\n\ndef main():\n    from gpt1.cli.main import main\n")
    (tmp_path / "experiments" / "other.py").write_text("from sys import path\nimport gpt1.report.stage\n")
    assert room_offences({"gpt1.stages.pretrain", "gpt1.report.stage", "gpt1.cli.main"}, tmp_path) == [
        "bench/bad.py:2: sys.path", "bench/bad.py:3: bench imports experiments",
        "bench/bad.py:3: bench imports experiments.study", "experiments/other.py:1: imports sys.path",
        "experiments/other.py:2: imports gpt1.report.stage", "experiments/study.py:2: imports gpt1.stages.pretrain",
        "experiments/study.py:6: imports gpt1.cli.main"]
    assert main_modules(tmp_path) == ["bench.fine", "experiments.study"]
