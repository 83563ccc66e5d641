"""Test session setup: choose the mode before anything imports triton.

`make test` runs on the CPU in interpreter mode; `make test-gpu` runs the tests marked `gpu`.
"""

import os
from pathlib import Path

# One thread per process for torch's, OpenMP's and the BLAS libraries' pools, in the test
# processes and every kernel and nbgrader run they start (which inherit it), unless set already.
# The suite runs a process per core (pytest-xdist) and each starts kernels; with a pool per core
# in each, the pools' threads spin waiting for each other on cores that are busy elsewhere: a
# 64x64 torch.matmul took 50 times as long beside other work, and a notebook that runs in 6 s
# took 614 s. Must come before torch or numpy is imported.
for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_pool, "1")

import pytest  # noqa: E402

from grader.runtime import device  # noqa: E402
from tests import shared  # noqa: E402

pytest_plugins = ["tests.cputime"]

ROOT = Path(__file__).resolve().parent.parent
DEVICE = device.setup()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU: run `make test-gpu` on one")
    for item in items:
        if "gpu" in item.keywords and not DEVICE.is_gpu:
            item.add_marker(skip_gpu)


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


@pytest.fixture
def clean_env(monkeypatch):
    """An environment without the course's mode variables, restored afterwards."""
    for name in ("COURSE_MODE", "TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION"):
        monkeypatch.delenv(name, raising=False)
    return os.environ
