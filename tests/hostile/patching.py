"""Class 2 of the attacks on grading: the checker replaced through a route a simple scan misses.
The patch sits on a blank notebook, so its honest base scores nothing; what nbgrader gives it is
not the question: it must be flagged."""

from tests.hostile import Attacker

ATTACKERS = [
    Attacker(
        "patch-checker-by-alias",
        "00_setup",
        lambda m: m.files(
            m.appended(
                m.release, "relu-kernel", "import grader.runtime.checks as c\nc.check = print"
            )
        ),
        flags=frozenset({"cheating"}),
        total=None,
    ),
]
