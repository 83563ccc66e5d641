"""`make lab` serves course/ with widgets working, and 00 runs top to bottom in its kernel.

Starts JupyterLab the way `make lab` does (`python -m grader lab`), then drives a kernel that the
server started, as the browser would, through the server's REST API and the kernel's channels.
"""

import json
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest
from jupyter_client import BlockingKernelClient

from grader import build

pytestmark = [pytest.mark.slow, pytest.mark.tooling]
TOKEN = "course-test"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port, path, method="GET", body=None):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    runtime = tmp_path_factory.mktemp("runtime")
    port = free_port()
    env = {**build.nbgrader_env(), "JUPYTER_RUNTIME_DIR": str(runtime)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grader",
            "lab",
            "--no-browser",
            f"--port={port}",
            f"--IdentityProvider.token={TOKEN}",
            "--ServerApp.open_browser=False",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 90
    while True:
        try:
            api(port, "/api/status")
            break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("JupyterLab did not start within 90 s")
            time.sleep(0.5)
    yield port, runtime
    proc.terminate()
    proc.wait(timeout=30)


def test_lab_serves_the_course_with_widgets(lab):
    port, _ = lab
    listing = api(port, "/api/contents/00_setup")
    assert "setup.ipynb" in {item["name"] for item in listing["content"]}
    # the widget manager is among the extensions the lab page loads, and it is enabled
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/lab", headers={"Authorization": f"token {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        page = response.read().decode()
    assert '"name": "@jupyter-widgets/jupyterlab-manager"' in page
    manager = next(
        e
        for e in api(port, "/lab/api/extensions")
        if e["name"] == "jupyter-widgets-jupyterlab-manager"
    )
    assert manager["enabled"] and manager["status"] == "ok"


def test_setup_notebook_runs_top_to_bottom_in_the_labs_kernel(lab):
    port, runtime = lab
    kernel = api(port, "/api/kernels", "POST", {"name": "python3", "path": "00_setup"})
    client = BlockingKernelClient(connection_file=str(runtime / f"kernel-{kernel['id']}.json"))
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        source = build.to_notebook(build.SOLUTIONS / "00_setup" / "setup.py")
        cells = [c.source for c in source.cells if c.cell_type == "code"]
        cells.append("import ipywidgets\nipywidgets.IntSlider(value=3)")
        outputs = []
        for code in cells:
            reply = client.execute_interactive(code, timeout=120, output_hook=outputs.append)
            assert reply["content"]["status"] == "ok", (code[:200], reply["content"])
        widget_views = [
            m
            for m in outputs
            if m["msg_type"] == "execute_result"
            and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
        ]
        assert widget_views, "the widget did not produce a view"
    finally:
        client.stop_channels()
        api(port, f"/api/kernels/{kernel['id']}", "DELETE")


def test_course_notebook_opens_as_a_valid_notebook(lab):
    port, _ = lab
    model = api(port, "/api/contents/00_setup/setup.ipynb")
    nbformat.validate(nbformat.from_dict(model["content"]))
