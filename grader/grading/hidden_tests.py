"""Hidden tests kept out of the feedback students receive.

nbgrader's ClearHiddenTests removes the hidden region from a test cell's source, but the cell's
outputs still quote it: IPython's traceback of a failing check shows the lines around the failing
call, and a submission's own code can print the source of the cells it ran (an IPython
`pre_run_cell` hook sees every cell). `HideHiddenTests`, one of GenerateFeedback's preprocessors
(grader/grading/nbgrader_config.py), cleans every output of the notebook:

- an error in a test cell with hidden tests keeps the failing check's exception type and message
  (the course's checks write there what to fix) and loses its traceback frames;
- every output line that holds a line of hidden-test source is replaced by `REMOVED`.

Visible test cells keep their tracebacks: their frames quote the visible test (shown in the
feedback anyway), the student's own code and the course's runtime, all public; the line check
still runs on them, so a frame that does quote hidden source loses that line.

The hidden lines come from the gradebook (the source cells nbgrader saved when it generated the
assignment), never from the student's files. A line is matched with its whitespace squeezed out,
as written and as decoded (ANSI colors, HTML tags and entities, repr and JSON escapes), so
indentation, quoting and traceback prefixes do not hide it; lines that also appear outside the
hidden regions, and lines too short to tell anything (`try:`, `)`), are not secrets. What this
cannot see is hidden source that a submission encodes (base64, an image of it); `shown_by` finds
the cells whose outputs hold it plainly, and grader.grading.findings lists them for a human look.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

BEGIN, END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"  # nbgrader's ClearHiddenTests delimiters
MIN_CHARS = 8  # a line of fewer word characters (`finally:`, `return []`) reveals nothing
REMOVED = "[a line of the hidden tests was removed here]"
NO_TRACEBACK = (
    "(the traceback of a cell with hidden tests is not shown; the message above says what failed)"
)
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

    def redact(self, text: str) -> str:
        """`text` with each line that holds a hidden line replaced by REMOVED."""
        return "\n".join(REMOVED if self.leaks(line) else line for line in text.split("\n"))

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


def clean_output(output, hidden: Hidden, hidden_cell: bool) -> None:
    """Redact one output in place; an error of a cell with hidden tests keeps only its message."""
    kind = output.get("output_type")
    if kind == "stream":
        output["text"] = hidden.redact(output.get("text", ""))
    elif kind == "error":
        output["ename"] = hidden.redact(output.get("ename", ""))
        output["evalue"] = hidden.redact(output.get("evalue", ""))
        if hidden_cell:
            message = f"\x1b[0;31m{output['ename']}\x1b[0m: {output['evalue']}"
            output["traceback"] = [message, NO_TRACEBACK]
        else:
            output["traceback"] = [hidden.redact(t) for t in output.get("traceback", [])]
    elif "data" in output:
        data = output["data"]
        for mime, value in list(data.items()):
            if isinstance(value, str):
                data[mime] = hidden.redact(value)
            elif hidden.shows(json.dumps(value)):
                del data[mime]
        if not data:
            data["text/plain"] = REMOVED


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


def clean(nb, hidden: Hidden) -> None:
    """Redact every output of `nb` in place, and drop its saved widget state (which feedback pages
    embed) where that shows hidden-test source."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            clean_output(output, hidden, _grade_id(cell) in hidden.cells)
    if hidden.shows(json.dumps(nb.metadata.get("widgets", {}))):
        del nb.metadata["widgets"]


@functools.cache
def _preprocessor():
    """HideHiddenTests, made on first use: nbgrader is imported only where it runs."""
    import nbformat
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.preprocessors import NbGraderPreprocessor

    class HideHiddenTests(NbGraderPreprocessor):
        """Feedback without hidden-test source in any output (see grader.grading.hidden_tests)."""

        def preprocess(self, nb, resources):
            info = resources["nbgrader"]
            hidden = Hidden.from_gradebook(
                info["db_url"], info["assignment"], info["notebook"], self._release(info)
            )
            clean(nb, hidden)
            return nb, resources

        def _release(self, info):
            """The released notebook, from the course directory."""
            coursedir = CourseDirectory(config=self.config)
            folder = coursedir.format_path(coursedir.release_directory, ".", info["assignment"])
            path = Path(folder) / f"{info['notebook']}.ipynb"
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path}: feedback needs the released notebook, to tell the hidden tests from "
                    f"what students saw; run `nbgrader generate_assignment {info['assignment']}`"
                )
            return nbformat.read(path, as_version=4)

    return HideHiddenTests


def __getattr__(name: str):
    if name == "HideHiddenTests":  # the name nbgrader_config.py gives GenerateFeedback
        return _preprocessor()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
