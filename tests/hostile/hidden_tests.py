"""Attacks on grading that show the hidden tests. The solution cell registers an IPython
`pre_run_cell` hook, which sees the source of every later cell, hidden tests included, and puts
it in that cell's outputs (printed, or as the message of an error), or in files beside the
notebook, which nbgrader copies into the feedback folder. Outputs that show the hidden tests
must be flagged for a human look, and no feedback file may hold a line of them."""

import html
import re

import nbformat

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

WRITES = """
def _show(info):
    for name in ("hidden.txt", "hidden.html", "setup.html"):
        with open(name, "a") as f:
            f.write(info.raw_cell)
    print("wrote hidden.txt, hidden.html, setup.html")  # shows the attack ran


get_ipython().events.register("pre_run_cell", _show)
"""


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
        assert not (ran / "hidden.txt").exists() and not (ran / "setup.html").exists()

    return check


ATTACKERS = [
    Attacker(
        "print-hidden-tests",
        "00_setup",
        lambda m: m.files(m.appended(m.answered(), "relu-kernel", PRINTS)),
        flags=frozenset({"hidden-tests"}),
        detail="test-relu-hidden",
        base=Materials.answered,
        check=_not_in_page("print-hidden-tests"),
    ),
    Attacker(
        "raise-hidden-tests",
        "00_setup",
        lambda m: m.files(m.appended(m.release, "relu-kernel", RAISES)),
        flags=frozenset({"hidden-tests"}),
        detail="test-relu-hidden",
        total=None,
        check=_not_in_page("raise-hidden-tests"),
    ),
    Attacker(
        "write-hidden-tests",
        "00_setup",
        lambda m: m.files(m.appended(m.release, "relu-kernel", WRITES)),
        total=None,
        check=_only_pages("write-hidden-tests"),
    ),
]
