"""Known-wrong solutions, one module per notebook: WRONG maps an exercise's grade_id to named
replacement sources for that exercise cell. tests/test_known_wrong.py swaps each one in and
requires the notebook's own graded tests to reject it.

A source may also be a `WithGiven`: the exercise cell's replacement together with edits of given
(ungraded, editable) cells between the exercise and its tests, such as a launcher that the
exercise hands out but a student may still rewrite.

PARTIAL (optional) maps names to `Partial` submissions: right for some exercises, blank or wrong
for others; each must earn exactly the test points of the exercises it gets right.

OTHER_WAYS (optional) maps an exercise's grade_id to right sources written otherwise than the
reference (`tl.where`, exp2 with log2(e) folded in, libdevice, Triton's tutorials' forms): each
must pass every test of its exercise, hidden lines included, in the interpreter as on a GPU."""

import functools
from dataclasses import dataclass, field

from grader.authoring import build


@dataclass(frozen=True)
class WithGiven:
    """`exercise` replaces the exercise cell; `given` maps a passage that exactly one given cell
    after it holds to the text that replaces the passage there."""

    exercise: str
    given: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Partial:
    """A submission right for some exercises and not others (a module's PARTIAL): `sources` maps
    grade_ids to the cells that replace them; every test cell of the exercises in `earns` must
    pass, and some test cell of each exercise in `fails` must fail; `says` maps some of those to a
    passage that the message of the first of their test cells to fail must hold."""

    sources: dict[str, str]
    earns: tuple[str, ...]
    fails: tuple[str, ...]
    says: dict[str, str] = field(default_factory=dict)


@functools.cache
def _reference_cells(notebook: str) -> dict[str, str]:
    (path,) = [a.source for a in build.assignments() if a.name == notebook]  # side files too
    return {c.id: c.source for c in build.to_notebook(path).cells}


def swapped(notebook: str, grade_id: str, *pairs: tuple[str, str]) -> str:
    """The reference's cell `grade_id` with each `old` (which must occur exactly once) replaced
    by `new`: a wrong version that follows the reference as it changes."""
    source = _reference_cells(notebook)[grade_id]
    for old, new in pairs:
        if source.count(old) != 1:
            raise ValueError(f"{grade_id}: {old!r} occurs {source.count(old)} times")
        source = source.replace(old, new)
    return source
