#!/usr/bin/env bash
# Set up .venv with everything the pipeline and its tests need (Python 3.11+).
# torch goes first: a bare torch requirement with no torch installed pulls the multi-GB CUDA build.
# TORCH_WHEELS names a folder of local torch wheels (default /opt/wheels, used when present).
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}
torch_version=${TORCH_VERSION:-2.13.0}
wheels=${TORCH_WHEELS:-/opt/wheels}

command -v uv >/dev/null 2>&1 || "$python" -m pip install -q uv
[ -x .venv/bin/python ] || uv venv -q .venv -p "$python"
find_links=()
[ -d "$wheels" ] && find_links=(--find-links "$wheels")
uv pip install -q --compile-bytecode -p .venv/bin/python "${find_links[@]}" "torch==$torch_version"
uv pip install -q --compile-bytecode -p .venv/bin/python "${find_links[@]}" -e ".[test]"
echo "setup: .venv ready ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
