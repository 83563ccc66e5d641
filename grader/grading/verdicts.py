"""Speed verdicts read back as data: `grader.runtime.perf.publish_verdict` publishes each
comparison of a speed cell as display data of type SPEED_MIMETYPE beside its line of text; the
batch grader's report and bench/trust.py read them here. Printed text is never read as a verdict.
At grading the records are the judge's (grader.grading.judge): speed cells run where no student
code does, so a record there is read as the judge wrote it."""

from __future__ import annotations

from grader.runtime.published import SPEED_MIMETYPE, Verdict


def margin(measured: float | None, needed: float | None, at_most: bool) -> float | None:
    """How far a figure is past its threshold, as a ratio: 1 is the threshold, below 1 short of
    it (a floor's figure over it, or a ceiling over its figure); None without both."""
    if measured is None or not needed or (at_most and not measured):
        return None
    return needed / measured if at_most else measured / needed


def published(outputs: list) -> list[Verdict]:
    """Every speed verdict in a cell's outputs, in order."""
    return [
        Verdict.read(o["data"][SPEED_MIMETYPE])
        for o in outputs
        if o.get("output_type") in ("display_data", "execute_result")
        and SPEED_MIMETYPE in o.get("data", {})
    ]


def worst(records: list[Verdict]) -> Verdict | None:
    """The verdict with a figure furthest short of (or least past) its threshold."""
    measured = [r for r in records if r.measured is not None]
    return min(measured, key=lambda r: margin(r.measured, r.needed, r.at_most), default=None)
