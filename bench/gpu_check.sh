#!/usr/bin/env bash
# The project on a GPU in one command (issue 33); bench/gpu_check.py says what each section does. It runs as
# `python -P -m bench.gpu_check` with this checkout first on PYTHONPATH (-P: not the caller's folder, which may be
# another checkout), so the GPU machine's copy of the tree needs no install.
#
#   bash bench/gpu_check.sh --prepare [--no-wheels] [--bundle DIR]    # here, on the CPU, with the project's .venv:
#                                                                     # bench/gpu_bundle/, which `carry` sends
#   bash bench/gpu_check.sh OUT [--device cpu] [--tiny] [--budget-s S] [--work DIR] [--bundle DIR]
#                               [--sections NAME,...|all]         # default: issue 43's sections (gpu_check.py)
#
# On the GPU machine (python3 there holds torch; the bundle's wheels go to GPT1_GPU_SITE, default /tmp/gpt1-site,
# when mlflow, datasets, jsonschema or SQLAlchemy is missing):
#   bash bench/gpu_check.sh $OUT
# The rehearsal on this CPU, in the project's .venv (or GPT1_PYTHON=...):
#   bash bench/gpu_check.sh /tmp/gpu-check --device cpu
# Everything printed also goes to OUT/log.txt; the last lines are the summary table.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${GPT1_PYTHON:-}" ]; then python=$GPT1_PYTHON
elif [ -x "$repo/.venv/bin/python" ]; then python=$repo/.venv/bin/python
else python=python3
fi
export PYTHONUNBUFFERED=1

if [ "${1:-}" = "--prepare" ]; then
    shift
    PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -P -m bench.gpu_check prepare "$@"
fi
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
    echo "usage: bash bench/gpu_check.sh OUT [--device cpu] [--tiny] [--budget-s S] [--work DIR] [--bundle DIR]" \
        "[--sections NAME,...|all]" >&2
    echo "       bash bench/gpu_check.sh --prepare [--no-wheels] [--bundle DIR]" >&2
    exit 2
fi
out=$1
mkdir -p "$out"
bundle=$repo/bench/gpu_bundle
args=("$@")
for ((i = 1; i < ${#args[@]}; i++)); do
    [ "${args[i]}" = "--bundle" ] && bundle=${args[i + 1]}
done

{
    started=$(date +%s)
    if ! "$python" -c "import mlflow, datasets, jsonschema, sqlalchemy, alembic" 2>/dev/null; then
        site=${GPT1_GPU_SITE:-/tmp/gpt1-site}
        if ! ls "$bundle"/wheels/*.whl >/dev/null 2>&1; then
            echo "gpu_check: mlflow, datasets, jsonschema or SQLAlchemy missing and no wheels in $bundle/wheels;" \
                "run bash bench/gpu_check.sh --prepare here first" >&2
            exit 2
        fi
        "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
            "$bundle"/wheels/*.whl
        # Byte-compiled once, on every core: else each of the ten gpt1 processes that start at once compiles them
        "$python" -m compileall -q -j 0 "$site" >/dev/null || true
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
        echo "gpu_check: installed $(ls "$bundle"/wheels/*.whl | wc -l) wheels into $site in $(($(date +%s) - started)) s"
    fi
    export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
    "$python" -P -m bench.gpu_check run "$@"
} 2>&1 | tee "$out/log.txt"
