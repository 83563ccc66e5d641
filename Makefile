# The course's commands, for authors and instructors; students receive the kit that
# `make student-kit` builds.
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
BENCH_ARGS ?=
WHEELHOUSE ?= build/wheelhouse
WHEEL_PYTHON ?= 3.12
WHEELHOUSE_EXTRAS ?=
WHEELHOUSE_GRADING ?=
# test-gpu: which notebooks (default: all), a time limit per cell and for the whole notebook run
# (under the 10 minutes a GPU job may take), and which tests the pytest step runs.
NOTEBOOKS ?=
CELL_TIMEOUT ?= 300
RUN_TIMEOUT ?= 540
GPU_TESTS ?= gpu or not (slow or tooling)

ASSIGNMENT ?=
SUBMISSIONS ?=
AUTOGRADE_ARGS ?=

.PHONY: help setup lab test test-fast test-extended test-gpu test-gpu-notebooks test-gpu-tests \
	test-gpu-grading bench release \
	check lint wheelhouse clean autograde student-kit kit-container grading-cost throughput \
	recordings test-grader-pins

help:
	@echo "make lab        set up if needed, build course/, start JupyterLab on it"
	@echo "make test       set up if needed, run the CPU test suite (interpreter mode)"
	@echo "make test-fast  the unit tests alone: no notebook runs, graded classes or browser"
	@echo "make test-extended  the CPU tests too long for make test (10's hostile class, minutes)"
	@echo "make release    build course/ from solutions/"
	@echo "make check      fail when course/ or a committed diagram is stale"
	@echo "make test-gpu   solution notebooks at full size, GPU tests, grading (needs a CUDA GPU)"
	@echo "make recordings on a GPU, run the solution notebooks and keep their measurements in"
	@echo "                grader/runtime/recordings/ (shown where a cell cannot time); NOTEBOOKS= picks"
	@echo "make bench      the benchmark suite (needs a CUDA GPU): report and plots in build/report/"
	@echo "make wheelhouse offline wheels for a GPU machine with torch and triton but no Jupyter"
	@echo "                (WHEELHOUSE_EXTRAS=1 adds matplotlib and tqdm, WHEELHOUSE_GRADING=1 nbgrader"
	@echo "                for make autograde there)"
	@echo "make autograde  grade a batch: ASSIGNMENT=00_setup SUBMISSIONS=path (docs/instructors.md)"
	@echo "make grading-cost what grading one student costs per notebook on this machine's GPU"
	@echo "make throughput a synthetic class graded on one GPU and on two: same scores, the gain"
	@echo "make student-kit what students receive, in build/student-kit/: one kit (a folder and"
	@echo "                a zip) per assignment; NOTEBOOKS=\"00_setup 01_roofline\" picks some"
	@echo "                (default: all), TOGETHER=1 puts them in one kit"
	@echo "make kit-container  build the kit's container image (Docker or podman) and run notebook 00"
	@echo "                in it offline (minutes; skipped where no engine answers)"
	@echo "make test-grader-pins  the known-wrong and other-ways corpora on the GPU grading image's"
	@echo "                torch and Triton, in the interpreter (its own venv, .venv-grader)"
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
	$(PY) -m grader diagrams --check

lint: setup
	$(PY) -m ruff check grader tests solutions bench
	$(PY) -m ruff format --check grader tests bench

lab: release
	$(PY) -m grader lab

# Test files run side by side (pytest-xdist), the longest first (tests/conftest.py); GPU tests never
# do, as they time kernels. One worker more than the cores this process may use (counted in
# Python: macOS has no nproc): some tests mostly wait (Slurm's one-minute limit, hung students'
# timeouts, a browser's page), and the extra worker uses the core meanwhile
# (results/2026-11-30-fourteenth-session.md).
WORKERS := $(shell $(PYTHON) -c "import os; cores = os.sched_getaffinity(0) \
  if hasattr(os, 'sched_getaffinity') else range(os.cpu_count() or 1); print(len(cores) + 1)")
XDIST := -n $(WORKERS) --dist loadfile --no-loadscope-reorder
test: setup
	$(PY) -m pytest -m "not gpu and not container and not extended" $(XDIST) $(PYTEST_ARGS)

# The tests not marked slow (tests that execute notebooks, grade a class or drive a browser are):
# a couple of minutes on two cores. New tests are in unless they carry the mark.
test-fast: setup
	$(PY) -m pytest -m "not gpu and not slow and not container" $(XDIST) $(PYTEST_ARGS)

# The CPU tests marked extended, past make test's 15 minutes on two cores: 10's hostile batch
# (CI runs them in a job of their own, .github/workflows/cpu.yml).
test-extended: setup
	$(PY) -m pytest -m "extended and not gpu" $(XDIST) $(PYTEST_ARGS)

# On a GPU, three steps, each short enough for one 10-minute job (the third with half the
# notebooks), all run even when one fails.
# test-gpu-notebooks: every solution notebook (or NOTEBOOKS="04_matmul 05_autotuning") once, at
# full size, streaming its output; fails on any failing graded cell or a speed cell short of its
# points; executed copies in build/executed/, the summary in build/report/notebooks.json.
# test-gpu-tests: the GPU-marked tests and the fast unit tests, which take the compiled path there;
# the slow CPU tests (notebooks in the interpreter, known-wrong kernels, the toolchain) are CPU
# CI's. `.ci/gpu` runs these on a machine without a venv.
test-gpu:
	@status=0; \
	$(MAKE) --no-print-directory test-gpu-notebooks || status=1; \
	$(MAKE) --no-print-directory test-gpu-tests || status=1; \
	$(MAKE) --no-print-directory test-gpu-grading || status=1; \
	exit $$status

test-gpu-notebooks:
	$(PY) -m grader doctor
	$(PY) -m grader run --cell-timeout $(CELL_TIMEOUT) --timeout $(RUN_TIMEOUT) \
	  --out build/executed --summary build/report/notebooks.json $(NOTEBOOKS)

test-gpu-tests:
	$(PY) -m grader doctor
	$(PY) -m pytest -m "$(GPU_TESTS)" $(PYTEST_ARGS)

# test-gpu-grading: each solution (or NOTEBOOKS=) graded as one student the way `make autograde`
# grades (the sandbox, the judge, speed from the GPU activity log), by bench/grading_cost.py; fails
# unless every reference earns full marks. A notebook that passes test-gpu-notebooks can still lose
# points here, where its tests run in the judge: 05's and 08's did. About a minute a notebook:
# two 10-minute jobs for all of them. Needs nbgrader and bubblewrap (.ci/gpu says how).
test-gpu-grading:
	$(MAKE) --no-print-directory grading-cost BENCH_ARGS="$(NOTEBOOKS)"

# On a GPU: the solution notebooks run as in test-gpu-notebooks, with COURSE_RECORD set, so that
# each measurement and speed cell keeps what it showed (grader/runtime/recorded.py); then the
# records become grader/runtime/recordings/NN_topic.json (device, driver, CUDA, torch, Triton,
# date), which the CPU notebooks show where they cannot time. Only a run whose notebooks all
# passed is collected. Commit the files it writes.
RECORD_SPOOL := $(CURDIR)/build/recordings
recordings:
	$(PY) -m grader doctor
	rm -rf $(RECORD_SPOOL)
	COURSE_RECORD=$(RECORD_SPOOL) $(PY) -m grader run --cell-timeout $(CELL_TIMEOUT) \
	  --timeout $(RUN_TIMEOUT) --out build/executed --summary build/report/notebooks.json $(NOTEBOOKS)
	$(PY) -m grader recordings $(RECORD_SPOOL)

# The benchmark suite on a GPU (bench/report.py): every reference kernel against its baselines
# in one run, the goals, timing trust and plots, into build/report/. Options go in BENCH_ARGS,
# e.g. BENCH_ARGS="--full --trust 02_first_kernels". Like test-gpu, it uses $(PY) as it is.
bench:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PY) bench/report.py --out build/report \
	  $(BENCH_ARGS)

# What grading one student costs per notebook on this machine's device, and where the time goes
# (bench/grading_cost.py): build/report/grading_cost.{json,md}. Notebooks in BENCH_ARGS, e.g.
# BENCH_ARGS="00_setup 07_flash_attention" (default: all). Like bench, it uses $(PY) as it is.
grading-cost:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PY) bench/grading_cost.py --out build/report \
	  $(BENCH_ARGS)

# A synthetic class of one notebook graded on one GPU, then on two, by the batch itself; the same
# scores required of both, the gain and a projection (bench/throughput.py):
# build/report/throughput.{json,md}. Options in BENCH_ARGS, e.g. BENCH_ARGS="--students 16".
throughput:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PY) bench/throughput.py --out build/report \
	  $(BENCH_ARGS)

# Grade every submission of one assignment with nbgrader on this machine's device, e.g.
#   make autograde ASSIGNMENT=00_setup SUBMISSIONS=~/downloads/setup.zip AUTOGRADE_ARGS="--jobs 4"
# Outputs go to build/grading/$(ASSIGNMENT)/ (`python -m grader autograde --help`). With PY set to
# another Python (a GPU image's), it runs there as it is, like test-gpu.
autograde: $(if $(filter $(VENV)/bin/python,$(PY)),setup)
	$(if $(ASSIGNMENT),,$(error give ASSIGNMENT=NN_topic, e.g. make autograde ASSIGNMENT=00_setup SUBMISSIONS=path))
	$(PY) -m grader autograde $(ASSIGNMENT) $(if $(SUBMISSIONS),--submissions "$(SUBMISSIONS)") $(AUTOGRADE_ARGS)

# What students receive instead of the repository: course/ (rebuilt first), the runtime, pinned
# requirements, a setup and a lab script (grader/authoring/kit.py; docs/instructors.md).
student-kit: release
	$(PY) -m grader kit $(NOTEBOOKS)$(if $(TOGETHER), --together)

# The kit's container recipe (its Dockerfile, for macOS and Windows) built as a student builds it,
# then notebook 00 run in the image with no network (tests/test_kit.py, marked `container`; kept
# out of `make test`: the build downloads about 600 MB and takes minutes). CONTAINER_ENGINE picks
# the engine (default: podman, else docker), CONTAINER_BUILD_ARGS adds build options.
# The corpora of tests/test_known_wrong.py (each known-wrong kernel refused with its hint, each
# correct kernel written another way accepted) in the interpreter, on the torch and Triton of the
# GPU grading image (its recordings name them, tests/test_environment.py checks): what the kit's
# pins decide, the grader's pins must decide too. Its own venv; CI's `pins` job runs it.
GRADER_TORCH  ?= torch==2.11.0
GRADER_TRITON ?= triton==3.6.0
GRADER_VENV   ?= .venv-grader
# Triton before 3.7 interprets with NumPy before 2.4 only (the doctor names the combination)
GRADER_NUMPY  ?= numpy==2.3.5
test-grader-pins:
	$(MAKE) --no-print-directory setup VENV=$(GRADER_VENV) TRITON="$(GRADER_TRITON)" \
	  TORCH="$(GRADER_TORCH) --index-url https://download.pytorch.org/whl/cpu"
	$(GRADER_VENV)/bin/python -m pip install -q "$(GRADER_NUMPY)"
	$(GRADER_VENV)/bin/python -m grader doctor --strict
	$(GRADER_VENV)/bin/python -m pytest -m "slow and not gpu" $(XDIST) $(PYTEST_ARGS) \
	  tests/test_known_wrong.py

kit-container: setup
	$(PY) -m pytest -m container -s tests/test_kit.py $(PYTEST_ARGS)

wheelhouse:
	$(PYTHON) -m pip download -q --only-binary=:all: --python-version $(WHEEL_PYTHON) \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 --platform any --no-deps -d $(WHEELHOUSE) \
	  -r grader/wheelhouse.txt $(if $(WHEELHOUSE_EXTRAS),-r grader/wheelhouse-extras.txt) \
	  $(if $(WHEELHOUSE_GRADING),-r grader/wheelhouse-grading.txt)
	@echo "wheels in $(WHEELHOUSE): pip install --no-index --no-deps --target DIR $(WHEELHOUSE)/*.whl"

clean:
	rm -rf build .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -not -path "./$(VENV)/*" -exec rm -rf {} +
