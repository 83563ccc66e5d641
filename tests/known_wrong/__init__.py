"""Known-wrong solutions, one module per notebook: WRONG maps an exercise's grade_id to named
replacement sources for that exercise cell. tests/test_known_wrong.py swaps each one in and
requires the notebook's own graded tests to reject it.

A source may also be a `WithGiven`: the exercise cell's replacement together with edits of given
(ungraded, editable) cells between the exercise and its tests, such as a launcher that the
exercise hands out but a student may still rewrite."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class WithGiven:
    """`exercise` replaces the exercise cell; `given` maps a passage that exactly one given cell
    after it holds to the text that replaces the passage there."""

    exercise: str
    given: dict[str, str] = field(default_factory=dict)
