"""Test session setup: choose the mode before anything imports triton.

`make test` runs on the CPU in interpreter mode; `make test-gpu` runs the tests marked `gpu`.
"""

import os
from pathlib import Path

import pytest

from grader.runtime import device

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


@pytest.fixture
def clean_env(monkeypatch):
    """An environment without the course's mode variables, restored afterwards."""
    for name in ("COURSE_MODE", "TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION"):
        monkeypatch.delenv(name, raising=False)
    return os.environ
