"""The notebook grading runs is assembled on the trusted side (grader.grading.assemble): the
release, with only the answer cells' source taken from the submission. Each way a submission
could change what runs outside its answers is shown to change nothing."""

import copy
import os

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell

from grader.authoring import build
from grader.grading import assemble

pytestmark = pytest.mark.tooling


@pytest.fixture(scope="module")
def release(registered_course):
    return nbformat.read(registered_course / "release" / "00_setup" / "setup.ipynb", as_version=4)


def cell(nb, grade_id):
    (found,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return found


def answered(release):
    nb = copy.deepcopy(release)
    cell(nb, "relu-kernel").source = "ANSWER = 1"
    return nb


def test_the_answers_come_from_the_submission_and_everything_else_from_the_release(release):
    mine = answered(release)
    graded, dropped = assemble.assemble(release, mine)
    assert cell(graded, "relu-kernel").source == "ANSWER = 1"
    others = [(c.cell_type, c.source, c.metadata) for c in graded.cells if c.id != "relu-kernel"]
    given = [(c.cell_type, c.source, c.metadata) for c in release.cells if c.id != "relu-kernel"]
    assert others == given and graded.metadata == release.metadata
    assert not dropped


def test_edited_given_cells_added_cells_and_metadata_do_not_run(release):
    mine = answered(release)
    reference = next(c for c in mine.cells if "def relu_reference" in c.source)
    reference.source = "def relu_reference(x):\n    return x"  # a wrong reference
    cell(mine, "test-relu-visible").source = "pass"
    mine.cells.insert(3, new_code_cell("import grader.runtime.checks as c\nc.check = print"))
    mine.cells.insert(3, new_markdown_cell("notes"))
    mine.metadata["kernelspec"] = {"name": "evil", "display_name": "x", "language": "python"}
    del mine.cells[[c.id for c in mine.cells].index("test-relu-hidden")]
    graded, dropped = assemble.assemble(release, mine)
    assert [c.source for c in graded.cells if c.id != "relu-kernel"] == [
        c.source for c in release.cells if c.id != "relu-kernel"
    ]
    assert graded.metadata == release.metadata
    assert dropped.edited == [reference.metadata["nbgrader"]["grade_id"], "test-relu-visible"]
    assert dropped.added == 1 and "2 given cells" not in dropped.describe()
    assert "given cells edited" in dropped.describe() and "1 code cell added" in dropped.describe()


def test_a_missing_answer_runs_as_released_and_a_repeated_one_runs_its_last(release):
    mine = copy.deepcopy(release)
    mine.cells.remove(cell(mine, "relu-kernel"))
    graded, dropped = assemble.assemble(release, mine)
    assert cell(graded, "relu-kernel").source == cell(release, "relu-kernel").source
    assert dropped.missing == ["relu-kernel"]
    mine = answered(release)
    first = copy.deepcopy(cell(mine, "relu-kernel"))
    first.source = "FIRST = 1"
    mine.cells.insert(0, first)
    graded, dropped = assemble.assemble(release, mine)
    assert cell(graded, "relu-kernel").source == "ANSWER = 1"
    assert dropped.repeated == ["relu-kernel"]


def test_staging_writes_the_assembled_notebook_and_a_plain_timestamp_only(tmp_path, release):
    folder = tmp_path / "alice"
    folder.mkdir()
    nbformat.write(answered(release), folder / "setup.ipynb")
    (folder / "timestamp.txt").write_text("2026-11-20 10:00:00.000000 UTC\n")
    (folder / "torch").mkdir()  # a package named like a library the notebook imports
    (folder / "torch" / "__init__.py").write_text("raise SystemExit")
    (folder / "gemm.py").write_text("x = 1")
    target = tmp_path / "assembled" / "alice"
    assert list(assemble.stage(folder, {"setup": release}, target).notebooks) == ["setup"]
    assert sorted(p.name for p in target.iterdir()) == ["setup.ipynb", "timestamp.txt"]
    graded = nbformat.read(target / "setup.ipynb", as_version=4)
    assert cell(graded, "relu-kernel").source == "ANSWER = 1"
    assert (target / "timestamp.txt").read_text() == "2026-11-20 10:00:00.000000 UTC\n"


def test_one_read_finds_what_runs_what_cannot_and_a_digest_of_every_file(tmp_path, release):
    folder = tmp_path / "carol"
    (folder / "data").mkdir(parents=True)
    nbformat.write(answered(release), folder / "setup.ipynb")
    (folder / "notes.txt").write_text("mine")
    found = assemble.read(folder, {"setup": release, "other": release})
    assert cell(found.notebooks["setup"], "relu-kernel").source == "ANSWER = 1"
    assert found.missing == ["other"] and not found.unreadable and found.stamp is None
    assert found.dropped.files == ["data", "notes.txt"]
    (folder / "data" / "x.bin").write_bytes(b"1")  # a file anywhere in the folder counts
    assert assemble.read(folder, {"setup": release}).digest != found.digest
    (folder / "setup.ipynb").write_bytes(b"%PDF-1.7")
    found = assemble.read(folder, {"setup": release})
    assert found.unreadable == {"setup": "a PDF file with an .ipynb name"} and not found.notebooks


@pytest.mark.parametrize("kind", ["link", "garbage", "huge"])
def test_a_timestamp_that_is_a_link_or_unreadable_is_left_out(tmp_path, release, kind):
    folder = tmp_path / "bob"
    folder.mkdir()
    nbformat.write(answered(release), folder / "setup.ipynb")
    if kind == "link":
        (tmp_path / "elsewhere").write_text("2020-01-01 00:00:00 UTC")
        os.symlink(tmp_path / "elsewhere", folder / "timestamp.txt")
    elif kind == "garbage":
        (folder / "timestamp.txt").write_text("yesterday, honest")
    else:
        (folder / "timestamp.txt").write_text("2020-01-01 00:00:00 UTC" + " " * 1000)
    target = tmp_path / "assembled"
    assemble.stage(folder, {"setup": release}, target)
    assert not (target / "timestamp.txt").exists()


def test_a_notebook_that_is_a_link_or_a_folder_is_not_read(tmp_path, release):
    folder = tmp_path / "eve"
    folder.mkdir()
    nbformat.write(answered(release), tmp_path / "source.ipynb")
    os.symlink(tmp_path / "source.ipynb", folder / "setup.ipynb")
    assert not assemble.stage(folder, {"setup": release}, tmp_path / "a").notebooks
    os.unlink(folder / "setup.ipynb")
    (folder / "setup.ipynb").mkdir()
    assert not assemble.stage(folder, {"setup": release}, tmp_path / "b").notebooks
    assert assemble.read_plain(folder / "setup.ipynb", 1 << 20) is None


def test_every_course_notebook_assembles_to_its_release_with_the_authors_answers(
    registered_course,
):
    for a in build.assignments():
        (path,) = (registered_course / "release" / a.name).glob("*.ipynb")
        release = nbformat.read(path, as_version=4)
        source = nbformat.read(registered_course / "source" / a.name / path.name, as_version=4)
        theirs = {
            c.id: c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")
        }
        mine = copy.deepcopy(release)
        for c in mine.cells:
            c.source = theirs.get(c.id, c.source)
        graded, dropped = assemble.assemble(release, mine)
        assert not dropped, (a.name, dropped.describe())
        assert [c.source for c in graded.cells] == [c.source for c in mine.cells]
