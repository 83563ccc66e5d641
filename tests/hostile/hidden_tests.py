"""Attacks on grading that show the hidden tests. A solution cell reads the hidden tests where the
student's process holds them: an IPython `pre_run_cell` hook sees the source of every later cell;
the running test cell's source is in its frame's file, as IPython's line cache holds it, and in
the `In` history. The attacker puts it in the outputs, plainly (printed, or as the message of an
error: flagged for a human look) or compressed and base64-encoded, which no filter tells from
noise: printed in the same cell or a later one, written into a display an earlier cell made,
into a widget's value, or into an error's message or its class name. Or it writes files beside
the notebook, which nbgrader copies into the feedback folder. No feedback file may hold a line
of the hidden tests, plain or decoded; the instructor's copy must show that each attack ran."""

import base64
import binascii
import html
import json
import re
import zlib

import nbformat

from tests import light
from tests.hostile import Attacker, Graded, Materials, printed

PRINTS = """
def _show(info):
    print(info.raw_cell)
    print(repr(info.raw_cell))


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
    print("wrote hidden.txt, hidden.html, setup.html")  # shows the attack ran


get_ipython().events.register("pre_run_cell", _show)
"""


# The encoded attacks' common part: where the student's process holds the hidden tests while they
# run, and the payload scheme (zlib, then base64), which the checks below decode.
READS = """
import base64, linecache, sys, zlib

_MARKER = "BEGIN HIDDEN" + " TESTS"  # not spelled out: this cell's own source must not hold it


def _packed(text):
    return base64.b64encode(zlib.compress(text.encode())).decode()


def _running_hidden_cell():
    # the running cell's source, where it holds hidden tests: a frame's file, in the line cache
    frame = sys._getframe(1)
    while frame is not None:
        source = "".join(linecache.getlines(frame.f_code.co_filename))
        if _MARKER in source:
            return source
        frame = frame.f_back
    return None


def _hidden_history():
    # every cell run so far that held hidden tests, from IPython's `In` history
    return "\\n".join(c for c in get_ipython().user_ns["In"] if _MARKER in c)
"""

# the course's checker, wrapped: it runs inside the hidden-test cell, whose source it reads
WRAPS_CHECK = """
import grader.runtime.checks as _checks

_check, _sent = _checks.check, set()


def _checking(*args, **kwargs):
    source = _running_hidden_cell()
    if source is not None and source not in _sent:
        _sent.add(source)
        {act}
    return _check(*args, **kwargs)


_checks.check = _checking
"""
SAME_CELL = READS + WRAPS_CHECK.format(act='print("payload", _packed(source))')
ERROR_MESSAGE = READS + WRAPS_CHECK.format(act='raise AssertionError("payload " + _packed(source))')
ERROR_CLASS = READS + WRAPS_CHECK.format(act="raise type(_packed(source), (AssertionError,), {})()")

LATER_CELL = (
    READS
    + """
def _later(info):
    history = _hidden_history()
    if history and _MARKER not in info.raw_cell and not getattr(_later, "sent", 0):
        _later.sent = 1
        print("payload", _packed(history))


get_ipython().events.register("pre_run_cell", _later)
"""
)

# a display made now, in the solution cell, rewritten once the hidden tests have run
DISPLAY = (
    READS
    + """
from IPython.display import display

_handle = display({"text/plain": "a display " + "made early"}, raw=True, display_id=True)


def _rewrite(result):
    if _hidden_history():
        _handle.update({"text/plain": "payload " + _packed(_hidden_history())}, raw=True)


get_ipython().events.register("post_run_cell", _rewrite)
"""
)

WIDGET = (
    READS
    + """
import ipywidgets
from IPython.display import display

_box = ipywidgets.Textarea(value="a widget " + "made early")
display(_box)


def _fill(result):
    if _hidden_history():
        _box.value = "payload " + _packed(_hidden_history())


get_ipython().events.register("post_run_cell", _fill)
"""
)

# the prompt numbers of the cells after the hidden tests: 7 bytes of a hidden line each
PROMPT_BYTES = 7
PROMPT_NUMBER = (
    READS
    + f"""
def _number(result):
    lines = _hidden_history().split(_MARKER, 1)[1:]
    if lines:
        line = lines[0].split("\\n")[1].strip()
        n = int.from_bytes(line[:{PROMPT_BYTES}].encode(), "big")
        get_ipython().execution_count = n  # Out[n] of the next result
        get_ipython().kernel.execution_count = n - 1  # In[n] of the next cell


get_ipython().events.register("post_run_cell", _number)
"""
)


def page_text(page: str) -> str:
    """What a feedback page shows, as text: tags dropped, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]*>", "", page)).split())


def hidden_lines(m: Materials) -> list[str]:
    """The lines of the source notebook's hidden-test regions (markers included), spaces
    collapsed, leaving out those the release shows too and those without 8 word characters."""
    from grader.grading import hidden_tests

    public = {" ".join(line.split()) for c in m.release.cells for line in c.source.split("\n")}
    found = []
    for cell in m.source.cells:
        inside = False
        for line in cell.source.split("\n"):
            inside = inside or hidden_tests.BEGIN in line
            if inside:
                found.append(" ".join(line.split()))
            inside = inside and hidden_tests.END not in line
    return [
        line
        for line in dict.fromkeys(found)
        if line not in public and len(re.sub(r"\W", "", line)) >= hidden_tests.MIN_CHARS
    ]


def leaked(graded: Graded, student: str) -> list[str]:
    """The hidden-test lines that the student's feedback page shows."""
    m = graded.materials
    page = graded.out / "feedback" / student / f"{m.notebook}.html"
    text = page_text(page.read_text())
    return [line for line in hidden_lines(m) if line in text]


def errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.output_type == "error"]


def said(cell) -> str:
    """What a cell's outputs say, as the page shows it: its stream text, or its first error."""
    if errors(cell):
        error = errors(cell)[0]
        return " ".join(f"{error.ename}: {error.evalue}".split())
    return " ".join("".join(o.get("text", "") for o in cell.get("outputs", [])).split())


def page_keeps_hidden_tests_hidden(result: Graded, student: str) -> None:
    """`student` ("blank" or "partial") of a graded class: the instructor's copy shows a hidden
    test failing (inside the hidden region, for "partial"); the feedback page holds no hidden
    line, shows the visible tests' own messages, then only each graded cell's score and status.
    (tests/test_feedback.py and, for 00's, tests/test_autograde.py check their classes with it.)"""
    from grader.grading import feedback, findings, gradebook, hidden_tests

    m, assignment = result.materials, result.materials.assignment
    autograded = nbformat.read(
        result.root / "autograded" / student / assignment / f"{m.notebook}.ipynb", as_version=4
    )
    first = next(i for i, c in enumerate(autograded.cells) if hidden_tests.BEGIN in c.source)
    copied = autograded.metadata[feedback.SNAPSHOT]["outputs"]
    assert len(copied) == first, "the copy was not taken as the first hidden-test cell started"
    hidden = [c for c in autograded.cells if hidden_tests.BEGIN in c.source]
    failed = [c for c in hidden if errors(c)]
    assert failed, f"{student}: no hidden-test cell failed; the class no longer tests anything"
    shown = " ".join(  # the instructor's copy: the leak this test guards against
        re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors(c)[0].traceback)) for c in failed
    )
    quoted = [line for line in hidden_lines(m) if line in " ".join(shown.split())]
    if student == "partial":
        assert quoted, "the failure is no longer inside the hidden region; update the class"
    assert not leaked(result, student), (student, leaked(result, student))
    assert findings.KINDS["hidden-tests"] not in result.review[student], "IPython's own quote"

    page = page_text((result.out / "feedback" / student / f"{m.notebook}.html").read_text())
    graded_before = [
        c for c in autograded.cells[:first] if c.metadata.get("nbgrader", {}).get("grade")
    ]
    assert graded_before, "no visible test before the first hidden one"
    for cell in graded_before:  # the visible tests' own messages, as outputs
        shown = page.count(said(cell)) - " ".join(cell.source.split()).count(said(cell))
        assert said(cell) and shown > 0, (student, said(cell))
    if student == "blank":
        assert "Traceback (most recent call last)" in page, "visible tests lost their tracebacks"
    points = gradebook.max_scores(gradebook.sqlite_url(result.root / "gradebook.db"), assignment)
    for cell in autograded.cells[first:]:  # from the first hidden test on: scores, no outputs
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in points:
            score = result.scores[student][grade_id]
            assert f"{grade_id}: {score:g} of {points[grade_id]:g} points;" in page, grade_id
        elif said(cell) and said(cell) not in " ".join(cell.source.split()):
            assert said(cell) not in page, (student, said(cell))
    for cell in failed:  # which exercise failed, and where to look
        grade_id = cell.metadata.nbgrader.grade_id
        ename = errors(cell)[0].ename
        assert f"{grade_id}: 0 of" in page and f"failed: raised {ename}." in page, grade_id
        visible = grade_id.removesuffix("-hidden") + "-visible"
        assert feedback.VISIBLE.format(test=visible) in page, grade_id


_BASE64 = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")


def decoded(text: str) -> list[str]:
    """Every payload of the encoded attacks' scheme (zlib, then base64) in `text`, decoded."""
    found = []
    for token in _BASE64.findall(text):
        try:
            found.append(zlib.decompress(base64.b64decode(token)).decode())
        except (binascii.Error, zlib.error, UnicodeDecodeError):
            continue
    return found


def _hold_hidden(texts: list[str], m: Materials) -> bool:
    lines = hidden_lines(m)
    return any(line in " ".join(t.split()) for t in texts for line in lines)


def _autograded(graded: Graded, student: str) -> nbformat.NotebookNode:
    m = graded.materials
    path = graded.root / "autograded" / student / m.assignment / f"{m.notebook}.ipynb"
    return nbformat.read(path, as_version=4)


def _page(graded: Graded, student: str) -> str:
    return (graded.out / "feedback" / student / f"{graded.materials.notebook}.html").read_text()


def _sealed(student: str, *shown: str):
    """The attack ran (the instructor's copy carries its payload, with hidden lines, in its
    outputs or widget state), and the feedback page carries none, plain or decoded; it shows
    `shown` (the trusted side's verdict, what the solution cell displayed before the hidden
    tests: text its source does not spell out)."""

    def check(graded: Graded):
        m, nb = graded.materials, _autograded(graded, student)
        carried = json.dumps([[c.get("outputs", []) for c in nb.cells], nb.metadata.get("widgets")])
        assert _hold_hidden(decoded(carried), m), f"{student}: the attack did not run"
        page = _page(graded, student)
        assert not _hold_hidden(decoded(page) + decoded(page_text(page)), m), student
        assert not leaked(graded, student), (student, leaked(graded, student))
        for text in shown:
            assert text in page_text(page), (student, text)

    return check


def _from_prompt(number: int) -> str:
    """The text a prompt number carries under PROMPT_NUMBER's scheme."""
    if not 0 <= number < 1 << (8 * PROMPT_BYTES):
        return ""
    return number.to_bytes(PROMPT_BYTES, "big").decode("ascii", errors="replace")


def _prompts_sealed(student: str):
    """The attack ran (the instructor's copy has prompt numbers that spell hidden lines' starts),
    and the feedback page shows none."""

    def check(graded: Graded):
        m, nb = graded.materials, _autograded(graded, student)
        lines = hidden_lines(m)

        def spelled(number: int) -> bool:
            text = _from_prompt(number)
            return text.isprintable() and any(line.startswith(text) for line in lines)

        counts = [c.get("execution_count") or 0 for c in nb.cells if c.cell_type == "code"]
        assert any(spelled(n) for n in counts), f"{student}: the attack did not run: {counts}"
        shown = re.findall(r"(?:In|Out)\s*\[(\d+)\]", page_text(_page(graded, student)))
        assert not [n for n in shown if spelled(int(n))], (student, shown)

    return check


def _not_in_page(student: str):
    """No hidden line on the page; the flag the attacker must also raise shows the attack ran."""

    def check(graded: Graded):
        assert not leaked(graded, student), (student, leaked(graded, student))

    return check


def _only_pages(student: str):
    def check(graded: Graded):
        m = graded.materials
        assert not leaked(graded, student), (student, leaked(graded, student))
        page = f"{m.notebook}.html"
        handed_out = [p.name for p in (graded.out / "feedback" / student).iterdir()]
        assert handed_out == [page], handed_out
        made = graded.root / "feedback" / student / m.assignment  # what release_feedback sends
        kept = {p.name for p in made.iterdir()}
        assert kept <= {page, "timestamp.txt"}, kept
        ran = graded.root / "autograded" / student / m.assignment
        nb = nbformat.read(ran / f"{m.notebook}.ipynb", as_version=4)
        assert any("wrote hidden.txt" in s for s in printed(nb)), "the attack did not run"
        # the sandbox kept what the kernel wrote in its private copy of the folder
        assert not (ran / "hidden.txt").exists() and not (ran / page).exists()

    return check


# The attacks that read what the kernel holds need no helper of a notebook: they attack the
# light assignment (tests/light.py), whose students cost a third of 00's. Those that wrap the
# checker the test cells call attack 00, which has one.
LIGHT_HIDDEN = f"test-{light.ANSWER}-hidden"


def _answered_with(code: str, cell: str = "relu-kernel"):
    """The answered notebook with `code` run at the end of its answer cell `cell` (00's)."""
    return lambda m: m.files(m.appended(m.answered(), cell, code))


def _passed(hidden: str, points: float) -> str:
    return f"{hidden}: {points:g} of {points:g} points; passed."


PASSED = _passed("test-relu-hidden", 2)
FAILED = "test-relu-hidden: 0 of 2 points; failed:"
LIGHT_PASSED = _passed(LIGHT_HIDDEN, light.FULL[LIGHT_HIDDEN])

ATTACKERS = [
    Attacker(
        "print-hidden-tests",
        light.ASSIGNMENT,
        _answered_with(PRINTS, light.ANSWER),
        flags=frozenset({"hidden-tests"}),
        detail=LIGHT_HIDDEN,
        base=Materials.answered,
        check=_not_in_page("print-hidden-tests"),
    ),
    Attacker(
        "raise-hidden-tests",
        light.ASSIGNMENT,
        lambda m: m.files(m.appended(m.release, light.ANSWER, RAISES)),
        flags=frozenset({"hidden-tests"}),
        detail=LIGHT_HIDDEN,
        total=None,
        check=_not_in_page("raise-hidden-tests"),
    ),
    Attacker(
        "write-hidden-tests",
        light.ASSIGNMENT,
        lambda m: m.files(m.appended(m.release, light.ANSWER, WRITES)),
        total=None,
        check=_only_pages("write-hidden-tests"),
    ),
    Attacker(
        "encoded-same-cell",
        "00_setup",
        _answered_with(SAME_CELL),
        base=Materials.answered,
        check=_sealed("encoded-same-cell", PASSED),
    ),
    Attacker(
        "encoded-later-cell",
        light.ASSIGNMENT,
        _answered_with(LATER_CELL, light.ANSWER),
        base=Materials.answered,
        check=_sealed("encoded-later-cell", LIGHT_PASSED),
    ),
    Attacker(
        "encoded-display-update",
        light.ASSIGNMENT,
        _answered_with(DISPLAY, light.ANSWER),
        base=Materials.answered,
        check=_sealed("encoded-display-update", LIGHT_PASSED, "a display made early"),
    ),
    Attacker(
        "encoded-widget",
        light.ASSIGNMENT,
        _answered_with(WIDGET, light.ANSWER),
        base=Materials.answered,
        check=_sealed("encoded-widget", LIGHT_PASSED, "Textarea(value='a widget made early')"),
    ),
    Attacker(  # the hidden tests fail on the error it raises: only the visible point is left
        "encoded-error-message",
        "00_setup",
        _answered_with(ERROR_MESSAGE),
        total=1.0,
        check=_sealed("encoded-error-message", f"{FAILED} raised AssertionError."),
    ),
    Attacker(
        "encoded-error-class",
        "00_setup",
        _answered_with(ERROR_CLASS),
        total=1.0,
        check=_sealed("encoded-error-class", f"{FAILED} raised an error."),
    ),
    Attacker(
        "encoded-prompt-number",
        light.ASSIGNMENT,
        _answered_with(PROMPT_NUMBER, light.ANSWER),
        base=Materials.answered,
        check=_prompts_sealed("encoded-prompt-number"),
    ),
]
