"""The package's layers are its folders, and its import graph (module-level and function-level imports, read by
gpt1.pipeline.codedeps) keeps them: no cycle;

- gpt1/cli/ is the CLI (`gpt1 <stage>` in cli/main.py, the user's commands, preflight, boundary); only it and
  gpt1/__main__.py import a stage, and nothing else imports the CLI;
- gpt1/stages/ holds the stage modules (each holding a CLI command's stage function; the report's is report/stage.py,
  beside its library), and no stage imports another stage (what two share lives in a library);
- the library folders (data, modeling, training, evaluation, pipeline, and the report's modules but its stage) import
  no stage and no CLI, and know no params.yaml: only the CLI calls `config.load_config`, the one reader of that file
  (a library takes plain values or a section of the selected profile);
- every module lies in one of those folders (gpt1/__init__.py and gpt1/__main__.py aside);
- every `__init__.py` below gpt1/ is empty: it runs nothing, so it is no stage's code input (gpt1.pipeline.codedeps).

Beside the package, bench/ (speed and memory) and experiments/ (the studies) are packages run as `python -m
bench.<module>` and `python -m experiments.<study>`: none of their modules imports a stage module or the CLI (they use
the libraries, and run a stage as `python -m gpt1 <stage>` in a child) or touches sys.path, bench imports nothing of
experiments, and every module with a `main` imports as a package module."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path

import pytest

from gpt1.pipeline.codedeps import PACKAGE_DIR, find_cycle, import_graph, stage_modules

REPO = Path(__file__).resolve().parents[1]
ROOMS = ("bench", "experiments")
CLI = "gpt1.cli"  # the CLI layer's folder
STAGES = "gpt1.stages"  # the stage modules' folder
REPORT_STAGE = "gpt1.report.stage"  # the report's stage module, beside its library
LIBRARY = ("gpt1.data", "gpt1.modeling", "gpt1.training", "gpt1.evaluation", "gpt1.pipeline", "gpt1.report")
ENTRY_POINTS = {"gpt1.__main__", CLI}  # they dispatch to stages
PARAMS_READERS = ("load_config", "read_params")  # gpt1.pipeline.config's readers of params.yaml: the CLI's alone
FOLDERS = ("cli", "stages", "data", "modeling", "training", "evaluation", "pipeline", "report")  # every module's
TOP_MODULES = ("__init__", "__main__")  # the package itself and its `python -m gpt1`


def within(module: str, folders: str | tuple[str, ...] | set[str]) -> bool:
    """Whether `module` is one of `folders` or lies below one of them."""
    folders = (folders,) if isinstance(folders, str) else tuple(folders)
    return any(module == folder or module.startswith(f"{folder}.") for folder in folders)


def layer_offences(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """'importer -> imported: why' for every import that crosses a layer the wrong way: a stage importing a stage, a
    library module importing a stage or the CLI, anything but the entry points importing a stage or the CLI (a
    folder's bare name counts: `from gpt1 import stages` imports gpt1.stages)."""
    name = package_dir.name
    cli, stages, report_stage = (f"{name}{m[4:]}" for m in (CLI, STAGES, REPORT_STAGE))
    library = tuple(f"{name}{m[4:]}" for m in LIBRARY)
    entry = {f"{name}{m[4:]}" for m in ENTRY_POINTS}

    def stage(module: str) -> bool:
        return module == report_stage or within(module, stages)

    def of_cli(module: str) -> bool:
        return within(module, cli)

    found = []
    for module, targets in sorted(import_graph(package_dir).items()):
        for other in sorted(targets):
            if any(t.startswith(f"{other}.") for t in targets):  # a package, as the parent of what is named
                continue
            if stage(module) and stage(other):
                found.append(f"{module} -> {other}: a stage imports a stage")
            elif within(module, library) and module != report_stage and (stage(other) or of_cli(other)):
                found.append(f"{module} -> {other}: a library module imports a {'stage' if stage(other) else 'CLI'}")
            elif not within(module, entry) and of_cli(other):
                found.append(f"{module} -> {other}: only gpt1/__main__.py imports the CLI")
            elif not within(module, entry) and stage(other):
                found.append(f"{module} -> {other}: only the CLI imports a stage")
    return found


def params_readers(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """'file:line' for each use of config.load_config or config.read_params (the params.yaml readers) outside the
    CLI's folder."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        relative = path.relative_to(package_dir.parent)
        if relative.parts[1:2] == ("cli",) or relative.as_posix() == f"{package_dir.name}/pipeline/config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            named = ((isinstance(node, ast.ImportFrom) and any(a.name in PARAMS_READERS for a in node.names))
                     or (isinstance(node, ast.Attribute) and node.attr in PARAMS_READERS)
                     or (isinstance(node, ast.Name) and node.id in PARAMS_READERS))
            if named:
                found.append(f"{relative.as_posix()}:{node.lineno}")
    return found


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_the_stage_modules_are_the_stages_folder():
    """The modules holding a CLI command's stage function are those of gpt1/stages/ (and the report's stage)."""
    found = set(stage_modules().values())
    folder = {f"{STAGES}.{path.stem}" for path in (PACKAGE_DIR / "stages").glob("*.py") if path.stem != "__init__"}
    assert found == folder | {REPORT_STAGE}, (f"stage functions outside gpt1/stages/: {sorted(found - folder)}; "
                                              f"modules of gpt1/stages/ holding none: {sorted(folder - found)}")
    assert {"gpt1.stages.finetune", "gpt1.stages.layers", "gpt1.stages.pretrain", "gpt1.stages.export"} <= found


def test_no_import_crosses_a_layer_the_wrong_way():
    offending = layer_offences()
    assert not offending, f"imports against the layers: {'; '.join(offending)}"


def test_the_library_knows_no_params_yaml():
    offending = params_readers()
    assert not offending, f"only gpt1/cli/ reads params.yaml (config.{PARAMS_READERS}): {', '.join(offending)}"


def unfiled_modules(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The modules in no layer folder: the tree is the map, so each module has its place in it."""
    modules = (path.relative_to(package_dir) for path in package_dir.rglob("*.py"))
    return sorted(m.as_posix() for m in modules
                  if m.parts[0] not in FOLDERS and m.with_suffix("").as_posix() not in TOP_MODULES)


def full_inits(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """Every `__init__.py` below the package's own that holds anything."""
    return sorted(path.relative_to(package_dir).as_posix() for path in package_dir.rglob("*/__init__.py")
                  if path.read_bytes())


def report_modules_in_design_order() -> list[str]:
    """The report's modules as DESIGN.md's tree lists them under `report/`."""
    lines = (REPO / "DESIGN.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("      report/ "))
    listed = []
    for line in lines[start + 1:]:
        if not line.startswith("        "):
            break
        if (name := line.split()[0]).endswith(".py"):
            listed.append(name.removesuffix(".py"))
    return listed


def test_each_report_module_imports_only_those_above_it_in_design_md():
    order = report_modules_in_design_order()
    on_disk = sorted(p.stem for p in (PACKAGE_DIR / "report").glob("*.py") if p.stem != "__init__")
    assert sorted(order) == on_disk, "DESIGN.md's report/ lists other modules than gpt1/report/ holds"
    graph = import_graph()
    for position, module in enumerate(order):
        imported = {t.rsplit(".", 1)[1] for t in graph[f"gpt1.report.{module}"] if t.startswith("gpt1.report.")}
        assert imported <= set(order[:position]), f"report.{module} imports {sorted(imported - set(order[:position]))}"


def test_every_module_lies_in_a_layer_folder():
    assert not unfiled_modules(), f"modules outside gpt1/{{{','.join(FOLDERS)}}}/: {unfiled_modules()}"


def test_every_folders_init_is_empty():
    """An empty `__init__.py` runs nothing: gpt1.pipeline.codedeps leaves it out of the stages' code inputs (DVC
    warns of every empty dep), and a folder's code lives in its modules, one concern each."""
    assert not full_inits(), f"not empty (say it in the modules or DESIGN.md instead): {full_inits()}"


def fake_package(root: Path, modules: dict[str, str]) -> Path:
    package = root / "gpt1"
    for name, source in {"__init__": "", **modules}.items():
        path = package.joinpath(*name.split("/")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent != package and not (path.parent / "__init__.py").exists():
            (path.parent / "__init__.py").write_text("")
        path.write_text(source)
    return package


def test_the_checks_find_a_cycle_and_each_wrong_way_import(tmp_path: Path):
    package = fake_package(tmp_path, {
        "__main__": "from gpt1.cli.main import main\n",
        "cli/main": "def _one(cfg, a):\n    from gpt1.stages.one import one_stage\n\n\n"
                    "def _two(cfg, a):\n    from gpt1.stages.two import two_stage\n\n\n"
                    "def _rep(cfg, a):\n    from gpt1.report.stage import report_stage\n\n\n"
                    "def build(sub):\n    _stage(sub, 'one', 'help', _one)\n    _stage(sub, 'two', 'help', _two)\n"
                    "    _stage(sub, 'report', 'help', _rep)\n",
        "cli/commands": "from gpt1.pipeline.config import load_config\n",
        "stages/one": "from gpt1.data.lib import helper\n\n\n"
                      "def one_stage():\n    from gpt1.stages.two import two_stage\n",
        "stages/two": "from gpt1.pipeline import config\n\n\n"
                      "def two_stage():\n    config.load_config('params.yaml')\n",
        "report/stage": "def report_stage():\n    pass\n",
        "report/tables": "from gpt1.report import stage\n",
        "data/lib": "def helper():\n    from gpt1.data import deep\n",
        "data/deep": "from gpt1.data.lib import helper\nfrom gpt1.cli import commands\n",
        "pipeline/config": "def load_config(path):\n    pass\n",
        "loose": "from gpt1 import stages\n",
        "data/nested/__init__": "'''a docstring'''\n",
        "evaluation/reads": "from gpt1.pipeline.config import read_params\n",
    })  # fmt: skip
    graph = import_graph(package)
    assert graph["gpt1.stages.one"] == {"gpt1.data.lib", "gpt1.stages.two"}
    assert find_cycle(graph) == ["gpt1.data.lib", "gpt1.data.deep", "gpt1.data.lib"]
    assert stage_modules(package) == {"one": "gpt1.stages.one", "two": "gpt1.stages.two", "report": "gpt1.report.stage"}
    assert layer_offences(package) == [
        "gpt1.data.deep -> gpt1.cli.commands: a library module imports a CLI",
        "gpt1.loose -> gpt1.stages: only the CLI imports a stage",
        "gpt1.report.tables -> gpt1.report.stage: a library module imports a stage",
        "gpt1.stages.one -> gpt1.stages.two: a stage imports a stage"]
    assert params_readers(package) == ["gpt1/evaluation/reads.py:1", "gpt1/stages/two.py:5"]
    assert unfiled_modules(package) == ["loose.py"]
    assert full_inits(package) == ["data/nested/__init__.py"]
    (package / "data" / "deep.py").write_text("")
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


def forbidden_in_rooms(module: str) -> bool:
    """A stage module or the CLI: what bench/ and experiments/ run as `python -m gpt1 <stage>`, never import."""
    return within(module, (STAGES, CLI, REPORT_STAGE, "gpt1.__main__"))


def room_offences(forbidden: Callable[[str], bool] = forbidden_in_rooms, repo: Path = REPO) -> list[str]:
    """'file:line: what' for each import of a `forbidden` module (the stage modules and the CLI), each use of
    sys.path, and each import of experiments from bench, in the modules of bench/ and experiments/."""
    found = []
    for path in room_modules(repo):
        name = path.relative_to(repo).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            seen_here: set[str] = set()
            for module in imported_names(node):
                if (forbidden(module) and module.rpartition(".")[0] not in seen_here) or module == "sys.path":
                    found.append((name, node.lineno, f"imports {module}"))  # `from a.b import c`: a.b, not a.b.c
                    seen_here.add(module)
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
    offending = room_offences()
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
        "import sys\nfrom gpt1.pipeline import layout\nfrom bench.common import REPO\n\n\n"
        "def main():\n    print(sys.argv)\n")
    (tmp_path / "bench" / "bad.py").write_text("import sys\nsys.path.insert(0, '.')\nfrom experiments import study\n")
    (tmp_path / "experiments" / "study.py").write_text(
        "from bench.common import REPO\nfrom gpt1.stages import pretrain\n\n\n"
        "def main():\n    from gpt1.cli.main import main\n")
    (tmp_path / "experiments" / "other.py").write_text("from sys import path\nimport gpt1.report.stage\n"
                                                       "from gpt1 import cli\n")
    assert room_offences(repo=tmp_path) == [
        "bench/bad.py:2: sys.path", "bench/bad.py:3: bench imports experiments",
        "bench/bad.py:3: bench imports experiments.study", "experiments/other.py:1: imports sys.path",
        "experiments/other.py:2: imports gpt1.report.stage", "experiments/other.py:3: imports gpt1.cli",
        "experiments/study.py:2: imports gpt1.stages",
        "experiments/study.py:6: imports gpt1.cli.main"]
    assert main_modules(tmp_path) == ["bench.fine", "experiments.study"]
