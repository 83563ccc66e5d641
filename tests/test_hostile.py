"""The hostile class, graded end to end: every synthetic attacker in tests/hostile/, graded in one
batch per notebook by `python -m grader autograde` on the CPU (attacks on grading's pipeline
that need no notebook's helpers attack tests/light.py's assignment), beside honest students and
each attacker's honest base (its own kernel without the attack; each distinct base graded once,
and one that is the honest answer as the first honest student). Each attacker must score its
base or be flagged for a human look with the right reason; the honest students keep full marks;
no student is lost."""

from __future__ import annotations

import contextlib
import csv
import functools
import io
from pathlib import Path

import nbformat
import pytest

from grader import cli
from grader.grading import assemble, findings, gradebook
from tests import hostile, light, shared
from tests.hostile.hidden_tests import BEGIN, page_text

pytestmark = [pytest.mark.slow, pytest.mark.tooling]

EVERYONE = hostile.everyone()
# The notebooks whose batches are graded on the CPU; an attacker of another notebook must run as
# its base, which the CPU checks by assembling both (the GPU grades them: test_hostile_gpu.py).
CPU_BATCHES = (
    "00_setup",
    "02_first_kernels",
    "07_flash_attention",
    "10_flash_backward",
    light.ASSIGNMENT,
)
# Batches too long for `make test` (10's: about four minutes on two cores, each student's notebook
# some 25 s of the interpreter, the honest one's hidden tests 60 s more): `make test-extended`.
EXTENDED = ("10_flash_backward",)
# An attacker that runs as its base byte for byte is graded only where it has a check of its own
# to make (what reached the sandbox, say): its score is its base's by construction, which
# test_what_grading_runs_for_an_attacker_is_its_base_byte_for_byte shows for every one.
ATTACKERS = [
    a
    for a in EVERYONE
    if a.assignment in CPU_BATCHES and not a.gpu_only and (not a.runs_as_base or a.check)
]
HONEST = ("honest-1",)


def _marked(assignment: str, value):
    """`value` as a test parameter, marked `extended` where `assignment`'s batch is."""
    return pytest.param(value, marks=[pytest.mark.extended] if assignment in EXTENDED else [])


BATCHES = [_marked(a, a) for a in sorted({a.assignment for a in ATTACKERS})]
CELL_TIMEOUT, SUBMISSION_TIMEOUT, MEMORY_GIB, JOBS = 60, 400, 3, 4


def _materials(root, assignment) -> hostile.Materials:
    (path,) = (root / "release" / assignment).glob("*.ipynb")
    release = nbformat.read(path, as_version=4)
    source = nbformat.read(root / "source" / assignment / path.name, as_version=4)
    return hostile.Materials(assignment, path.stem, release, source)


def _write(folder, student, assignment, files):
    target = folder / student / assignment
    target.mkdir(parents=True)
    for name, content in files.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (target / name).write_bytes(content)
        else:
            nbformat.write(content, target / name)


@functools.cache
def graded(
    assignment: str,
    tmp: Path,
    registered: Path,
    attackers: tuple[hostile.Attacker, ...] = (),
    honest: tuple[str, ...] = HONEST,
    options: tuple[str, ...] = ("--mode", "interpreter", "--speed-cell-timeout", str(CELL_TIMEOUT)),
) -> tuple[hostile.Graded, int, str]:
    """The batch of one notebook: (what it left, exit code, what it printed). `attackers`: those
    to grade (by default, the CPU's of that notebook); `options`: the device's."""
    root = shared.copy_course(registered, tmp / "course")
    m = _materials(root, assignment)
    inbox = tmp / "inbox"
    for student in honest:
        _write(inbox, student, assignment, m.files(m.answered()))
    # each distinct base graded once: most attackers' base is the honest answer itself
    graded_as = {nbformat.writes(m.answered()): honest[0]} if honest else {}
    bases = {}
    for a in attackers or [a for a in ATTACKERS if a.assignment == assignment]:
        _write(inbox, a.student, assignment, a.files(m))
        if a.base is not None:
            base = a.base(m)
            student = graded_as.setdefault(nbformat.writes(base), f"{a.student}-base")
            if student == f"{a.student}-base":
                _write(inbox, student, assignment, m.files(base))
            bases[a.student] = student
    argv = [
        "autograde", assignment, "--submissions", str(inbox), "--root", str(root),
        "--jobs", str(JOBS), "--cell-timeout", str(CELL_TIMEOUT),
        "--timeout", str(SUBMISSION_TIMEOUT), "--memory-limit", str(MEMORY_GIB), *options,
    ]  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(argv)
    url = gradebook.sqlite_url(root / "gradebook.db")
    out = root / "grading" / assignment
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    review = {row["student_id"]: row["needs_review"] for row in rows}
    dropped = {row["student_id"]: row["dropped_at_grading"] for row in rows}
    scores = {s: g.scores for s, g in gradebook.grades(url, assignment).items()}
    return hostile.Graded(root, out, scores, review, dropped, m, bases), code, printed.getvalue()


@pytest.fixture(scope="module")
def batches(tmp_path_factory, registered_course, registered_light):
    base = tmp_path_factory.getbasetemp()

    def batch(assignment):
        registered = registered_light if assignment == light.ASSIGNMENT else registered_course
        return graded(assignment, base / assignment, registered)

    return batch


def _total(scores: dict[str, float]) -> float:
    return sum(
        v for g, v in scores.items() if not g.startswith("speed-")
    )  # the CPU grades no speed


@pytest.mark.parametrize("assignment", BATCHES)
def test_batch_finishes_and_loses_no_one(batches, assignment):
    result, code, printed = batches(assignment)
    assert code == 0, printed[-3000:]
    students = {*HONEST, *(a.student for a in ATTACKERS if a.assignment == assignment)}
    students |= set(result.bases.values())
    assert students <= set(result.scores), students - set(result.scores)
    assert students <= set(result.review), students - set(result.review)


@pytest.mark.parametrize("assignment", BATCHES)
def test_honest_students_keep_full_marks(batches, assignment):
    result, _, _ = batches(assignment)
    url = gradebook.sqlite_url(result.root / "gradebook.db")
    full = _total(gradebook.max_scores(url, assignment))
    for student in HONEST:
        assert _total(result.scores[student]) == full, (student, result.scores[student])
        assert result.review[student] == "", (student, result.review[student])


@pytest.mark.parametrize("assignment", BATCHES)
def test_honest_feedback_shows_what_each_cell_printed(batches, assignment):
    """Beside the attackers, an honest page shows what each cell printed, a graded cell's being
    the judge's (and no hidden line: tests/hostile/hidden_tests.py)."""
    result, _, _ = batches(assignment)
    m = result.materials
    for student in HONEST:
        ran = result.root / "autograded" / student / assignment / f"{m.notebook}.ipynb"
        nb = nbformat.read(ran, as_version=4)
        page = page_text((result.out / "feedback" / student / f"{m.notebook}.html").read_text())
        shown = [(c, " ".join(o.text.split())) for c in nb.cells for o in c.get("outputs", [])
                 if "text" in o and o.text.strip()]  # fmt: skip
        assert any(c.metadata.get("nbgrader", {}).get("grade") for c, _ in shown), "no test"
        for cell, text in shown:  # as an output, not only in the source the page shows
            source = " ".join(cell.source.split(BEGIN)[0].split())
            assert page.count(text) > source.count(text), (student, text)


def check_attacker(result: hostile.Graded, attacker: hostile.Attacker, total) -> None:
    """What `attacker` must have got in its batch: its flags (with `detail`), its total (by
    `total`, a function of a student's scores) or its base's, what the report says did not run,
    and its own check."""
    review = result.review[attacker.student]
    said = {k for k, label in findings.KINDS.items() if f"{label}: " in review}
    assert attacker.flags <= said, f"{attacker.student}: expected {attacker.flags}, got {review!r}"
    if attacker.detail:
        assert attacker.detail in review, (attacker.student, review)
    mine = result.scores[attacker.student]
    if attacker.total == "base" or attacker.runs_as_base:
        base = result.scores[result.bases[attacker.student]]
        assert total(mine) == total(base), (attacker.student, mine, base)
    elif attacker.total is not None:
        assert total(mine) == attacker.total, (attacker.student, mine)
    if attacker.dropped:
        assert attacker.dropped in result.dropped[attacker.student], (
            attacker.student,
            result.dropped[attacker.student],
        )
    if attacker.check is not None:
        attacker.check(result)


@pytest.mark.parametrize(
    "attacker", [_marked(a.assignment, a) for a in ATTACKERS], ids=lambda a: a.student
)
def test_attacker(batches, attacker):
    result, _, _ = batches(attacker.assignment)
    check_attacker(result, attacker, _total)


def test_every_attacker_is_graded_somewhere():
    for a in EVERYONE:
        assert a.assignment in CPU_BATCHES or a.runs_as_base or a.gpu_only, (
            f"{a.student}: its notebook is graded on a GPU only; the CPU can check it only by "
            "assembly (runs_as_base)"
        )


@pytest.mark.parametrize(
    "attacker", [a for a in EVERYONE if a.runs_as_base], ids=lambda a: a.student
)
def test_what_grading_runs_for_an_attacker_is_its_base_byte_for_byte(
    attacker, registered_course, tmp_path
):
    m = _materials(registered_course, attacker.assignment)
    inbox, staged = tmp_path / "inbox", tmp_path / "staged"
    _write(inbox, "attacker", attacker.assignment, attacker.files(m))
    _write(inbox, "base", attacker.assignment, m.files(attacker.base(m)))
    for who in ("attacker", "base"):
        found = assemble.stage(inbox / who / attacker.assignment, {m.notebook: m.release},
                               staged / who)  # fmt: skip
        assert list(found.notebooks) == [m.notebook], (who, found.unreadable)
    ran = sorted(p.name for p in (staged / "attacker").iterdir())
    assert ran == [f"{m.notebook}.ipynb"], ran
    mine, theirs = (
        (staged / who / f"{m.notebook}.ipynb").read_bytes() for who in ("attacker", "base")
    )
    assert mine == theirs, attacker.student
    dropped = assemble.read(inbox / "attacker" / attacker.assignment, {m.notebook: m.release})
    dropped = dropped.dropped
    assert attacker.dropped in dropped.describe(), (attacker.student, dropped.describe())
