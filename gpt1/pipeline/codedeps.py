"""The package files a stage runs, read from the package's own imports: the code inputs of both workflow engines.

A stage is `python -m gpt1 <command>`: `gpt1/__main__.py`, `gpt1/cli/main.py` and what they import, plus what the one
dispatch function of `<command>` imports (cli/main.py imports each stage lazily, inside its dispatch function), not
the commands that are no stage (`gpt1 sample`: cli/main.py's `_tool_commands`). The
closure follows every `import` statement of a module, those inside functions too (stages import lazily), so it
may list a file a given run never loads: an extra input costs a rerun, a missing one a stale result.

A library: it knows no params.yaml key, no MLflow and no results path; it reads Python source and nothing runs.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from gpt1.pipeline.errors import CodeDepsError

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # gpt1/, this module being gpt1/pipeline/codedeps.py
ENTRY = "__main__"  # `python -m gpt1`: the engines' stage command
CLI = "cli.main"  # the module of `gpt1 <stage>`: gpt1/cli/main.py
STAGE_REGISTRAR = "_stage"  # cli/main.py's `_stage(sub, "<command>", help, <dispatch function>, ...)`
TOOLS_REGISTRAR = "_tool_commands"  # cli/main.py's registrar of the commands that are no stage (gpt1.cli.commands)


def _cli_file(package_dir: Path) -> Path:
    return package_dir.joinpath(*CLI.split(".")).with_suffix(".py")


def _module_name(path: Path, package_dir: Path) -> str:
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_file(name: str, package_dir: Path) -> Path | None:
    """The file of module `name` (a package's `__init__.py`); None for a name that is no module (an attribute)."""
    base = package_dir.parent.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# Parsed once per text (not per path: an edited file is read again); Snakemake asks once per rule.
@functools.cache
def _import_nodes(source: str, skip: frozenset[str]) -> tuple[ast.Import | ast.ImportFrom, ...]:
    return tuple(node for node in _walk(ast.parse(source), skip) if isinstance(node, ast.Import | ast.ImportFrom))


@functools.cache
def _string_constants(source: str) -> frozenset[str]:
    return frozenset(n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)
                     and isinstance(n.value, str))


def _walk(node: ast.AST, skip: frozenset[str]) -> Iterator[ast.AST]:
    """ast.walk, not entering the functions named in `skip` (cli/main.py's dispatch functions of other commands)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and child.name in skip:
            continue
        yield child
        yield from _walk(child, skip)


def _from_base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module of `from X import ...`, relative imports (`from .x import y`) resolved."""
    if not node.level:
        return node.module or ""
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _imported_names(path: Path, package_dir: Path, skip: frozenset[str] = frozenset()) -> set[str]:
    """Every module name an import statement of `path` may load. `from a import b` gives `a` and `a.b`: b may be a
    submodule or an attribute, and only names with a file count later."""
    module, is_package = _module_name(path, package_dir), path.name == "__init__.py"
    names: set[str] = set()
    for node in _import_nodes(_source(path), skip):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        else:
            base = _from_base(node, module, is_package)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _files_of(name: str, package_dir: Path) -> list[Path]:
    """The files importing `name` executes: each enclosing package's `__init__.py`, then the module's own."""
    if name.partition(".")[0] != package_dir.name:
        return []
    parts = name.split(".")
    found = (_module_file(".".join(parts[:i]), package_dir) for i in range(1, len(parts) + 1))
    return [path for path in found if path is not None]


def _data_files(package_dir: Path) -> dict[str, Path]:
    """The package's files that are not Python (paper.yaml, params.schema.yaml), by name."""
    return {p.name: p for p in package_dir.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")}


def _named_data(path: Path, data: Mapping[str, Path]) -> set[Path]:
    """The data files module `path` names in a string constant, e.g. `Path(__file__).with_name("paper.yaml")`: it
    reads them (a cheap test, not a proof: a name built at run time is not seen)."""
    return {data[name] for name in _string_constants(_source(path)) & data.keys()}


def import_closure(roots: Iterable[str], package_dir: Path = PACKAGE_DIR,
                   skip: Mapping[str, frozenset[str]] | None = None) -> list[str]:
    """The sorted files (`gpt1/...`, relative to the package's parent) that importing the modules `roots` may load
    or read, following imports inside functions too; `skip` names functions per module whose imports do not count."""
    skip = skip or {}
    seen: set[Path] = set()
    todo = [path for name in roots for path in _files_of(name, package_dir)]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        module = _module_name(path, package_dir)
        for name in _imported_names(path, package_dir, skip.get(module, frozenset())):
            todo.extend(_files_of(name, package_dir))
    data = _data_files(package_dir)
    files = seen | {file for path in seen for file in _named_data(path, data)}
    return sorted(path.relative_to(package_dir.parent).as_posix() for path in files)


def cli_commands(package_dir: Path = PACKAGE_DIR) -> dict[str, str]:
    """Each stage command of cli/main.py and the name of its dispatch function, read from its `_stage(...)` calls."""
    commands = {}
    for node in ast.walk(ast.parse(_source(_cli_file(package_dir)))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == STAGE_REGISTRAR
                and len(node.args) >= 4 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[3], ast.Name)):
            commands[node.args[1].value] = node.args[3].id
    return commands


def stage_code(command: str, package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The files `python -m gpt1 <command>` may run: a change to any of them must rerun the stage. An empty file (each
    folder's `__init__.py`, tests/test_imports.py) runs nothing, and is left out: DVC warns of every empty dep."""
    commands = cli_commands(package_dir)
    if command not in commands:
        where = _cli_file(package_dir).relative_to(package_dir.parent).as_posix()
        raise CodeDepsError(f"gpt1 {command}: no such stage command in {where} (known: {', '.join(commands)})")
    others = frozenset(function for name, function in commands.items() if name != command) | {TOOLS_REGISTRAR}
    package = package_dir.name
    closure = import_closure([f"{package}.{ENTRY}"], package_dir, skip={f"{package}.{CLI}": others})
    return [file for file in closure if (package_dir.parent / file).stat().st_size]


# ----------------------------------------------------------------------------------------------------------------
# The package's import graph: no cycle, no stage importing another (tests/test_imports.py)


def import_graph(package_dir: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    """Each module of the package -> the package's modules its import statements name (at module level and inside
    functions; a package's `__init__` when the name is the package itself)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        module = _module_name(path, package_dir)
        targets = {_module_name(file, package_dir) for name in _imported_names(path, package_dir)
                   if name.partition(".")[0] == package_dir.name and (file := _module_file(name, package_dir))}
        graph[module] = targets - {module}
    return graph


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One import cycle of `graph` as [a, b, ..., a] (modules in sorted order tried first), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def _defining_module(module: str, name: str, package_dir: Path) -> str:
    """The module that defines `name` which `from module import name` gets, following re-exports (a package's
    `__init__` importing it from a submodule)."""
    path = _module_file(module, package_dir)
    if path is None:
        return module
    tree = ast.parse(_source(path))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            return module
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(alias.name == name for alias in node.names):
            return _defining_module(_from_base(node, module, path.name == "__init__.py"), name, package_dir)
    return module


def stage_modules(package_dir: Path = PACKAGE_DIR) -> dict[str, str]:
    """Each stage command -> the module holding its stage function (what its dispatch function in cli/main.py
    imports)."""
    dispatch = {function: command for command, function in cli_commands(package_dir).items()}
    cli = f"{package_dir.name}.{CLI}"
    found = {}
    for node in ast.parse(_source(_cli_file(package_dir))).body:
        if isinstance(node, ast.FunctionDef) and node.name in dispatch:
            for imp in ast.walk(node):
                if isinstance(imp, ast.ImportFrom) and _from_base(imp, cli, False).startswith(package_dir.name):
                    base = _from_base(imp, cli, False)
                    found[dispatch[node.name]] = _defining_module(base, imp.names[0].name, package_dir)
    return found
