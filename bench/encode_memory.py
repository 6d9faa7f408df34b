"""Peak memory of the encode stage at two corpus sizes: it must not grow with the corpus.

    GPT1_DATA_MIRROR=../shared/data .venv/bin/python -m bench.encode_memory [--small 10] [--copies 4]

Encodes (in a child process, with 2 workers) the first `--small` novels, and all 99 novels `--copies` times over,
interleaved A B A B, sampling the resident memory of the whole process tree every 50 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.common import REPO, machine, median, novels_jsonl

ENCODE = """
import sys
from pathlib import Path
from gpt1.data.ids import encode_split
encode_split(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), "uint16", 100_000, 2)
"""


def tree_rss(process: psutil.Process) -> int:
    total = 0
    for proc in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total


def peak_encode(tokenizer: Path, corpus: Path, work: Path) -> tuple[int, float, int]:
    """(peak bytes of the process tree, seconds, tokens)."""
    args = [sys.executable, "-c", ENCODE, str(tokenizer), str(corpus), str(work / "x.bin"), str(work / "x.json")]
    start, peak = time.perf_counter(), 0
    child = subprocess.Popen(args, cwd=REPO, stderr=subprocess.DEVNULL)
    process = psutil.Process(child.pid)
    while child.poll() is None:
        peak = max(peak, tree_rss(process))
        time.sleep(0.05)
    if child.returncode:
        raise SystemExit(f"encode failed with {child.returncode}")
    return peak, time.perf_counter() - start, json.loads((work / "x.json").read_text())["tokens"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=10, help="novels in the small corpus")
    parser.add_argument("--copies", type=int, default=4, help="copies of the 99 novels in the large corpus")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tokenizer", type=Path, default=REPO / "results/default/tokenizer")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-mem-"))
    corpora = {"small": novels_jsonl(work / "small.jsonl", 1, args.small),
               "large": novels_jsonl(work / "large.jsonl", args.copies)}
    results: dict[str, list[tuple[int, float, int]]] = {name: [] for name in corpora}
    for _ in range(args.repeats):
        for name, corpus in corpora.items():
            results[name].append(peak_encode(args.tokenizer, corpus, work))
    print(f"\nMachine: {machine()}; tokenizer {args.tokenizer}; {args.repeats} interleaved repeats, medians\n")
    print("| corpus | bytes | tokens | peak RSS (process tree) | encode time |\n| --- | --- | --- | --- | --- |")
    for name, corpus in corpora.items():
        peak = median([r[0] for r in results[name]]) / 2**20
        seconds = median([r[1] for r in results[name]])
        print(f"| {name} | {corpus.stat().st_size / 2**20:,.0f} MiB | {results[name][0][2]:,} | {peak:,.0f} MiB "
              f"| {seconds:.0f} s |")


if __name__ == "__main__":
    main()
