"""The hostile class on a GPU: 02's, 05's, 07's, 09's and 10's attackers graded end to end by
`python -m grader autograde --mode gpu`, each student's kernel in its sandbox on a GPU of its
own, beside an honest student and each attacker's honest base, speed cells included. Every
attack on speed (tests/hostile/speed_routes.py) must be flagged with its speed cells at 0; every
attack outside the answer cells (tests/hostile/outside_answers.py) must score its base, speed
included. What each student scored is kept in build/report/hostile_gpu_<notebook>.json, the
record of a GPU run. Needs a GPU (two are used when there are two) and bubblewrap, as `make
autograde` does; 09's batch needs an sm_90 GPU, where alone its float8 and warp-specialization
cells score, and is skipped on others. COURSE_HOSTILE_STUDENTS (attackers' names, comma-separated)
grades only those, with their bases and the honest student, to fit a job's time limit; with
COURSE_HOSTILE_HONEST=0 too, the honest student is graded only as an attacker's base (one of 10's
students costs about two minutes on an H200)."""

import json
import os
from pathlib import Path

import pytest
import torch

from grader.grading import gradebook
from tests import hostile
from tests.test_hostile import EVERYONE, check_attacker, graded

pytestmark = pytest.mark.gpu

GPU_BATCHES = (
    "02_first_kernels",
    "05_autotuning",
    "07_flash_attention",
    "09_hopper",
    "10_flash_backward",
)
ONLY = {s for s in os.environ.get("COURSE_HOSTILE_STUDENTS", "").split(",") if s}
ATTACKERS = [
    a
    for a in EVERYONE
    if a.assignment in GPU_BATCHES
    and (a.student in ONLY if ONLY else True)
    and (a.gpu_only or a.assignment != "02_first_kernels")  # 02's others grade on the CPU
]
HONEST = () if os.environ.get("COURSE_HOSTILE_HONEST") == "0" else ("honest-1",)
RECORDS = Path(__file__).parent.parent / "build" / "report"
SPEED_CELL_TIMEOUT, SUBMISSION_TIMEOUT = 600, 1200
MEMORY_GIB = 16  # what make autograde gives a student where the machine has it
HOPPER_ONLY = ("09_hopper",)  # an honest student earns every point on sm_90 alone


def _needs_its_gpu(assignment: str) -> None:
    if assignment in HOPPER_ONLY and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip(f"{assignment} earns every point on an sm_90 GPU alone")


def _options() -> tuple[str, ...]:
    """The batch's device options: two GPUs where there are two, or the nvidia-smi indexes
    that COURSE_TEST_GPUS names (to leave the others to other work)."""
    gpus = os.environ.get("COURSE_TEST_GPUS") or ",".join(
        str(i) for i in range(min(2, torch.cuda.device_count()))
    )
    return (
        *("--mode", "gpu", "--gpus", gpus, "--speed-cell-timeout", str(SPEED_CELL_TIMEOUT)),
        *("--timeout", str(SUBMISSION_TIMEOUT), "--memory-limit", str(MEMORY_GIB)),
    )


@pytest.fixture(scope="module")
def batches(tmp_path_factory, registered_course):
    base, done = tmp_path_factory.getbasetemp(), {}

    def batch(assignment: str) -> tuple[hostile.Graded, int, str]:
        mine = tuple(a for a in ATTACKERS if a.assignment == assignment)
        done[assignment] = graded(
            assignment, base / f"gpu-{assignment}", registered_course, mine, HONEST,
            _options(),
        )  # fmt: skip
        return done[assignment]

    yield batch
    RECORDS.mkdir(parents=True, exist_ok=True)
    for name, (result, code, _) in done.items():
        record = {
            "device": torch.cuda.get_device_name(),
            "gpus": _options()[3],
            "torch": torch.__version__,
            "exit": code,
            "scores": result.scores,
            "needs_review": result.review,
            "dropped": result.dropped,
            "bases": result.bases,
        }
        (RECORDS / f"hostile_gpu_{name}.json").write_text(json.dumps(record, indent=1))


@pytest.mark.parametrize(
    "assignment", [a for a in GPU_BATCHES if not ONLY or any(x.assignment == a for x in ATTACKERS)]
)
def test_the_honest_student_earns_every_point_speed_included(batches, assignment):
    if not HONEST:
        pytest.skip("COURSE_HOSTILE_HONEST=0: the honest student is graded only as a base")
    _needs_its_gpu(assignment)
    result, code, printed = batches(assignment)
    assert code == 0, printed[-3000:]
    url = gradebook.sqlite_url(result.root / "gradebook.db")
    full = gradebook.max_scores(url, assignment)
    assert result.scores["honest-1"] == full, result.scores["honest-1"]
    assert result.review["honest-1"] == "", result.review["honest-1"]


@pytest.mark.parametrize("attacker", ATTACKERS, ids=lambda a: a.student)
def test_attacker_on_a_gpu(batches, attacker):
    _needs_its_gpu(attacker.assignment)
    result, _, _ = batches(attacker.assignment)
    check_attacker(result, attacker, lambda scores: scores)  # every cell, speed included
