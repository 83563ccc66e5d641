# The course's commands. A student needs two: `make lab` and `make test`.
# Everything installs into .venv; torch is pinned for the CPU path and can be overridden, e.g.
#   make setup TORCH="torch==2.11.0 --index-url https://download.pytorch.org/whl/cu128"
# A CUDA build of torch brings its own triton; a CPU build does not, and then TRITON is installed.

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
TRITON ?= triton==3.9.0
PY     ?= $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
WHEELHOUSE ?= build/wheelhouse
WHEEL_PYTHON ?= 3.12
ASSIGNMENT ?=
SUBMISSIONS ?=
AUTOGRADE_ARGS ?=

.PHONY: help setup lab test test-gpu bench release check lint wheelhouse clean autograde

help:
	@echo "make lab        set up if needed, build course/, start JupyterLab on it"
	@echo "make test       set up if needed, run the CPU test suite (interpreter mode)"
	@echo "make release    build course/ from solutions/"
	@echo "make check      fail when course/ is stale"
	@echo "make test-gpu   GPU tests and solution notebooks at full size (needs a CUDA GPU)"
	@echo "make bench      run the benchmarks in bench/ (needs a CUDA GPU), tables into results/"
	@echo "make wheelhouse offline wheels for a GPU machine with torch and triton but no Jupyter"
	@echo "make autograde  grade a batch: ASSIGNMENT=00_setup SUBMISSIONS=path (docs/instructors.md)"
	@echo "make clean      remove build/ and caches (keeps .venv)"

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q $(TORCH)
	@if $(VENV)/bin/python -c "import importlib.metadata as m, sys; \
	  sys.exit(any(r.split(';')[0].strip().startswith('triton') for r in m.requires('torch') or []))"; \
	  then echo "torch brings no triton: installing $(TRITON)"; \
	       $(VENV)/bin/python -m pip install -q $(TRITON); \
	  else echo "triton comes with torch"; fi
	$(VENV)/bin/python -m pip install -q -e ".[course,dev]"
	@touch $(STAMP)

release: setup
	$(PY) -m grader build

check: setup
	$(PY) -m grader build --check

lint: setup
	$(PY) -m ruff check grader tests solutions bench
	$(PY) -m ruff format --check grader tests bench

lab: release
	$(PY) -m grader lab

# Test files run side by side (pytest-xdist, one worker per core); GPU tests never do, as they
# time kernels.
test: setup
	$(PY) -m pytest -m "not gpu" -n auto --dist loadfile $(PYTEST_ARGS)

# On a GPU: everything but the toolchain tests (build, lint, nbgrader, JupyterLab run in CPU CI):
# the GPU-marked tests, the checker's tests (they take the compiled path there), and every
# solution notebook at full size. `.ci/gpu` runs this on a machine without a venv.
test-gpu:
	$(PY) -m grader doctor
	$(PY) -m pytest -m "not tooling" $(PYTEST_ARGS)

# Every script in bench/ (not starting with _) on the GPU, each writing a markdown table to
# results/bench-<script>-<date>.md. Like test-gpu, it uses $(PY) as it is (no setup).
bench:
	@mkdir -p results
	@for script in bench/*.py; do \
	  name=$$(basename $$script .py); \
	  case $$name in _*) continue;; esac; \
	  echo "== $$script"; \
	  PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PY) $$script \
	    --out results/bench-$$name-$$(date +%Y-%m-%d).md || exit $$?; \
	done

# Grade every submission of one assignment with nbgrader on this machine's device, e.g.
#   make autograde ASSIGNMENT=00_setup SUBMISSIONS=~/downloads/setup.zip AUTOGRADE_ARGS="--jobs 4"
# Outputs go to build/grading/$(ASSIGNMENT)/ (`python -m grader autograde --help`). With PY set to
# another Python (a GPU image's), it runs there as it is, like test-gpu.
autograde: $(if $(filter $(VENV)/bin/python,$(PY)),setup)
	$(if $(ASSIGNMENT),,$(error give ASSIGNMENT=NN_topic, e.g. make autograde ASSIGNMENT=00_setup SUBMISSIONS=path))
	$(PY) -m grader autograde $(ASSIGNMENT) $(if $(SUBMISSIONS),--submissions "$(SUBMISSIONS)") $(AUTOGRADE_ARGS)

wheelhouse:
	$(PYTHON) -m pip download -q --only-binary=:all: --python-version $(WHEEL_PYTHON) \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 --platform any --no-deps -d $(WHEELHOUSE) \
	  -r grader/wheelhouse.txt
	@echo "wheels in $(WHEELHOUSE): pip install --no-index --no-deps --target DIR $(WHEELHOUSE)/*.whl"

clean:
	rm -rf build .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -not -path "./$(VENV)/*" -exec rm -rf {} +
