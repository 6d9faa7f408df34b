#!/usr/bin/env bash
# The project on a GPU in one command (issue 33); bench/gpu_check.py says what each section does. It runs as
# `python -P -m bench.gpu_check` with this checkout first on PYTHONPATH (-P: not the caller's folder, which may be
# another checkout), so the GPU machine's copy of the tree needs no install.
#
#   bash bench/gpu_check.sh --prepare [--no-wheels] [--bundle DIR]    # here, on the CPU, with the project's .venv:
#                                                                     # bench/gpu_bundle/, which `carry` sends
#   bash bench/gpu_check.sh --install [--bundle DIR]                  # on the GPU machine: every wheel of the
#                                                                     # bundle's wheels/, dag_wheels/, spacy_wheels/
#   bash bench/gpu_check.sh OUT [--device cpu] [--tiny] [--budget-s S] [--work DIR] [--bundle DIR]
#                               [--sections NAME,...|all]         # default: issue 43's sections (gpu_check.py)
#
# On the GPU machine (python3 there holds torch): the wheels go to GPT1_GPU_SITE, default .gpu-site/ in this
# checkout (git-ignored: the machine keeps an ignored path of the tree between two calls while it stays warm), by
# --install, or by a run when mlflow, datasets, jsonschema or SQLAlchemy is missing; a run puts an existing site
# first on PYTHONPATH, so a call after --install carries no wheels (section dag's calls: gpu_check.py):
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
site=${GPT1_GPU_SITE:-$repo/.gpu-site}
export GPT1_GPU_SITE=$site

bundle_of() {  # the --bundle among the arguments, else bench/gpu_bundle
    local found=$repo/bench/gpu_bundle
    while [ $# -gt 0 ]; do
        if [ "$1" = "--bundle" ] && [ $# -gt 1 ]; then found=$2; fi
        shift
    done
    echo "$found"
}

install_wheels() {  # every wheel of the bundle's wheels/, dag_wheels/ and spacy_wheels/ that it holds, into $site
    local started wheels=()
    started=$(date +%s)
    for folder in wheels dag_wheels spacy_wheels; do
        for wheel in "$1/$folder"/*.whl; do
            if [ -f "$wheel" ]; then wheels+=("$wheel"); fi
        done
    done
    if [ ${#wheels[@]} -eq 0 ]; then
        echo "gpu_check: no wheels in $1/wheels, $1/dag_wheels or $1/spacy_wheels; run bash bench/gpu_check.sh" \
            "--prepare here first (--dag-results ... for section dag's), and carry them" >&2
        return 2
    fi
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
        "${wheels[@]}"
    # Byte-compiled once, on every core: else each of the ten gpt1 processes that start at once compiles them
    "$python" -m compileall -q -j 0 "$site" >/dev/null || true
    echo "gpu_check: installed ${#wheels[@]} wheels into $site in $(($(date +%s) - started)) s"
}

if [ "${1:-}" = "--prepare" ]; then
    shift
    PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -P -m bench.gpu_check prepare "$@"
fi
if [ "${1:-}" = "--install" ]; then
    shift
    install_wheels "$(bundle_of "$@")"
    exit
fi
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
    echo "usage: bash bench/gpu_check.sh OUT [--device cpu] [--tiny] [--budget-s S] [--work DIR] [--bundle DIR]" \
        "[--sections NAME,...|all]" >&2
    echo "       bash bench/gpu_check.sh --prepare [--no-wheels] [--bundle DIR]" >&2
    echo "       bash bench/gpu_check.sh --install [--bundle DIR]" >&2
    exit 2
fi
out=$1
mkdir -p "$out"
bundle=$(bundle_of "$@")

{
    if [ -d "$site" ]; then export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"; fi
    if ! "$python" -c "import mlflow, datasets, jsonschema, sqlalchemy, alembic" 2>/dev/null; then
        echo "gpu_check: mlflow, datasets, jsonschema or SQLAlchemy missing: installing the bundle's wheels"
        install_wheels "$bundle" || exit 2
        case ":${PYTHONPATH:-}:" in *":$site:"*) ;; *) export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" ;; esac
    fi
    export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
    "$python" -P -m bench.gpu_check run "$@"
} 2>&1 | tee "$out/log.txt"
