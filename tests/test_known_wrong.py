"""The notebooks' own graded tests reject every known-wrong solution and accept the reference.

For each notebook with a module in tests/known_wrong/, one kernel runs the solution notebook top
to bottom; then, for each wrong source of an exercise (WRONG), the exercise cell is replaced by
it (and the given cells a `WithGiven` rewrites, by theirs) and the cells up to that exercise's
last test cell are run again: a test cell must fail. Where the module states the hint a failure
must carry (HINTS: a pattern of grader.runtime.hints, None for a bug that fits none, or a tuple
of those where the failure depends on memory a read past the end finds), the failure's message
must name that pattern, and only that one.
Slow-but-correct sources (SLOW, GPU only) must pass every test and score 0 in every speed cell.
Partial submissions (PARTIAL) must pass every test of the exercises they get right and fail one
of each exercise they do not.
The reference and the given cells are put back afterwards (tests/test_notebooks.py proves that
the reference passes).
"""

import importlib
import json
import pkgutil
import re

import pytest

import tests.known_wrong
from tests.known_wrong import WithGiven
from tests.notebook_session import Session

pytestmark = pytest.mark.slow

MODULES = [
    importlib.import_module(f"tests.known_wrong.{m.name}")
    for m in pkgutil.iter_modules(tests.known_wrong.__path__)
]
CASES = [
    (m.NOTEBOOK, grade_id, name)
    for m in MODULES
    for grade_id, variants in m.WRONG.items()
    for name in variants
]
SOURCES = {
    (m.NOTEBOOK, g, n): src for m in MODULES for g, v in m.WRONG.items() for n, src in v.items()
}
PARTIAL_CASES = [
    (m.NOTEBOOK, name, partial)
    for m in MODULES
    for name, partial in getattr(m, "PARTIAL", {}).items()
]
HINTS = {
    (m.NOTEBOOK, g, n): pattern
    for m in MODULES
    for g, v in getattr(m, "HINTS", {}).items()
    for n, pattern in v.items()
}
SLOW_CASES = [
    (m.NOTEBOOK, grade_id, name, source)
    for m in MODULES
    for grade_id, variants in getattr(m, "SLOW", {}).items()
    for name, source in variants.items()
]


@pytest.fixture(scope="module")
def sessions():
    opened = {}

    def session(name):
        if name not in opened:
            opened[name] = Session(name)
        return opened[name]

    yield session
    for s in opened.values():
        s.close()


def carries_its_hint(case, detail):
    """The failure names the pattern HINTS expects for `case` (no hint where it expects None);
    a case without an entry is not held to one."""
    if case not in HINTS:
        return
    named = re.findall(r"Likely cause \[([a-z0-9-]+)\]", detail)
    expected = HINTS[case] if isinstance(HINTS[case], tuple) else (HINTS[case],)
    assert len(named) <= 1 and (named[0] if named else None) in expected, (
        f"'{case[2]}' should carry the hint {' or '.join(map(str, expected))}, got {named}: "
        + detail
    )


def is_test(cell):
    meta = cell.metadata.get("nbgrader", {})
    return meta.get("grade") and not meta["grade_id"].startswith("speed-")


@pytest.mark.parametrize(
    "notebook, grade_id, name", CASES, ids=[f"{n}:{g}:{w}" for n, g, w in CASES]
)
def test_known_wrong_solution_is_rejected(sessions, notebook, grade_id, name):
    session = sessions(notebook)
    index, last = session.span(grade_id)
    source = SOURCES[notebook, grade_id, name]
    if not isinstance(source, WithGiven):
        source = WithGiven(source)
    cells = session.code_cells(index + 1, last + 1)
    rewritten = {}  # the given cells the source edits, by position in `cells`
    for old, new in source.given.items():
        (position,) = [i for i, c in enumerate(cells) if old in c.source and not is_test(c)]
        rewritten[position] = rewritten.get(position, cells[position].source).replace(old, new)
    try:
        status, detail = session.run(source.exercise)
        if status != "ok":  # a wrong source may already fail to define itself; that counts
            carries_its_hint((notebook, grade_id, name), detail)
            return
        for position, cell in enumerate(cells):
            status, detail = session.run(rewritten.get(position, cell.source))
            if status != "ok" and is_test(cell):
                # rejected, with `detail` as the student would read it
                carries_its_hint((notebook, grade_id, name), detail)
                return
        pytest.fail(f"'{name}' passed every test of {grade_id}")
    finally:
        for cell in [session.cells[index], *(cells[p] for p in rewritten)]:
            status, detail = session.run(cell.source)  # the reference and given cells, back
            assert status == "ok", f"the reference no longer defines itself: {detail}"


@pytest.mark.parametrize(
    "notebook, name, partial", PARTIAL_CASES, ids=[f"{n}:{w}" for n, w, _ in PARTIAL_CASES]
)
def test_partial_solution_earns_its_exercises_only(sessions, notebook, name, partial):
    session = sessions(notebook)
    spans = {g: session.span(g) for g in (*partial.sources, *partial.earns, *partial.fails)}
    first = min(index for index, _ in spans.values())
    last = max(end for _, end in spans.values())
    status = {}  # test cell id -> (status, error), as the notebook runs top to bottom
    try:
        for cell in session.code_cells(first, last + 1):
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if grade_id.startswith("speed-"):
                continue
            status[cell.id] = session.run(partial.sources.get(grade_id, cell.source))
        for grade_id in partial.earns:
            index, end = spans[grade_id]
            for cell in session.code_cells(index + 1, end + 1):
                if is_test(cell):
                    assert status[cell.id][0] == "ok", (
                        f"'{name}' loses {cell.id} of {grade_id}, which it gets right: "
                        f"{status[cell.id][1]}"
                    )
        for grade_id in partial.fails:
            index, end = spans[grade_id]
            tests = [c for c in session.code_cells(index + 1, end + 1) if is_test(c)]
            assert any(status[c.id][0] != "ok" for c in tests), (
                f"'{name}' passed every test of {grade_id}"
            )
    finally:
        for grade_id in partial.sources:
            status_back, detail = session.run(session.cells[spans[grade_id][0]].source)
            assert status_back == "ok", f"the reference no longer defines itself: {detail}"


@pytest.mark.gpu
@pytest.mark.parametrize(
    "notebook, grade_id, name, source",
    SLOW_CASES,
    ids=[f"{n}:{g}:{w}" for n, g, w, _ in SLOW_CASES],
)
def test_slow_but_correct_solution_scores_no_speed_points(
    sessions, notebook, grade_id, name, source
):
    session = sessions(notebook)
    index, last = session.span(grade_id, speed=True)
    try:
        status, detail = session.run(source)
        assert status == "ok", f"'{name}' does not define itself: {detail}"
        speed_cells = 0
        for cell in session.code_cells(index + 1, last + 1):
            printed = []
            status, detail = session.run(cell.source, printed)
            assert status == "ok", f"'{name}' must be correct, but {cell.id} fails: {detail}"
            if cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("speed-"):
                speed_cells += 1
                score = float(printed[-1])
                shown = "".join(p if isinstance(p, str) else f"{json.dumps(p)}\n" for p in printed)
                assert score == 0.0, f"'{name}' earned {score} in {cell.id}:\n{shown}"
        assert speed_cells, f"{grade_id} has no speed cell"
    finally:
        status, detail = session.run(session.cells[index].source)
        assert status == "ok", f"the reference no longer defines itself: {detail}"
