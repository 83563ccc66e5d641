#!/usr/bin/env bash
# Open the course in JupyterLab (run `bash setup.sh` once before). Arguments go to JupyterLab,
# e.g. `bash lab.sh --no-browser --port 8899`.
set -euo pipefail
cd "$(dirname "$0")"
VENV="${VENV:-.venv}"  # where setup.sh put the environment
if [ ! -x "$VENV/bin/python" ]; then
  echo "lab: no $VENV yet: run bash setup.sh first" >&2
  exit 1
fi
# the notebooks import the course's runtime (grader/) from this folder
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
extra=()
if [ "$(id -u)" = 0 ]; then extra+=(--allow-root); fi  # containers run as root
exec "$VENV/bin/python" -m jupyterlab --notebook-dir=course ${extra[@]+"${extra[@]}"} "$@"
