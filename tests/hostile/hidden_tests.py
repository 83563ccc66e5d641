"""Attacks that try to read the hidden tests. At grading, hidden-test code runs only in the judge
(grader.grading.judge), never in the student's process; these students look for it where an
in-process grader would have held it: an IPython `pre_run_cell` hook that sees the source of every
later cell, the `In` history, the running test cell's frame and IPython's line cache (from inside
a wrapped checker), and files written beside the notebook, which nbgrader copies into the feedback
folder. Each attack runs and finds nothing: no hidden line reaches the instructor's copy of the
notebook, plain or compressed and base64-encoded, nor the feedback page, and each scores its
honest base. A failing hidden test shows its message alone, never a traceback that would quote
its lines (grader.grading.notebook_guards)."""

import base64
import binascii
import html
import json
import re
import zlib

import nbformat

from tests import light
from tests.hostile import Attacker, Graded, Materials, printed

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"  # nbgrader's markers
MIN_CHARS = 8  # word characters of a hidden line worth looking for

PRINTS = """
def _show(info):
    print("a cell:", info.raw_cell)


get_ipython().events.register("pre_run_cell", _show)
"""

RAISES = """
def _show(info):
    raise RuntimeError(info.raw_cell)


get_ipython().events.register("pre_run_cell", _show)
"""

# named like the feedback page of the light assignment's notebook, light.html, among others
WRITES = """
def _show(info):
    for name in ("hidden.txt", "hidden.html", "light.html"):
        with open(name, "a") as f:
            f.write(info.raw_cell)
    print("wrote hidden.txt, hidden.html, light.html")  # shows the attack ran


get_ipython().events.register("pre_run_cell", _show)
"""

# Where an in-process grader held the hidden tests while they ran, and the payload scheme (zlib,
# then base64), which the checks below decode.
READS = """
import base64, linecache, sys, zlib

_MARKER = "BEGIN HIDDEN" + " TESTS"  # not spelled out: this cell's own source must not hold it


def _packed(text):
    return base64.b64encode(zlib.compress(text.encode())).decode()


def _running_hidden_cell():
    frame = sys._getframe(1)
    while frame is not None:
        source = "".join(linecache.getlines(frame.f_code.co_filename))
        if _MARKER in source:
            return source
        frame = frame.f_back
    return None


def _hidden_history():
    return "\\n".join(c for c in get_ipython().user_ns["In"] if _MARKER in c)
"""

# the course's checker, wrapped: where it ran inside the hidden-test cell, it read its source
WRAPS_CHECK = (
    READS
    + """
import grader.runtime.checks as _checks

_check = _checks.check


def _checking(*args, **kwargs):
    source = _running_hidden_cell()
    if source is not None:
        print("payload", _packed(source))
        raise AssertionError("payload " + _packed(source))
    return _check(*args, **kwargs)


_checks.check = _checking
"""
)

LATER_CELL = (
    READS
    + """
def _later(info):
    history = _hidden_history()
    print("history holds", len(history), "characters of hidden tests")
    if history:
        print("payload", _packed(history))


get_ipython().events.register("pre_run_cell", _later)
"""
)


def page_text(page: str) -> str:
    """What a feedback page shows, as text: tags dropped, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]*>", "", page)).split())


def hidden_lines(m: Materials) -> list[str]:
    """The lines of the source notebook's hidden-test regions (markers included), spaces
    collapsed, leaving out those the release shows too and those without MIN_CHARS word
    characters."""
    public = {" ".join(line.split()) for c in m.release.cells for line in c.source.split("\n")}
    found = []
    for cell in m.source.cells:
        inside = False
        for line in cell.source.split("\n"):
            inside = inside or BEGIN in line
            if inside:
                found.append(" ".join(line.split()))
            inside = inside and END not in line
    return [
        line
        for line in dict.fromkeys(found)
        if line not in public and len(re.sub(r"\W", "", line)) >= MIN_CHARS
    ]


_BASE64 = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")


def decoded(text: str) -> list[str]:
    """Every payload of the attacks' scheme (zlib, then base64) in `text`, decoded."""
    found = []
    for token in _BASE64.findall(text):
        try:
            found.append(zlib.decompress(base64.b64decode(token)).decode())
        except (binascii.Error, zlib.error, UnicodeDecodeError):
            continue
    return found


def _held(texts: list[str], m: Materials) -> list[str]:
    lines = hidden_lines(m)
    return [line for line in lines if any(line in " ".join(t.split()) for t in texts)]


def _autograded(graded: Graded, student: str) -> nbformat.NotebookNode:
    m = graded.materials
    path = graded.root / "autograded" / student / m.assignment / f"{m.notebook}.ipynb"
    return nbformat.read(path, as_version=4)


def _page(graded: Graded, student: str) -> str:
    return (graded.out / "feedback" / student / f"{graded.materials.notebook}.html").read_text()


def leaked(graded: Graded, student: str) -> list[str]:
    """The hidden-test lines that the student's feedback page or the outputs of the instructor's
    copy hold, plain or decoded. (The copy's test cells hold them in their source, as nbgrader
    puts them there.)"""
    nb, page = _autograded(graded, student), _page(graded, student)
    carried = json.dumps([[c.get("outputs", []) for c in nb.cells], nb.metadata.get("widgets")])
    texts = [carried, page_text(page), *decoded(carried), *decoded(page), *decoded(page_text(page))]
    return _held(texts, graded.materials)


def errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.output_type == "error"]


def said(cell) -> str:
    """What a cell's outputs say: its stream text, or its first error."""
    if errors(cell):
        error = errors(cell)[0]
        return " ".join(f"{error.ename}: {error.evalue}".split())
    return " ".join("".join(o.get("text", "") for o in cell.get("outputs", [])).split())


def page_keeps_hidden_tests_hidden(result: Graded, student: str) -> None:
    """`student` of a graded class fails a hidden test: the instructor's copy and the feedback
    page hold no hidden line; the failing hidden test's error is its message alone, on the page;
    each visible test's own message is on the page too. (tests/test_feedback.py and, for 00's,
    tests/test_autograde.py check their classes with it.)"""
    m = result.materials
    nb = _autograded(result, student)
    hidden = [c for c in nb.cells if BEGIN in c.source]
    failed = [c for c in hidden if errors(c)]
    assert failed, f"{student}: no hidden-test cell failed; the class no longer tests anything"
    assert not leaked(result, student), (student, leaked(result, student))
    page = page_text(_page(result, student))
    for cell in failed:
        (error,) = errors(cell)
        assert error.traceback == [f"{error.ename}: {error.evalue}"], error.traceback
        assert said(cell) in page, (student, said(cell))
    visible = [
        c
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade") and BEGIN not in c.source and c.outputs
    ]
    assert visible, "no visible test with an output"
    for cell in visible:  # as an output, not only in the cell's source
        shown = page.count(said(cell)) - " ".join(cell.source.split()).count(said(cell))
        assert said(cell) and shown > 0, (student, said(cell))
    assert hidden_lines(m), "the notebook has no hidden line to look for"


def _found_nothing(student: str, ran: str):
    """The attack ran (the instructor's copy shows `ran` printed) and found no hidden line."""

    def check(graded: Graded):
        nb = _autograded(graded, student)
        assert any(ran in s for s in printed(nb)), f"{student}: the attack did not run"
        assert not leaked(graded, student), (student, leaked(graded, student))

    return check


def _only_pages(student: str):
    def check(graded: Graded):
        m = graded.materials
        _found_nothing(student, "wrote hidden.txt")(graded)
        page = f"{m.notebook}.html"
        handed_out = [p.name for p in (graded.out / "feedback" / student).iterdir()]
        assert handed_out == [page], handed_out
        made = graded.root / "feedback" / student / m.assignment  # what release_feedback sends
        kept = {p.name for p in made.iterdir()}
        assert kept <= {page, "timestamp.txt"}, kept
        ran = graded.root / "autograded" / student / m.assignment
        # the sandbox kept what the kernel wrote in its private copy of the folder
        assert not (ran / "hidden.txt").exists() and not (ran / page).exists()

    return check


def _answered_with(code: str, cell: str = "relu-kernel"):
    """The answered notebook with `code` run at the end of its answer cell `cell` (00's)."""
    return lambda m: m.files(m.appended(m.answered(), cell, code))


def _light(student: str, code: str, ran: str, check=None) -> Attacker:
    return Attacker(
        student,
        light.ASSIGNMENT,
        _answered_with(code, light.ANSWER),
        base=Materials.answered,
        check=check or _found_nothing(student, ran),
    )


ATTACKERS = [
    _light("print-hidden-tests", PRINTS, "a cell: print("),
    _light("raise-hidden-tests", RAISES + '\nprint("hook set")', "hook set"),
    _light("write-hidden-tests", WRITES, "", _only_pages("write-hidden-tests")),
    _light("read-hidden-history", LATER_CELL, "history holds 0 characters"),
    Attacker(  # 00's test cells call checks.check: in the judge, not this wrapper
        "read-hidden-frames",
        "00_setup",
        _answered_with(WRAPS_CHECK + '\nprint("checker wrapped")'),
        base=Materials.answered,
        check=_found_nothing("read-hidden-frames", "checker wrapped"),
    ),
]
