"""Hidden-test source shown plainly in a graded notebook's outputs, for a human look.

The feedback students receive shows nothing their code produced once it could have read a hidden
test (grader.grading.feedback), so nothing is filtered here. The autograded notebook, the
instructor's copy, keeps every output: `shown_by` finds the cells whose outputs quote hidden
lines (printed by a submission that went looking for the tests: an IPython `pre_run_cell` hook
sees every cell's source), and grader.grading.findings flags them. What it cannot see is hidden
source that a submission encodes (base64, an image of it).

The hidden lines come from the gradebook (the source cells nbgrader saved when it generated the
assignment), never from the student's files. A line is matched with its whitespace squeezed out,
as written and as decoded (ANSI colors, HTML tags and entities, repr and JSON escapes), so
indentation, quoting and traceback prefixes do not hide it; lines that also appear outside the
hidden regions, and lines too short to tell anything (`try:`, `)`), are not secrets.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

BEGIN, END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"  # nbgrader's ClearHiddenTests delimiters
MIN_CHARS = 8  # a line of fewer word characters (`finally:`, `return []`) reveals nothing
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TAG = re.compile(r"<[^>]*>")
_ESCAPED = re.compile(r"\\(['\"\\])")  # \' \" \\ as repr and JSON write them
_SPACE = re.compile(r"\s+")
_NOT_WORD = re.compile(r"\W")
_COMMENT = re.compile(r"\s*#[^'\"]*$")  # a trailing comment without quotes in it


def _squeezed(text: str) -> str:
    """`text` without its whitespace: what survives indentation, line prefixes and wrapping."""
    return _SPACE.sub("", text)


def _forms(line: str) -> set[str]:
    """One output line as written and as shown: ANSI colors dropped; HTML tags dropped and
    entities decoded; backslash escapes decoded; whitespace squeezed out of each."""
    plain = _ANSI.sub("", line)
    shown = html.unescape(_TAG.sub("", plain))
    return {
        _squeezed(t) for t in (plain, shown, _ESCAPED.sub(r"\1", plain), _ESCAPED.sub(r"\1", shown))
    }


@dataclass(frozen=True)
class Hidden:
    """What one notebook hides: its test cells with hidden regions, and the lines in those
    regions (with and without a trailing comment; whitespace squeezed out) that the notebook as
    released does not show."""

    cells: frozenset[str]  # grade_ids
    lines: frozenset[str]

    @classmethod
    def from_sources(cls, sources: dict[str, str], public: Iterable[str] = ()) -> Hidden:
        """From {grade_id: source} of the notebook's graded and read-only cells as its authors
        wrote them, and the source of the notebook's cells as released (`public`)."""
        cells, secret, shown = set(), set(), set()
        for grade_id, source in sources.items():
            inside = False
            for line in source.split("\n"):
                if BEGIN in line:
                    inside = True
                    cells.add(grade_id)
                forms = {_squeezed(line), _squeezed(_COMMENT.sub("", line))}  # and without it
                (secret if inside else shown).update(forms)
                if END in line:
                    inside = False
        shown |= {_squeezed(line) for source in public for line in source.split("\n")}
        lines = {s for s in secret - shown if len(_NOT_WORD.sub("", s)) >= MIN_CHARS}
        return cls(frozenset(cells), frozenset(lines))

    @classmethod
    def from_gradebook(cls, db_url: str, assignment: str, notebook: str, release) -> Hidden:
        """From the source cells that `nbgrader generate_assignment` saved in the gradebook, and
        the notebook it released."""
        from nbgrader.api import Gradebook

        with Gradebook(db_url) as gb:
            found = gb.find_notebook(notebook, assignment)
            sources = {c.name: c.source for c in found.source_cells}
        return cls.from_sources(sources, [c.source for c in release.cells])

    def leaks(self, line: str) -> bool:
        """Whether one line of output holds a hidden line."""
        return any(secret in form for form in _forms(line) for secret in self.lines)

    def shows(self, text: str) -> bool:
        return any(self.leaks(line) for line in text.split("\n"))


def _texts(output) -> list[str]:
    """The text an output shows: stream text, error parts, and every text-like display form."""
    if output.get("output_type") == "stream":
        return [output.get("text", "")]
    if output.get("output_type") == "error":
        return [output.get("ename", ""), output.get("evalue", ""), *output.get("traceback", [])]
    data = output.get("data", {})
    return [v if isinstance(v, str) else json.dumps(v) for v in data.values()]


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def shown_by(cell, hidden: Hidden) -> bool:
    """Whether the cell's outputs show hidden-test source. The tracebacks of a hidden-test cell's
    own errors are left out: IPython quotes a failing test there, through no fault of the
    student's."""
    for output in cell.get("outputs", []):
        texts = _texts(output)
        if output.get("output_type") == "error" and _grade_id(cell) in hidden.cells:
            texts = texts[:2]  # ename, evalue
        if any(hidden.shows(t) for t in texts):
            return True
    return False
