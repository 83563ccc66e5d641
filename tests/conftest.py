"""Test session setup: choose the mode before anything imports triton.

`make test` runs on the CPU in interpreter mode; `make test-gpu` runs the tests marked `gpu`.
"""

import os
from pathlib import Path

# One thread per process for torch's, OpenMP's and the BLAS libraries' pools, in the test
# processes and every kernel and nbgrader run they start (which inherit it), unless set already.
# The suite runs a process per core and one more (pytest-xdist), each starting kernels; with a
# pool per core in each, the pools' threads spin waiting for each other on cores that are busy
# elsewhere: a 64x64 torch.matmul took 50 times as long beside other work, and a notebook that
# runs in 6 s took 614 s. Must come before torch or numpy is imported.
for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_pool, "1")

import pytest  # noqa: E402

from grader.runtime import device  # noqa: E402
from tests import shared  # noqa: E402

pytest_plugins = ["tests.cputime"]

ROOT = Path(__file__).resolve().parent.parent
DEVICE = device.setup()

# The test files that take longest, longest first (seconds on two idle cores, 2026-11-24:
# 141, 126, 73, 70, 67, 56, 51, 47, 43, 29, 25). `make test` hands each pytest-xdist worker whole
# files in collection order (--dist loadfile --no-loadscope-reorder); collected first, these
# leave short files for the end, instead of one long file running alone while the other worker
# has nothing left to do. The rest keep their order.
LONGEST_FIRST = (
    "test_known_wrong.py",
    "test_hostile.py",
    "test_autograde_inputs.py",
    "test_nbgrader.py",
    "test_kit.py",
    "test_autograde.py",
    "test_browser.py",
    "test_slurm.py",
    "test_feedback.py",
    "test_exchange.py",
)
if _stale := [name for name in LONGEST_FIRST if not (ROOT / "tests" / name).is_file()]:
    raise pytest.UsageError(f"tests/conftest.py: LONGEST_FIRST names no test file {_stale}")


def _longest_first(item) -> int:
    name = item.path.name
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU: run `make test-gpu` on one")
    for item in items:
        if "gpu" in item.keywords and not DEVICE.is_gpu:
            item.add_marker(skip_gpu)
    items.sort(key=_longest_first)  # stable: within a file, tests keep their order


@pytest.fixture
def dev():
    return DEVICE


@pytest.fixture
def root():
    return ROOT


@pytest.fixture(scope="session")
def registered_course(tmp_path_factory) -> Path:
    """A course directory with every assignment generated and registered in its gradebook, made
    once per run for all workers (tests.shared); copy it with `shared.copy_course`."""
    return shared.shared_folder(tmp_path_factory, "registered-course", shared.generate_course)


@pytest.fixture(scope="session")
def registered_light(tmp_path_factory) -> Path:
    """A course directory with tests/light.py's assignment alone, registered, made once per run
    for all workers; copy it with `shared.copy_course`."""
    from tests import light

    return shared.shared_folder(tmp_path_factory, "registered-light", light.generate)


@pytest.fixture
def clean_env(monkeypatch):
    """An environment without the course's mode variables, restored afterwards."""
    for name in ("COURSE_MODE", "TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION"):
        monkeypatch.delenv(name, raising=False)
    return os.environ
