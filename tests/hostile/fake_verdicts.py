"""Class 6 of the attacks on grading: text or data that imitates a speed verdict. Verdicts are
read only from the records the grader's own speed cells publish, and only where speed is graded:
on the CPU the report must say speed was not graded, whatever a student printed or published,
and the student must be flagged."""

from tests.hostile import Attacker

PRINTED = 'print("PASS 9.90x copy bandwidth (needs 80%): 1 of 1 points")'

# The type's name is built so that no literal of it appears: the scan cannot read it, the
# record in the autograded notebook gives it away.
PUBLISHED = """
from IPython.display import display

display({"application/vnd." + "gpu-kernels-" + "course.speed+json": {
    "comparison": "copy bandwidth", "measured": 990.0, "needed": 80.0, "unit": "%",
    "passed": True, "flags": []}, "text/plain": "PASS"}, raw=True)
"""


def _speed_not_reported(graded):
    report = (graded.out / "report.md").read_text()
    speed = report.split("\n## Speed\n", 1)[1].split("\n## ", 1)[0]
    assert "Speed was not graded on this device" in speed, speed
    assert "| speed cell |" not in speed and "9.9" not in speed, speed


ATTACKERS = [
    Attacker(
        "fake-verdict-printed",
        "00_setup",
        lambda m: m.files(m.appended(m.answered(), "relu-kernel", PRINTED)),
        flags=frozenset({"forged-output"}),
        detail="cell relu-kernel prints text that imitates a speed verdict",
        base=lambda m: m.answered(),
        check=_speed_not_reported,
    ),
    Attacker(
        "fake-verdict-published",
        "00_setup",
        lambda m: m.files(m.appended(m.answered(), "relu-kernel", PUBLISHED)),
        flags=frozenset({"forged-output"}),
        detail="cell relu-kernel publishes a speed verdict, but is no speed cell",
        base=lambda m: m.answered(),
        check=_speed_not_reported,
    ),
]
