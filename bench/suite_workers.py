"""The README's test command on this machine with N pytest-xdist workers against M: which finishes first.

    .venv/bin/python -m bench.suite_workers --arms 3,2 --rounds 1 --out bench/results/suite_workers.json

Each run is the whole suite as CI runs it (`CI=true python -m pytest -q -n <workers>`) in a fresh clone of this
checkout's HEAD, with `../shared` beside it and a .venv that setup.sh made (this checkout's, or --venv; setup's time
is the same for every arm, so it is left out). The arms alternate and swap their order each round (A B, B A, ...),
because this machine's speed drifts over minutes; the result is each run's pytest time and outcome, each arm's
median, and the per-round ratios. A run that fails is reported with its outcome, never left out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import REPO, machine, median

SUMMARY = re.compile(r"^=*\s*(?P<counts>.*?) in (?P<seconds>[0-9.]+)s\b")


def plan(arms: list[int], rounds: int) -> list[tuple[int, int]]:
    """(round, workers) in the order they run: the arms in turn, their order reversed every other round."""
    return [(r, workers) for r in range(rounds) for workers in (arms if r % 2 == 0 else arms[::-1])]


def parse_summary(output: str) -> tuple[float, str]:
    """pytest's last line, '783 passed, 5 skipped in 1552.61s (0:25:52)': its seconds and its counts."""
    for line in reversed(output.strip().splitlines()):
        found = SUMMARY.match(line.strip())
        if found:
            return float(found["seconds"]), found["counts"].strip("= ")
    raise ValueError(f"no pytest summary line in the run's output: {output.strip()[-300:]!r}")


def fresh_clone(work: Path, venv: Path) -> Path:
    """A clone of HEAD at work/main, with ../shared beside it and `venv` as its .venv."""
    checkout = work / "main"
    subprocess.run(["git", "clone", "-q", str(REPO), str(checkout)], check=True)
    (work / "shared").symlink_to((REPO.parent / "shared").resolve())
    (checkout / ".venv").symlink_to(venv.resolve())
    return checkout


def run_suite(workers: int, venv: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="suite-workers-") as tmp:
        Path(tmp).chmod(0o755)  # as CI's checkout: the tests that run a stage as user nobody need to read it
        checkout = fresh_clone(Path(tmp), venv)
        env = {**os.environ, "CI": "true", "MLFLOW_TRACKING_URI": f"sqlite:///{checkout}/.ci-mlflow.db"}
        start = time.perf_counter()
        done = subprocess.run([str(checkout / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-n", str(workers)],
                              cwd=checkout, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
    seconds, counts = parse_summary(done.stdout)
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]  # -rs: which, and why
    return {"workers": workers, "pytest_s": seconds, "wall_s": round(wall, 1), "outcome": counts,
            "exit": done.returncode, "skipped": skipped}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", default="3,2", help="worker counts to compare, comma-separated (default 3,2)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--venv", type=Path, default=REPO / ".venv", help="the environment setup.sh made")
    parser.add_argument("--out", type=Path, help="write the runs and the summary here as JSON")
    args = parser.parse_args(argv)
    if not (args.venv / "bin" / "python").is_file():
        raise SystemExit(f"suite_workers: no {args.venv / 'bin' / 'python'}; run ./setup.sh, or give --venv")
    arms = [int(a) for a in args.arms.split(",")]
    runs = []
    for r, workers in plan(arms, args.rounds):
        run = {"round": r, **run_suite(workers, args.venv)}
        print(json.dumps(run), flush=True)
        runs.append(run)
    medians = {w: median([run["pytest_s"] for run in runs if run["workers"] == w]) for w in arms}
    seconds = {(run["round"], run["workers"]): run["pytest_s"] for run in runs}
    ratios = [seconds[r, arms[0]] / seconds[r, arms[1]] for r in range(args.rounds)] if len(arms) == 2 else []
    summary = {"machine": machine(), "arms": arms, "median_pytest_s": medians,
               f"ratio_{arms[0]}_over_{arms[-1]}": ratios, "runs": runs}
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
