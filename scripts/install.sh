#!/usr/bin/env bash
# Create the virtual environment and install torchsmith into it.
#
# torch: keep a usable one (>= 2.6) if the base Python already has it; otherwise install
# the CPU build torch==2.13.0 on machines without an NVIDIA GPU, so that set-up never
# pulls a CUDA build of several GB there. A constraints file then pins that torch so no
# later `pip install` upgrades it.
set -euo pipefail
PYTHON=${1:-python3}
VENV=${2:-.venv}

usable_torch() {
  "$1" - <<'PY' 2>/dev/null
import sys, torch
major, minor = (int(x) for x in torch.__version__.split(".")[:2])
sys.exit(0 if (major, minor) >= (2, 6) else 1)
PY
}

if usable_torch "$PYTHON"; then
  echo "install: keeping the torch already installed for $PYTHON"
  "$PYTHON" -m venv --system-site-packages "$VENV"
else
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip >/dev/null 2>&1 || true

if ! usable_torch "$PY"; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "install: NVIDIA GPU found, installing a CUDA build of torch"
    "$PY" -m pip install -q "torch>=2.6"
  else
    echo "install: no NVIDIA GPU, installing the CPU build torch==2.13.0"
    "$PY" -m pip install -q "torch==2.13.0"
  fi
fi
TORCH_VERSION=$("$PY" -c "import torch; print(torch.__version__)")
echo "torch==${TORCH_VERSION}" > "$VENV/constraints.txt"
"$PY" -m pip install -q -c "$VENV/constraints.txt" -e ".[dev,etcd,lightning,hf]"
echo "install: torchsmith installed in $VENV with torch $TORCH_VERSION"
