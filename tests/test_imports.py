"""The package's import graph (module-level and function-level imports, read by gpt1.codedeps): no cycle, and no
stage module imports another stage module (a stage's shared code lives in a library). cli.py, __main__.py and bench/
may import stages; the stage modules are those holding a CLI command's stage function."""

from __future__ import annotations

from pathlib import Path

from gpt1.codedeps import find_cycle, import_graph, stage_modules

ENTRY_POINTS = {"gpt1.cli", "gpt1.__main__"}  # they dispatch to stages


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
    assert {"gpt1.finetune", "gpt1.layers", "gpt1.pretrain", "gpt1.export", "gpt1.report.stage"} <= stages
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
