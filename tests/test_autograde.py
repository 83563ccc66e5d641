"""The instructor's batch grading, end to end: a synthetic class of 00_setup (the notebook that
runs fastest in interpreter mode) built by editing the solution and release notebooks, graded by
`python -m grader autograde` on the CPU. Every good score is checked exactly against the
gradebook's points, every bad submission must be listed for a human look with the right reason,
and every student must reach the gradebook and the CSV.

Short limits keep the hangs cheap: a cell may run 20 s (a whole submission 300 s; the sandbox's
own tests check the whole-submission limit)."""

import contextlib
import copy
import csv
import io
import shutil
import zipfile

import nbformat
import pytest

from grader import cli
from grader.grading import autograde, findings, gradebook
from tests import hostile, shared
from tests.hostile.hidden_tests import page_keeps_hidden_tests_hidden

pytestmark = [pytest.mark.slow, pytest.mark.tooling]

ASSIGNMENT = "00_setup"
NOTEBOOK = "setup"
DUEDATE = "2026-01-10 17:00:00 UTC"
CELL_TIMEOUT, SUBMISSION_TIMEOUT = 20, 300
MEMORY_GIB = 3  # per submission; "memory-hog" allocates 4 GiB
JOBS = 5  # two cores; the hanging submissions mostly wait


def solution_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]


def cell(nb, grade_id):
    (found,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return found


def edited(source, old, new):
    assert old in source, f"the notebook changed: {old!r} is gone; update this test"
    return source.replace(old, new)


def answered(release, source):
    """The release with every solution cell answered as in the source, markers dropped."""
    nb = copy.deepcopy(release)
    for mine, theirs in zip(solution_cells(nb), solution_cells(source), strict=True):
        lines = theirs.source.split("\n")
        mine.source = "\n".join(
            line
            for line in lines
            if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line
        )
    return nb


def prefixed(nb, code):
    """`nb` with `code` run at the top of the kernel's solution cell."""
    nb = copy.deepcopy(nb)
    kernel = cell(nb, "relu-kernel")
    kernel.source = code + "\n\n" + kernel.source
    return nb


LATE = b"2026-01-11 20:00:00.000000 UTC"


def ran_on(nb, torch_version):
    """`nb` as saved after its setup cell ran on `torch_version` (grader.runtime.device)."""
    from grader.runtime import published

    nb = copy.deepcopy(nb)
    said = {"torch": torch_version, "triton": "3.9.0", "mode": "interpreter"}
    output = nbformat.v4.new_output("display_data", {published.VERSIONS_MIMETYPE: said})
    next(c for c in nb.cells if c.cell_type == "code").outputs = [output]
    return nb


def make_class(release, source):
    """{student: files}, each file a notebook or raw bytes, and what nbgrader should find."""
    right = answered(release, source)
    partial = copy.deepcopy(right)
    kernel = cell(partial, "relu-kernel")
    kernel.source = edited(kernel.source, "pid * BLOCK + tl.arange", "pid * 1024 + tl.arange")
    tampered = copy.deepcopy(release)
    cell(tampered, "test-relu-visible").source = "pass  # nothing to see"
    tampered.cells.remove(cell(tampered, "test-relu-hidden"))
    warns = copy.deepcopy(right)  # a library warning during the graded call costs nothing
    kernel = cell(warns, "relu-kernel")
    kernel.source += (  # each launch warns, as a deprecated library call would: a hook that
        # Triton's autotuner runs before every launch (the kernel stays a Triton kernel)
        "\n\nimport warnings\n\n\ndef _warns(args):\n"
        "    warnings.warn('a library is deprecating something', DeprecationWarning)\n\n\n"
        "relu_kernel = triton.autotune([triton.Config({}, pre_hook=_warns)], key=[])(relu_kernel)\n"
    )
    edits = copy.deepcopy(right)  # a given launcher edited: grading runs the release's
    (launcher,) = [c for c in edits.cells if c.source.startswith("def relu(")]
    launcher.source = edited(launcher.source, "    n = x.numel()", "    return out")
    shrunk = copy.deepcopy(right)  # wrong past 16384 elements, and sizes that stop short of it
    kernel = cell(shrunk, "relu-kernel")
    kernel.source = edited(kernel.source, "y, mask=mask)", "y, mask=mask & (offsets < 16384))")
    params = next(c for c in shrunk.cells if "parameters" in c.metadata.get("tags", []))
    params.source = edited(params.source, "1025, 20_011]", "1025]")
    cheater = copy.deepcopy(release)
    cell(cheater, "relu-kernel").source += "\n\nchecks.check = lambda *args, **kwargs: None\n"
    ignore_interrupts = (
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "while True:\n    time.sleep(0.05)"
    )
    return {
        "correct": {"setup.ipynb": prefixed(right, "print('measuring:', RUN_BENCHMARKS)")},
        "late": {"setup.ipynb": ran_on(right, "2.99.0"), "timestamp.txt": LATE},
        "partial": {"setup.ipynb": partial},
        "warns": {"setup.ipynb": warns},
        "edits-given": {"setup.ipynb": edits, "gemm.py": b"x = 1", "notes.txt": b"mine"},
        "blank": {"setup.ipynb": release},
        "crash-kernel": {"setup.ipynb": prefixed(right, "import os\nos._exit(1)")},
        "hang-cell": {
            "setup.ipynb": prefixed(right, "import time\nwhile True:\n    time.sleep(0.05)")
        },
        "hang-stuck": {"setup.ipynb": prefixed(right, ignore_interrupts)},
        "memory-hog": {"setup.ipynb": prefixed(right, "hog = torch.ones(1 << 30)  # 4 GiB")},
        "tampered": {"setup.ipynb": tampered},
        "shrunk-sizes": {"setup.ipynb": shrunk},
        "cheater": {"setup.ipynb": cheater},
        "not-json": {"setup.ipynb": b'{"cells": [{"cell_type": "code", "source": '},
        "pdf": {"setup.ipynb": b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >>\n"},
        "misnamed": {"Setup (1).ipynb": right},
    }


# kinds of finding each student must have (exactly, for the ones without trouble)
EXPECTED = {
    "correct": set(),
    "late": {"late"},
    "partial": set(),
    "warns": set(),
    "blank": {"zero-score"},
    "crash-kernel": {"crashed"},
    "hang-cell": {"cell-timeout"},
    "hang-stuck": {"timed-out"},
    "memory-hog": {"out-of-memory"},
    "edits-given": set(),
    "tampered": {"zero-score"},
    "shrunk-sizes": set(),
    "cheater": {"cheating", "zero-score"},
    "not-json": {"not-a-notebook"},
    "pdf": {"not-a-notebook"},
    "misnamed": {"missing-notebook"},
}
EXACT = {
    "correct",
    "late",
    "partial",
    "warns",
    "edits-given",
    "shrunk-sizes",
}  # nothing else may be said about these
DETAIL = {  # words the reason must contain
    "blank": "no solution filled in",
    "crash-kernel": "kernel died",
    "hang-cell": "relu-kernel",
    "hang-stuck": "ignored the interrupt",
    "memory-hog": "allocate memory",
    "tampered": "no solution filled in",
    "cheater": "replaces grader.runtime.checks.check",
    "not-json": "not valid JSON",
    "pdf": "PDF",
    "misnamed": "Setup (1).ipynb",
    "late": "no penalty",
}


def write_submissions(folder, students):
    for student, files in students.items():
        target = folder / student / ASSIGNMENT
        target.mkdir(parents=True)
        for name, content in files.items():
            if isinstance(content, bytes):
                (target / name).write_bytes(content)
            else:
                nbformat.write(content, target / name)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, registered_course):
    """The class graded by `python -m grader autograde` (its main, in this process) in a course
    directory of its own: (course directory, submissions, (exit code, what it printed))."""
    tmp = tmp_path_factory.mktemp("autograde")
    root = shared.copy_course(registered_course, tmp / "course")  # generated and registered
    release = nbformat.read(root / "release" / ASSIGNMENT / f"{NOTEBOOK}.ipynb", as_version=4)
    source = nbformat.read(root / "source" / ASSIGNMENT / f"{NOTEBOOK}.ipynb", as_version=4)
    students = make_class(release, source)
    write_submissions(tmp / "inbox", students)
    argv = [
        "autograde", ASSIGNMENT,
        "--submissions", str(tmp / "inbox"), "--root", str(root), "--mode", "interpreter",
        "--jobs", str(JOBS), "--cell-timeout", str(CELL_TIMEOUT),
        "--speed-cell-timeout", str(CELL_TIMEOUT), "--timeout", str(SUBMISSION_TIMEOUT),
        "--memory-limit", str(MEMORY_GIB), "--duedate", DUEDATE,
    ]  # fmt: skip
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = cli.main(argv)  # in this process: torch is imported already
    return root, students, (code, stdout.getvalue())


def report_rows(root):
    with open(root / "grading" / ASSIGNMENT / "grades.csv", newline="") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


def test_command_succeeds(graded):
    _, _, (code, printed) = graded
    assert code == 0, printed[-3000:]
    assert "grades.csv" in printed and "feedback" in printed


def test_nothing_lost(graded):
    root, students, _ = graded
    url = gradebook.sqlite_url(root / "gradebook.db")
    assert set(gradebook.grades(url, ASSIGNMENT)) == set(students)
    assert set(report_rows(root)) == set(students)


def test_good_scores_are_exact(graded):
    root, _, _ = graded
    url = gradebook.sqlite_url(root / "gradebook.db")
    points = gradebook.max_scores(url, ASSIGNMENT)
    assert set(points) == {"test-relu-visible", "test-relu-hidden", "speed-relu"}
    full = {g: (0.0 if g.startswith("speed-") else p) for g, p in points.items()}  # on the CPU
    want = {
        "correct": full,
        "late": full,  # no penalty unless the instructor configures one
        "partial": {**full, "test-relu-hidden": 0.0},
        # its parameters would let the partial kernel pass: grading ran the release's
        "shrunk-sizes": {**full, "test-relu-hidden": 0.0},
        "warns": full,  # stderr with only a warning on it is not a failure
        "edits-given": full,  # its edit of the launcher never ran
        # the checker it replaced is its own process's; the judge's checks fail the stub
        "cheater": dict.fromkeys(full, 0.0),
    }
    recorded = gradebook.grades(url, ASSIGNMENT)
    rows = report_rows(root)
    for student, scores in want.items():
        assert recorded[student].scores == scores, student
        assert float(rows[student]["score"]) == sum(scores.values()), student
        assert float(rows[student]["max_score"]) == sum(points.values())
        for grade_id, score in scores.items():
            assert float(rows[student][grade_id]) == score, (student, grade_id)
    for student in set(recorded) - set(want):
        assert recorded[student].total == 0, (student, recorded[student].scores)
        assert float(rows[student]["score"]) == 0, student


def test_every_bad_submission_is_explained(graded):
    root, _, _ = graded
    rows = report_rows(root)
    report = (root / "grading" / ASSIGNMENT / "report.md").read_text()
    for student, kinds in EXPECTED.items():
        review = rows[student]["needs_review"]
        said = {k for k, label in findings.KINDS.items() if f"{label}: " in review}
        if student in EXACT:
            assert said == kinds, (student, review)
        else:
            assert kinds <= said, (student, review)
            assert f"| {student} |" in report, student
        if student in DETAIL:
            assert DETAIL[student] in review, (student, review)
    assert "| correct |" not in report and "| partial |" not in report


DROPPED = {  # what grading left out, as the CSV says it
    "edits-given": "given cells edited: setup-",
    "shrunk-sizes": "given cells edited: parameters-setup",
    "tampered": "given cells edited: test-relu-visible",
}


def test_what_did_not_run_is_listed_and_changes_no_score(graded):
    root, _, _ = graded
    rows = report_rows(root)
    report = (root / "grading" / ASSIGNMENT / "report.md").read_text()
    for student, words in DROPPED.items():
        assert words in rows[student]["dropped_at_grading"], (student, rows[student])
        assert f"| {student} |" in report.split("## Dropped at grading")[1], student
    assert "files beside the notebook: gemm.py, notes.txt" in rows["edits-given"][
        "dropped_at_grading"]  # fmt: skip
    assert rows["correct"]["dropped_at_grading"] == ""
    autograded = root / "autograded" / "edits-given" / ASSIGNMENT
    assert not (autograded / "notes.txt").exists()  # nothing but the release's files ran
    assert (autograded / "gemm.py").exists() is False


def test_the_given_cells_measure_nothing_at_grading(graded):
    """A sweep or a profile of a given cell scores nothing: grading turns RUN_BENCHMARKS off
    after the parameters cell, in the student's kernel as in the judge."""
    root, _, _ = graded
    nb = nbformat.read(root / "autograded" / "correct" / ASSIGNMENT / f"{NOTEBOOK}.ipynb", 4)
    printed = "".join(o.get("text", "") for o in cell(nb, "relu-kernel").outputs)
    assert "measuring: False" in printed, cell(nb, "relu-kernel").outputs


def test_report_says_speed_was_not_graded(graded):
    root, _, _ = graded
    out = root / "grading" / ASSIGNMENT
    report = (out / "report.md").read_text()
    assert "Speed was not graded on this device" in report
    versions = report.split("## Versions")[1]  # the students whose notebook ran on another torch
    assert "| late |" in versions and "torch 2.99.0" in versions and "| correct |" not in versions
    assert "`speed-relu`" in report
    assert not (out / "speed.png").exists()
    for figure in ("scores.png", "pass_rate.png"):
        assert (out / figure).stat().st_size > 5000, figure
    html = (out / "report.html").read_text()
    assert "<table>" in html and 'src="scores.png"' in html


@pytest.mark.parametrize("student", ["blank", "partial"])
def test_failing_students_feedback_keeps_the_hidden_tests_hidden(graded, student):
    root, _, _ = graded
    release, source = (
        nbformat.read(root / step / ASSIGNMENT / f"{NOTEBOOK}.ipynb", as_version=4)
        for step in ("release", "source")
    )
    url = gradebook.sqlite_url(root / "gradebook.db")
    scores = {s: g.scores for s, g in gradebook.grades(url, ASSIGNMENT).items()}
    review = {s: row["needs_review"] for s, row in report_rows(root).items()}
    m = hostile.Materials(ASSIGNMENT, NOTEBOOK, release, source)
    result = hostile.Graded(root, root / "grading" / ASSIGNMENT, scores, review, {}, m)
    page_keeps_hidden_tests_hidden(result, student)


def test_feedback_per_student_without_hidden_tests(graded):
    root, _, _ = graded
    feedback = root / "grading" / ASSIGNMENT / "feedback"
    page = (feedback / "correct" / f"{NOTEBOOK}.html").read_text()
    assert "test-relu-hidden" in page
    assert "for block in (128, 256)" not in page, "a hidden test leaked into the feedback"
    assert (feedback / "partial" / f"{NOTEBOOK}.html").is_file()


def test_rerun_keeps_every_score_and_grades_nothing_again(graded):
    root, students, _ = graded
    batch = autograde.Batch(ASSIGNMENT, "interpreter", root=root)
    before = gradebook.grades(batch.url, ASSIGNMENT)
    logs = {p: p.stat().st_mtime_ns for p in (batch.out / "logs").iterdir()}
    runs = autograde.grade_all(batch, sorted(students))
    assert runs["hang-stuck"].status == "timeout" and runs["correct"].status == "ok"
    assert {p: p.stat().st_mtime_ns for p in (batch.out / "logs").iterdir()} == logs
    after = gradebook.grades(batch.url, ASSIGNMENT)
    assert {s: g.scores for s, g in after.items()} == {s: g.scores for s, g in before.items()}


def test_zip_from_an_lms_goes_through_zip_collect(graded, tmp_path):
    graded_root, _, _ = graded
    root = tmp_path / "course"
    for step in ("source", "release"):
        shutil.copytree(graded_root / step, root / step)
    notebook = graded_root / "submitted" / "correct" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    lms = tmp_path / "submissions.zip"
    with zipfile.ZipFile(lms, "w") as z:  # Canvas: <login>[_late]_<user id>_<submission>_<file>
        z.write(notebook, f"adams_1001_77_{NOTEBOOK}.ipynb")
        z.write(notebook, f"baker_late_1002_78_{NOTEBOOK}.ipynb")
        z.writestr("readme.txt", "not a submission")
    batch = autograde.Batch(ASSIGNMENT, "interpreter", root=root)
    assert autograde.import_submissions(batch, lms) == ["adams", "baker"]
    for student in ("adams", "baker"):
        copied = root / "submitted" / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
        assert copied.read_bytes() == notebook.read_bytes()
