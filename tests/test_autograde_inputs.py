"""What comes into a grading batch before any notebook runs, and what stops it: LMS downloads
(zips within zips, entries that climb out of the folder, a zip bomb, two files for one notebook,
names that match no pattern), folders whose names are not student ids (not UTF-8, or a pattern
that `nbgrader autograde --student` would match to others), symbolic links, floods of empty or
sparse files past one submission's limits, and an interrupted batch (Ctrl-C). Each is recorded
with its reason and nothing else is lost: the honest students are imported and graded as ever;
the interrupted students are graded by the next run."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import nbformat
import pytest

from grader import cli
from grader.authoring import build
from grader.grading import autograde, classreport, findings, gradebook, intake
from tests import hostile, light, shared

pytestmark = [pytest.mark.slow, pytest.mark.tooling]

ASSIGNMENT, NOTEBOOK = light.ASSIGNMENT, light.NOTEBOOK  # a notebook that imports nothing
LIMITS = ["--cell-timeout", "60", "--speed-cell-timeout", "60", "--timeout", "300"]
LIMITS += ["--memory-limit", "3", "--mode", "interpreter"]


@pytest.fixture(scope="module")
def course(tmp_path_factory, registered_light):
    """A course directory with the light assignment registered, and its materials."""
    root = shared.copy_course(registered_light, tmp_path_factory.mktemp("course") / "course")
    path = root / "release" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    release = nbformat.read(path, as_version=4)
    source = nbformat.read(root / "source" / ASSIGNMENT / path.name, as_version=4)
    materials = hostile.Materials(ASSIGNMENT, NOTEBOOK, release, source)
    return root, materials


def fresh(course, tmp_path) -> autograde.Batch:
    """A copy of the registered course directory, nothing submitted yet."""
    root = tmp_path / "course"
    for part in ("source", "release", "gradebook.db"):
        copy = shutil.copytree if (course[0] / part).is_dir() else shutil.copy
        copy(course[0] / part, root / part if part != "gradebook.db" else root)
    return autograde.Batch(ASSIGNMENT, "interpreter", root=root)


def answered(course) -> bytes:
    return nbformat.writes(course[1].answered()).encode()


def reasons(batch) -> dict[str, str]:
    return {r.student: r.reason for r in autograde.refused(batch)}


def zipped(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(zipfile.ZipInfo(name), data, zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


HONEST = f"adams_1001_77_{NOTEBOOK}.ipynb"


def _lms_cases(notebook: bytes, tmp_path):
    """{case: (LMS download, students imported, {refused: words of the reason})}; each download
    holds the honest adams and one bad thing."""
    other = notebook.replace(b"double", b"double ", 1)
    secret = tmp_path / "instructor" / f"{NOTEBOOK}.ipynb"
    secret.parent.mkdir(parents=True)
    secret.write_bytes(b"the instructor's solutions")

    def download(name: str, entries: dict[str, bytes], links: dict[str, object] = ()) -> object:
        if not links:
            path = tmp_path / f"{name}.zip"
            path.write_bytes(zipped({HONEST: notebook, **entries}))
            return path
        folder = tmp_path / name
        folder.mkdir()
        (folder / HONEST).write_bytes(notebook)
        for link, target in links.items():
            (folder / link).symlink_to(target)
        return folder

    inner = zipped({f"{NOTEBOOK}.ipynb": notebook})
    climbing = zipped({f"../../../../{NOTEBOOK}.ipynb": notebook})
    return {
        "nested-zip": (
            download("nested", {f"carol_1003_79_{NOTEBOOK}.zip": inner}),
            ["adams"],
            {"carol": "an archive inside the download"},
        ),
        "nested-zip-climbing-out": (
            download("climbing", {f"dave_1004_80_{NOTEBOOK}.zip": climbing}),
            ["adams"],
            {"dave": "an archive inside the download"},
        ),
        "entry-climbing-out": (
            download("traversal", {f"../../erin_1005_81_{NOTEBOOK}.ipynb": notebook}),
            ["adams"],
            {f"../../erin_1005_81_{NOTEBOOK}.ipynb": "a path outside the download"},
        ),
        "duplicate": (
            download(
                "duplicate",
                {
                    f"baker_1002_78_{NOTEBOOK}.ipynb": notebook,
                    f"baker_1002_79_{NOTEBOOK}.ipynb": other,
                },
            ),
            ["adams", "baker"],
            {"baker": f"baker_1002_78_{NOTEBOOK}.ipynb: a second {NOTEBOOK}.ipynb"},
        ),
        "no-pattern": (
            download("nopattern", {"readme.txt": b"hello", f"{NOTEBOOK}.ipynb": notebook}),
            ["adams"],
            {"readme.txt": "does not match", f"{NOTEBOOK}.ipynb": "does not match"},
        ),
        "zip-bomb": (
            download("bomb", {f"frank_1006_82_{NOTEBOOK}.ipynb": bytes(80 << 20)}),
            ["adams"],
            {"frank": f"frank_1006_82_{NOTEBOOK}.ipynb: over the 64 MiB limit"},
        ),
        "glob-ids": (
            download(
                "globs",
                {f"*_1007_83_{NOTEBOOK}.ipynb": notebook, f"a[d]_1008_84_{NOTEBOOK}.ipynb": other},
            ),
            ["adams"],
            {"*": "reads as a pattern", "a[d]": "reads as a pattern"},
        ),
        "symlink": (
            download("links", {}, {f"mallory_1009_85_{NOTEBOOK}.ipynb": secret}),
            ["adams"],
            {f"mallory_1009_85_{NOTEBOOK}.ipynb": "a symbolic link"},
        ),
    }


CASES = [
    "nested-zip", "nested-zip-climbing-out", "entry-climbing-out", "duplicate", "no-pattern",
    "zip-bomb", "glob-ids", "symlink",
]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_lms_download_keeps_the_class_and_says_what_it_left_out(course, tmp_path, case):
    notebook = answered(course)
    source, imported, left_out = _lms_cases(notebook, tmp_path / "lms")[case]
    batch = fresh(course, tmp_path)
    assert autograde.import_submissions(batch, source) == imported
    said = reasons(batch)
    for student, words in left_out.items():
        assert words in said.get(student, ""), (student, said)
    submitted = batch.folder("submitted", "adams") / f"{NOTEBOOK}.ipynb"
    assert submitted.read_bytes() == notebook
    assert autograde.students(batch) == imported
    if case == "duplicate":  # the later submission is the one graded
        assert b"double " in (batch.folder("submitted", "baker") / f"{NOTEBOOK}.ipynb").read_bytes()
    allowed = [tmp_path / "lms", batch.root / "source", batch.root / "release"]
    allowed += [batch.folder("submitted"), batch.root / "downloaded" / ASSIGNMENT / "archive"]
    allowed += [batch.root / "downloaded" / ASSIGNMENT / "extracted", batch.out]
    for path in tmp_path.rglob("*"):  # nothing was written outside, nor left half-written
        if path.is_file() and not path.is_symlink() and path.suffix != ".db":
            assert any(folder in path.parents for folder in allowed), path


# A student's files past one submission's limits (intake.Budget): {flood: ({file: size}, the
# words of the reason)}. Sparse files and empty ones take next to nothing of the student's disk.
FLOODS = {
    "empty-files": (
        {f"empty{i:04}.txt": 0 for i in range(intake.MAX_SUBMISSION_FILES + 1)},
        f"more than {intake.MAX_SUBMISSION_FILES} files and folders",
    ),
    "sparse-files": (
        {
            f"sparse{i}.ipynb": intake.MAX_FILE_BYTES
            for i in range(intake.MAX_SUBMISSION_BYTES // intake.MAX_FILE_BYTES + 1)
        },
        f"over {intake.MAX_SUBMISSION_BYTES >> 20} MiB in all",
    ),
}


def flood(folder, files: dict[str, int]) -> None:
    """`files` in `folder`, each of its size and sparse: nothing written but their lengths."""
    folder.mkdir(parents=True)
    for name, size in files.items():
        with open(folder / name, "wb") as f:
            f.truncate(size)


def allocated(folder) -> int:
    """The bytes of disk that the files under `folder` take."""
    return sum(p.lstat().st_blocks * 512 for p in folder.rglob("*"))


@pytest.fixture
def copies(monkeypatch) -> list:
    """Every file that intake.copy_capped copies, by target, as it is copied."""
    targets = []
    original = intake.copy_capped

    def copy(read, target, limit):
        targets.append(target)
        return original(read, target, limit)

    monkeypatch.setattr(intake, "copy_capped", copy)
    return targets


@pytest.mark.parametrize("kind", FLOODS)
def test_a_flood_in_a_submissions_folder_is_refused_before_it_is_copied(
    course, tmp_path, copies, kind
):
    files, words = FLOODS[kind]
    batch = fresh(course, tmp_path)
    inbox = tmp_path / "inbox"
    _write(inbox / "adams" / ASSIGNMENT, {f"{NOTEBOOK}.ipynb": answered(course)})
    flood(inbox / "flooder" / ASSIGNMENT, files)
    assert autograde.import_submissions(batch, inbox) == ["adams"]
    assert reasons(batch)["flooder"].startswith(f"flooder/{ASSIGNMENT}/: {words}")
    assert not batch.folder("submitted", "flooder").exists()
    assert not [t for t in copies if "flooder" in t.parts]  # refused before any copy
    assert allocated(batch.folder("submitted")) < 1 << 20
    assert autograde.students(batch) == ["adams"]


@pytest.mark.parametrize("kind", FLOODS)
def test_a_flood_in_an_lms_download_is_refused_before_it_is_extracted(
    course, tmp_path, copies, kind
):
    """The LMS's zip holds each file whole (a sparse file's zeros deflate to next to nothing):
    a student's files past the limits are refused before any is extracted."""
    files, words = FLOODS[kind]
    download = tmp_path / "download.zip"
    entries = {HONEST: answered(course)}
    entries |= {f"frank_1006_82_{name}": bytes(size) for name, size in files.items()}
    download.write_bytes(zipped(entries))
    batch = fresh(course, tmp_path)
    assert autograde.import_submissions(batch, download) == ["adams"]
    assert reasons(batch)["frank"].startswith(f"its {len(files)} files in the download: {words}")
    assert [t.name for t in copies] == [HONEST]  # nothing of frank's was extracted
    downloaded = batch.root / "downloaded" / ASSIGNMENT
    assert allocated(downloaded) + allocated(batch.folder("submitted")) < 1 << 20
    assert autograde.students(batch) == ["adams"]


def test_a_file_that_grew_since_it_was_counted_is_not_copied(course, tmp_path, monkeypatch):
    """Each file is copied up to the size it was counted with: one written to between the count
    and the copy (here a sparse file that grows as the copy opens it) is left out, saying so,
    and what was counted stays within the limits."""
    batch = fresh(course, tmp_path)
    inbox = tmp_path / "inbox"
    _write(inbox / "adams" / ASSIGNMENT, {f"{NOTEBOOK}.ipynb": answered(course), "data": b"1"})
    copy = intake.copy_capped

    def growing(read, target, limit):
        if target.name == "data":
            with open(inbox / "adams" / ASSIGNMENT / "data", "ab") as f:
                f.truncate(intake.MAX_SUBMISSION_BYTES)
        return copy(read, target, limit)

    monkeypatch.setattr(intake, "copy_capped", growing)
    assert autograde.import_submissions(batch, inbox) == ["adams"]
    assert reasons(batch)["adams"] == f"adams/{ASSIGNMENT}/data: {intake.CHANGED}"
    folder = batch.folder("submitted", "adams")
    assert sorted(p.name for p in folder.iterdir()) == [f"{NOTEBOOK}.ipynb"]


def test_a_file_past_the_size_limit_is_not_read(tmp_path):
    path = tmp_path / f"{NOTEBOOK}.ipynb"
    with open(path, "wb") as f:
        f.truncate(findings.MAX_NOTEBOOK_BYTES + 1)
    nb, why = findings.read_notebook(path)
    assert nb is None and "over the 64 MiB limit" in why


def _write(folder, files: dict[str, bytes]):
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)


def _autograde(batch, inbox=None, jobs=2) -> tuple[int, str]:
    argv = ["autograde", ASSIGNMENT, "--root", str(batch.root), "--jobs", str(jobs), *LIMITS]
    argv += ["--submissions", str(inbox)] if inbox else []
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(argv)
    return code, printed.getvalue()


def _csv(batch) -> dict[str, dict[str, str]]:
    with open(batch.out / "grades.csv", newline="", encoding="utf-8") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


def test_folders_that_are_not_student_ids_or_are_links_are_listed_not_graded(course, tmp_path):
    """`a[bc]` and `*` would make nbgrader grade ab and ac (and everyone) in their runs; a name
    that is not UTF-8 broke the gradebook and the CSV; links would import what they point at (here
    the instructor's solutions). Each is a row saying why; ab and ac are graded once, in full."""
    batch = fresh(course, tmp_path)
    notebook, blank = answered(course), nbformat.writes(course[1].release).encode()
    inbox = tmp_path / "inbox"
    for student in ("ab", "ac"):
        _write(inbox / student / ASSIGNMENT, {f"{NOTEBOOK}.ipynb": notebook})
    for student in ("a[bc]", "*", os.fsdecode(b"caf\xe9")):
        _write(inbox / student / ASSIGNMENT, {f"{NOTEBOOK}.ipynb": blank})
    solutions = batch.root / "source" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    (inbox / "linked-notebook" / ASSIGNMENT).mkdir(parents=True)
    (inbox / "linked-notebook" / ASSIGNMENT / f"{NOTEBOOK}.ipynb").symlink_to(solutions)
    (inbox / "linked-folder").mkdir()
    (inbox / "linked-folder" / ASSIGNMENT).symlink_to(solutions.parent)

    code, printed = _autograde(batch, inbox)
    assert code == 0, printed[-3000:]
    rows = _csv(batch)
    assert set(rows) == {"ab", "ac", "a[bc]", "*", "caf\\xe9", "linked-notebook", "linked-folder"}
    for student in ("a[bc]", "*"):
        assert "not imported: " in rows[student]["needs_review"], rows[student]
        assert "reads as a pattern matching other students" in rows[student]["needs_review"]
    assert "not printable UTF-8" in rows["caf\\xe9"]["needs_review"]
    assert "a symbolic link" in rows["linked-notebook"]["needs_review"]
    assert "missing notebook" in rows["linked-notebook"]["needs_review"]
    assert "a symbolic link, not followed" in rows["linked-folder"]["needs_review"]
    recorded = gradebook.grades(batch.url, ASSIGNMENT)
    assert set(recorded) == {"ab", "ac", "linked-notebook"}
    assert recorded["linked-notebook"].total == 0
    for student in ("ab", "ac"):
        assert recorded[student].scores == light.FULL and rows[student]["needs_review"] == ""
    logs = sorted(p.name for p in (batch.out / "logs").iterdir())
    assert logs == ["ab.log", "ac.log"], logs
    for student in ("ab", "ac"):  # each graded in its own run, by no one else's
        log = (batch.out / "logs" / f"{student}.log").read_text()
        assert log.count("Autograding ") == 1, log[-2000:]


def test_a_submitted_folder_with_a_link_or_a_large_file_is_not_read(course, tmp_path):
    """What already sits in submitted/ (an `nbgrader collect` run anyway, a copy by hand) is not
    believed: a folder whose notebook is a link to the instructor's source, that holds a file
    past the size limit, or more files than one submission may, is listed with the reason and
    not graded; the others are graded."""
    batch = fresh(course, tmp_path)
    notebook = answered(course)
    _write(batch.folder("submitted", "honest"), {f"{NOTEBOOK}.ipynb": notebook})
    linked = batch.folder("submitted", "linked")
    linked.mkdir(parents=True)
    (linked / f"{NOTEBOOK}.ipynb").symlink_to(
        batch.root / "source" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    )
    large = batch.folder("submitted", "large")
    _write(large, {f"{NOTEBOOK}.ipynb": notebook})
    with open(large / "data.bin", "wb") as f:
        f.truncate(intake.MAX_FILE_BYTES + 1)
    flood(batch.folder("submitted", "flooded"), FLOODS["empty-files"][0])

    code, printed = _autograde(batch)
    assert code == 0, printed[-3000:]
    rows = _csv(batch)
    assert set(rows) == {"honest", "linked", "large", "flooded"}
    where = f"submitted/linked/{ASSIGNMENT}/{NOTEBOOK}.ipynb: a symbolic link, not followed"
    assert rows["linked"]["needs_review"].startswith(f"not imported: {where}")
    where = f"submitted/large/{ASSIGNMENT}/data.bin: {intake.TOO_LARGE}"
    assert rows["large"]["needs_review"].startswith(f"not imported: {where}")
    where = f"submitted/flooded/{ASSIGNMENT}: {FLOODS['empty-files'][1]}"
    assert rows["flooded"]["needs_review"].startswith(f"not imported: {where}")
    assert set(gradebook.grades(batch.url, ASSIGNMENT)) == {"honest"}
    assert rows["honest"]["needs_review"] == ""
    assert sorted(p.name for p in (batch.out / "logs").iterdir()) == ["honest.log"]
    assert sorted(p.name for p in batch.folder("autograded").iterdir()) == ["honest"]


def as_from_a_terminal() -> None:
    """In the child before it runs the command: SIGINT with its default action and not blocked,
    as a shell starts a command in the foreground; a test worker's own disposition (which
    earlier tests in the same process may have changed) is not inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def test_ctrl_c_leaves_the_students_in_flight_to_the_next_run(course, tmp_path):
    """SIGINT to the process group of `python -m grader autograde`, as Ctrl-C in a terminal sends
    it, while "slow" is being graded and after "quick" was: the run stops (exit 130), "slow" is
    recorded as not graded, and the next run grades it in full and leaves "quick" alone."""
    batch = fresh(course, tmp_path)
    notebook = answered(course)
    nb = nbformat.reads(notebook.decode(), as_version=4)
    answer = course[1].cell(nb, light.ANSWER)
    answer.source = "import time\ntime.sleep(20)\n\n" + answer.source
    inbox = tmp_path / "inbox"
    _write(inbox / "quick" / ASSIGNMENT, {f"{NOTEBOOK}.ipynb": notebook})
    command = [sys.executable, "-m", "grader", "autograde", ASSIGNMENT, "--root", str(batch.root)]
    command += ["--jobs", "1", *LIMITS, "--submissions", str(inbox)]
    code, printed = _autograde(batch, inbox, jobs=1)
    assert code == 0, printed[-3000:]
    _write(inbox / "slow" / ASSIGNMENT, {f"{NOTEBOOK}.ipynb": nbformat.writes(nb).encode()})
    quick_log = (batch.out / "logs" / "quick.log").stat().st_mtime_ns

    env = {**os.environ, "PYTHONPATH": str(build.ROOT)}
    run = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           preexec_fn=as_from_a_terminal)  # fmt: skip
    started = time.monotonic()
    while "Autograding " not in _read(batch.out / "logs" / "slow.log"):
        assert run.poll() is None and time.monotonic() - started < 240, run.stdout.read()
        time.sleep(0.5)
    time.sleep(3)
    os.killpg(run.pid, signal.SIGINT)
    output = run.communicate(timeout=120)[0]
    assert run.returncode == 130, output[-3000:]
    assert "interrupted" in output
    record = json.loads((batch.out / "runs" / "slow.json").read_text())
    assert record["status"] == "interrupted", record

    runs = autograde.grade_all(batch, ["quick", "slow"])
    assert runs["slow"].status == "ok", runs["slow"]
    assert (batch.out / "logs" / "quick.log").stat().st_mtime_ns == quick_log
    recorded = gradebook.grades(batch.url, ASSIGNMENT)
    assert recorded["slow"].scores == recorded["quick"].scores
    assert recorded["quick"].total == 3.0


def _read(path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def test_reports_show_student_text_as_text(tmp_path):
    """Student ids and reasons: Markdown-escaped in the report (no tag, link or table cell of
    their own in report.html), and never a spreadsheet formula in the CSV."""
    evil = "<script>alert(1)</script> [x](javascript:alert(2)) | y"
    rows = [
        classreport.StudentRow(student, {"a": 1.0}, [findings.Finding("crashed", evil)])
        for student in ('=HYPERLINK("http://e.test","x")', "+1", "-2", "@SUM(A1)", "<b>bold</b>")
    ]
    rows.append(classreport.StudentRow("plain", {"a": 1.0}, [findings.Finding("crashed", "=1+1")]))
    results = classreport.ClassResults("00_setup", "the CPU", False, {"a": 1.0}, rows)
    written = classreport.write(results, tmp_path)
    with open(written["csv"], newline="", encoding="utf-8") as f:
        cells = [cell for row in csv.reader(f) for cell in row]
    assert not [c for c in cells if c.startswith(classreport.FORMULA_STARTS)], cells
    assert '\'=HYPERLINK("http://e.test","x")' in cells and "'@SUM(A1)" in cells
    html = written["html"].read_text()
    assert "<script>" not in html and "<b>bold" not in html and "href" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt; [x](javascript:alert(2)) | y") == 5
    markdown = written["markdown"].read_text()
    table = [line for line in markdown.splitlines() if line.endswith("\\| y |")]
    assert len(table) == 5 and all(line.count(" | ") == 2 for line in table), table
