#!/usr/bin/env bash
# Set up .venv with everything the pipeline and its tests need (Python 3.11+), at the versions pinned in
# constraints.txt (made by `uv pip compile`, its first lines say how), so a fresh machine gets what CI tested.
# torch goes first: a bare torch requirement with no torch installed pulls the multi-GB CUDA build.
# TORCH_WHEELS names a folder of local torch wheels (default /opt/wheels, used when present); their
# 2.13.0+cpu satisfies the pin torch==2.13.0.
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
uv pip install -q --compile-bytecode -p .venv/bin/python "${find_links[@]}" -c constraints.txt -e ".[test]"
echo "setup: .venv ready ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
