"""The check's outputs, rewritten after every section so that a time-out still leaves what was measured:
OUT/results.json (every section's record), OUT/report.md (their tables, then the final table) and, last on the
console, the final table alone. Sections write their records through `Record`, also while they run."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

from bench.gpu.env import Context, write_json

# What comes back from the GPU machine: at most 8 files (the device tool's limit); the shell script writes log.txt.
RESULTS, REPORT, LOG = "results.json", "report.md", "log.txt"
PROFILE_TABLE = "profile_step.txt"  # section b, when ours is under 55% MFU (and always on the CPU)
STAGES_TAR = "stages.tar.gz"  # section c
CURVE_CSV = "pretrain_curve.csv"
DAG_TAR = "dag.tar.gz"  # section dag: the DAG's tables, records of DVC and Snakemake, logs
OUT_FILES = (RESULTS, REPORT, LOG, PROFILE_TABLE, STAGES_TAR, CURVE_CSV, DAG_TAR)

# (record name, letter, title) in the order they run: issue 43's sections first (a GPU's time may run out), then
# those that ran on an H100 on 2026-11-26 and section dag (issues 43 item 1 and 44), run when named (or with all)
SECTIONS = (
    ("hardware", "a", "GPU, driver, torch; measured bf16 matmul peak and copy bandwidth"),
    ("host_probe", "h", "the GPU machine's CPU: the numerics probe's hashes in each mode against the AMD files"),
    ("dropout", "g", "dropout as trained (bf16, compiled): which SDPA backend, and each dropout's measured rate"),
    ("speed", "b", "one pre-training step at the paper's shape: ours eager and compiled against HF OpenAIGPT"),
    ("levers", "b2", "pre-training MFU levers: micro-batch 64, the vocabulary unpadded (the current step pads it), "
     "max-autotune, chunked cross-entropy, each against the current step"),
    ("finetune_speed", "e", "fine-tuning update time at the gpu profile's shapes; its GPU-hours recomputed"),
    ("finetune_graphs", "e2", "fine-tuning without its fixed cost: static shapes and CUDA graphs against today's "
     "update"),
    ("stages", "c", "every CUDA path of the stages through the gpt1 CLI, outputs verified"),
    ("precision", "d", "numerics: CPU fp32 against GPU fp32, TF32 and bf16; two identical GPU pre-trainings"),
    ("speed_extra", "b+", "if time allows: ours compiled against HF compiled"),
    ("pretrain_minutes", "f", "the gpu profile's pre-training for minutes on the mirror's novels: its loss curve"),
    ("dag", "i", "a profile's whole DAG through Snakemake, K model jobs sharing the GPU: jobs, MLflow runs, DVC"),
)
TITLES = {name: (letter, title) for name, letter, title in SECTIONS}


class Record:
    """One section's record: status, data, markdown and the line of the final table; saved on every change."""

    def __init__(self, ctx: Context, name: str) -> None:
        self.ctx, self.name, self.tick = ctx, name, time.perf_counter()
        letter, title = TITLES[name]
        self.value: dict[str, Any] = {"section": letter, "name": name, "title": title, "status": "running",
                                      "seconds": 0.0, "summary": "", "markdown": "", "data": {}, "error": None}

    @property
    def data(self) -> dict[str, Any]:
        return self.value["data"]

    def update(self, **data: Any) -> None:
        """Keep `data` and save at once: what a section measured survives its time-out."""
        self.data.update(data)
        self.save()

    def save(self, status: str | None = None, summary: str | None = None, markdown: str | None = None) -> None:
        if status is not None:
            self.value["status"] = status
        if summary is not None:
            self.value["summary"] = summary
        if markdown is not None:
            self.value["markdown"] = markdown
        self.value["seconds"] = round(time.perf_counter() - self.tick, 1)
        write_json(self.ctx.record(self.name), self.value)


def fallback_record(ctx: Context, name: str, status: str, error: str) -> dict[str, Any]:
    """The record of a section that wrote none (it died at start) or was stopped at its time limit: whatever it
    saved, with the status that ended it."""
    letter, title = TITLES[name]
    saved = ctx.read_record(name) or {"section": letter, "name": name, "title": title, "seconds": 0.0,
                                      "summary": "", "markdown": "", "data": {}}
    summary = saved.get("summary") or (error.strip().splitlines() or [""])[-1][:150]
    return {**saved, "status": status, "error": error[-3000:], "summary": f"{status.upper()}: {summary}"}


def write_record(ctx: Context, record: dict[str, Any]) -> None:
    write_json(ctx.record(record["name"]), record)


# ----------------------------------------------------------------------------------------------------------------
# results.json, report.md, the final table


def records(ctx: Context) -> list[dict[str, Any]]:
    return [r for name, _, _ in SECTIONS if (r := ctx.read_record(name)) is not None]


def final_table(ctx: Context) -> str:
    lines = ["| section | status | result | seconds |", "|---|---|---|---:|"]
    for r in records(ctx):
        summary = r["summary"].replace("|", "/").replace("\n", " ")
        lines.append(f"| {r['section']}. {r['name']} | {r['status']} | {summary} | {r['seconds']:.0f} |")
    spent = time.time() - ctx.started
    lines.append(f"| all | | device {ctx.device}{', tiny' if ctx.tiny else ''}; {spent:.0f} s of a "
                 f"{ctx.budget_s:.0f} s budget | {spent:.0f} |")
    return "\n".join(lines)


def machine(ctx: Context) -> dict[str, Any]:
    """The run's provenance (gpu.env.provenance), completed by section a's record where it ran."""
    found = {**ctx.machine()}
    hardware = (ctx.read_record("hardware") or {}).get("data", {})
    for key in ("gpu", "driver", "torch", "cuda", "transformers"):
        if hardware.get(key):
            found[key] = hardware[key]
    return found


def header(ctx: Context, command: str) -> list[str]:
    found = machine(ctx)
    return [f"# GPU check ({dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')})", "",
            f"- machine: {found.get('gpu', 'GPU not recorded')}; CPU {found.get('cpu', 'not recorded')} "
            f"({found.get('cpus', '?')} logical CPUs); host {found.get('host', 'not recorded')}",
            f"- device: {ctx.device}{' (tiny sizes)' if ctx.tiny else ''}; driver {found.get('driver', '-')}; "
            f"torch {found.get('torch', '-')}; CUDA {found.get('cuda', '-')}; transformers "
            f"{found.get('transformers', '-')}; Python {found.get('python', '-')}",
            f"- command: `{command}`", f"- commit: {found.get('commit', 'unknown')}", ""]


def write(ctx: Context, command: str) -> str:
    """OUT/results.json and OUT/report.md from the records so far; returns the final table."""
    found = records(ctx)
    table = final_table(ctx)
    write_json(ctx.out / RESULTS, {"device": ctx.device, "tiny": ctx.tiny, "command": command, "machine": machine(ctx),
                                   "budget_s": ctx.budget_s, "elapsed_s": round(time.time() - ctx.started, 1),
                                   "sections": {r["name"]: r for r in found}})
    body = header(ctx, command)
    for r in found:
        body += [f"## {r['section']}. {r['title']}", "", f"status: **{r['status']}** ({r['seconds']:.0f} s)", ""]
        body += [r["markdown"], ""] if r["markdown"] else []
        body += ["```", r["error"].strip(), "```", ""] if r.get("error") else []
    body += ["## Summary", "", table, ""]
    temp = ctx.out / f".{REPORT}.tmp"
    temp.write_text("\n".join(body))
    temp.replace(ctx.out / REPORT)
    return table


def read_results(out: Path) -> dict[str, Any]:
    return json.loads((out / RESULTS).read_text())


def md_table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
