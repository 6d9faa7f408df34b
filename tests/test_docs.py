"""The documentation holds: every relative link of README.md, DESIGN.md, BENCHMARKS.md, config/README.md and
docs/*.md leads to a file that exists, and a link's #anchor to a heading of that file (GitHub's slugs); params.yaml's
comments point at headings that exist; and every command in the README's code blocks is valid: a `gpt1` subcommand
parses its arguments and `--help` lists the options the README gives, a `dvc` subcommand's `--help` lists them too,
`snakemake` plans its jobs in a dry run (in a copy of the workflow, the shared mirror set when it is there), a Python
module or script answers `--help`, and a script the README runs exists."""

from __future__ import annotations

import functools
import importlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_dag import workspace

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = [README, REPO / "DESIGN.md", REPO / "BENCHMARKS.md", REPO / "config" / "README.md",
        *sorted((REPO / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent  # the environment's snakemake, dvc, ...
MIRROR = REPO.parent / "shared" / "data"
# The two commands at the top of the README, exactly: CI (.ci/run) runs the second.
FIRST_COMMANDS = [
    "./setup.sh && GPT1_DATA_MIRROR=../shared/data .venv/bin/snakemake --cores all",
    "./setup.sh && .venv/bin/python -m pytest -q -n auto",
]
# Programs the README may run that are not the project's: nothing of theirs to check here.
EXTERNAL = {"git", "nvidia-smi", "export", "cd", "eval", "apt-get", "uv", "mlflow", "torchrun", "curl"}
FENCE = re.compile(r"(`{3,}|~{3,})\s*([\w-]*)")


# --- Markdown: code, links, headings ------------------------------------------------------------------------------


def prose(text: str, spans: bool = False) -> str:
    """The text without fenced code blocks and, unless `spans`, inline code spans (lines kept, so numbers stay
    right)."""
    out, fence = [], None
    for line in text.splitlines():
        match = FENCE.match(line.strip())
        if fence is None and match:
            fence = match.group(1)
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append("")
        else:
            out.append(line if spans else re.sub(r"`[^`\n]*`", "``", line))
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lowercase, punctuation dropped but `-` and `_`, each
    space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor GitHub makes in a markdown file: one per heading (repeats get -1, -2, ...), and HTML ids."""
    text = path.read_text()
    found, seen = set(), {}
    for line in prose(text, spans=True).splitlines():
        match = re.match(r" {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    found.update(re.findall(r"""<a\s+(?:id|name)=["']([^"']+)["']""", text))
    return frozenset(found)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image in a markdown file's prose."""
    text = prose(path.read_text())
    found = []
    for match in re.finditer(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<img\s[^>]*src=\"([^\"]+)\"", text):
        found.append((text.count("\n", 0, match.start()) + 1, match.group(1) or match.group(2)))
    return found


def broken(source: Path, target: str) -> str | None:
    """Why a link from `source` to `target` leads nowhere, or None; web addresses are not followed."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target):
        return None
    path, _, anchor = target.partition("#")
    dest = (source.parent / path).resolve() if path else source
    if not dest.exists():
        return f"{path}: no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"#{anchor}: no such heading in {dest.relative_to(REPO)}"
    return None


def test_every_relative_link_resolves():
    problems = [f"{doc.relative_to(REPO)}:{line}: {target}: {why}"
                for doc in DOCS for line, target in links(doc) if (why := broken(doc, target))]
    assert not problems, "\n".join(problems)


# Where the project names its own code in words: the package's texts (notes printed under tables among them), the
# tools, the workflow and the documents. The tests' fake packages and the records of past runs are not among them.
NAMING_FILES = [*DOCS, *(REPO / "gpt1").rglob("*.py"), *(REPO / "gpt1").rglob("*.yaml"),
                *(REPO / "bench").rglob("*.py"), *(REPO / "tools").rglob("*.py"), *(REPO / "experiments").glob("*.py"),
                *(REPO / "workflow").rglob("*.smk"), REPO / "workflow" / "Snakefile", REPO / "params.yaml",
                REPO / "dvc.yaml"]
CODE_FOLDERS = {p.name for p in (REPO / "gpt1").iterdir() if (p / "__init__.py").exists()}
TAG_NAMESPACES = {"machine"}  # gpt1.machine.cpu: MLflow tags; the other tags are one word (gpt1.task, gpt1.stage)


def code_name_problem(name: str) -> str | None:
    """`gpt1.report.tables.code_name` or `gpt1/report/tables.py`: None when it names a module, file or attribute
    that exists. A dotted name is code when it starts with a folder of the package or has two parts after gpt1
    (gpt1.metrics.glue_average), but MLflow's tags (gpt1.task, gpt1.machine.cpu) are not."""
    if "/" in name:
        return None if (REPO / name).exists() else "no such file"
    parts = name.split(".")[1:]
    if parts[0] not in CODE_FOLDERS and (len(parts) < 2 or parts[0] in TAG_NAMESPACES):
        return None
    for k in range(len(parts), 0, -1):  # the longest prefix that is a module, then attributes
        module = ".".join(["gpt1", *parts[:k]])
        try:
            target = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if not (err.name or "gpt1").startswith("gpt1"):
                raise  # a package the module imports is missing: the environment's fault, not the name's
            continue
        for attribute in parts[k:]:
            fields = getattr(target, "__dataclass_fields__", {})
            if not hasattr(target, attribute) and attribute not in fields:
                return f"{module} has no {attribute}"
            target = getattr(target, attribute, None)
        return None
    return "no such module"


def test_every_code_name_in_words_exists():
    """A note under a table named gpt1/significance.py for months after that module moved: names of our own code,
    written out in texts, documents and comments, must name code that exists."""
    pattern = re.compile(r"\bgpt1/[\w/.-]*\w\.(?:py|yaml|smk)\b|\bgpt1(?:\.\w+)+")
    problems = [f"{path.relative_to(REPO)}: {name}: {why}"
                for path in NAMING_FILES for name in sorted(set(pattern.findall(path.read_text())))
                if (why := code_name_problem(name.rstrip(".")))]
    assert not problems, "\n".join(problems)


def test_a_code_name_that_moved_is_found():
    assert code_name_problem("gpt1/significance.py") == "no such file"
    assert code_name_problem("gpt1.metrics.glue_average") == "no such module"
    assert code_name_problem("gpt1.evaluation.metrics.glue_avg") == "gpt1.evaluation.metrics has no glue_avg"
    assert code_name_problem("gpt1.evaluation.metrics.glue_average") is None
    assert code_name_problem("gpt1.training.finetuning.FinetuneResult.predictions") is None  # a dataclass field
    assert code_name_problem("gpt1.machine.cpu") is None  # an MLflow tag, not code


def test_params_yaml_comments_point_at_headings_that_exist():
    pointers = re.findall(r"(docs/[\w/.-]+\.md)#([\w-]+)", (REPO / "params.yaml").read_text())
    assert pointers, "params.yaml's comments point at docs/decisions.md"
    problems = [f"{path}#{anchor}" for path, anchor in pointers if broken(REPO / "params.yaml", f"{path}#{anchor}")]
    assert not problems, problems


def test_slugs_follow_github():
    assert slug("`profiles.default.finetune.lr_by_task`") == "profilesdefaultfinetunelr_by_task"
    assert slug("Three seeds at today's settings: does Table 5's 5 of 8 hold? (2026-11-25, 03:35-04:16)") == (
        "three-seeds-at-todays-settings-does-table-5s-5-of-8-hold-2026-11-25-0335-0416")
    assert slug("BPE: training time, `spacy` vs `fast`") == "bpe-training-time-spacy-vs-fast"


def design_tree(text: str) -> list[str]:
    """The module paths below gpt1/ of DESIGN.md's package tree (the indented block after its heading), in order: a
    line `name/` opens a folder, the lines indented below it are its files."""
    section = text.split("## Package: one folder per layer", 1)[1].split("\n## ", 1)[0]
    paths, folders = [], []  # folders: (indent, "name/") of the open folders
    for indent, name in re.findall(r"^( {6,})(\w+/|\w+\.py)(?: |$)", section, re.M):
        while folders and folders[-1][0] >= len(indent):
            folders.pop()
        if name.endswith("/"):
            folders.append((len(indent), name))
        else:
            paths.append("".join(folder for _, folder in folders) + name)
    return paths


def test_design_names_every_module_once():
    """Every module of gpt1/ has its line in DESIGN.md's tree, under its folder; a layer folder's empty __init__.py
    has none."""
    listed = design_tree((REPO / "DESIGN.md").read_text())
    package = REPO / "gpt1"
    modules = sorted(path.relative_to(package).as_posix() for path in package.rglob("*.py")
                     if not (path.name == "__init__.py" and path.stat().st_size == 0))
    assert sorted(listed) == modules, (f"DESIGN.md's module tree lacks {sorted(set(modules) - set(listed))}, "
                                       f"names no module {sorted(set(listed) - set(modules))}")
    assert len(listed) == len(set(listed)), "DESIGN.md's module tree names a module twice"


# --- The README ---------------------------------------------------------------------------------------------------


def code_blocks(text: str) -> list[list[str]]:
    """The README's shell code: fenced blocks without a language or in a shell, and indented blocks (four spaces
    after a blank line); a mermaid block is not shell."""
    lines, blocks, i = text.splitlines(), [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(match.group(1))), len(lines))
            if match.group(2) in ("", "sh", "bash", "shell", "console"):
                blocks.append(lines[i + 1:end])
            i = end + 1
        elif lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            blocks.append([line[4:] for line in lines[i:end]])
            i = end
        else:
            i += 1
    return blocks


def shell_commands(block: list[str]) -> list[str]:
    """The command lines of a block: continuation lines joined, comments and blank lines dropped."""
    text = re.sub(r"\\\n\s*", " ", "\n".join(block))
    return [line for line in (shlex.join(shlex.split(raw, comments=True)) for raw in text.splitlines()) if line]


def simple_commands(line: str) -> list[list[str]]:
    """A command line cut at `&&`, `||`, `;` and `|` into its simple commands (words)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in (";", "&&", "||", "|", "&"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


@dataclass(frozen=True)
class Command:
    """One simple command of the README: its environment assignments, its program and its arguments."""

    line: str
    env: tuple[tuple[str, str], ...]
    program: str
    args: tuple[str, ...]

    def __str__(self) -> str:
        return self.line


def readme_commands() -> list[Command]:
    found = []
    for block in code_blocks(README.read_text()):
        for line in shell_commands(block):
            for words in simple_commands(line):
                env = []
                while words and re.match(r"[A-Za-z_]\w*=", words[0]):
                    name, _, value = words.pop(0).partition("=")
                    env.append((name, value))
                if words:
                    found.append(Command(" ".join(words), tuple(env), words[0], tuple(words[1:])))
    return list({str(c): c for c in found}.values())  # each command once


COMMANDS = readme_commands()


def test_the_readme_stays_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    first = [line.split("#")[0].strip() for line in code_blocks(text)[0] if line.strip()]
    assert first == FIRST_COMMANDS, "the two commands at the top of the README (CI runs the second)"
    assert "```mermaid" in text, "the DAG"


def tool(name: str) -> str:
    """A program of the environment that runs the tests (its `.venv/bin/` in a checkout)."""
    path = BIN / name
    assert path.exists(), f"{name} is not installed beside {sys.executable}"
    return str(path)


@functools.cache
def help_text(*argv: str) -> str:
    out = subprocess.run([*argv, "--help"], capture_output=True, text=True, cwd=REPO, timeout=120,
                         env=os.environ | {"PYTHONPATH": str(REPO)})
    assert out.returncode == 0, f"{' '.join(argv)} --help: {out.stderr[-2000:]}"
    return out.stdout


def assert_options_listed(args: tuple[str, ...], text: str, what: str) -> None:
    for arg in args:
        option = arg.partition("=")[0]
        if re.fullmatch(r"--?[A-Za-z][\w-]*", option):
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text), f"{what} has no option {option}"


def module_and_args(command: Command) -> tuple[str | None, tuple[str, ...]]:
    """`python -m MODULE ARGS` → (MODULE, ARGS); `python SCRIPT ARGS` → (None, (SCRIPT, *ARGS))."""
    if command.args[:1] == ("-m",):
        return command.args[1], command.args[2:]
    return None, command.args


def check_gpt1(args: tuple[str, ...]) -> None:
    from gpt1.cli.main import build_parser

    assert args and not args[0].startswith("-"), "gpt1 without a subcommand"
    try:
        build_parser().parse_args(list(args))  # the README's arguments parse (placeholders are strings)
    except SystemExit as exit:
        raise AssertionError(f"gpt1 {' '.join(args)}: argparse says no (exit {exit.code})") from None
    assert_options_listed(args[1:], help_text(sys.executable, "-m", "gpt1", args[0]), f"gpt1 {args[0]}")


def check_snakemake(command: Command, tmp_path: Path) -> None:
    """A dry run of the README's command in a copy of what Snakemake reads: every job planned, nothing written here."""
    root = workspace(tmp_path, "default")
    env = {k: v for k, v in os.environ.items() if k != "GPT1_DATA_MIRROR"} | {"PYTHONPATH": str(REPO)}
    for name, value in command.env:
        env[name] = str((REPO / value).resolve()) if name == "GPT1_DATA_MIRROR" else value
    if "GPT1_DATA_MIRROR" in env and not Path(env["GPT1_DATA_MIRROR"]).is_dir():
        del env["GPT1_DATA_MIRROR"]  # no mirror on this machine: the plan reads the hub's names instead
    out = subprocess.run([tool("snakemake"), "-n", *command.args], cwd=root, capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Job stats:" in out.stdout and "This was a dry-run" in out.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_readme_command_is_valid(command: Command, tmp_path: Path):
    program, name = command.program, Path(command.program).name
    if program.startswith("./") or ("/" in program and not program.startswith(".venv/bin/")):
        script = REPO / program
        assert script.is_file() and os.access(script, os.X_OK), f"{program}: no such executable in the repository"
    elif name == "snakemake":
        check_snakemake(command, tmp_path)
    elif name == "dvc":
        words = [a for a in command.args[:2] if not a.startswith("-")]
        assert words, "dvc without a subcommand"
        assert_options_listed(command.args[len(words):], help_text(tool("dvc"), *words), f"dvc {' '.join(words)}")
    elif name == "gpt1":
        check_gpt1(command.args)
    elif name in ("python", "python3"):
        module, args = module_and_args(command)
        if module == "gpt1":
            check_gpt1(args)
        elif module:
            assert_options_listed(args, help_text(sys.executable, "-m", module), f"python -m {module}")
        else:
            assert args and (REPO / args[0]).is_file(), f"python {args[0] if args else ''}: no such script"
            assert_options_listed(args[1:], help_text(sys.executable, args[0]), args[0])
    elif name in ("source", "."):  # .venv/bin/activate: the environment setup.sh makes, here the one running this
        path = command.args[0] if command.args else ""
        assert (BIN / "activate").is_file() if path == ".venv/bin/activate" else (REPO / path).is_file(), path
    elif name in ("bash", "sh"):
        script = next((a for a in command.args if not a.startswith("-")), None)
        assert script and (REPO / script).is_file(), f"{name} {script}: no such script in the repository"
    else:
        assert name in EXTERNAL, f"{program}: a program this test does not know how to check (add it)"


def test_the_readme_commands_are_found():
    """The parser sees the commands the README shows: the two at the top and the profile ones."""
    seen = {str(c) for c in COMMANDS}
    assert {"./setup.sh", ".venv/bin/snakemake --cores all", ".venv/bin/python -m pytest -q -n auto"} <= seen
    assert any(c.program == "snakemake" and "profile=smoke" in c.args for c in COMMANDS)
