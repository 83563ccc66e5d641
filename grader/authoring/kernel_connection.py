"""How the course's own tools (nbgrader, papermill's runs, the tests' kernel sessions) reach the
kernels they start: two guards against hangs of Jupyter's plumbing that show up when many
kernels run side by side.

- Sockets: ZMQ's ipc transport, Unix sockets in a folder of their own, instead of TCP ports on
  localhost. jupyter_client picks a kernel's TCP ports by binding port 0 and closing the socket
  again; the kernel binds them a second or so later. A kernel started meanwhile by another
  process (a class graded side by side, test workers, a second CI job) can be handed the same
  port, and the client then waits on a kernel that never answers: "Kernel didn't respond in 60
  seconds". A socket file in a private folder cannot be handed to anyone else. The sandbox
  (grader.grading.jail) puts its kernels on the same transport, having no network.
- Waiting: `WakefulClient` waits for a kernel's messages in slices of WAKE_SECONDS. Each wait
  of zmq.asyncio ends with a direct look at the socket, but within one wait a message can fail
  to wake the event loop, and the wait then lasts its whole timeout. In one CI run a cell's
  execute_reply was stamped as sent at once, the next cell started ten minutes later (the
  cell's limit), and the notebook went on as if nothing had happened. Slices bound such a miss
  to WAKE_SECONDS."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import time
from pathlib import Path
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from traitlets import Type

TRANSPORT_OPTION = "--KernelManager.transport"
CLIENT_OPTION = "--AsyncKernelManager.client_class"
WAKE_SECONDS = 1.0


class _SlicedChannel(AsyncZMQSocketChannel):
    """A channel whose wait for a message looks at the socket at least every WAKE_SECONDS."""

    async def get_msg(self, timeout: float | None = None) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await super().get_msg(
                    WAKE_SECONDS if left is None else min(left, WAKE_SECONDS)
                )
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise


class WakefulClient(AsyncKernelClient):
    """nbclient's kernel client (AsyncKernelManager's), waiting in slices on the two channels
    whose waits are long: shell (a cell's reply) and IOPub (its output)."""

    shell_channel_class = Type(_SlicedChannel)
    iopub_channel_class = Type(_SlicedChannel)


CLIENT = f"{WakefulClient.__module__}.{WakefulClient.__qualname__}"


def private_folder() -> Path:
    """A new folder for kernels' sockets, removed when this process exits."""
    folder = Path(tempfile.mkdtemp(prefix="kernel-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def sockets(folder: Path) -> dict[str, str]:
    """KernelManager's traits that put a kernel's sockets in `folder` (one kernel at a time:
    socket files are numbered by what the folder holds when the kernel starts)."""
    return {"transport": "ipc", "ip": str(folder / "kernel")}


def config(folder: Path) -> dict[str, dict[str, str]]:
    """The configuration sections of a Jupyter tool whose kernels (one at a time) use `folder`
    for their sockets and WakefulClient to wait on them."""
    return {"KernelManager": sockets(folder), "AsyncKernelManager": {"client_class": CLIENT}}


def command_line(argv: list[str]) -> list[str]:
    """`argv` of a Jupyter application, with WakefulClient, and its kernels on sockets of a
    private folder, except where argv already says otherwise (the sandbox's options say where
    the sockets go)."""
    extra = []
    if not any(arg.startswith(TRANSPORT_OPTION) for arg in argv):
        extra += [f"--KernelManager.{k}={v}" for k, v in sockets(private_folder()).items()]
    if not any(arg.startswith(CLIENT_OPTION) for arg in argv):
        extra.append(f"{CLIENT_OPTION}={CLIENT}")
    return [*argv, *extra]
