"""What the GPT writes as it learns: the page tables/samples.{md,html}.

The snapshots params.yaml's `samples` section picks (indices into pretrain/gpt/snapshots/index.json, negative ones
from the last), in training order, each with the update it was taken at, the tokens seen and its validation loss;
under each, every prompt of the section continued by gpt1.evaluation.sampling with the section's length, temperature,
top-k and seed: the text `gpt1 sample --model <snapshot> --seed <seed> ...` writes, and on the CPU of a pinned profile
the same on every host. A snapshot index or tokenizer not there yet is said on the page (the pre-training's curves, read
by the same report, count the gap).

A library of the report: the section as a mapping, folders as arguments; torch loads only when a model runs.
"""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpt1.pipeline import layout
from gpt1.pipeline.errors import ReportError
from gpt1.report.inputs import Gap
from gpt1.report.renderers import HTML_STYLE, html_page, md

TITLE = "What the GPT writes as it learns"
WRAP = 100  # characters per line of a sample in the Markdown page
STYLE = HTML_STYLE + "pre { white-space: pre-wrap; max-width: 75em; background: #f6f6f6; padding: 6px; }\n"


@dataclass(frozen=True)
class Snapshot:
    """One snapshot of the GPT's pre-training and its continuation of each prompt."""

    index: int
    step: int
    tokens: int
    val_loss: float | None
    texts: tuple[tuple[str, str], ...]  # (prompt, the prompt and its continuation, decoded together)
    path: str = ""  # its weights file, as `gpt1 sample --model` takes it

    def heading(self) -> str:
        updates = f"{self.step:,} update{'s' * (self.step != 1)}"
        loss = (
            ""
            if self.val_loss is None
            else (f", validation loss {self.val_loss:.2f} (perplexity {math.exp(self.val_loss):,.1f})")
        )
        return f"Snapshot {self.index}: after {updates} ({self.tokens:,} tokens){loss}"


@dataclass(frozen=True)
class Samples:
    settings: Mapping[str, Any]  # params.yaml's samples section
    snapshots: list[Snapshot] = field(default_factory=list)
    missing: list[Gap] = field(default_factory=list)  # why there are none
    numerics: str | None = None  # what the samples were computed with (gpt1.training.numerics)
    tokenizer: str = ""  # the tokenizer folder, as `gpt1 sample --tokenizer` takes it


def chosen(count: int, wanted: Sequence[int], where: Path) -> list[int]:
    """The snapshot indices `wanted` names (negative: from the last) among `count`, in training order, each once."""
    for index in wanted:
        if not -count <= index < count:
            raise ReportError(
                f"params.yaml samples.snapshots: {index}, but {where} holds {count} snapshots; give "
                f"indices from {-count} to {count - 1} (-1: the last)"
            )
    return sorted({index % count for index in wanted})


def draw_samples(settings: Mapping[str, Any], pretrain_dir: Path, tokenizer_dir: Path) -> Samples:
    """Every chosen snapshot of the GPT in `pretrain_dir` continuing every prompt, through the tokenizer of
    `tokenizer_dir` (checked to be the one the snapshot was trained with)."""
    index = pretrain_dir / layout.SNAPSHOTS / layout.SNAPSHOT_INDEX
    missing = [
        Gap(path, f"not produced yet (run gpt1 {stage})")
        for path, stage in ((index, "pretrain --model gpt"), (tokenizer_dir / layout.TOKENIZER_META, "bpe"))
        if not path.is_file()
    ]
    if missing:
        return Samples(settings, missing=missing)

    from gpt1.data.tokenizer import GPT1Tokenizer
    from gpt1.evaluation.sampling import SampleSettings, check_pair, sample_text
    from gpt1.modeling.checkpoints import iter_snapshots, load_pretrained
    from gpt1.training.numerics import in_effect, note_upstream

    draw = SampleSettings(settings["length"], settings["temperature"], settings["top_k"], settings["seed"])
    tokenizer = GPT1Tokenizer.load(tokenizer_dir)
    for i, prompt in enumerate(settings["prompts"]):
        if not tokenizer.encode(prompt):
            raise ReportError(f"samples.prompts[{i}]: {prompt!r} encodes to no tokens; give some text in params.yaml")
    entries = list(iter_snapshots(pretrain_dir))
    numerics = in_effect("cpu")
    snapshots = []
    for i in chosen(len(entries), settings["snapshots"], index):
        entry, path = entries[i]
        model, meta = load_pretrained(path)  # verified against the index's size and sha256
        check_pair(model, meta.get("tokenizer_sha256"), tokenizer, str(path), str(tokenizer_dir))
        note_upstream(numerics, meta.get("numerics"), str(path))
        texts = tuple((prompt, sample_text(model, tokenizer, prompt, draw)) for prompt in settings["prompts"])
        snapshots.append(Snapshot(entry["index"], entry["step"], entry["tokens"], entry.get("val_loss"), texts,
                                  str(path)))
    return Samples(settings, snapshots, numerics=numerics.describe(), tokenizer=str(tokenizer_dir))


def no_samples(why: str) -> Samples:
    return Samples({}, missing=[Gap(Path("params.yaml"), why)])


def _intro(samples: Samples) -> str:
    s, last = samples.settings, samples.snapshots[-1]
    return (
        f"Each snapshot of the GPT's pre-training continues the same prompts with the same draws (params.yaml "
        f"samples: {s['length']} new tokens, temperature {s['temperature']:g}, top-k {s['top_k'] or 'none'}, "
        f"seed {s['seed']}). `gpt1 sample --model {last.path} --tokenizer {samples.tokenizer} --prompt "
        f"\"{last.texts[0][0]}\" --length {s['length']} --temperature {s['temperature']:g} --top-k {s['top_k'] or 0} "
        f"--seed {s['seed']}` writes the last one's first text again (another snapshot: its file under each "
        f"heading). The text is the tokenizer's decoding: lower case, with spaces around punctuation, as the corpus "
        f"was normalised for pre-training; lines are wrapped at {WRAP} characters here. Snapshots close together "
        f"can write the same text: the draws are the same, and a model that has barely moved picks the same tokens. "
        f"Computed with {samples.numerics}."
    )


def to_markdown(samples: Samples) -> str:
    lines = [f"# {TITLE}", ""]
    if samples.missing:
        return "\n".join([*lines, *(f"- {md(gap.note)}" for gap in samples.missing)]) + "\n"
    lines += [md(_intro(samples))]
    for snapshot in samples.snapshots:
        lines += ["", f"## {snapshot.heading()}", "", f"`{snapshot.path}`"]
        for prompt, text in snapshot.texts:
            wrapped = "\n".join(textwrap.fill(line, WRAP) for line in text.splitlines())
            lines += ["", f"Prompt: “{md(prompt)}”", "", "```text", wrapped, "```"]
    return "\n".join(lines) + "\n"


def to_html(samples: Samples) -> str:
    body = [f"<h2>{html.escape(TITLE)}</h2>"]
    if samples.missing:
        return html_page(
            TITLE, [*body, "<ul>", *(f"<li>{html.escape(gap.note)}</li>" for gap in samples.missing), "</ul>"], STYLE
        )
    body.append(f'<p class="notes">{html.escape(_intro(samples))}</p>')
    for snapshot in samples.snapshots:
        body.append(f"<h3>{html.escape(snapshot.heading())}</h3>")
        body.append(f"<p><code>{html.escape(snapshot.path)}</code></p>")
        for prompt, text in snapshot.texts:
            body += [f"<p>Prompt: “{html.escape(prompt)}”</p>", f"<pre>{html.escape(text)}</pre>"]
    return html_page(TITLE, body, STYLE)


RENDERERS = {"md": to_markdown, "html": to_html}

__all__ = ["RENDERERS", "Samples", "Snapshot", "chosen", "draw_samples", "no_samples"]
