"""House rules for every notebook in solutions/, checked on the built notebooks."""

import re
import subprocess
import sys

import pytest

from grader.authoring import build, kit

pytestmark = pytest.mark.tooling
ASSIGNMENTS = build.assignments()
MARKERS = {
    "SOLUTION": ("### BEGIN SOLUTION", "### END SOLUTION"),
    "HIDDEN TESTS": ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"),
}


def make_targets() -> list[str]:
    """The Makefile's targets, from its .PHONY list."""
    text = (build.ROOT / "Makefile").read_text().replace("\\\n", " ")
    return re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split()


# What a student-visible text must not name: the repository's folders and commands that students
# never receive (the kit holds course/ and grader/runtime/ only, and no Makefile). Not preceded by
# a word character, a dot, a slash or a hyphen, so that `https://pytorch.org/docs/`, a file
# `my_tests/` or `python -m grader.runtime` (the kit's doctor) do not count.
AUTHOR_ONLY = re.compile(
    r"(?<![\w./-])(bench|solutions|tests|build|docs|results|\.ci|\.github)/"
    r"|grader[./](authoring|grading|cli)\b"
    r"|-m grader(?![\w.])"
    rf"|\bmake ({'|'.join(map(re.escape, make_targets()))})\b"
)


def student_text(assignment) -> list[tuple[str, str]]:
    """(where, text) of what students see of a notebook, read from its source: markdown cells,
    code cells without their solution and hidden-test regions (what nbgrader's release leaves),
    and the files released beside it."""
    out = []
    for cell in build.to_notebook(assignment.source).cells:
        text = cell.source
        if cell.cell_type == "code":
            for kind in kit.MARKERS:
                _, text = kit.regions(text, kind)
        out.append((f"cell {cell.id}", text))
    for side in sorted(assignment.source.parent.rglob("*")):
        if side.is_file() and side != assignment.source and "__pycache__" not in side.parts:
            out.append((str(side.relative_to(assignment.source.parent.parent)), side.read_text()))
    return out


@pytest.mark.parametrize("assignment", ASSIGNMENTS, ids=lambda a: a.name)
def test_students_see_no_author_only_paths(assignment):
    found = [
        f"{where}: {m.group(0)!r} in {line.strip()!r}"
        for where, text in student_text(assignment)
        for line in text.splitlines()
        for m in AUTHOR_ONLY.finditer(line)
    ]
    assert not found, (
        "students receive the kit, not the repository: say it without the author's paths and "
        "commands (or move the note inside the solution region, which students never see):\n"
        + "\n".join(found)
    )


@pytest.mark.parametrize(
    "text",
    [
        "# The reference kernel; bench/attention.py imports this cell from the notebook's source.",
        "Of the tiles `make bench` times",
        "`python -m grader doctor` (or the cell below)",
        "(results/bench-attention-2026-11-21.md)",
        "the course's report `docs/benchmarks/2026-11-21-h200`",
        "see solutions/04_matmul/matmul.py and tests/test_gemm.py",
        "from grader.grading import autograde",
    ],
)
def test_the_author_only_rule_catches(text):
    assert AUTHOR_ONLY.search(text)


@pytest.mark.parametrize(
    "text",
    [
        "the only way to make it faster is to move fewer bytes",
        "list make visible",
        "https://pytorch.org/docs/stable/notes/cuda.html",
        "`python -m grader.runtime` prints your device",
        "from grader.runtime import checks, perf, timing",
        "the visible tests follow them",
    ],
)
def test_the_author_only_rule_leaves_prose_alone(text):
    assert not AUTHOR_ONLY.search(text)


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
