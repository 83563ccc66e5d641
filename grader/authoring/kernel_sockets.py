"""Where the kernels the course starts itself listen: ZMQ's ipc transport, Unix sockets in a
folder of their own, instead of TCP ports on localhost.

jupyter_client picks a kernel's TCP ports by binding port 0 and closing the socket again; the
kernel binds them a second or so later. A kernel started meanwhile by another process (a class
graded side by side, test workers, a second CI job) can be handed the same port, and the client
then waits on a kernel that never answers: "Kernel didn't respond in 60 seconds". A socket file
in a private folder cannot be handed to anyone else. The sandbox (grader.grading.jail) puts its
kernels on the same transport for its own reason: it has no network."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

TRANSPORT_OPTION = "--KernelManager.transport"


def private_folder() -> Path:
    """A new folder for kernels' sockets, removed when this process exits."""
    folder = Path(tempfile.mkdtemp(prefix="kernel-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def options(folder: Path) -> dict[str, str]:
    """KernelManager's traits that put a kernel's sockets in `folder` (one kernel at a time:
    socket files are numbered by what the folder holds when the kernel starts)."""
    return {"transport": "ipc", "ip": str(folder / "kernel")}


def command_line(argv: list[str]) -> list[str]:
    """`argv` of a Jupyter application, with its kernels on sockets of a private folder unless
    argv already says where they go (the sandbox's options do)."""
    if any(arg.startswith(TRANSPORT_OPTION) for arg in argv):
        return list(argv)
    return [*argv, *(f"--KernelManager.{k}={v}" for k, v in options(private_folder()).items())]
