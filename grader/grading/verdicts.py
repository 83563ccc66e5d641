"""Speed verdicts as the grader prints them, and read back: `perf` and `integrity` print
"PASS 1.53x eager (needs 1.2x)" or "NOT YET 71% of copy bandwidth (needs 80%)", 07's speed cell
one line per comparison ("D=64 ... vs SDPA flash: 1.33x (needs 0.8x) ok"), and a speed cell whose
figures cannot be trusted one "SPEED FLAGGED: <reason>" line per reason; the batch grader's
report and the benchmark's trust runs read those lines here."""

from __future__ import annotations

import re

from grader.runtime.perf import FLAGGED, NOT_GRADED_HERE  # noqa: F401 (read with the verdicts)

_NEEDS = re.compile(r"\(needs (\d+(?:\.\d+)?)(x|%)\)")
_FIGURE = re.compile(r"(\d+(?:\.\d+)?)(x|%)")
_VERDICT = re.compile(r"^(PASS|NOT YET)\b", re.MULTILINE)


def ratios(text: str) -> list[tuple[float, float, str]]:
    """(measured, needed, unit) for every "(needs ...)" in `text`, in order; the measured figure
    is the last one before it on its line ("0.12x eager (5 operations) (needs 2.5x)" -> 0.12).
    The unit is "x" (a speedup) or "%" (a share of the copy bandwidth), as printed."""
    found = []
    for needs in _NEEDS.finditer(text):
        line = text[text.rfind("\n", 0, needs.start()) + 1 : needs.start()]
        figures = _FIGURE.findall(line)
        if figures:
            found.append((float(figures[-1][0]), float(needs[1]), figures[-1][1]))
    return found


def passed(text: str) -> bool:
    """True when the last verdict line in `text` says PASS."""
    verdicts = _VERDICT.findall(text)
    return bool(verdicts) and verdicts[-1] == "PASS"


def flags(text: str) -> list[str]:
    """The reasons a speed cell was flagged (not scored), one per "SPEED FLAGGED: ..." line."""
    prefix = f"{FLAGGED}: "
    return [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]
