"""Speed verdicts read back as data: `grader.runtime.perf.publish_verdict` publishes each
comparison of a speed cell as display data of type SPEED_MIMETYPE beside its line of text; the
batch grader's report and bench/trust.py read them here. Printed text is never read as a verdict.
At grading the records are the judge's (grader.grading.judge): the student's process never runs
a speed cell."""

from __future__ import annotations

import math
from dataclasses import dataclass

from grader.runtime.published import SPEED_MIMETYPE

UNITS = ("x", "%")


@dataclass(frozen=True)
class Record:
    """One published comparison: `measured` (None: the measurement stopped, flagged) and
    `needed` in `unit` ("x" or "%"), a floor, or a ceiling where `at_most` (the DRAM bytes
    counted over the fewest); `flags` say why the figure cannot be trusted."""

    comparison: str
    measured: float | None
    needed: float
    unit: str
    passed: bool
    flags: tuple[str, ...] = ()
    at_most: bool = False

    @property
    def margin(self) -> float | None:
        return margin(self.measured, self.needed, self.at_most)


def margin(measured: float | None, needed: float | None, at_most: bool) -> float | None:
    """How far a figure is past its threshold, as a ratio: 1 is the threshold, below 1 short of
    it (a floor's figure over it, or a ceiling over its figure); None without both."""
    if measured is None or not needed or (at_most and not measured):
        return None
    return needed / measured if at_most else measured / needed


def parse(data: object) -> Record | str:
    """The record in one SPEED_MIMETYPE payload, or why it is not a well-formed one."""
    if not isinstance(data, dict):
        return f"a speed record that is not a JSON object ({type(data).__name__})"
    comparison, measured, needed = data.get("comparison"), data.get("measured"), data.get("needed")
    unit, passed, flags = data.get("unit"), data.get("passed"), data.get("flags", [])
    at_most = data.get("at_most", False)
    numbers = (needed,) if measured is None else (measured, needed)
    if not isinstance(comparison, str) or not comparison:
        return "a speed record without a comparison name"
    if not all(type(v) in (int, float) and math.isfinite(v) for v in numbers) or needed <= 0:
        return f"a speed record for {comparison!r} without finite figures"
    if unit not in UNITS or not isinstance(passed, bool):
        return f"a speed record for {comparison!r} with unit {unit!r}, passed {passed!r}"
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        return f"a speed record for {comparison!r} with malformed flags"
    if not isinstance(at_most, bool) or (at_most and unit != "x"):
        return f"a speed record for {comparison!r} with at_most {at_most!r} in {unit!r}"
    within = measured is not None and (measured <= needed if at_most else measured >= needed)
    if passed != (within and not flags):
        figure = "no figure" if measured is None else f"{measured:g}{unit}"
        return f"a speed record for {comparison!r} that says passed={passed} of {figure}"
    figure = None if measured is None else float(measured)
    return Record(comparison, figure, float(needed), unit, passed, tuple(flags), at_most)


def published(outputs: list) -> list[Record | str]:
    """Every speed record in a cell's outputs (parsed, or why not), in order."""
    return [
        parse(o["data"][SPEED_MIMETYPE])
        for o in outputs
        if o.get("output_type") in ("display_data", "execute_result")
        and SPEED_MIMETYPE in o.get("data", {})
    ]


def worst(records: list[Record]) -> Record | None:
    """The record with a figure furthest short of (or least past) its threshold."""
    measured = [r for r in records if r.measured is not None]
    return min(measured, key=lambda r: r.margin, default=None)
