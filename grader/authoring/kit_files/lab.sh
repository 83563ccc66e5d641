#!/usr/bin/env bash
# Open the course in JupyterLab (run `bash setup.sh` once before). Arguments go to JupyterLab,
# e.g. `bash lab.sh --no-browser --port 8899`.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then
  echo "lab: no .venv here yet: run bash setup.sh first" >&2
  exit 1
fi
# the notebooks import the course's runtime (grader/) from this folder
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
extra=()
if [ "$(id -u)" = 0 ]; then extra+=(--allow-root); fi  # containers run as root
exec .venv/bin/python -m jupyterlab --notebook-dir=course ${extra[@]+"${extra[@]}"} "$@"
