#!/usr/bin/env bash
# Set up the course: a Python environment in .venv beside this file, with the packages the
# notebooks need (requirements.txt). `bash setup.sh` for a laptop or any machine without an NVIDIA
# GPU: torch's CPU build, and Triton, whose interpreter runs the kernels on the CPU.
# `bash setup.sh gpu` for an NVIDIA GPU: a CUDA build of torch, which brings its own Triton
# (requirements-gpu.txt).
# Settings: PYTHON=python3.12 picks another Python (3.11 or newer); TORCH_INDEX is where torch's
# build comes from (default: PyTorch's cpu or cu128 index; another cuXXX for another CUDA driver,
# see pytorch.org; empty for the package index alone, with `gpu`: PyPI's Linux torch is the CUDA
# build, whose own Triton the CPU requirements' pin would clash with); VENV=/opt/venv puts the
# environment there, not in .venv (the Dockerfile's image does, outside the folder it mounts).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
case "${1:-cpu}" in
  cpu) requirements=requirements.txt; index=https://download.pytorch.org/whl/cpu ;;
  gpu) requirements=requirements-gpu.txt; index=https://download.pytorch.org/whl/cu128 ;;
  *) echo "usage: bash setup.sh [gpu]" >&2; exit 2 ;;
esac
index="${TORCH_INDEX-$index}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup: the course needs Python 3.11 or newer, and $PYTHON is not; install one, then" >&2
  echo "       PYTHON=python3.12 bash setup.sh" >&2
  exit 1
fi
packages=$(grep -v '^#' "$requirements" | tr '\n' ' ')
echo "setup: installs into $VENV: ${packages% }"
echo "setup: downloads $(sed -n 's/^# download: //p' "$requirements")"
echo "setup: pip lists each package as it downloads it, then installs them all at once, which can"
echo "       take a few minutes more on a laptop"
"$PYTHON" -m venv "$VENV"
if ! "$VENV/bin/python" -m pip install --progress-bar on ${index:+--extra-index-url "$index"} \
  --requirement "$requirements"; then
  if [ -n "$index" ]; then
    echo "setup: pip failed. If it could not reach $index, take torch from your" >&2
    echo "       package index alone: TORCH_INDEX= bash setup.sh gpu (torch's CUDA build, several" >&2
    echo "       GB, which runs without a GPU too)" >&2
  fi
  exit 1
fi
# JupyterLab asks on its first start whether to fetch Jupyter's news from the web: never
mkdir -p "$VENV/share/jupyter/lab/settings"
echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}' \
  >"$VENV/share/jupyter/lab/settings/overrides.json"
echo "setup: installed into $VENV; your device and versions:"
"$VENV/bin/python" -m grader.runtime
echo "setup: done. Open the course with: bash lab.sh"
