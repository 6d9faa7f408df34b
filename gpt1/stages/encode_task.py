"""The encode_task stage: a task's examples loaded, cut, capped, transformed (§3.3) and tokenised once, written to
results/<profile>/tasks/<task>/ for every fine-tuning, ablation and layer job of that task to read.

Before this stage each of those ~50 jobs read its parquet files and ran spaCy over the same texts again.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpt1.data.rows import data_settings, data_source
from gpt1.data.taskdata import ENCODE_STAGE, part_sha256, part_source, plan_task_data, write_encoded
from gpt1.data.tasks import finetune_task
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.pipeline import layout

if TYPE_CHECKING:
    from gpt1.pipeline.config import Config


def encode_task_stage(cfg: Config, task: str, tokenizer_dir: Path, out_dir: Path) -> dict[str, Any]:
    """`gpt1 encode-task`: OUT/examples.jsonl and OUT/encoded.json for one task, with the finetune section's
    train cut and caps, the pipeline's tokenizer and the model's n_ctx; one MLflow run."""
    from gpt1.pipeline.tracking import published_run

    spec = finetune_task(task)
    tokenizer = GPT1Tokenizer.load(tokenizer_dir)
    n_ctx = cfg.section("model")["n_ctx"]
    finetune = cfg.section("finetune")
    source = data_source(cfg.data_mirror, cfg.synthetic, spec)
    settings = data_settings(spec, finetune, source)
    params = {"task": task, "n_ctx": n_ctx, "tokenizer_sha256": tokenizer.fingerprint(), **settings}
    with published_run(ENCODE_STAGE, cfg, params, name=f"encode_task {task}") as run:
        run.set_tags({"gpt1.task": task, "gpt1.tokenizer_sha256": tokenizer.fingerprint()})
        data = plan_task_data(spec, finetune, source, tokenizer, n_ctx)
        header = write_encoded(Path(out_dir), spec, data, tokenizer.fingerprint(), n_ctx, settings)
        run.log_output(Path(out_dir) / layout.ENCODED_JSON)  # what was encoded; the examples stay in the DVC cache
        for context, part in [("train", data.train), *(("eval", p) for p in data.evals)]:
            run.log_dataset(f"{task}/{part.name}", part_source(spec, part), part_sha256(part), context)
            key = f"{context}.{part.split}"  # MLflow keys take no brackets: the split, not the cut
            run.log_metrics({f"{key}.examples": len(part.examples), f"{key}.truncated": part.truncated})
            print(f"encode_task {task}: {part.name}: {len(part.examples)} examples, {part.truncated} truncated to "
                  f"n_ctx={n_ctx}")
    return header
