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


def _psutil():
    try:
        import psutil
    except ImportError:  # it comes with IPython, so with nbgrader; said plainly if not
        raise RuntimeError(
            "the memory watchdog needs psutil: pip install psutil (IPython, which nbgrader "
            "needs, normally brings it)"
        ) from None
    return psutil


def _tree(process) -> list:
    """`process` and its descendants, parents before children."""
    try:
        return [process, *process.children(recursive=True)]
    except _psutil().NoSuchProcess:
        return []


def resident_bytes(processes) -> int:
    """Resident memory of the psutil.Process objects in `processes` that still run."""
    psutil = _psutil()
    total = 0
    for p in processes:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def kill(processes) -> None:
    """SIGKILL each process in `processes` (children listed after their parents: they go
    first, so none is left orphaned); psutil refuses a pid that was reused meanwhile."""
    psutil = _psutil()
    for p in reversed(list(processes)):
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


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
    psutil = _psutil()
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    killed: list[str] = []
    peak = 0
    with contextlib.ExitStack() as stack:
        if zygote is None:
            out = stack.enter_context(open(log, "w", encoding="utf-8"))
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
            where = Path(cwd) if cwd is not None else Path.cwd()
            given = dict(env) if env is not None else dict(os.environ)
            pid = zygote.start(command, cwd=where, env=given, log=log, data_limit=data_limit)
            wait = zygote.wait  # the child stays the zygote's until then, so it can be watched
        seen = {pid: psutil.Process(pid)}  # every process of the tree seen so far
        done = threading.Event()

        def watch():
            nonlocal peak
            while not done.wait(POLL_SECONDS):
                tree = _tree(seen[pid])
                seen.update((p.pid, p) for p in tree)
                used = resident_bytes(tree)
                peak = max(peak, used)
                reason = "memory" if used > memory_limit else None
                if time.monotonic() - start > timeout:
                    reason = "timeout"
                if reason:
                    killed.append(reason)
                    kill(tree)
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            returncode = wait()
        finally:
            done.set()
            watcher.join()
            kill(list(seen.values())[1:])  # a kernel a failed nbgrader left behind dies too
    return Finished(returncode, time.monotonic() - start, peak, killed[0] if killed else None)


def default_memory_limit(jobs: int) -> int:
    """A per-submission limit that lets `jobs` submissions run side by side: 3/4 of the
    machine's memory shared among them, at most 16 GiB each, and never below 2 GiB."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(max(2 * GIB, min(16 * GIB, 0.75 * total / max(1, jobs))))
