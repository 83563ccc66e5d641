"""nbgrader's exchange end to end, as an instructor and a student use it, with the student in
headless Chromium: the instructor releases 00_setup with `nbgrader release_assignment`; the
student fetches it in JupyterLab's Assignments tab (nbgrader's lab extension), answers its exercise,
saves and submits it there; the instructor runs `nbgrader collect` and `python -m grader autograde`,
and the student's score reaches the gradebook and grades.csv.

Both people are on one machine, each with a HOME, Jupyter folders and an nbgrader_config.py of
their own naming the course (`CourseDirectory.course_id`) and the exchange (`Exchange.root`), a
folder the test makes as an administrator would. They run as the same system user, so the student
is known to nbgrader by that user's login name, as on a machine where each student logs in.
Screenshots go to build/browser/.
"""

from __future__ import annotations

import csv
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from grader.authoring import build
from grader.grading import autograde, gradebook
from tests import lab_server
from tests.test_autograde import answered, solution_cells

# importing the browser tests' helpers skips this module wherever they are skipped
from tests.test_browser import (  # noqa: F401 (chromium, console and page are fixtures)
    KERNEL_READY,
    NO_NEWS,
    PANEL,
    SHOTS,
    WAIT_MS,
    chromium,
    console,
    expect,
    open_lab,
    page,
)

pytestmark = [pytest.mark.slow, pytest.mark.tooling]

ASSIGNMENT, NOTEBOOK = "00_setup", "setup"
COURSE_ID = "triton101"
RELEASED = "#released_assignments_list > .list_item"  # the Assignments tab's three lists
FETCHED = "#fetched_assignments_list > .list_item"
SUBMITTED = "#submitted_assignments_list > .list_item"
ROW = ":scope > .col-md-12"  # an assignment's own row; its notebooks or submissions follow it


@dataclass(frozen=True)
class User:
    """A person's own folders: HOME, and Jupyter's config, data and runtime folders in it."""

    home: Path

    @property
    def jupyter_data(self) -> Path:
        return self.home / ".local" / "share" / "jupyter"

    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "JUPYTER_CONFIG_DIR": str(self.home / ".jupyter"),
            "JUPYTER_DATA_DIR": str(self.jupyter_data),
            "JUPYTER_RUNTIME_DIR": str(self.jupyter_data / "runtime"),
        }

    def configure(self, exchange: Path) -> None:
        """The nbgrader_config.py that names the course and the exchange."""
        config = self.home / ".jupyter" / "nbgrader_config.py"
        config.parent.mkdir(parents=True)
        config.write_text(
            "c = get_config()  # noqa: F821\n"
            f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
            f"c.Exchange.root = {str(exchange)!r}\n"
        )


@dataclass(frozen=True)
class Course:
    instructor: User
    student: User
    root: Path  # the instructor's course directory, as `make release` makes build/
    exchange: Path


def run(user: User, root: Path, *command: str) -> str:
    """Run `python -m <command>` as `user` in the course directory `root` with the course's
    config, as docs/instructors.md says; returns what it printed, or fails with it."""
    done = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=root,
        env={**build.nbgrader_env(), **user.env()},
        capture_output=True,
        text=True,
        timeout=300,
    )
    printed = done.stdout + done.stderr
    assert done.returncode == 0, f"`{' '.join(command)}` failed:\n{printed[-4000:]}"
    return printed


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The instructor's course directory with 00_setup generated (as tests/test_autograde.py
    makes one), an empty exchange folder, and two users configured for both."""
    tmp = tmp_path_factory.mktemp("exchange")
    instructor, student = User(tmp / "instructor"), User(tmp / "student")
    root = instructor.home / "course"
    build.build_sources(tmp / "all")
    (root / "source").mkdir(parents=True)
    os.rename(tmp / "all" / "source" / ASSIGNMENT, root / "source" / ASSIGNMENT)
    autograde.prepare(autograde.Batch(ASSIGNMENT, "interpreter", root=root))
    # made once by an administrator; everyone must be able to write into it
    exchange = tmp / "srv" / "nbgrader" / "exchange"
    exchange.mkdir(parents=True)
    exchange.chmod(0o777)
    for user in (instructor, student):
        user.configure(exchange)
    return Course(instructor, student, root, exchange)


@pytest.fixture(scope="module")
def student_lab(course):
    """The student's JupyterLab as `make lab` starts it, serving the student's HOME (as on a
    JupyterHub)."""
    with lab_server.running(
        course.student.jupyter_data,  # its runtime/ is the student's JUPYTER_RUNTIME_DIR
        f"--notebook-dir={course.student.home}",
        cwd=course.student.home,
        settings=NO_NEWS,
        env=course.student.env(),
    ) as lab:
        yield lab


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_release_fetch_submit_collect_and_autograde(course, student_lab, page, console):  # noqa: F811
    # the instructor releases the assignment into the exchange
    instructor, root = course.instructor, course.root
    at = f"--CourseDirectory.root={root}"  # the course directory is a copy, not build/
    printed = run(instructor, root, "nbgrader", "release_assignment", ASSIGNMENT, at)
    assert "Permissions for exchange directory" not in printed  # nothing to repair
    assert f"Released as: {COURSE_ID} {ASSIGNMENT}" in printed
    folder = course.exchange / COURSE_ID
    assert mode(course.exchange) == 0o777
    assert mode(folder) == mode(folder / "outbound") == 0o755
    # students may write into inbound and enter it, but not list it; new files keep its group
    assert mode(folder / "inbound") == 0o2733

    # the student fetches it in the Assignments tab
    open_lab(page, student_lab)
    page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
    page.locator(".lm-Menu-item[data-command='nbgrader:open-assignment-list']").click()
    expect(page.locator(".lm-TabBar-tab.jp-mod-current")).to_have_text("Assignments")
    expect(page.locator("#course_list_default")).to_have_text(COURSE_ID)
    released = page.locator(RELEASED)
    expect(released).to_have_count(1)
    expect(released.locator(".item_name")).to_have_text(ASSIGNMENT)
    page.screenshot(path=SHOTS / "exchange-released.png")
    released.get_by_role("button", name="Fetch").click()
    fetched = page.locator(FETCHED)
    expect(fetched.locator(ROW).locator(".item_name")).to_have_text(ASSIGNMENT)
    expect(page.locator(RELEASED)).to_have_count(0)
    notebook = course.student.home / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    release = root / "release" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    assert notebook.read_bytes() == release.read_bytes()

    # works: opens the notebook from the tab, answers the exercise, saves
    fetched.locator("a.assignment-notebooks-link").click()
    fetched.locator(".nested_list_item a", has_text=NOTEBOOK).click()
    nb = nbformat.read(notebook, as_version=4)
    page.wait_for_function(
        "([panel, n]) => document.querySelectorAll(panel + ' .jp-Cell').length === n",
        arg=[PANEL, len(nb.cells)],
        timeout=WAIT_MS,
    )
    page.wait_for_function(KERNEL_READY, arg=PANEL, timeout=WAIT_MS)  # its metadata settled
    source = nbformat.read(root / "source" / ASSIGNMENT / f"{NOTEBOOK}.ipynb", 4)
    answers = {c.id: c.source for c in solution_cells(answered(nb, source))}
    assert answers, "00_setup has no exercise to answer"
    for index, cell in enumerate(nb.cells):
        if cell.id in answers:
            editor = page.locator(f"{PANEL} .jp-Cell").nth(index).locator(".cm-content")
            editor.click()
            page.keyboard.press("ControlOrMeta+a")
            page.keyboard.insert_text(answers[cell.id])
    tab = page.locator(".lm-TabBar-tab.jp-mod-current")
    expect(tab).to_have_class(re.compile("jp-mod-dirty"))
    page.locator(f"{PANEL} [data-command='docmanager:save']").click()
    expect(tab).not_to_have_class(re.compile("jp-mod-dirty"))
    saved = nbformat.read(notebook, as_version=4)
    assert {c.id: c.source for c in solution_cells(saved)} == answers

    # and submits it from the Assignments tab
    page.locator(".lm-TabBar-tab", has_text="Assignments").click()
    fetched.locator(ROW).get_by_role("button", name="Submit").click()
    submitted = page.locator(SUBMITTED)
    expect(submitted.locator(ROW).locator(".item_name")).to_have_text(ASSIGNMENT)
    expect(submitted.locator(".nested_list_item .item_name")).to_have_text([re.compile(r" UTC$")])
    page.screenshot(path=SHOTS / "exchange-submitted.png")
    console.check()

    # the submission, in the exchange and in the student's own record of it
    from nbgrader.utils import get_username  # only where nbgrader is installed

    student = get_username()  # the login name, on a machine where each student logs in
    (inbound,) = (folder / "inbound").iterdir()
    assert inbound.name.startswith(f"{student}+{ASSIGNMENT}+")
    assert (inbound / f"{NOTEBOOK}.ipynb").read_bytes() == notebook.read_bytes()
    (cached,) = (course.student.jupyter_data / "nbgrader_cache" / COURSE_ID).iterdir()
    assert (cached / f"{NOTEBOOK}.ipynb").read_bytes() == notebook.read_bytes()

    # the instructor collects it and grades the batch
    printed = run(instructor, root, "nbgrader", "collect", ASSIGNMENT, at)
    assert f"Collecting submission: {student} {ASSIGNMENT}" in printed
    assert "cheating attempt" not in printed  # the submission is owned by its student
    collected = root / "submitted" / student / ASSIGNMENT
    assert (collected / f"{NOTEBOOK}.ipynb").read_bytes() == notebook.read_bytes()
    assert (collected / "timestamp.txt").read_text().endswith("UTC")
    run(instructor, root, "grader", "autograde", ASSIGNMENT, f"--root={root}", "--mode=interpreter")

    url = gradebook.sqlite_url(root / "gradebook.db")
    points = gradebook.max_scores(url, ASSIGNMENT)
    full = {g: (0.0 if g.startswith("speed-") else p) for g, p in points.items()}  # on the CPU
    recorded = gradebook.grades(url, ASSIGNMENT)
    assert set(recorded) == {student}
    assert recorded[student].scores == full
    with open(root / "grading" / ASSIGNMENT / "grades.csv", newline="") as f:
        (row,) = csv.DictReader(f)
    assert row["student_id"] == student
    assert float(row["score"]) == sum(full.values()) > 0
    assert row["needs_review"] == ""
