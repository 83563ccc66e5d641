"""The notebook runner: the graded-cell check rejects each way a graded cell can fail, the
time limits stop a cell and a run, a failing notebook does not end the batch, and the summary
reports what happened."""

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from grader import cli
from grader.authoring import execute, run_summary

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def graded(grade_id, points=1.0, outputs=(), count=1):
    cell = new_code_cell("pass", execution_count=count)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": points}
    cell.outputs = list(outputs)
    return cell


def score(value):
    return new_output("execute_result", data={"text/plain": repr(value)}, execution_count=1)


def printed(text, name="stdout"):
    return new_output("stream", name=name, text=text)


FAILED = new_output("error", ename="AssertionError", evalue="off by 1", traceback=[])


def notebook(*cells):
    nb = new_notebook(cells=list(cells))
    nb.cells.insert(0, new_code_cell("x = 1", execution_count=1))  # ungraded: never checked
    return nb


def test_passing_cells_pass_on_gpu_and_elsewhere():
    gpu = execute.read_grades(
        notebook(graded("test-a", outputs=[printed("fine\n")]), graded("speed-a", 2, [score(2.0)])),
        grades_speed=True,
    )
    assert (gpu.passed, gpu.total, gpu.problems) == (2, 2, ())
    assert gpu.speed == {"speed-a": (2.0, 2.0)}
    cpu = execute.read_grades(notebook(graded("speed-a", 2, [score(0.0)])), grades_speed=False)
    assert (cpu.passed, cpu.problems) == (1, ())


@pytest.mark.parametrize(
    "cell, grades_speed, expect",
    [
        (graded("test-a", outputs=[FAILED]), False, "AssertionError: off by 1"),
        (graded("test-a", outputs=[printed("overflow\n", "stderr")]), False, "wrote to stderr"),
        (graded("speed-a", 2, [printed("0.7x of cuBLAS\n"), score(1.0)]), True, "scored 1 of 2"),
        (graded("speed-a", 2, [score(2.0)]), False, "scored 2 of 2 where it is not graded"),
        (graded("speed-a", 2, [printed("no score\n")]), True, "must end with its score"),
        (graded("speed-a", 2, [score("fast")]), True, "must end with its score"),
        (graded("test-a", count=None), False, "1 of 1 graded cells did not run"),
    ],
    ids=["error", "stderr", "partial-speed", "speed-off-gpu", "no-score", "text-score", "not-run"],
)
def test_each_failure_is_rejected(cell, grades_speed, expect):
    grades = execute.read_grades(notebook(cell), grades_speed=grades_speed)
    assert grades.passed == 0 and grades.total == 1
    assert any(expect in p for p in grades.problems), grades.problems


def write_notebook(folder, name, *sources):
    path = folder / name / f"{name}.ipynb"
    path.parent.mkdir(parents=True)
    cells = [new_code_cell(s) for s in sources]
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC}), path)
    return path


def test_run_reports_each_notebook_and_goes_on_after_a_failure(tmp_path, capsys):
    sources = [
        write_notebook(tmp_path / "src", "a_fails", "print('before')", "1 / 0", "print('after')"),
        write_notebook(tmp_path / "src", "b_passes", "print('streamed line')"),
    ]
    out = tmp_path / "executed"
    failed, passed = execute.run_notebooks(sources, out, stream=True, grades_speed=False)
    assert "ZeroDivisionError" in failed.error and not failed.ok
    assert passed.ok and passed.grades.total == 0
    executed = nbformat.read(out / "a_fails" / "a_fails.ipynb", as_version=4)
    first = next(c for c in executed.cells if c.cell_type == "code")
    assert first.outputs[0].text == "before\n"  # kept although a later cell failed
    assert "b_passes | streamed line" in capsys.readouterr().out


def test_notebooks_run_side_by_side_each_in_its_own_folder(tmp_path, capfd):
    names = ["a_first", "b_second", "c_third"]
    sources = [write_notebook(tmp_path / "src", n, "import os; print(os.getcwd())") for n in names]
    out = tmp_path / "executed"
    outcomes = execute.run_notebooks(sources, out, grades_speed=False, jobs=2)
    assert [o.name for o in outcomes] == names and all(o.ok for o in outcomes)
    for name in names:
        executed = nbformat.read(out / name / f"{name}.ipynb", as_version=4)
        assert executed.cells[0].outputs[0].text == f"{tmp_path / 'src' / name}\n"
    assert sorted(line.split()[0] for line in capfd.readouterr().out.splitlines()) == names


def test_a_cell_stops_at_the_cell_timeout(tmp_path):
    source = write_notebook(tmp_path, "sleeps", "import time; time.sleep(60)")
    outcome = execute.run_notebook(source, tmp_path / "out.ipynb", cell_timeout=1)
    assert outcome.error.startswith("timed out"), outcome.error
    assert "whole run" not in outcome.error and outcome.seconds < 30


def test_an_earlier_runs_copy_is_not_read_as_this_runs(tmp_path):
    output = tmp_path / "out" / "gone" / "gone.ipynb"
    output.parent.mkdir(parents=True)
    nbformat.write(notebook(graded("test-a")), output)  # a passing copy from before
    missing = tmp_path / "gone" / "gone.ipynb"  # this time the source is missing
    outcome = execute.run_notebooks([missing], tmp_path / "out", grades_speed=False)[0]
    assert outcome.error and outcome.grades is None and not output.exists()


def test_the_run_stops_at_its_timeout_and_reports_the_rest(tmp_path):
    sources = [
        write_notebook(tmp_path, "first", "import time; time.sleep(60)"),
        write_notebook(tmp_path, "second", "print('never')"),
    ]
    first, second = execute.run_notebooks(sources, tmp_path / "out", cell_timeout=600, timeout=3)
    assert first.error.startswith("timed out") and first.seconds < 30
    assert first.error.endswith("(the whole run's time limit)")
    assert second.error.startswith("not run") and not (tmp_path / "out" / "second").exists()


def test_budget_and_summary(tmp_path):
    nb = notebook(graded("test-a"), graded("speed-a", 2, [score(2.0)]))
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    slow = execute.assess(execute.Outcome("03_slow", 130.0, path), grades_speed=True, budget=120.0)
    assert not slow.ok and "over its budget of 120 s" in slow.problems[0]
    quick = execute.assess(execute.Outcome("04_quick", 30.0, path), grades_speed=True, budget=120.0)
    broken = execute.Outcome("05_broken", 2.0, tmp_path / "missing.ipynb", "cell 3: NameError: x")
    outcomes = [slow, quick, broken]

    text = run_summary.table(outcomes)
    assert "04_quick" in text and "2/2" in text and "a 2/2" in text
    assert "2 of 3 failed" in text and "05_broken: cell 3: NameError: x" in text

    target = tmp_path / "report" / "notebooks.json"
    run_summary.write(target, run_summary.as_dict(outcomes, "H100 (sm_90)", {"triton": "3.6.0"}))
    saved = json.loads(target.read_text())
    assert saved["ok"] is False and saved["seconds"] == 162.0
    by_name = {n["name"]: n for n in saved["notebooks"]}
    assert by_name["04_quick"]["speed"] == {"speed-a": {"score": 2.0, "points": 2.0}}
    assert by_name["05_broken"]["graded_total"] is None and by_name["03_slow"]["ok"] is False


def test_run_options():
    args = cli.parser().parse_args(["run", "04_matmul"])
    assert (args.stream, args.check, args.budget, args.timeout, args.jobs) == (
        True,
        True,
        None,
        0,
        0,
    )
    assert args.summary == "build/report/notebooks.json" and args.notebooks == ["04_matmul"]
    args = cli.parser().parse_args(
        ["run", "--quiet", "--no-check", "--cell-timeout", "5", "--timeout", "60", "--budget", "0"]
        + ["--jobs", "2"]
    )
    assert (args.stream, args.check, args.cell_timeout, args.timeout, args.budget, args.jobs) == (
        False,
        False,
        5.0,
        60.0,
        0.0,
        2,
    )


def test_each_run_builds_into_a_folder_of_its_own(monkeypatch, tmp_path):
    """Two runs at once from one checkout (one per GPU) must not rebuild each other's notebooks:
    each builds into its own folder, which is gone afterwards, and build/ is left alone."""
    seen = []

    def run(sources, out_dir, params, **options):
        seen.append([(s, s.is_file()) for s in sources])
        return []

    monkeypatch.setattr(execute, "run_notebooks", run)
    before = sorted((execute.build.BUILD / "source").rglob("*"))
    for _ in range(2):
        execute.run_solutions(["00_setup"], out_dir=tmp_path)
    (first,), (second,) = seen
    assert first[1] and second[1] and first[0].name == "setup.ipynb"
    assert first[0].parent.parent != second[0].parent.parent
    assert not first[0].exists() and not second[0].exists()
    assert not first[0].is_relative_to(execute.build.BUILD)
    assert sorted((execute.build.BUILD / "source").rglob("*")) == before
