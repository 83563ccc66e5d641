"""Class 7 of the attacks on grading: a notebook that stops the whole batch for everyone unless
its trouble is kept its own. JSON nested deeper than Python's recursion limit broke the reading
of every submission (RecursionError); nested a little less, nbformat itself gives up. Each must
be graded as not a notebook (0) while the batch goes on."""

import json

import nbformat

from tests import light
from tests.hostile import Attacker


def _nested(m, depth: int) -> dict[str, bytes]:
    """The answered notebook with `depth` nested lists in its metadata."""
    text = json.dumps({**json.loads(nbformat.writes(m.answered())), "metadata": {"x": None}})
    deep = "[" * depth + "]" * depth
    return {f"{m.notebook}.ipynb": text.replace('{"x": null}', '{"x": ' + deep + "}").encode()}


ATTACKERS = [
    Attacker(
        f"nested-metadata-{depth}",
        light.ASSIGNMENT,
        lambda m, depth=depth: _nested(m, depth),
        flags=frozenset({"not-a-notebook"}),
        detail="nested too deeply",
        total=0.0,
    )
    for depth in (100_000, 600)
]
