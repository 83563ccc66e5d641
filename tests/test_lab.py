"""`make lab` serves course/ with widgets working, and 00 runs top to bottom in its kernel.

Starts JupyterLab the way `make lab` does (`python -m grader lab`, through tests/lab_server.py),
then drives a kernel that the server started, as the browser would, through the server's REST API
and the kernel's channels. tests/test_browser.py drives the same server through a real browser.
"""

import urllib.request

import nbformat
import pytest
from jupyter_client import BlockingKernelClient

from grader import cli
from grader.authoring import build
from tests import lab_server

pytestmark = [pytest.mark.slow, pytest.mark.tooling]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_server.running(tmp_path_factory.mktemp("lab")) as lab:
        yield lab


def test_students_get_course_and_instructors_the_repository():
    def served(command):
        return [a for a in command if a.startswith("--notebook-dir=")]

    assert served(cli.lab_command([])) == [f"--notebook-dir={build.COURSE}"]
    # the formgrader needs nbgrader's course directory, build/, inside the folder served
    assert served(cli.lab_command([], instructor=True)) == [f"--notebook-dir={build.ROOT}"]
    assert build.BUILD.parent == build.ROOT
    # a folder named on the command line replaces the default instead of clashing with it
    assert served(cli.lab_command(["--notebook-dir=/x"], instructor=True)) == ["--notebook-dir=/x"]
    assert served(cli.lab_command(["--ServerApp.root_dir", "/x"])) == []


def test_lab_serves_the_course_with_widgets(lab):
    listing = lab.api("/api/contents/00_setup")
    assert "setup.ipynb" in {item["name"] for item in listing["content"]}
    # the widget manager is among the extensions the lab page loads, and it is enabled
    request = urllib.request.Request(
        lab.url("/lab"), headers={"Authorization": f"token {lab_server.TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        page = response.read().decode()
    assert '"name": "@jupyter-widgets/jupyterlab-manager"' in page
    manager = next(
        e
        for e in lab.api("/lab/api/extensions")
        if e["name"] == "jupyter-widgets-jupyterlab-manager"
    )
    assert manager["enabled"] and manager["status"] == "ok"


def test_setup_notebook_runs_top_to_bottom_in_the_labs_kernel(lab):
    kernel = lab.api("/api/kernels", "POST", {"name": "python3", "path": "00_setup"})
    client = BlockingKernelClient(connection_file=str(lab.runtime / f"kernel-{kernel['id']}.json"))
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
        lab.api(f"/api/kernels/{kernel['id']}", "DELETE")


def test_course_notebook_opens_as_a_valid_notebook(lab):
    model = lab.api("/api/contents/00_setup/setup.ipynb")
    nbformat.validate(nbformat.from_dict(model["content"]))
