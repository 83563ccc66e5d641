"""The course in a real browser: JupyterLab started as `make lab` starts it, driven through
headless Chromium with Playwright (the system's Chromium; Playwright's own browsers are never
downloaded).

- A student's notebook (course/, as `make release` builds it, with its exercises solved) runs top
  to bottom from the Run menu without an error, and its explorer widget answers the slider.
- The instructor's formgrader, in JupyterLab, lists the course's assignments.
- The student kit (`make student-kit`), unzipped into a fresh folder and opened with its own
  lab.sh, runs a notebook with the runtime it ships.
- The checks themselves catch a failing cell, a page error and a misplaced course directory.

Any uncaught page error or console error fails the test that caused it. Screenshots go to
build/browser/.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import uuid
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.authoring import build, kit
from tests import lab_server

# the GPU runner collects this file without the dev extra; CPU CI has it and runs every test
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
expect, sync_playwright = sync_api.expect, sync_api.sync_playwright

pytestmark = [pytest.mark.slow, pytest.mark.tooling]
expect.set_options(timeout=60_000)  # Playwright's 5 s is short for a busy CI machine

CHROMIUM = Path("/usr/bin/chromium")
# Flags that work as root, without a GPU and without network; Playwright adds a fresh, empty
# user-data-dir of its own.
LAUNCH_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The quickest notebook with an explorer widget: Run All takes about 7 s here in interpreter mode
# (01_roofline and 05_autotuning take as long, and their controls are dropdowns).
NOTEBOOK = "06_online_softmax"
WAIT_MS = 180_000  # for the kernel and the notebook: generous, for a busy CI machine
SHOTS = build.BUILD / "browser"
# JupyterLab asks whether to fetch Jupyter's news from the web; no network here, and no prompt
# over the screenshots.
NO_NEWS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}

# The notebook in view (JupyterLab hides the panels of the other tabs)
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
# The notebook has run when every code cell has a number, none is waiting ([*]) and the kernel is
# idle; after an error the cells after it stay unnumbered, so at least one number is enough.
FINISHED = """([panelSelector, codeCells]) => {
  const panel = document.querySelector(panelSelector);
  if (!panel) return false;
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
    .map((p) => p.textContent.trim());
  const status = panel.querySelector('.jp-Notebook-ExecutionIndicator')?.dataset.status;
  return status === 'idle' && prompts.length === codeCells
    && !prompts.some((p) => p.includes('*')) && prompts.some((p) => /^\\[\\d+\\]:$/.test(p));
}"""
# The kernel is ready when the toolbar names it and its indicator reads idle (before the kernel
# is chosen the toolbar says "No Kernel" and the indicator idles too).
KERNEL_READY = """(panelSelector) => {
  const panel = document.querySelector(panelSelector);
  const name = panel?.querySelector('.jp-Toolbar-kernelName');
  const status = panel?.querySelector('.jp-Notebook-ExecutionIndicator');
  return !!name && !/No Kernel/.test(name.textContent) && status?.dataset.status === 'idle';
}"""


class Console:
    """Errors a page logs to its console or throws uncaught, in JupyterLab and in its frames. None
    is allowed: JupyterLab, the widgets and the formgrader log none when all is well."""

    def __init__(self, page):
        self.errors: list[str] = []
        page.on("console", self._message)
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught {exc}"))

    def _message(self, message) -> None:
        if message.type == "error":
            self.errors.append(f"console error: {message.text} ({message.location.get('url')})")

    def check(self) -> None:
        assert not self.errors, "the browser reported errors:\n" + "\n".join(self.errors)


def failures(nb: nbformat.NotebookNode) -> list[str]:
    """What went wrong in a notebook saved after Run All: error outputs and cells that never ran."""
    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        problems += [
            f"cell {i}: {out.ename}: {out.evalue}"
            for out in cell.outputs
            if out.output_type == "error"
        ]
        if cell.execution_count is None:
            problems.append(f"cell {i} did not run")
    return problems


def solved(course_notebook: Path, source_notebook: Path) -> nbformat.NotebookNode:
    """The student's notebook with every exercise filled in from the solution (cells are matched by
    their ids, which the build keeps), as a student who has done the work has it."""
    nb = nbformat.read(course_notebook, as_version=4)
    solutions = {c.id: c.source for c in nbformat.read(source_notebook, as_version=4).cells}
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = solutions[cell.id]
    return nb


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of the repository's generated material: course/ (the student notebooks, NOTEBOOK
    solved) and build/ as `make release` leaves it (source/ and release/), with nbgrader's
    course directory pointed at it by an nbgrader_config.py where the instructor's server starts.
    The repository's own course/ and build/ are never written to."""
    root = tmp_path_factory.mktemp("repository")
    build.build_sources(root / "build")
    shutil.copytree(build.COURSE, root / "build" / "release")  # course/ is the release, verbatim
    shutil.copytree(build.COURSE, root / "course")
    name = next(a.notebook_name for a in build.assignments() if a.name == NOTEBOOK)
    target = root / "course" / NOTEBOOK / name
    nbformat.write(solved(target, root / "build" / "source" / NOTEBOOK / name), target)
    (root / "nbgrader_config.py").write_text(
        f"c = get_config()  # noqa: F821\nc.CourseDirectory.root = {str(root / 'build')!r}\n"
    )
    return root


@pytest.fixture(scope="module")
def chromium():
    if not CHROMIUM.exists():
        pytest.skip(f"Chromium not found at {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=LAUNCH_FLAGS, headless=True
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def labs(tree, tmp_path_factory):
    """Two servers, started side by side: the student's as `make lab` starts it (on course/, here
    the copy), and the instructor's as `python -m grader lab --instructor` does (on the repository,
    here the copy, which holds the course directory build/)."""
    student = lab_server.start(
        tmp_path_factory.mktemp("student"), f"--notebook-dir={tree / 'course'}", settings=NO_NEWS
    )
    instructor = lab_server.start(
        tmp_path_factory.mktemp("instructor"), f"--notebook-dir={tree}", cwd=tree, settings=NO_NEWS
    )
    try:
        student.wait_ready()
        instructor.wait_ready()
        yield student, instructor
    finally:
        lab_server.stop(student, instructor)


@pytest.fixture
def student_lab(labs):
    return labs[0]


@pytest.fixture
def instructor_lab(labs):
    return labs[1]


@pytest.fixture
def page(chromium, request):
    """A fresh browser context and page; its last view is saved as a screenshot."""
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    yield page
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SHOTS / f"{request.node.name}-last.png")
    context.close()


@pytest.fixture
def console(page):
    return Console(page)


def open_lab(page, lab: lab_server.Lab, path: str = "") -> None:
    """Open JupyterLab in a workspace of its own (the server keeps the tabs each workspace had
    open), on the file at `path` if one is given."""
    workspace = uuid.uuid4().hex[:12]
    page.goto(lab.url(f"/lab/workspaces/{workspace}" + (f"/tree/{path}" if path else "")))


def open_notebook(page, lab: lab_server.Lab, path: str, cells: int) -> None:
    """Open the notebook at `path` (relative to the served folder), wait for all its `cells` and
    for its kernel."""
    open_lab(page, lab, path)
    # JupyterLab attaches cells as it goes; Run All must see them all
    page.wait_for_function(
        "([panel, n]) => document.querySelectorAll(panel + ' .jp-Cell').length === n",
        arg=[PANEL, cells],
        timeout=WAIT_MS,
    )
    page.wait_for_function(KERNEL_READY, arg=PANEL, timeout=WAIT_MS)


def run_all_and_save(page, notebook: Path) -> nbformat.NotebookNode:
    """Run All Cells from the Run menu, wait until the kernel is done, save from the toolbar, and
    return the notebook as saved."""
    nb = nbformat.read(notebook, as_version=4)
    assert all(c.get("execution_count") is None for c in nb.cells), (
        "expected a notebook not yet run"
    )
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()
    code_cells = sum(c.cell_type == "code" for c in nb.cells)
    page.wait_for_function(FINISHED, arg=[PANEL, code_cells], timeout=WAIT_MS)
    tab = page.locator(".lm-TabBar-tab.jp-mod-current")
    expect(tab).to_have_class(re.compile("jp-mod-dirty"))  # its outputs are not on disk yet
    page.locator(f"{PANEL} [data-command='docmanager:save']").click()
    expect(tab).not_to_have_class(re.compile("jp-mod-dirty"))
    return nbformat.read(notebook, as_version=4)


def test_a_solved_notebook_runs_and_its_explorer_responds(page, console, student_lab, tree):
    name = next(a.notebook_name for a in build.assignments() if a.name == NOTEBOOK)
    notebook = tree / "course" / NOTEBOOK / name
    open_notebook(page, student_lab, f"{NOTEBOOK}/{name}", len(nbformat.read(notebook, 4).cells))
    saved = run_all_and_save(page, notebook)
    assert failures(saved) == []
    # every code cell shows its number, as the saved notebook says
    numbers = [c.execution_count for c in saved.cells if c.cell_type == "code"]
    assert numbers == list(range(1, len(numbers) + 1))
    expect(page.locator(f"{PANEL} .jp-CodeCell .jp-InputPrompt")).to_have_text(
        [f"[{n}]:" for n in numbers]
    )

    # the explorer: a slider over the chunks, a line of text from the kernel, and a plot
    explorer = page.locator(".jp-OutputArea-output .widget-vbox").filter(
        has=page.locator(".widget-slider")
    )
    expect(explorer).to_have_count(1)
    handle = explorer.locator(".noUi-handle")
    readout = explorer.locator(".widget-readout")
    text = explorer.locator(".widget-html-content")
    plot = explorer.locator(".widget-output img")
    handle.scroll_into_view_if_needed()
    expect(readout).to_have_text("0")
    expect(text).to_contain_text("chunk 0: columns 0..")
    first_plot = plot.get_attribute("src")
    last = int(float(handle.get_attribute("aria-valuemax")))
    assert last >= 2, "the explorer needs at least three chunks to step through"
    page.screenshot(path=SHOTS / f"{NOTEBOOK}-explorer-before.png")

    # drag the handle past the end of its track, as a mouse does
    track = explorer.locator(".noUi-base").bounding_box()
    start = handle.bounding_box()
    y = start["y"] + start["height"] / 2
    page.mouse.move(start["x"] + start["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(track["x"] + track["width"] + 40, y, steps=8)
    page.mouse.up()
    expect(readout).to_have_text(str(last))
    expect(text).to_contain_text(f"chunk {last}: columns ")  # written by the kernel's callback
    expect(plot).not_to_have_attribute("src", first_plot)  # and the plot redrawn
    page.screenshot(path=SHOTS / f"{NOTEBOOK}-explorer-after.png")

    # one step back with the keyboard
    handle.press("ArrowLeft")
    expect(readout).to_have_text(str(last - 1))
    expect(text).to_contain_text(f"chunk {last - 1}: columns ")
    console.check()


def test_the_formgrader_lists_the_course_assignments(page, console, instructor_lab):
    page.goto(instructor_lab.url("/lab"))
    page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
    page.locator(".lm-Menu-item[data-command='nbgrader:open-formgrader']").click()
    formgrader = page.frame_locator("iframe[src$='/formgrader']")
    expect(formgrader.locator("h1", has_text="Manage Assignments")).to_be_visible()
    # the assignments `make release` built, one row each, in course order
    expect(formgrader.locator("#main-table td.name a")).to_have_text(
        [a.name for a in build.assignments()], timeout=WAIT_MS
    )
    page.screenshot(path=SHOTS / "formgrader.png")
    console.check()


def test_the_checks_catch_a_failing_cell_and_a_page_error(page, console, student_lab, tree):
    notebook = tree / "course" / "failing.ipynb"
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(s) for s in ("x = 1", "1 / 0", "x = 2")],
        metadata={"kernelspec": build.KERNELSPEC},
    )
    nbformat.write(nb, notebook)
    open_notebook(page, student_lab, notebook.name, 3)
    saved = run_all_and_save(page, notebook)
    assert failures(saved) == ["cell 1: ZeroDivisionError: division by zero", "cell 2 did not run"]
    expect(page.locator(".jp-OutputArea-output")).to_contain_text(["ZeroDivisionError"])

    assert console.errors == []
    with page.expect_event("pageerror"):
        page.evaluate("setTimeout(() => { throw new Error('planted page error') })")
    page.evaluate("console.error('planted console error')")
    with pytest.raises(AssertionError, match="planted page error(.|\n)*planted console error"):
        console.check()
    console.errors.clear()  # planted on purpose


def test_the_formgrader_refuses_a_course_directory_outside_the_served_folder(page, student_lab):
    # `make lab` serves course/ alone, so build/ lies outside it: hence `grader lab --instructor`.
    # The page's own console is not checked: its error is the point here.
    page.goto(student_lab.url("/formgrader"))
    expect(page.locator("body")).to_contain_text("the formgrader encountered an error")
    expect(page.locator("#main-table td.name")).to_have_count(0)


@pytest.fixture(scope="module")
def kit_lab(tmp_path_factory):
    """The student kit of 00_setup, unzipped into a fresh folder outside the repository, its
    exercise solved and a last cell that prints where the runtime came from; served by the kit's
    own lab.sh. The kit's .venv is this test run's environment (tests/test_kit.py sets up a real
    one from the kit's requirements; here the browser is the point), with none of the course's
    settings: lab.sh alone decides that course/ is served and grader/ is the kit's."""
    out = tmp_path_factory.mktemp("kit")
    built = kit.build_kit(["00_setup"], out=out / "build")
    with zipfile.ZipFile(built.zip) as z:
        z.extractall(out / "student")
    folder = out / "student" / kit.KIT_NAME
    (folder / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    source = next(a for a in build.assignments() if a.name == "00_setup")
    build.write_notebook(build.to_notebook(source.source), out / "source.ipynb")
    notebook = folder / "course" / "00_setup" / source.notebook_name
    nb = solved(notebook, out / "source.ipynb")
    nb.cells.append(nbformat.v4.new_code_cell("import grader\nprint(grader.__file__)"))
    nbformat.write(nb, notebook)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "JUPYTER"))}
    with lab_server.running(
        out / "server",
        settings=NO_NEWS,
        command=["bash", str(folder / "lab.sh")],
        base_env=env,
    ) as lab:
        yield lab, folder


def test_the_student_kit_opens_and_runs_in_jupyterlab(page, console, kit_lab):
    lab, folder = kit_lab
    notebook = folder / "course" / "00_setup" / "setup.ipynb"
    open_notebook(page, lab, "00_setup/setup.ipynb", len(nbformat.read(notebook, 4).cells))
    saved = run_all_and_save(page, notebook)
    assert failures(saved) == []
    printed = "".join(o.get("text", "") for o in saved.cells[-1].outputs).strip()
    assert printed == str(folder / "grader" / "__init__.py"), "the runtime must be the kit's"
    expect(page.locator(f"{PANEL} .jp-OutputArea-output").last).to_contain_text(str(folder))
    page.screenshot(path=SHOTS / "student-kit.png")
    console.check()
