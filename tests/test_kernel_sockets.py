"""The kernels the course starts itself (nbgrader's, papermill's) listen on Unix sockets of a
private folder, never on TCP ports another process can be handed; the sandbox's own options are
left as they are."""

import json
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from grader.authoring import execute, kernel_sockets, nbgrader_main

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
    jailed = ["autograde", "--KernelManager.transport=ipc", "--KernelManager.ip=/run/x/kernel"]
    assert kernel_sockets.command_line(jailed) == jailed
    first, second = (kernel_sockets.command_line(["autograde"]) for _ in range(2))
    assert first[:2] == ["autograde", "--KernelManager.transport=ipc"]
    assert first[2].startswith("--KernelManager.ip=") and Path(first[2].split("=")[1]).is_absolute()
    assert first[2] != second[2]


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
