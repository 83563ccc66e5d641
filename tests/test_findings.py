"""grader.grading.findings: why a submission needs a human look, from its files and its grading run.
Each check must fire on the fault it names and stay quiet on a clean submission."""

import copy

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from grader.grading import assemble, detectors, findings
from grader.runtime import perf

pytestmark = pytest.mark.tooling  # nbgrader's checksums


def graded_cell(source, grade_id, points=1, **flags):
    meta = {"grade": True, "grade_id": grade_id, "locked": True, "points": points}
    meta |= {"solution": False, "schema_version": 3, **flags}
    return new_code_cell(source, metadata={"nbgrader": meta})


PARAMETERS = {
    "grade": False,
    "grade_id": "parameters-example",
    "locked": True,
    "solution": False,
    "schema_version": 3,
}


def solution_cell(source, grade_id):
    meta = {"grade": False, "grade_id": grade_id, "locked": False, "solution": True}
    return new_code_cell(source, metadata={"nbgrader": {**meta, "schema_version": 3}})


@pytest.fixture
def release():
    return new_notebook(
        cells=[
            new_code_cell(  # a given cell, as the build makes it: read-only for nbgrader
                "from grader.runtime import checks\nimport torch",
                metadata={"nbgrader": {**PARAMETERS, "grade_id": "setup-000"}},
            ),
            new_code_cell(  # the parameters cell: editable, but graded as released
                "SIZES = [1, 17, 1025]\nRUN_BENCHMARKS = True",
                metadata={"tags": ["parameters"], "nbgrader": PARAMETERS},
            ),
            solution_cell("def f(x):\n    raise NotImplementedError()", "f-code"),
            graded_cell("checks.check(f, ref, inputs)", "test-f"),
            graded_cell("perf.grade(case(f), points=1)", "speed-f"),
        ]
    )


def answered(release, answer="def f(x):\n    return x"):
    nb = copy.deepcopy(release)
    nb.cells[2].source = answer
    return nb


# -- the submitted files -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, why",
    [
        (b"%PDF-1.5\n%\xb5\xb5\n", "PDF"),
        (b"PK\x03\x04rest-of-a-zip", "zip archive"),
        (b"\xff\xfe\x00binary", "binary"),
        (b'{"cells": [', "not valid JSON"),
        (b'["a", "list"]', "not a Jupyter notebook"),
        (b'{"cells": "nope", "metadata": {}, "nbformat": 4, "nbformat_minor": 5}', "readable"),
    ],
)
def test_files_that_are_not_notebooks_are_named(tmp_path, content, why):
    path = tmp_path / "setup.ipynb"
    path.write_bytes(content)
    nb, problem = findings.read_notebook(path)
    assert nb is None and why in problem


def test_a_notebook_reads(tmp_path, release):
    nbformat.write(release, tmp_path / "setup.ipynb")
    nb, problem = findings.read_notebook(tmp_path / "setup.ipynb")
    assert problem is None and len(nb.cells) == 5


def test_routes_of_the_answer_cells_are_flagged_as_their_kind():
    cheat = detectors.Route("cheating", "f-code", "replaces grader.runtime.checks.check")
    (finding,) = findings.classify(
        run=OK,
        submitted=findings.Submitted(patches=[cheat]),
        graded=findings.Graded(),
        score=1,
        max_score=2,
    )
    assert finding.kind == "cheating" and str(cheat) in finding.detail


def test_unchanged_solutions(release):
    assert findings.solutions_unchanged(copy.deepcopy(release), release)
    assert not findings.solutions_unchanged(answered(release), release)


def test_a_submission_folder_is_inspected(tmp_path, release):
    folder = tmp_path / "alice"
    folder.mkdir()
    (folder / "timestamp.txt").write_text("2026-01-01 00:00:00 UTC")
    nbformat.write(release, folder / "Setup (1).ipynb")
    seen = findings.inspect(assemble.read(folder, {"setup": release}), {"setup": release})
    assert seen.missing == ["setup"] and seen.dropped.files == ["Setup (1).ipynb"]
    mine = answered(release)
    mine.cells[0].source += "\nchecks.check = print"  # a given cell edited: it does not run
    nbformat.write(mine, folder / "setup.ipynb")
    seen = findings.inspect(assemble.read(folder, {"setup": release}), {"setup": release})
    assert not seen.missing and not seen.unreadable and not seen.unchanged_solutions
    assert seen.dropped.edited == ["setup-000"] and seen.patches == []
    (folder / "setup.ipynb").unlink()
    (folder / "setup.ipynb").symlink_to(tmp_path / "elsewhere.ipynb")
    nbformat.write(answered(release), tmp_path / "elsewhere.ipynb")
    seen = findings.inspect(assemble.read(folder, {"setup": release}), {"setup": release})
    assert seen.unreadable == {"setup": assemble.NOT_READ}


def test_an_answer_nested_too_deeply_to_parse_costs_only_its_cell(tmp_path, release):
    """Python refuses to compile it as the scan refuses to read it: its cell fails when it
    runs, and the submission is inspected as any other."""
    folder = tmp_path / "alice"
    folder.mkdir()
    nbformat.write(answered(release, "y = " + "-" * 20_000 + "1"), folder / "setup.ipynb")
    with pytest.raises((RecursionError, MemoryError)):
        compile("y = " + "-" * 20_000 + "1", "<cell>", "exec")
    seen = findings.inspect(assemble.read(folder, {"setup": release}), {"setup": release})
    assert not seen.unreadable and not seen.missing and seen.patches == []


# -- the autograded notebook -------------------------------------------------------------------


def with_outputs(cell, *outputs):
    cell = copy.deepcopy(cell)
    cell.outputs = list(outputs)
    return cell


def stdout(text):
    return new_output("stream", name="stdout", text=text)


def error(ename, evalue):
    return new_output("error", ename=ename, evalue=evalue, traceback=[])


def result(text):
    return new_output("execute_result", data={"text/plain": text}, execution_count=1)


def record(comparison, measured, needed, unit="x"):
    data = perf.Verdict(comparison, measured, needed, unit).record()
    return new_output("display_data", data={perf.SPEED_MIMETYPE: data, "text/plain": "..."})


def test_inspect_graded(release):
    nb = answered(release)
    nb.cells[2] = with_outputs(nb.cells[2], error("CellTimeoutError", ""))
    nb.cells[3] = with_outputs(nb.cells[3], error("IntegrityError", "called torch.softmax"))
    nb.cells[4] = with_outputs(nb.cells[4], record("eager", 2.5, 2.0))
    graded = findings.inspect_graded(nb, grades_speed=True)
    assert [(e.cell, e.ename) for e in graded.errors] == [
        ("f-code", "CellTimeoutError"),
        ("test-f", "IntegrityError"),
    ]
    assert graded.speed == [findings.Speed("speed-f", True, True, 2.5, 2.0, "x", 1)]
    assert graded.speed[0].relative == 1.25


def test_speed_is_read_only_where_it_is_graded_and_only_from_records(release):
    """On the CPU a speed cell measures nothing; on a GPU only the judge's published records
    count, never printed text."""
    nb = answered(release)
    nb.cells[4] = with_outputs(nb.cells[4], record("eager", 9.9, 2.0), result("0.0"))
    assert findings.inspect_graded(nb).speed == [findings.Speed("speed-f", False)]
    nb.cells[4] = with_outputs(nb.cells[4], stdout("PASS 9.9x eager (needs 2x): 1 of 1 points"))
    graded = findings.inspect_graded(nb, grades_speed=True)
    assert graded.speed == [findings.Speed("speed-f", True)]


# -- the verdict -------------------------------------------------------------------------------

OK = findings.Run("ok", 10.0)


def kinds(found):
    return [f.kind for f in found]


def test_a_clean_submission_needs_no_look():
    assert (
        findings.classify(
            run=OK, submitted=findings.Submitted(), graded=findings.Graded(), score=3, max_score=4
        )
        == []
    )


@pytest.mark.parametrize(
    "run, submitted, errors, score, want",
    [
        (None, findings.Submitted(unreadable={"setup": "a PDF"}), [], 0, ["not-a-notebook"]),
        (None, findings.Submitted(missing=["setup"]), [], 0, ["missing-notebook"]),
        (findings.Run("failed", 1, "the kernel died"), findings.Submitted(), [], 0, ["crashed"]),
        (findings.Run("timeout", 9, limit="60 s"), findings.Submitted(), [], 0, ["timed-out"]),
        (findings.Run("memory", 9, limit="3 GiB"), findings.Submitted(), [], 0, ["out-of-memory"]),
        (OK, findings.Submitted(), [("f-code", "CellTimeoutError", "")], 1, ["cell-timeout"]),
        (OK, findings.Submitted(), [("f", "RuntimeError", "can't allocate memory")], 1,
         ["out-of-memory"]),
        (OK, findings.Submitted(), [("f", "OutOfMemoryError", "CUDA")], 1, ["out-of-memory"]),
        (OK, findings.Submitted(), [("test-f", "RuntimeError", "an illegal memory access")], 1,
         ["crashed"]),
        (OK, findings.Submitted(patches=[detectors.Route("cheating", "x", "replaces a.b")]),
         [], 4, ["cheating"]),
        (OK, findings.Submitted(patches=[detectors.Route("dynamic-code", "x", "runs exec")]), [],
         4, ["dynamic-code"]),
        (OK, findings.Submitted(), [("test-f", "IntegrityError", "called torch.mm")], 3,
         ["cheating"]),
        (OK, findings.Submitted(unchanged_solutions=True), [], 0, ["zero-score"]),
        (OK, findings.Submitted(), [("f-code", "NameError", "name 'x' is not defined")], 0,
         ["zero-score"]),
    ],
)  # fmt: skip
def test_each_fault_has_its_reason(run, submitted, errors, score, want):
    graded = findings.Graded([findings.CellError(*e) for e in errors])
    found = findings.classify(run=run, submitted=submitted, graded=graded, score=score, max_score=4)
    assert kinds(found) == want, found


def test_zero_score_says_why():
    (blank,) = findings.classify(
        run=OK,
        submitted=findings.Submitted(unchanged_solutions=True),
        graded=findings.Graded(),
        score=0,
        max_score=4,
    )
    assert "no solution filled in" in blank.detail
    errors = [
        findings.CellError("relu-kernel", "CellTimeoutError", ""),
        findings.CellError("relu-kernel", "ModuleNotFoundError", "No module named 'x'"),
    ]
    (first, zero) = findings.classify(
        run=OK, submitted=findings.Submitted(), graded=findings.Graded(errors), score=0, max_score=4
    )
    assert first.kind == "cell-timeout" and "ModuleNotFoundError" in zero.detail


def test_late_says_by_how_much_and_what_it_cost():
    (late,) = findings.classify(
        run=OK,
        submitted=findings.Submitted(),
        graded=findings.Graded(),
        score=4,
        max_score=4,
        seconds_late=2 * 3600 + 300,
    )
    assert late.kind == "late" and late.detail == "2 h 05 min after the due date; no penalty"
    (penalised,) = findings.classify(
        run=OK,
        submitted=findings.Submitted(),
        graded=findings.Graded(),
        score=4,
        max_score=4,
        seconds_late=30,
        penalty=4,
    )
    assert "a penalty of 4 points" in penalised.detail


@pytest.mark.parametrize(
    "log, want",
    [
        ("...\nnbclient.exceptions.DeadKernelError: Kernel died\n", "kernel died"),
        ("UnresponsiveKernelError", "stopped responding"),
        ("Traceback\nValueError: bad things\n[AutogradeApp | ERROR] done", "ValueError: bad"),
        ("nothing useful", "see the log"),
    ],
)
def test_crash_detail(log, want):
    assert want in findings.crash_detail(log)


def test_a_flagged_speed_cell_is_read_and_needs_a_look():
    why = (
        "measured 127 TB/s, above this GPU's measured copy bandwidth of 2.9 TB/s (+10% allowed): "
        "is the output cached between timed calls?"
    )
    flagged = perf.Verdict("copy bandwidth", 4400.0, 80.0, "%", flags=(why,))
    speed = findings.speed_of("speed-fused-bandwidth", [perf.Verdict.read(flagged.record())])
    assert not speed.passed and speed.flags == (why,)
    graded = findings.Graded(speed=[speed])
    (found,) = findings.classify(
        run=OK, submitted=findings.Submitted(), graded=graded, score=3, max_score=4
    )
    assert found.kind == "cheating" and found.detail.startswith("speed-fused-bandwidth: measured")
    stopped = perf.Verdict("copy bandwidth", None, 80.0, "%", flags=(why,))
    speed = findings.speed_of("speed-fused-bandwidth", [perf.Verdict.read(stopped.record())])
    assert (speed.measured, speed.flags) == (None, (why,))
    passed = perf.Verdict.read(perf.Verdict("eager", 2.5, 2.0).record())
    clean = findings.Graded(speed=[findings.speed_of("speed-f", [passed])])
    assert (
        findings.classify(
            run=OK, submitted=findings.Submitted(), graded=clean, score=3, max_score=4
        )
        == []
    )
