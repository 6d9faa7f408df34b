"""Wall time per stage of a Snakemake run, from its log (the pipeline itself is the benchmark here).

    .venv/bin/python -m bench.pipeline_times [.snakemake/log/<run>.snakemake.log]   (default: the newest log)

Prints a Markdown table: per rule, the jobs, their summed wall time, and the first start and last finish.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
from collections import defaultdict
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
START = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def parse(log: Path) -> dict[str, list[tuple[dt.datetime, dt.datetime]]]:
    """rule -> [(start, end)] for every job that finished."""
    now, rule, starts, spans = None, None, {}, defaultdict(list)
    for line in log.read_text().splitlines():
        if m := STAMP.match(line):
            now = dt.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        elif m := START.match(line):
            rule = m.group(1)
        elif (m := JOBID.match(line)) and rule is not None:
            starts[m.group(1)] = now
            rule = None
        elif m := FINISHED.match(line):
            spans[m.group(2)].append((starts[m.group(1)], now))
    return spans


def newest_log(folder: Path = Path(".snakemake/log"), exclude: frozenset[Path] = frozenset()) -> Path | None:
    """The log of the latest Snakemake run in a checkout's `.snakemake/log` but those of `exclude` (None: none)."""
    logs = set(folder.glob("*.snakemake.log")) - exclude
    return max(logs, key=lambda p: p.stat().st_mtime) if logs else None


def per_rule(spans: dict[str, list[tuple[dt.datetime, dt.datetime]]]
             ) -> list[tuple[str, int, dt.timedelta, dt.datetime, dt.datetime]]:
    """(rule, jobs, their summed wall time, the first start, the last end), in the order the rules started."""
    found = []
    for rule, jobs in sorted(spans.items(), key=lambda kv: min(s for s, _ in kv[1])):
        total = sum(((e - s) for s, e in jobs), dt.timedelta())
        found.append((rule, len(jobs), total, min(s for s, _ in jobs), max(e for _, e in jobs)))
    return found


def table(log: Path) -> str:
    """The Markdown table of `log`'s jobs per rule, and the whole run's span."""
    rows = per_rule(parse(log))
    if not rows:
        return f"Log: {log}\n\nNo job finished."
    first, last = min(r[3] for r in rows), max(r[4] for r in rows)
    lines = [f"Log: {log}", "", "| stage | jobs | wall time (sum over jobs) | from | to |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {rule} | {jobs} | {total} | {start:%H:%M:%S} | {end:%H:%M:%S} |"
              for rule, jobs, total, start, end in rows]
    return "\n".join([*lines, "", f"Whole run: {last - first} ({first:%H:%M:%S} to {last:%H:%M:%S})."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", nargs="?", type=Path)
    args = parser.parse_args()
    log = args.log or newest_log()
    if log is None:
        raise SystemExit("pipeline_times: no .snakemake/log/*.snakemake.log here; give a log")
    print(table(log))


if __name__ == "__main__":
    main()
