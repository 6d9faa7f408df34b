"""Keep dvc.yaml's `gpt1/` deps equal to each stage's derived code (gpt1.pipeline.codedeps.stage_code).

Snakemake derives a rule's code inputs when it reads the workflow; dvc.yaml cannot compute, so its lists are
written out and this keeps them exact:

    .venv/bin/python tools/dvc_code_deps.py --check    # exit 1, naming each stage's missing and extra files
    .venv/bin/python tools/dvc_code_deps.py --write    # rewrite those lists; every other byte stays as it is
    .venv/bin/python tools/dvc_code_deps.py --lock     # then dvc.lock's gpt1/ entries: this tree's md5 and size

`--lock` records in dvc.lock the code as it now is, as `dvc commit` would in a tree holding the outputs: only for a
change that leaves every output's bytes as they were (the smoke digests, tests/test_workflow.py, are the evidence for
the smoke profile; a change to a path the smoke run does not take, CUDA's, needs its own). A change meant to change
results re-runs the pipeline instead, whose `dvc commit` writes dvc.lock whole.

A stage's command is the word after `gpt1.sh` (and its options) in its `cmd`. The `gpt1/` entries of a stage's
`deps:` are replaced where the first of them stood; comments and the other deps are not touched.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's package, installed or not
from gpt1.pipeline.codedeps import PACKAGE_DIR, stage_code  # noqa: E402

CODE_PREFIX = "gpt1/"
STAGE_LINE = re.compile(r"^  ([\w-]+):\s*$")  # a stage: two spaces in, under `stages:`
KEY_LINE = re.compile(r"^(\s*)[\w-]+:")
ITEM_LINE = re.compile(r"^(\s*)- (.*?)\s*$")


def command_of(cmd: str) -> str:
    """`sh workflow/scripts/gpt1.sh --per-gpu pretrain --profile ...` -> pretrain."""
    words = cmd.split()
    rest = words[next(i for i, w in enumerate(words) if w.endswith("gpt1.sh")) + 1:]
    return next(w for w in rest if not w.startswith("-"))


def stage_commands(text: str) -> dict[str, str]:
    """Each stage of dvc.yaml and the gpt1 command it runs (foreach stages keep their command under `do`)."""
    stages = yaml.safe_load(text)["stages"]
    return {name: command_of(stage.get("cmd") or stage["do"]["cmd"]) for name, stage in stages.items()}


def code_deps(text: str) -> dict[str, list[str]]:
    """The `gpt1/` deps each stage of dvc.yaml lists, in their order."""
    stages = yaml.safe_load(text)["stages"]
    return {name: [d for d in (stage.get("deps") or stage["do"].get("deps") or []) if d.startswith(CODE_PREFIX)]
            for name, stage in stages.items()}


def differences(text: str, package_dir: Path = PACKAGE_DIR) -> dict[str, tuple[list[str], list[str]]]:
    """Stage -> (missing, extra) against the derived code; only stages that differ."""
    listed = code_deps(text)
    found = {}
    for name, command in stage_commands(text).items():
        derived = stage_code(command, package_dir)
        missing = sorted(set(derived) - set(listed[name]))
        extra = sorted(set(listed[name]) - set(derived))
        if missing or extra or listed[name] != derived:
            found[name] = (missing, extra)
    return found


def _rewrite_deps(lines: list[str], start: int, wanted: list[str]) -> int:
    """Replace the `gpt1/` items of the deps block after line `start` with `wanted`; returns the line after it."""
    key_indent = len(KEY_LINE.match(lines[start]).group(1))
    end, first, indent = start + 1, None, " " * (key_indent + 2)
    while end < len(lines):
        line, item = lines[end], ITEM_LINE.match(lines[end])
        if item and len(item.group(1)) >= key_indent:
            indent = item.group(1)
            if item.group(2).startswith(CODE_PREFIX):
                first = end if first is None else first
                del lines[end]
                continue
        elif line.strip() and not line.lstrip().startswith("#"):
            break  # the next key
        end += 1
    at = start + 1 if first is None else first
    lines[at:at] = [f"{indent}- {path}\n" for path in wanted]
    return end + len(wanted)


def rewrite(text: str, package_dir: Path = PACKAGE_DIR) -> str:
    """dvc.yaml with every stage's `gpt1/` deps set to its derived code, all else byte for byte."""
    commands = stage_commands(text)
    lines = text.splitlines(keepends=True)
    stage, i, in_stages = None, 0, False
    while i < len(lines):
        line = lines[i]
        if not line.startswith((" ", "#")) and line.strip():
            in_stages = line.startswith("stages:")
        elif in_stages and (match := STAGE_LINE.match(line)):
            stage = match.group(1)
        elif in_stages and stage and line.strip() == "deps:":
            i = _rewrite_deps(lines, i, stage_code(commands[stage], package_dir))
            continue
        i += 1
    return "".join(lines)


def code_entry(path: str, root: Path) -> dict[str, object]:
    """A dvc.lock dep for a file of the tree, as DVC 3 records it."""
    data = (root / path).read_bytes()
    return {"path": path, "hash": "md5", "md5": hashlib.md5(data).hexdigest(), "size": len(data)}


def relock(lock_path: Path, dvc_yaml: Path, root: Path = REPO) -> int:
    """Rewrite `lock_path`'s `gpt1/` deps of every locked stage (a foreach stage's `name@item` too) to dvc.yaml's
    list for it, with this tree's md5 and size, in DVC's order and format; every other entry as it was. Returns the
    number of entries that changed (added, removed or rehashed)."""
    from dvc.utils.serialize import dump_yaml, parse_yaml_for_update

    listed = code_deps(dvc_yaml.read_text())
    lock = parse_yaml_for_update(lock_path.read_text(), str(lock_path))
    changed = 0
    for name, stage in lock["stages"].items():
        if (base := name.split("@")[0]) not in listed:  # a foreach or matrix stage's name@item
            raise SystemExit(f"{lock_path}: stage {name} is not in {dvc_yaml}: `dvc repro` or `dvc remove` it first")
        deps = stage.get("deps", [])
        old = {d["path"]: d for d in deps if d["path"].startswith(CODE_PREFIX)}
        new = [code_entry(path, root) for path in listed[base]]
        changed += sum(old.get(d["path"]) != d for d in new) + len(old.keys() - {d["path"] for d in new})
        others = [d for d in deps if not d["path"].startswith(CODE_PREFIX)]
        stage["deps"] = sorted([*new, *others], key=lambda d: d["path"])
    dump_yaml(lock_path, lock)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="exit 1 where a stage's gpt1/ deps differ")
    action.add_argument("--write", action="store_true", help="rewrite the gpt1/ deps of every stage")
    action.add_argument("--lock", action="store_true",
                        help="re-record dvc.lock's gpt1/ deps from this tree (a change that moves no output)")
    parser.add_argument("--dvc-yaml", type=Path, default=REPO / "dvc.yaml", help="default: this checkout's")
    args = parser.parse_args(argv)
    text = args.dvc_yaml.read_text()
    if args.lock:
        package = args.dvc_yaml.parent / "gpt1"  # the tree whose files it hashes
        if not package.is_dir():
            print(f"{args.dvc_yaml}: no gpt1/ beside it to record; give the dvc.yaml of a checkout", file=sys.stderr)
            return 1
        if found := differences(text, package):
            print(f"{args.dvc_yaml}: stages {', '.join(found)} list other code than they import; run --write first",
                  file=sys.stderr)
            return 1
        lock = args.dvc_yaml.with_name("dvc.lock")
        print(f"{lock}: {relock(lock, args.dvc_yaml, args.dvc_yaml.parent)} code entries re-recorded")
        return 0
    if args.write:
        args.dvc_yaml.write_text(rewrite(text))
        return 0
    found = differences(text)
    for name, (missing, extra) in found.items():
        print(f"{args.dvc_yaml}: stage {name}: missing {missing or 'none'}, extra {extra or 'none'}"
              + ("" if missing or extra else " (order differs)"), file=sys.stderr)
    if found:
        print(f"refresh with: python {Path(__file__).relative_to(REPO)} --write", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
