"""The build: deterministic notebooks, byte-identical rebuilds, and course/ in step with
solutions/ (the drift test)."""

import shutil
from pathlib import Path

import pytest

from grader.authoring import build

pytestmark = pytest.mark.tooling

SOURCE = """# %% [markdown]
# # 99 · Example

# %% nbgrader={"grade_id": "sol", "solution": true}
x = 1

# %%
y = 2

# %% nbgrader={"grade": true, "grade_id": "test-sol", "points": 2}
assert x == 1
"""


def write(tmp_path, text=SOURCE):
    path = tmp_path / "example.py"
    path.write_text(text)
    return path


def test_cell_ids_are_grade_ids_or_numbered(tmp_path):
    nb = build.to_notebook(write(tmp_path))
    assert [c.id for c in nb.cells] == ["example-000", "sol", "example-002", "test-sol"]
    again = build.to_notebook(write(tmp_path))
    assert build.nbformat.writes(nb) == build.nbformat.writes(again)


def test_every_given_code_cell_is_read_only_and_markdown_is_left_alone(tmp_path):
    nb = build.to_notebook(write(tmp_path))
    given = nb.cells[2]
    assert given.metadata["nbgrader"]["grade_id"] == "example-002"
    assert given.metadata["nbgrader"]["locked"] and not given.metadata["nbgrader"]["solution"]
    assert given.metadata["editable"] is False and given.metadata["deletable"] is False
    assert "nbgrader" not in nb.cells[0].metadata  # markdown cannot change a score
    for a in build.assignments():
        for cell in build.to_notebook(a.source).cells:
            if cell.cell_type == "code":
                assert "grade_id" in cell.metadata.get("nbgrader", {}), (a.name, cell.id)


def test_nbgrader_metadata_is_completed(tmp_path):
    nb = build.to_notebook(write(tmp_path))
    assert nb.cells[1].metadata["nbgrader"] == {
        "grade": False,
        "grade_id": "sol",
        "locked": False,
        "schema_version": 3,
        "solution": True,
        "task": False,
    }
    assert nb.cells[3].metadata["nbgrader"]["locked"] is True
    assert nb.cells[3].metadata["nbgrader"]["points"] == 2
    assert "jupytext" not in nb.metadata and nb.metadata["kernelspec"]["name"] == "python3"


def test_parameters_are_editable_but_restored_at_grading(tmp_path):
    text = SOURCE.replace(
        "# %%\ny = 2",
        '# %% tags=["parameters"]\nSIZES = [1, 17]\n\n# %% nbgrader={"grade_id": "given"}\ny = 2',
    )
    nb = build.to_notebook(write(tmp_path, text))
    params, given = (c for c in nb.cells if c.id in ("parameters-example", "given"))
    assert params.metadata["tags"] == ["parameters"]
    for cell in (params, given):  # both read-only for nbgrader: restored before it grades
        meta = cell.metadata["nbgrader"]
        assert meta["locked"] and not meta["grade"] and not meta["solution"], cell.id
        assert cell.metadata["deletable"] is False, cell.id
    assert "editable" not in params.metadata  # students change sizes while they work
    assert given.metadata["editable"] is False
    for a in build.assignments():  # every notebook of the course has such a parameters cell
        cells = build.to_notebook(a.source).cells
        (mine,) = (c for c in cells if "parameters" in c.metadata.get("tags", []))
        assert mine.id == build.PARAMETERS_PREFIX + a.source.stem, a.name
        assert mine.metadata["nbgrader"]["locked"], a.name


def test_metadata_mistakes_name_the_file(tmp_path):
    with pytest.raises(build.BuildError, match="without a grade_id"):
        build.to_notebook(write(tmp_path, SOURCE.replace('"grade_id": "sol", ', "")))
    with pytest.raises(build.BuildError, match="'test-sol' needs points"):
        build.to_notebook(write(tmp_path, SOURCE.replace(', "points": 2', "")))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """One full build of the course, shared by the tests below."""
    root = tmp_path_factory.mktemp("fresh")
    build.build(root / "build", root / "course")
    return root


def test_two_builds_are_byte_identical(fresh, registered_course):
    """This module's build against the run's other one (tests.shared.generate_course: the same
    steps, in a folder and process of their own)."""
    for sub, other in (("course", "release"), ("build/source", "source")):
        first = sorted(p for p in (fresh / sub).rglob("*") if p.is_file())
        assert first, f"nothing built under {sub}"
        for path in first:
            twin = registered_course / other / path.relative_to(fresh / sub)
            assert path.read_bytes() == twin.read_bytes(), f"{path} differs between builds"


def test_course_is_in_step_with_solutions(fresh):
    problems = build.differences(build.COURSE, fresh / "course")
    assert problems == [], "course/ is stale; run `make release`:\n" + "\n".join(problems)


def test_the_built_course_holds_the_figures_its_notebooks_show(fresh):
    shown = 0
    for a in build.assignments():
        notebook = fresh / "course" / a.name / a.notebook_name
        for link in build.figure_links(build.nbformat.read(notebook, as_version=4)):
            built, committed = fresh / "course" / a.name / link, a.source.parent / link
            assert built.is_file(), f"{a.name}: the build left out {link}"
            assert built.read_bytes() == committed.read_bytes(), f"{a.name}/{link} differs"
            shown += 1
    assert shown, "no notebook shows a figure: the check above checked nothing"


def test_drift_is_detected(fresh, tmp_path):
    stale = tmp_path / "course"
    shutil.copytree(build.COURSE, stale)
    notebook = stale / "00_setup" / "setup.ipynb"  # any notebook would do; this one says "Setup"
    notebook.write_text(notebook.read_text().replace("Setup", "Set up", 1))
    (stale / "stray.txt").write_text("edited by hand")
    (stale / "01_roofline" / "roofline.ipynb").unlink()
    problems = build.differences(stale, fresh / "course")
    assert f"stale: course/{notebook.relative_to(stale)}" in problems
    assert "not built from solutions/: stray.txt" in problems
    assert "missing from course/: 01_roofline/roofline.ipynb" in problems


def test_check_builds_afresh_and_finds_a_stale_course(fresh, tmp_path, monkeypatch):
    """check() builds into a folder of its own (here the build is this module's one, copied) and
    compares course/ with it."""
    built = []

    def build_again(build_dir, course, solutions):
        assert not course.exists() and build.COURSE not in (course, *course.parents)
        shutil.copytree(fresh / "course", course)
        built.append(solutions)

    monkeypatch.setattr(build, "build", build_again)
    stale = tmp_path / "course"
    shutil.copytree(build.COURSE, stale)
    (stale / "stray.txt").write_text("edited by hand")
    assert build.check(course=stale) == ["not built from solutions/: stray.txt"]
    assert built == [build.SOLUTIONS]


def test_every_solution_folder_has_its_notebook(tmp_path):
    (tmp_path / "01_topic").mkdir()
    with pytest.raises(build.BuildError, match="expected the notebook source topic.py"):
        build.assignments(Path(tmp_path))
