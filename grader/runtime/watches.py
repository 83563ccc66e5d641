"""Contexts that watch a graded call (the launches it makes, the torch functions it calls, the
memory it allocates) register here while they are open. At grading the call may run in the
notebook's own process (grader.runtime.serve): the judge sends each open watch's `remote(codec)`
(its kind and parameters, encoded by a grader.runtime.wire.Codec) with the call, the same watch is
opened there around it, and the judge's watch `absorb(report, context)`s what it saw. While the
judge moves a call's arguments and results (`quiet`), the watches that are torch function modes
let torch's functions through unseen: that work is the grader's, not the graded call's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_OPEN: list = []
_QUIET = [0]
_ELSEWHERE: list = []


@contextmanager
def _pushed(stack: list, item) -> Iterator:
    stack.append(item)
    try:
        yield item
    finally:
        del stack[next(i for i, x in enumerate(stack) if x is item)]


def opened(watch):
    """Register `watch` as open for the block."""
    return _pushed(_OPEN, watch)


def current() -> list:
    """The open watches, the outermost first."""
    return list(_OPEN)


@contextmanager
def quiet() -> Iterator[None]:
    """The grader's own work in the block is no graded call's: watches let it through."""
    _QUIET[0] += 1
    try:
        yield
    finally:
        _QUIET[0] -= 1


def is_quiet() -> bool:
    return _QUIET[0] > 0


def measured_elsewhere(measurer):
    """While the block runs, speed cells ask `measurer` first (grading's judge: its
    `measure(case)` gives grader.runtime.perf.Measured, or None to measure here)."""
    return _pushed(_ELSEWHERE, measurer)


def elsewhere():
    """The measurer registered by `measured_elsewhere`, or None (a notebook's own process)."""
    return _ELSEWHERE[-1] if _ELSEWHERE else None
