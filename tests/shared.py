"""What several test files need and one run makes once: a folder built by the first test to ask
for it, under a lock, in the run's temporary folder, which every pytest-xdist worker of the run
shares; the others wait for it and reuse it. Such a folder is read-only by agreement: a test
copies what it changes."""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from grader.authoring import build


def shared_folder(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """The run's folder `name`, made by `make(path)` if no worker of this run has made it yet."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above each worker's own
    path = base / name
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not path.is_dir():
            making = base / f"{name}.making"
            shutil.rmtree(making, ignore_errors=True)  # a worker that died while making it
            make(making)
            making.rename(path)
    return path


def generate_course(root: Path) -> None:
    """A course directory as `make release` leaves build/: every assignment's nbgrader source,
    its release, and its graded cells registered in gradebook.db (one generate_assignment)."""
    build.build_sources(root)
    build.nbgrader("generate_assignment", "*", "--force", root=root)


def copy_course(registered: Path, root: Path) -> Path:
    """A course directory of one's own at `root`: source/, release/ and gradebook.db of
    `registered`, so that grading finds the assignments generated and registered."""
    for step in ("source", "release"):
        shutil.copytree(registered / step, root / step)
    shutil.copy(registered / "gradebook.db", root / "gradebook.db")
    return root


def cpu_sampler(fn, warmup_ms, rep_ms, *, before=None) -> list[float]:
    """A wall clock in place of timing.device_sampler, for tests without a GPU: a warm-up call,
    then three timed ones, `before` ahead of each call. What it measures is CPU time, never a GPU
    speed."""
    samples = []
    for i in range(4):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        if i:
            samples.append((time.perf_counter() - start) * 1e3)
    return samples
