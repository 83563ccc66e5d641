"""Locks that every grading process of one host sees: a sandbox's uid slot (grader.grading.jail)
and a GPU (grader.grading.devices) belong to one student of one batch at a time, also when two
batches run side by side.

Each lock is an `flock` on a file of `folder()`. flock belongs to the open file, so two threads of
one process exclude each other as two processes do, and the kernel lets go of it when its holder
dies, however it dies: a crashed or killed batch leaves nothing to clean up.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

FOLDER_VARIABLE = "COURSE_GRADING_LOCKS"
POLL_SECONDS = 0.5


def folder() -> Path:
    """Where the lock files are: $COURSE_GRADING_LOCKS, else /run/lock/course-grading for root
    (the sandbox's batches) and a folder of the user's own under the temporary folder for
    anyone else."""
    default = (
        Path("/run/lock/course-grading")
        if os.geteuid() == 0
        else Path(tempfile.gettempdir()) / f"course-grading-{os.geteuid()}"
    )
    path = Path(os.environ.get(FOLDER_VARIABLE) or default)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.is_symlink() or path.stat().st_uid != os.geteuid():
        raise PermissionError(
            f"{path}: the grading locks' folder is a link, or belongs to another user (who "
            f"could hold every lock); remove it, or set {FOLDER_VARIABLE} to a folder of yours"
        )
    return path


def try_hold(name: str) -> int | None:
    """The open lock file `name`, locked, or None when another holder has it."""
    fd = os.open(folder() / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextmanager
def holding(fd: int) -> Iterator[None]:
    """Keep the lock of `fd` (from try_hold) while the block runs."""
    try:
        yield
    finally:
        os.close(fd)  # closing the open file's last descriptor releases its flock


@contextmanager
def first_free(names: Sequence[str], poll: float = POLL_SECONDS) -> Iterator[str]:
    """Hold the first lock of `names` that nobody holds, for as long as the block runs; while
    every one is held, wait for one."""
    if not names:
        raise ValueError("no lock to wait for")
    while True:
        for name in names:
            fd = try_hold(name)
            if fd is not None:
                with holding(fd):
                    yield name
                return
        time.sleep(poll)


@contextmanager
def numbered(prefix: str) -> Iterator[int]:
    """Hold the lowest-numbered lock `<prefix>N` that nobody holds; N for as long as the block
    runs."""
    for n in itertools.count():
        fd = try_hold(f"{prefix}{n}")
        if fd is not None:
            with holding(fd):
                yield n
            return
