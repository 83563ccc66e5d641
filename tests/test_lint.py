"""House rules for every notebook in solutions/, checked on the built notebooks."""

import ast
import re
import subprocess
import sys

import nbformat
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


# Prose: how long a markdown cell may be, how a notebook states its reading time, and how an
# exercise is headed.
MAX_CELL_WORDS = 200
WORDS_PER_MINUTE = 200
READING_TIME = re.compile(r"^\*Reading time: about (\d+) minutes?\.\*$")
EXERCISE_LIKE = re.compile(r"^#+\s*Exercise\b", re.I)
EXERCISE = re.compile(r"^### Exercise (?P<n>\d+) · (?P<title>\S.*\S) \((?P<k>\d+) points?\)$")


def prose_words(markdown: str) -> int:
    """The words a reader reads in a markdown text, counted as whitespace-separated tokens that
    hold a letter or a digit (markup alone, `#`, `-`, `|`, `·`, is no word), with these made
    one word each: a code span (`tl.max(x, axis=1)` is read as one term) and an inline or display
    formula ($e^{x_j - m}$); a link counts its text, not its address; an image counts nothing
    (its picture is not read word by word)."""
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", " ", markdown)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"\$\$.+?\$\$|\$[^$\n]+\$|`[^`\n]+`", " term ", text, flags=re.S)
    return sum(1 for token in text.split() if re.search(r"\w", token))


def markdown_words(nb) -> list[tuple[int, str, int]]:
    """(cell index, first line, words) of each markdown cell."""
    return [
        (i, (c.source.splitlines() or [""])[0], prose_words(c.source))
        for i, c in enumerate(nb.cells)
        if c.cell_type == "markdown"
    ]


def reading_minutes(nb) -> int:
    """Minutes to read a notebook's markdown at WORDS_PER_MINUTE, rounded up."""
    return -(-sum(w for _, _, w in markdown_words(nb)) // WORDS_PER_MINUTE)


def exercise_problems(nb) -> list[str]:
    """What is wrong with a notebook's exercise headings. An exercise runs from its heading to
    the next one (or the end): its points are those of the graded cells in that span (a speed
    cell that times the exercise's kernel later on counts toward it). Headings read
    `### Exercise N · title (k points)`, N = 1, 2, ... in order; no graded or solution cell
    comes before the first."""
    problems, exercises = [], []  # exercises: [cell index, heading, its match, summed points]
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            exercises += [
                [i, line, EXERCISE.match(line), 0]
                for line in cell.source.splitlines()
                if EXERCISE_LIKE.match(line)
            ]
        elif nbg(cell).get("grade") or nbg(cell).get("solution"):
            if not exercises:
                problems.append(
                    f"cell {i} ({nbg(cell)['grade_id']}) comes before the first exercise heading"
                )
            elif nbg(cell).get("grade"):
                exercises[-1][3] += nbg(cell)["points"]
    for number, (i, line, m, points) in enumerate(exercises, start=1):
        unit = "point" if points == 1 else "points"
        if not m:
            problems.append(
                f"cell {i}: {line!r} must read '### Exercise {number} · title ({points} {unit})'"
            )
            continue
        if int(m["n"]) != number:
            problems.append(f"cell {i}: {line!r} is exercise {number}: number it {number}")
        if int(m["k"]) != points:
            problems.append(
                f"cell {i}: {line!r} states {m['k']}; its graded cells (up to the next exercise "
                f"heading) give {points}"
            )
        elif not line.endswith(f"({points} {unit})"):
            problems.append(f"cell {i}: {line!r}: write '({points} {unit})'")
    return problems


def test_no_markdown_cell_is_over_200_words(notebook):
    assignment, nb = notebook
    long = [
        f"{assignment.name}, cell {i} ({first[:60]!r}): {words} words"
        for i, first, words in markdown_words(nb)
        if words > MAX_CELL_WORDS
    ]
    assert not long, (
        f"a markdown cell holds at most {MAX_CELL_WORDS} words (see prose_words for how they "
        "are counted): cut repetition, or split the cell where it turns to another idea:\n"
        + "\n".join(long)
    )


def test_exercise_headings_state_their_points(notebook):
    assignment, nb = notebook
    problems = exercise_problems(nb)
    assert not problems, f"{assignment.name}:\n" + "\n".join(problems)


def test_reading_time_is_stated_under_the_title_and_true(notebook):
    assignment, nb = notebook
    lines = [line for line in nb.cells[0].source.splitlines()[1:] if line.strip()]
    minutes = reading_minutes(nb)
    wanted = f"*Reading time: about {minutes} minute{'s' if minutes != 1 else ''}.*"
    m = READING_TIME.match(lines[0]) if lines else None
    assert m, f"{assignment.name}: the line under the title must read {wanted!r}"
    assert lines[0] == wanted, (
        f"{assignment.name}: {sum(w for _, _, w in markdown_words(nb))} words of markdown at "
        f"{WORDS_PER_MINUTE} a minute, rounded up: the line must read {wanted!r}, not "
        f"{lines[0]!r}"
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("## The ridge point", 3),
        ("Load with `tl.load(x_ptr + offs, mask=mask)` and store.", 5),
        ("where $m = \\max_k x_k$ holds", 3),
        ("$$\\mathrm{softmax}(x)_j = e^{x_j - m}$$ for each row", 4),
        ("See [the CUDA guide](https://docs.nvidia.com/cuda/x.html) now.", 5),
        ("![rows in tiles](figures/tiles.png)", 0),
        ("- a | b · c\n---", 3),
    ],
)
def test_prose_words_counts_terms_not_markup(text, words):
    assert prose_words(text) == words


def md(text):
    return nbformat.v4.new_markdown_cell(text)


def graded(points, gid="t"):
    return nbformat.v4.new_code_cell(
        "pass", metadata={"nbgrader": {"grade": True, "grade_id": gid, "points": points}}
    )


def solution(gid="s"):
    return nbformat.v4.new_code_cell(
        "pass", metadata={"nbgrader": {"solution": True, "grade_id": gid}}
    )


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        ([md("### Exercise 1 · the kernel (3 points)"), solution(), graded(1), graded(2)], []),
        ([md("### Exercise 1 · it (1 point)"), graded(1), md("## Speed"), graded(1)], ["give 2"]),
        ([md("### Exercise 1 · it (2 points)"), graded(1)], ["states 2;"]),
        ([md("### Exercise 1 · it (1 points)"), graded(1)], ["write '(1 point)'"]),
        (
            [md("## Exercise 1: it (1 point)"), graded(1)],
            ["must read '### Exercise 1 · title (1 point)'"],
        ),
        ([md("### Exercise 2 · it (1 point)"), graded(1)], ["number it 1"]),
        ([solution(), md("### Exercise 1 · it (1 point)"), graded(1)], ["before the first"]),
    ],
)
def test_exercise_problems_catches(cells, expected):
    nb = nbformat.v4.new_notebook(cells=cells)
    problems = exercise_problems(nb)
    assert len(problems) == len(expected)
    for problem, part in zip(problems, expected, strict=True):
        assert part in problem


def test_the_cell_and_reading_time_rules_can_fail(monkeypatch):
    long = md("# 99 · Title\n\n*Reading time: about 1 minute.*\n\n" + "word " * 250)
    nb = nbformat.v4.new_notebook(cells=[long])
    fake = build.Assignment("99_fake", build.SOLUTIONS / "99_fake" / "fake.py")
    with pytest.raises(AssertionError, match=r"99_fake, cell 0 .*: 257 words"):
        test_no_markdown_cell_is_over_200_words((fake, nb))
    with pytest.raises(AssertionError, match=r"about 2 minutes"):
        test_reading_time_is_stated_under_the_title_and_true((fake, nb))


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


# Speed: every speed cell scores through the course's one speed path (grader.runtime.perf.grade,
# which the judge measures at grading), never by a route of its own: the checks that path makes
# (fresh inputs, own work, census, ceilings) cannot be left out by a cell.
SPEED_PATH = {"perf.grade"}
NOT_GRADED_HERE = "perf.not_graded_here"
OTHER_ROUTES = {
    "perf.compare",
    "perf.compare_all",
    "perf.measure",
    "perf.score",
    "perf.publish_verdict",
    "timing.bench",
    "timing.device_sampler",
    "triton.testing.do_bench",
    "do_bench",
}


def dotted(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = dotted(node.value)
        return f"{owner}.{node.attr}" if owner else None
    return None


def speed_route_problems(nb) -> list[str]:
    """Why the speed cells of `nb` do not all score through the one speed path (empty when they
    do): a speed cell's last statement must call perf.grade, or a function of
    a given cell whose every return does (or says the device grades no speed); neither may time
    or publish by another route."""
    helpers = {
        node.name: node
        for c in nb.cells
        if c.cell_type == "code" and not nbg(c).get("solution")
        for node in ast.parse(c.source).body
        if isinstance(node, ast.FunctionDef)
    }
    problems = []
    for cell in nb.cells:
        gid = nbg(cell).get("grade_id", "")
        if cell.cell_type != "code" or not gid.startswith("speed-"):
            continue
        body = ast.parse(cell.source).body
        last = body[-1] if body else None
        callee = dotted(last.value.func) if isinstance(last, ast.Expr) and isinstance(
            last.value, ast.Call) else None  # fmt: skip
        reached = [cell.source]
        if callee in helpers:
            helper = helpers[callee]
            reached.append(ast.unparse(helper))
            returns = [
                dotted(r.value.func) if isinstance(r.value, ast.Call) else None
                for r in ast.walk(helper)
                if isinstance(r, ast.Return)
            ]
            if not returns or any(r not in SPEED_PATH | {NOT_GRADED_HERE} for r in returns):
                problems.append(f"{gid}: {callee} returns {returns}, not perf.grade's score")
            elif not any(r in SPEED_PATH for r in returns):
                problems.append(f"{gid}: {callee} never reaches perf.grade")
        elif callee not in SPEED_PATH:
            problems.append(f"{gid}: its last line is {callee or 'no call'}, not perf.grade")
        for source in reached:
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Call) and dotted(node.func) in OTHER_ROUTES:
                    problems.append(f"{gid}: times through {dotted(node.func)}")
    return problems


def test_every_speed_cell_scores_through_the_one_speed_path(notebook):
    _, nb = notebook
    assert speed_route_problems(nb) == []


def speed_notebook(helper: str, cell: str):
    return nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(helper),
            nbformat.v4.new_code_cell(
                cell, metadata={"nbgrader": {"grade": True, "grade_id": "speed-x", "points": 1}}
            ),
        ]
    )


GOOD_HELPER = """def grade_it(p):
    if p:
        return perf.not_graded_here(p)
    return perf.grade(case, points=p)"""


@pytest.mark.parametrize(
    "helper, cell, problem",
    [
        ("", "perf.compare(f, g)", "not perf.grade"),
        ("", "x = perf.grade(case, points=1)\nprint(x)", "not perf.grade"),
        ("", "t = timing.bench(f)\nperf.grade(case, points=1)", "times through timing.bench"),
        ("def g():\n    return 1.0", "g()", "not perf.grade's score"),
        (
            "def g():\n    timing.bench(f)\n    return perf.grade(c, points=1)",
            "g()",
            "timing.bench",
        ),
        ("def g():\n    return perf.not_graded_here(1)", "g()", "never reaches perf.grade"),
        ("", "perf.score([v], 1)", "not perf.grade"),
    ],
)
def test_the_speed_path_rule_catches_a_cell_that_times_its_own_way(helper, cell, problem):
    problems = speed_route_problems(speed_notebook(helper, cell))
    assert problems and problem in problems[0], problems


def test_the_speed_path_rule_accepts_the_path_and_helpers_that_return_it():
    assert speed_route_problems(speed_notebook("", "perf.grade(case, points=1)")) == []
    assert speed_route_problems(speed_notebook(GOOD_HELPER, "grade_it(1)")) == []


# The judge runs again the given cells a test cell needs (grader.grading.roles' BOTH cells), with
# RUN_BENCHMARKS off: whatever such a cell times or profiles must sit under `if RUN_BENCHMARKS`,
# or the judge would time the student's functions outside any speed cell (perf.grade, in a
# helper the speed cells call, is the speed path itself).
MEASURES = OTHER_ROUTES | {"profile.each", "profile.compare"}


def unguarded_measures(source: str) -> list[str]:
    """The measuring calls of `source` outside an `if RUN_BENCHMARKS` block."""
    found = []

    def visit(node, guarded):
        if isinstance(node, ast.If) and "RUN_BENCHMARKS" in ast.unparse(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, guarded)
            return
        if isinstance(node, ast.Call) and dotted(node.func) in MEASURES and not guarded:
            found.append(dotted(node.func))
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(source), False)
    return found


def test_the_given_cells_the_judge_runs_measure_only_under_run_benchmarks(notebook):
    from grader.grading import roles

    _, nb = notebook
    plan = roles.plan(nb, *roles.answers(nb))
    both = [i for i, where in enumerate(plan.where) if where == roles.BOTH]
    assert both, "the judge needs no given cell: the plan reads nothing"
    problems = {i: unguarded_measures(roles.python(nb.cells[i].source)) for i in both}
    assert not {i: p for i, p in problems.items() if p}, problems


def test_unguarded_measures_are_found():
    guarded = "if RUN_BENCHMARKS:\n    timing.bench(f)\nelse:\n    profile.each(g)\n"
    assert unguarded_measures(guarded) == ["profile.each"]
    assert unguarded_measures("def f():\n    perf.compare(a, b)\n") == ["perf.compare"]
