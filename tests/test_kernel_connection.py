"""The kernels the course starts itself (nbgrader's, papermill's) listen on Unix sockets of a
private folder, never on TCP ports another process can be handed; the sandbox's own options are
left as they are; and a message that fails to wake its waiter is read within a second, not at
the end of the cell's limit."""

import asyncio
import json
import subprocess
import time
from pathlib import Path
from queue import Empty

import nbformat
import pytest
import zmq
import zmq.asyncio
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.session import Session
from nbformat.v4 import new_code_cell, new_notebook

from grader.authoring import execute, kernel_connection, nbgrader_main

pytestmark = pytest.mark.tooling

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}

# the kernel reports the transport and address it was started on
PROBE = """
import json
from ipykernel.kernelapp import IPKernelApp
app = IPKernelApp.instance()
open("kernel.json", "w").write(json.dumps({"transport": app.transport, "ip": app.ip}))
"""


def probe_notebook(folder: Path) -> Path:
    nb = new_notebook(cells=[new_code_cell(PROBE)])
    nb.metadata["kernelspec"] = KERNELSPEC
    path = folder / "probe.ipynb"
    nbformat.write(nb, path)
    return path


def reported(folder: Path) -> dict:
    return json.loads((folder / "kernel.json").read_text())


def assert_private_sockets(kernel: dict):
    assert kernel["transport"] == "ipc", kernel
    address = Path(kernel["ip"])
    assert address.is_absolute() and address.name == "kernel", kernel
    assert not address.parent.exists(), "the socket folder outlived the run"


def test_the_sandbox_options_are_kept_and_others_get_a_folder_of_their_own():
    client = f"--AsyncKernelManager.client_class={kernel_connection.CLIENT}"
    jailed = ["autograde", "--KernelManager.transport=ipc", "--KernelManager.ip=/run/x/kernel"]
    assert kernel_connection.command_line(jailed) == [*jailed, client]
    assert kernel_connection.command_line([*jailed, client]) == [*jailed, client]
    first, second = (kernel_connection.command_line(["autograde"]) for _ in range(2))
    assert first[:2] == ["autograde", "--KernelManager.transport=ipc"]
    assert first[2].startswith("--KernelManager.ip=") and Path(first[2].split("=")[1]).is_absolute()
    assert first[2] != second[2] and first[3] == client


class MissesWakeups(zmq.asyncio.Socket):
    """A socket whose waits are never woken by a message: each lasts its whole timeout and then
    looks at the socket, as zmq.asyncio's do when a wake-up is missed."""

    async def poll(self, timeout=None, flags=zmq.POLLIN):
        await asyncio.sleep(timeout / 1000)
        return await super().poll(0, flags)


async def wait_for_a_message(channel_class, timeout, send=True):
    """Seconds `channel_class` takes to read a message sent 0.1 s into its wait of `timeout`."""
    context, session = zmq.asyncio.Context(), Session()
    receiver, sender = MissesWakeups(context, zmq.PAIR), context.socket(zmq.PAIR)
    receiver.bind("inproc://wakeups")
    sender.connect("inproc://wakeups")
    try:

        async def later():
            await asyncio.sleep(0.1)
            if send:
                session.send(sender, "execute_reply", {"status": "ok"})

        start = time.monotonic()
        got, _ = await asyncio.gather(channel_class(receiver, session).get_msg(timeout), later())
        assert got["header"]["msg_type"] == "execute_reply"
        return time.monotonic() - start
    finally:
        receiver.close(linger=0)
        sender.close(linger=0)
        context.term()


def test_a_missed_wakeup_costs_a_second_not_the_cells_limit():
    assert asyncio.run(wait_for_a_message(AsyncZMQSocketChannel, 2)) >= 2  # the hazard itself
    client = kernel_connection.WakefulClient()
    sliced = client.shell_channel_class
    assert client.iopub_channel_class is sliced and sliced is not AsyncZMQSocketChannel
    assert asyncio.run(wait_for_a_message(sliced, 600)) < 3 * kernel_connection.WAKE_SECONDS
    assert asyncio.run(wait_for_a_message(sliced, None)) < 3 * kernel_connection.WAKE_SECONDS
    start = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(wait_for_a_message(sliced, 1.5, send=False))
    assert 1.5 <= time.monotonic() - start < 3  # the caller's timeout still holds


def test_nbgrader_and_papermill_are_configured_with_the_wakeful_client(tmp_path):
    from jupyter_client import AsyncKernelManager  # nbclient's kernel manager
    from traitlets.config import Config
    from traitlets.config.loader import KVArgParseConfigLoader

    by_command_line = KVArgParseConfigLoader(kernel_connection.command_line([])).load_config()
    for config in (by_command_line, Config(kernel_connection.config(tmp_path))):
        manager = AsyncKernelManager(config=config)
        assert isinstance(manager.client(), kernel_connection.WakefulClient)
        assert manager.transport == "ipc" and Path(manager.ip).parent.is_dir()


def test_nbgraders_kernels_use_private_sockets(tmp_path):
    notebook = probe_notebook(tmp_path)
    done = subprocess.run(
        nbgrader_main.command("validate", notebook.name),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert_private_sockets(reported(tmp_path))


def test_papermills_kernels_use_private_sockets(tmp_path):
    notebook = probe_notebook(tmp_path)
    outcome = execute.run_notebook(notebook, tmp_path / "out" / notebook.name, cell_timeout=120)
    assert outcome.error is None, outcome.error
    assert_private_sockets(reported(tmp_path))
