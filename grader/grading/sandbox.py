"""Run one command, for one student's submission, so that it cannot take the machine down: a
wall-clock limit, and a memory limit on the command and everything it starts (nbgrader starts the
Jupyter kernel, which may start more processes).

Memory is limited twice. `data_limit` sets RLIMIT_DATA on the command, which its children inherit:
an allocation past it fails inside the kernel (torch raises "can't allocate memory"), so only the
cell that made it fails. It is used on the CPU only: CUDA reserves address space in ways a data
limit may refuse. Everywhere, a watchdog sums the resident memory of the whole process tree twice a
second and kills the tree when it passes `memory_limit`: the submission then fails as a whole, but
the machine and the other submissions carry on.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.grading.zygote import Zygote

POLL_SECONDS = 0.5
GIB = 1 << 30


@dataclass(frozen=True)
class Finished:
    """How a sandboxed command ended. `killed` is "timeout", "memory" or None."""

    returncode: int
    seconds: float
    peak_bytes: int
    killed: str | None = None

    @property
    def ok(self) -> bool:
        return self.killed is None and self.returncode == 0


def kill(processes) -> None:
    """SIGKILL each of the psutil processes `processes`, children (listed after their parents)
    first, so that none is left orphaned; psutil refuses a pid that was reused meanwhile."""
    import psutil  # it comes with IPython, so with nbgrader

    for p in reversed(list(processes)):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)


def run(
    command: Sequence[str],
    *,
    log: Path,
    timeout: float,
    memory_limit: int,
    data_limit: int | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    zygote: Zygote | None = None,
) -> Finished:
    """Run `command`, its output going to `log`; kill its whole tree past `timeout` seconds or
    past `memory_limit` bytes resident; with `data_limit`, set RLIMIT_DATA on it first. With
    `zygote` (grader.grading.zygote), `command` is nbgrader's arguments, forked by the zygote
    rather than started afresh."""
    import psutil

    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    if zygote is None:
        with open(log, "w", encoding="utf-8") as out:  # the child writes to its own copy
            proc = subprocess.Popen(
                list(command),
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        if data_limit is not None:  # set before nbgrader starts the kernel, which inherits it
            with contextlib.suppress(ProcessLookupError):  # it has already finished
                resource.prlimit(proc.pid, resource.RLIMIT_DATA, (data_limit, data_limit))
        pid, wait = proc.pid, proc.wait
    else:
        env = os.environ if env is None else env
        pid = zygote.start(command, cwd=cwd or Path.cwd(), env=env, log=log, data_limit=data_limit)
        wait = functools.partial(zygote.wait, pid)  # the zygote's child until then: watched here
    seen = {pid: psutil.Process(pid)}  # every process of the tree seen so far
    killed: str | None = None
    peak = 0

    def watch():
        nonlocal peak, killed
        while not done.wait(POLL_SECONDS):
            try:
                tree = [seen[pid], *seen[pid].children(recursive=True)]
            except psutil.NoSuchProcess:
                tree = []
            seen.update((p.pid, p) for p in tree)
            used = 0
            for p in tree:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    used += p.memory_info().rss
            peak = max(peak, used)
            late = time.monotonic() - start > timeout
            if late or used > memory_limit:
                killed = "timeout" if late else "memory"
                kill(tree)
                return

    done = threading.Event()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        returncode = wait()
    finally:
        done.set()
        watcher.join()
        kill(list(seen.values())[1:])  # a kernel a failed nbgrader left behind dies too
    return Finished(returncode, time.monotonic() - start, peak, killed)


def default_memory_limit(jobs: int) -> int:
    """A per-submission limit that lets `jobs` submissions run side by side: 3/4 of the
    machine's memory shared among them, at most 16 GiB each, and never below 2 GiB."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(max(2 * GIB, min(16 * GIB, 0.75 * total / max(1, jobs))))
