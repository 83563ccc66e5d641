"""nbgrader's exchange end to end, as an instructor and a student use it, with the student in
headless Chromium: the instructor releases an assignment (tests/light.py's, whose notebook
imports nothing: the exchange is what is tested) with `nbgrader release_assignment`; the
student fetches it in JupyterLab's Assignments tab (nbgrader's lab extension), answers its exercise,
saves and submits it there; the instructor runs `python -m grader autograde --exchange`, and the
student's score reaches the gradebook and grades.csv.

Both people are on one machine, each with a HOME, Jupyter folders and an nbgrader_config.py of
their own naming the course (`CourseDirectory.course_id`) and the exchange (`Exchange.root`), a
folder the test makes as an administrator would. They run as the same system user, so the student
is known to nbgrader by that user's login name, as on a machine where each student logs in.
Screenshots go to build/browser/.

Then a class of two real accounts of the machine (made with useradd, removed afterwards): an
honest student, and one who writes into the exchange's inbound/ by hand, as any student can, with
links into the instructor's course folder and to /etc/shadow, an entry that is itself a link, an
entry in the honest student's name, and a late entry whose name and timestamp.txt say it was on
time. Each is refused or corrected, with a row in the class report.

And, as the grader's own user writing entries in its own name, the entries a hostile student may
write that no collect should copy: one rewritten while it is copied (a placeholder written in
time, the answer written during the import), and floods of empty or sparse files.
"""

from __future__ import annotations

import csv
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest

from grader.authoring import build
from grader.grading import autograde, classreport, exchange, gradebook, intake
from tests import lab_server, light, shared
from tests.test_autograde import answered, solution_cells
from tests.test_autograde_inputs import FLOODS, allocated, copies, flood  # noqa: F401 (a fixture)

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

ASSIGNMENT, NOTEBOOK = light.ASSIGNMENT, light.NOTEBOOK
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
def generated(tmp_path_factory, registered_light) -> Path:
    """A course directory with the assignment generated and registered."""
    return shared.copy_course(registered_light, tmp_path_factory.mktemp("generated") / "course")


def make_exchange(folder: Path) -> Path:
    """The exchange's folder, as an administrator makes it once (docs/instructors.md): everyone
    may create in it, no one may rename or remove what another made."""
    folder.mkdir(parents=True)
    folder.chmod(0o1777)
    return folder


@pytest.fixture(scope="module")
def course(tmp_path_factory, generated):
    """The instructor's course directory, an empty exchange folder, and two users configured
    for both."""
    tmp = tmp_path_factory.mktemp("exchange")
    instructor, student = User(tmp / "instructor"), User(tmp / "student")
    root = shutil.copytree(generated, instructor.home / "course")
    exchange = make_exchange(tmp / "srv" / "nbgrader" / "exchange")
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


def ctime(path: Path) -> int:
    return path.lstat().st_ctime_ns


def test_release_fetch_submit_collect_and_autograde(course, student_lab, page, console):  # noqa: F811
    # the instructor releases the assignment into the exchange
    instructor, root = course.instructor, course.root
    at = f"--CourseDirectory.root={root}"  # the course directory is a copy, not build/
    printed = run(instructor, root, "nbgrader", "release_assignment", ASSIGNMENT, at)
    assert "Permissions for exchange directory" not in printed  # nothing to repair
    assert f"Released as: {COURSE_ID} {ASSIGNMENT}" in printed
    folder = course.exchange / COURSE_ID
    assert mode(course.exchange) == 0o1777  # left as the administrator made it
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
    assert answers, f"{ASSIGNMENT} has no exercise to answer"
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

    # the instructor grades the batch straight from the exchange, in place of `nbgrader collect`
    at_root = f"--root={root}"
    printed = run(instructor, root, "grader", "autograde", ASSIGNMENT, at_root, "--exchange",
                  "--mode=interpreter")  # fmt: skip
    assert f"1 submissions of {ASSIGNMENT} imported from {folder / 'inbound'}" in printed
    collected = root / "submitted" / student / ASSIGNMENT
    assert (collected / f"{NOTEBOOK}.ipynb").read_bytes() == notebook.read_bytes()
    stamp = (collected / "timestamp.txt").read_text()  # from the file system, nbgrader's format
    assert stamp == exchange.handed_in(max(ctime(p) for p in [inbound, *inbound.rglob("*")]))
    listed = json.loads((root / "grading" / ASSIGNMENT / exchange.LISTING).read_text())
    assert [(e["entry"], e["outcome"]) for e in listed] == [(inbound.name, "imported")]
    assert json.loads((root / "grading" / ASSIGNMENT / "refused.json").read_text()) == []

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


# -- a hostile student writes into inbound/ by hand -------------------------------------------

# What `nbgrader submit` leaves in inbound/, made by the student's own account as submit would
# (this machine's Python lies where only root may enter, so the accounts cannot run nbgrader):
# the folder, the notebook, timestamp.txt and submission_secret.txt, with submit's modes.
SUBMIT = """
entry="$INBOUND/$NAME"
mkdir "$entry"
cp "$NOTEBOOK" "$entry/$FILE"
printf '%s' "$STAMP" > "$entry/timestamp.txt"
head -c 64 /dev/urandom | od -An -tx1 | tr -d ' \\n' > "$entry/submission_secret.txt"
chmod 644 "$entry"/*
chmod 777 "$entry"
"""
# Entries that `nbgrader collect` would copy through the links (its working directory is the
# course directory, so /proc/self/cwd is the instructor's course folder), and one that is a link.
LINKS = """
entry="$INBOUND/$NAME"
mkdir "$entry"
ln -s "/proc/self/cwd/source/$ASSIGNMENT/$FILE" "$entry/$FILE"
ln -s /etc/shadow "$entry/shadow"
ln -s "$COURSE" "$entry/course"
ln -s "$COURSE/source/$ASSIGNMENT" "$INBOUND/$LINKED"
"""


def nbgrader_time(when: datetime) -> str:
    return when.strftime(exchange.TIMESTAMP_FORMAT)


def entry_name(student: str, when: str) -> str:
    return f"{student}+{ASSIGNMENT}+{when}+{secrets.token_urlsafe(9)}"


def as_student(account: pwd.struct_passwd, script: str, **variables: str) -> None:
    """Run the shell `script` as `account`, with nothing of root's (no supplementary groups)."""
    done = subprocess.run(
        ["sh", "-euc", script],
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[],
        env={"PATH": "/usr/bin:/bin", **variables},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"as {account.pw_name}: {done.stderr}"


@pytest.fixture
def accounts():
    """Two accounts of this machine, as a JupyterHub gives each student: an honest student and
    a hostile one. Removed afterwards."""
    suffix = secrets.token_hex(3)
    names = {"honest": f"ada{suffix}", "hostile": f"eve{suffix}"}
    made = []
    try:
        for name in names.values():
            subprocess.run(
                ["useradd", "--no-create-home", "--home-dir", "/nonexistent",
                 "--shell", "/usr/sbin/nologin", "--user-group", name],
                check=True, capture_output=True,
            )  # fmt: skip
            made.append(name)
        yield {role: pwd.getpwnam(name) for role, name in names.items()}
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def shared_folder():
    """A folder every account can reach (pytest's own are root's alone), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="course-exchange-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="makes accounts of the machine: needs root and useradd (CI runs as root on Debian)",
)
def test_entries_written_into_inbound_by_hand_are_refused_or_corrected(
    generated, tmp_path, accounts, shared_folder
):
    instructor = User(tmp_path / "instructor")
    root = shutil.copytree(generated, instructor.home / "course")
    exchange_root = make_exchange(shared_folder / "exchange")
    instructor.configure(exchange_root)
    at = f"--CourseDirectory.root={root}"
    run(instructor, root, "nbgrader", "release_assignment", ASSIGNMENT, at)
    inbound = exchange_root / COURSE_ID / "inbound"
    release = nbformat.read(root / "release" / ASSIGNMENT / f"{NOTEBOOK}.ipynb", 4)
    source = nbformat.read(root / "source" / ASSIGNMENT / f"{NOTEBOOK}.ipynb", 4)
    notebooks = shared_folder / "notebooks"  # what the students wrote, readable by them
    notebooks.mkdir()
    nbformat.write(answered(release, source), notebooks / "right.ipynb")
    nbformat.write(release, notebooks / "blank.ipynb")
    for path in [notebooks, *notebooks.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    ada, eve = accounts["honest"], accounts["hostile"]
    common = {"INBOUND": str(inbound), "COURSE": str(root), "ASSIGNMENT": ASSIGNMENT}
    common |= {"FILE": f"{NOTEBOOK}.ipynb"}

    # ada submits in time
    stamp = nbgrader_time(datetime.now(UTC))
    mine = entry_name(ada.pw_name, stamp)
    right = str(notebooks / "right.ipynb")
    as_student(ada, SUBMIT, **common, NAME=mine, STAMP=stamp, NOTEBOOK=right)
    # the due date passes
    due = datetime.fromtimestamp(int(time.time()) + 2, UTC)
    time.sleep(max(0.0, due.timestamp() - time.time()) + 0.5)
    # eve writes into inbound/ by hand, after it
    early = "2020-01-01 00:00:00.000000 UTC"
    later = nbgrader_time(datetime.now(UTC))
    links, linked = entry_name(eve.pw_name, later), entry_name(eve.pw_name, later)
    as_student(eve, LINKS, **common, NAME=links, LINKED=linked)
    in_her_name = entry_name(ada.pw_name, later)
    blank = str(notebooks / "blank.ipynb")
    as_student(eve, SUBMIT, **common, NAME=in_her_name, STAMP=later, NOTEBOOK=blank)
    late = entry_name(eve.pw_name, early)
    as_student(eve, SUBMIT, **common, NAME=late, STAMP=early, NOTEBOOK=right)

    due_date = due.strftime("%Y-%m-%d %H:%M:%S UTC")
    printed = run(instructor, root, "grader", "autograde", ASSIGNMENT, f"--root={root}",
                  "--exchange", "--mode=interpreter", f"--duedate={due_date}")  # fmt: skip
    assert f"2 submissions of {ASSIGNMENT} imported from {inbound}" in printed

    # each student graded on her own entry, and only on what she wrote herself
    submitted = root / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == sorted([ada.pw_name, eve.pw_name])
    for account in (ada, eve):
        folder = submitted / account.pw_name / ASSIGNMENT
        files = sorted(p.name for p in folder.rglob("*"))
        assert files == [f"{NOTEBOOK}.ipynb", "submission_secret.txt", "timestamp.txt"], files
        assert (folder / f"{NOTEBOOK}.ipynb").read_bytes() == Path(right).read_bytes()
    url = gradebook.sqlite_url(root / "gradebook.db")
    points = gradebook.max_scores(url, ASSIGNMENT)
    full = {g: (0.0 if g.startswith("speed-") else p) for g, p in points.items()}  # on the CPU
    recorded = gradebook.grades(url, ASSIGNMENT)
    assert set(recorded) == {ada.pw_name, eve.pw_name}
    assert recorded[ada.pw_name].scores == full and recorded[ada.pw_name].seconds_late == 0
    # eve's late entry is late: its time comes from the file system, not from what she wrote
    assert recorded[eve.pw_name].seconds_late > 0
    stamp_taken = (submitted / eve.pw_name / ASSIGNMENT / "timestamp.txt").read_text()
    assert stamp_taken != early and stamp_taken > nbgrader_time(due)

    # every entry is listed with what became of it; each refusal is a row of the report
    out = root / "grading" / ASSIGNMENT
    listed = {e["entry"]: e for e in json.loads((out / exchange.LISTING).read_text())}
    outcomes = {name: listed[name]["outcome"] for name in listed}
    assert outcomes == {
        mine: "imported", late: "imported",
        links: "refused", linked: "refused", in_her_name: "refused",
    }  # fmt: skip
    refused = json.loads((out / "refused.json").read_text())
    rows = {
        (r["student"], name): r["reason"]
        for r in refused
        for name in listed
        if r["reason"].startswith(f"inbound/{name}: ")
    }
    assert len(rows) == len(refused) == 4, refused
    assert rows[eve.pw_name, linked].endswith(
        f": the entry is a symbolic link (to {root}/source/{ASSIGNMENT}), not followed"
    )
    assert "is a symbolic link (to " in rows[eve.pw_name, links]
    theirs = f"the entry belongs to {eve.pw_name}, not to {ada.pw_name}"
    assert rows[ada.pw_name, in_her_name].endswith(theirs)
    assert rows[eve.pw_name, in_her_name].endswith(theirs)  # she wrote it
    with open(out / "grades.csv", newline="") as f:
        review = {row["student_id"]: row["needs_review"] for row in csv.DictReader(f)}
    assert f"not imported: inbound/{in_her_name}: " in review[ada.pw_name]
    assert review[eve.pw_name].count("not imported: ") == 3
    assert "late: " in review[eve.pw_name] and "late: " not in review[ada.pw_name]
    report = (out / "report.md").read_text()
    for reason in rows.values():
        assert classreport.markdown_text(f"not imported: {reason}") in report

    # nothing of /etc/shadow or of the course folder reached what grading wrote
    shadow = Path("/etc/shadow").read_text().splitlines()[0].encode()
    for folder in ("submitted", "autograded", "feedback", "grading"):
        for path in (root / folder).rglob("*"):
            assert not path.is_symlink(), path
            if path.is_file():
                data = path.read_bytes()
                assert shadow not in data, path
                assert b"### BEGIN SOLUTION" not in data, path  # the source notebook's


# -- as the grader's own user: what an entry does while it is imported --------------------------


def own_exchange(tmp_path) -> tuple[exchange.Inbound, Path, str]:
    """An exchange with the course's inbound/ and an empty course directory, and the name of
    the user running the tests, who writes the entries as a student writes hers."""
    inbound = exchange.Inbound(tmp_path / "exchange", COURSE_ID)
    inbound.folder.mkdir(parents=True)
    (tmp_path / "course").mkdir()
    return inbound, tmp_path / "course", pwd.getpwuid(os.geteuid()).pw_name


def imported(inbound, course) -> tuple[list[str], dict[str, dict], list[intake.Refused]]:
    """Import from `inbound` into `course`: the students imported, exchange.json by entry, and
    the rows the class report lists as not imported."""
    out = course / "grading" / ASSIGNMENT
    found = exchange.import_exchange(inbound, ASSIGNMENT, course, out)
    listed = {e["entry"]: e for e in json.loads((out / exchange.LISTING).read_text())}
    batch = autograde.Batch(ASSIGNMENT, "interpreter", root=course)
    return found, listed, autograde.refused(batch)


@pytest.mark.parametrize("rewritten", ["first.txt", "later/answer.ipynb"])
def test_an_entry_rewritten_while_it_is_copied_is_not_taken_as_on_time(
    tmp_path, monkeypatch, rewritten
):
    """A placeholder handed in before the due date, rewritten while the import copies the entry
    (between the copy of first.txt and that of later/answer.ipynb): a file already copied is
    refused, with a row saying why, since the copy is older than the entry; one not yet copied
    is taken as rewritten, at the time of the rewrite."""
    inbound, course, me = own_exchange(tmp_path)
    entry = inbound.folder / f"{me}+{ASSIGNMENT}+2020-01-01 00:00:00.000000 UTC"
    (entry / "later").mkdir(parents=True)
    (entry / "first.txt").write_text("placeholder")
    (entry / "later" / "answer.ipynb").write_text("placeholder")
    copy = intake.copy_capped

    def rewriting(read, target, limit):
        copied = copy(read, target, limit)
        if target.name == "first.txt":
            (entry / rewritten).write_text("the answer, written after the due date")
        return copied

    monkeypatch.setattr(intake, "copy_capped", rewriting)
    found, listed, rows = imported(inbound, course)
    submitted = course / "submitted" / me / ASSIGNMENT
    if rewritten == "first.txt":
        assert found == [] and not submitted.exists()
        assert listed[entry.name]["outcome"] == "refused"
        assert rows == [intake.Refused(me, f"inbound/{entry.name}: {intake.CHANGED}")]
    else:
        assert found == [me] and rows == []
        assert (submitted / rewritten).read_text() == (entry / rewritten).read_text()
        late = exchange.handed_in((entry / rewritten).stat().st_ctime_ns)
        assert (submitted / "timestamp.txt").read_text() == late == listed[entry.name]["handed_in"]


@pytest.mark.parametrize("kind", FLOODS)
def test_a_flood_in_an_entry_is_refused_before_it_is_copied(tmp_path, copies, kind):  # noqa: F811
    """An entry of more files, or more bytes in sparse files, than one submission may hold (a
    few KiB of the student's disk) is refused with the limit it passed, before anything of it is
    copied; the student's earlier entry within the limits is imported."""
    files, words = FLOODS[kind]
    inbound, course, me = own_exchange(tmp_path)
    earlier = inbound.folder / f"{me}+{ASSIGNMENT}+1"
    flood(earlier, {f"{NOTEBOOK}.ipynb": 100})
    later = inbound.folder / f"{me}+{ASSIGNMENT}+2"
    flood(later, files)
    found, listed, rows = imported(inbound, course)
    assert found == [me]
    assert listed[earlier.name]["outcome"] == "imported"
    assert listed[later.name]["outcome"] == "refused"
    (row,) = rows
    assert row.student == me and row.reason.startswith(f"inbound/{later.name}: {words}")
    assert [t.name for t in copies] == [f"{NOTEBOOK}.ipynb"]  # the earlier entry's alone
    assert allocated(course) < 1 << 20
