"""House rules for every notebook in solutions/, checked on the built notebooks."""

import re
import subprocess
import sys

import pytest

from grader.authoring import build

pytestmark = pytest.mark.tooling
ASSIGNMENTS = build.assignments()
MARKERS = {
    "SOLUTION": ("### BEGIN SOLUTION", "### END SOLUTION"),
    "HIDDEN TESTS": ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"),
}


@pytest.fixture(scope="module", params=ASSIGNMENTS, ids=lambda a: a.name)
def notebook(request):
    return request.param, build.to_notebook(request.param.source)


def nbg(cell):
    return cell.metadata.get("nbgrader", {})


def test_no_ipynb_under_solutions(root):
    assert not list((root / "solutions").rglob("*.ipynb"))


def test_title_and_you_will_learn(notebook):
    assignment, nb = notebook
    first = nb.cells[0]
    number = assignment.name[:2]
    assert first.cell_type == "markdown"
    assert re.match(rf"# {number} · \S", first.source), "title must read 'NN · Title'"
    assert "**You will learn:**" in first.source


def test_summary_and_further_exercises_close_the_notebook(notebook):
    _, nb = notebook
    headings = [
        line
        for c in nb.cells
        if c.cell_type == "markdown"
        for line in c.source.splitlines()
        if line.startswith("## ")
    ]
    assert headings[-2:] == ["## Summary", "## Further exercises"]


def test_one_parameters_cell_before_the_first_exercise(notebook):
    _, nb = notebook
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    first_exercise = next(i for i, c in enumerate(nb.cells) if nbg(c).get("solution"))
    assert tagged[0] < first_exercise
    # the switch that turns ungraded sweeps off (the known-wrong harness sets it False)
    assert re.search(r"^RUN_BENCHMARKS = True", nb.cells[tagged[0]].source, re.M)


def test_markers_are_balanced_and_in_the_right_cells(notebook):
    _, nb = notebook
    for cell in nb.cells:
        for kind, (begin, end) in MARKERS.items():
            lines = [line.strip() for line in cell.source.splitlines()]
            opened = 0
            for line in lines:
                if line == begin:
                    assert opened == 0, f"{cell.id}: nested {kind}"
                    opened += 1
                elif line == end:
                    assert opened == 1, f"{cell.id}: {end} without {begin}"
                    opened -= 1
            assert opened == 0, f"{cell.id}: {begin} never closed"
            if begin in lines:
                need = "solution" if kind == "SOLUTION" else "grade"
                assert nbg(cell).get(need), f"{cell.id}: {kind} markers outside a {need} cell"


def test_grade_ids_are_unique_across_the_course():
    seen = {}
    for a in ASSIGNMENTS:
        for cell in build.to_notebook(a.source).cells:
            gid = nbg(cell).get("grade_id")
            if gid:
                assert gid not in seen, f"{gid} in {a.name} and {seen[gid]}"
                seen[gid] = a.name


def test_every_exercise_is_graded_and_speed_cells_are_named(notebook):
    _, nb = notebook
    graded = [c for c in nb.cells if nbg(c).get("grade")]
    assert any(nbg(c).get("solution") for c in nb.cells)
    assert any(not nbg(c)["grade_id"].startswith("speed-") for c in graded)
    for cell in graded:
        visible = re.sub(
            r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", cell.source, flags=re.S
        )
        code = [
            line
            for line in visible.splitlines()
            if line.strip() and not line.strip().startswith("#")
        ]
        assert code, f"{cell.id}: the student's copy must test something, or it passes blank"
        assert not re.search(r"sys\.stderr|warnings\.warn", cell.source), (
            f"{cell.id}: a graded cell that writes to stderr scores 0"
        )


def test_notebook_length(notebook):
    _, nb = notebook
    assert 15 <= len(nb.cells) <= 40, f"{len(nb.cells)} cells; the house style asks 15-40"


@pytest.mark.parametrize(
    "command",
    [
        ["check", "grader", "tests", "solutions", "bench"],
        ["format", "--check", "grader", "tests", "bench"],
    ],
    ids=["check", "format"],
)
def test_ruff_is_clean(root, command):
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command], cwd=root, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
