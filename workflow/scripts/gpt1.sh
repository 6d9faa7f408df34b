#!/bin/sh
# Every stage command of both engines: `sh workflow/scripts/gpt1.sh [--per-gpu] <stage> ...` runs
# `python -m gpt1 <stage> ...` with the project's Python, whether or not an environment is activated:
#   1. $GPT1_PYTHON when set (Snakemake sets it: the Python running Snakemake, or `python` under --use-conda);
#   2. else the repository's .venv (setup.sh makes it), so `.venv/bin/dvc repro` works from any shell;
#   3. else python3 (or python) on PATH: an activated environment.
# --per-gpu starts one process per GPU of the job with torchrun (data-parallel pre-training); with one GPU or none it
# is plain `python -m gpt1`. The GPUs: $GPT1_GPUS, else Slurm's $SLURM_GPUS_ON_NODE, else $CUDA_VISIBLE_DEVICES,
# else `nvidia-smi -L`.
set -eu

here=$(cd "$(dirname "$0")" && pwd)

project_python() {
    if [ -n "${GPT1_PYTHON:-}" ]; then
        echo "$GPT1_PYTHON"
    elif [ -x "$here/../../.venv/bin/python" ]; then
        echo "$here/../../.venv/bin/python"
    elif command -v python3 >/dev/null 2>&1; then
        echo python3
    else
        echo python
    fi
}

gpu_count() {
    if [ -n "${GPT1_GPUS:-}" ]; then
        echo "$GPT1_GPUS"
    elif [ -n "${SLURM_GPUS_ON_NODE:-}" ]; then
        echo "$SLURM_GPUS_ON_NODE"
    elif [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
        echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c . || true
    elif command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
    else
        echo 0
    fi
}

python=$(project_python)
if [ "${1:-}" = "--per-gpu" ]; then
    shift
    gpus=$(gpu_count)
    if [ "$gpus" -gt 1 ]; then
        exec "$python" -m torch.distributed.run --standalone --nproc_per_node="$gpus" -m gpt1 "$@"
    fi
fi
exec "$python" -m gpt1 "$@"
