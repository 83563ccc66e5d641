"""The DRAM bytes counted in grading: 02's fused kernel graded by `python -m grader autograde
--mode gpu`, each student's kernel in its sandbox, where Nsight Compute counts what the kernel
reads and writes beside the bandwidth it is timed at (grader.runtime.perf.Traffic). The honest
kernel moves about the fewest bytes; one that reads `x` a second time, from rows half the
tensor away (so from DRAM, not from a cache), is counted moving about 1.5 times as many. The
records each speed cell published are kept in build/report/traffic_gpu.json. Needs a GPU,
Nsight Compute with permission to count, and bubblewrap, as `make autograde` does."""

import json

import nbformat
import pytest
import torch

from grader.grading import gradebook, verdicts
from grader.runtime import perf
from grader.runtime.published import Verdict
from tests import hostile
from tests.test_hostile import HONEST, graded
from tests.test_hostile_gpu import RECORDS, _options

pytestmark = pytest.mark.gpu

ASSIGNMENT, CELL = "02_first_kernels", "speed-fused-bandwidth"
SECOND_READ = """
    far = (offs_m + M // 2) % M  # rows half the tensor away: not in any cache
    x_far = tl.load(x_ptr + far[:, None] * stride_xm + offs_n[None, :], mask=mask)
    x = x + 0.0 * x_far.to(tl.float32)  # the same values, one more read of x"""


def reads_twice(m: hostile.Materials) -> nbformat.NotebookNode:
    return m.edited(
        m.answered(),
        "fused-kernel",
        "x = tl.load(x_ptrs, mask=mask).to(tl.float32)  # (BLOCK_M, BLOCK_N)",
        "x = tl.load(x_ptrs, mask=mask).to(tl.float32)  # (BLOCK_M, BLOCK_N)" + SECOND_READ,
    )


# not an attacker: a correct, slower kernel, graded in the same batch machinery
READS_TWICE = hostile.Attacker(
    "reads-x-twice", ASSIGNMENT, lambda m: m.files(reads_twice(m)), total=None
)


def _cell(result: hostile.Graded, student: str):
    ran = result.root / "autograded" / student / ASSIGNMENT / f"{result.materials.notebook}.ipynb"
    nb = nbformat.read(ran, as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == CELL]
    return cell


def _records(cell) -> list[Verdict]:
    return verdicts.published(cell.outputs)


def _printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.fixture(scope="module")
def batch(tmp_path_factory, registered_course):
    result, code, printed = graded(
        ASSIGNMENT, tmp_path_factory.mktemp("traffic"), registered_course, (READS_TWICE,),
        HONEST, _options(),
    )  # fmt: skip
    assert code == 0, printed[-3000:]
    cells = {s: _cell(result, s) for s in (*HONEST, READS_TWICE.student)}
    records = {s: (_records(c), _printed(c)) for s, c in cells.items()}
    RECORDS.mkdir(parents=True, exist_ok=True)
    (RECORDS / "traffic_gpu.json").write_text(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "scores": {s: result.scores[s] for s in records},
                "records": {s: [r.__dict__ for r in rs] for s, (rs, _) in records.items()},
                "printed": {s: text for s, (_, text) in records.items()},
            },
            indent=1,
        )
    )
    return result, records


def _counted(cell: tuple[list[Verdict], str]) -> Verdict:
    records, printed = cell
    counted = [r for r in records if r.comparison == perf.Traffic.comparison]
    assert len(counted) == 1, f"no count of the DRAM bytes; the cell printed:\n{printed}"
    return counted[0]


def test_the_honest_kernel_is_counted_near_the_fewest_bytes_and_scores(batch):
    result, records = batch
    counted = _counted(records[HONEST[0]])
    assert counted.at_most and counted.passed and 0.9 <= counted.measured <= 1.1, counted
    url = gradebook.sqlite_url(result.root / "gradebook.db")
    assert result.scores[HONEST[0]] == gradebook.max_scores(url, ASSIGNMENT)


def test_a_kernel_reading_x_twice_is_counted_so_and_scores_nothing_there(batch):
    result, records = batch
    counted = _counted(records[READS_TWICE.student])
    assert not counted.passed and 1.35 <= counted.measured <= 1.65, counted
    assert result.scores[READS_TWICE.student][CELL] == 0
    assert result.scores[READS_TWICE.student]["test-fused-hidden"] > 0  # correct, only slow
