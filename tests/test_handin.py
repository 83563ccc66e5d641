"""The student's hand-in check (grader.runtime.handin): it tells given cells, edited or not, from
answer cells and cells the student added, as grading will (grader.grading.assemble), and says so
when an answer needs a cell that grading does not run."""

import copy
import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from grader.authoring import build
from grader.grading import assemble
from grader.runtime import checks, handin

pytestmark = pytest.mark.tooling


@pytest.fixture(scope="module")
def release(registered_course):
    return nbformat.read(registered_course / "release" / "00_setup" / "setup.ipynb", as_version=4)


def as_json(nb) -> dict:
    return json.loads(nbformat.writes(nb))


def answered(release, answer="    pass\n"):
    nb = copy.deepcopy(release)
    (cell,) = [c for c in nb.cells if c.get("id") == "relu-kernel"]
    cell.source = cell.source.split("    # YOUR CODE HERE")[0] + answer
    return nb


def test_checksums_are_nbgraders_for_every_released_cell(registered_course):
    from nbgrader.utils import compute_checksum

    seen = 0
    for a in build.assignments():
        (path,) = (registered_course / "release" / a.name).glob("*.ipynb")
        for cell in nbformat.read(path, as_version=4).cells:
            if "checksum" in cell.metadata.get("nbgrader", {}):
                assert handin.checksum(cell) == compute_checksum(cell), (a.name, cell.id)
                seen += 1
    assert seen > 100


def test_the_release_and_an_answered_notebook_need_nothing(release):
    assert handin.review(as_json(release)) == ([], [])
    assert handin.review(as_json(answered(release))) == ([], [])
    kinds = {c.kind for c in handin.cells(as_json(release))}
    assert kinds == {"answer", "given"}


def test_an_answer_that_needs_an_added_cell_is_told_to_move_it(release):
    nb = answered(release, "    x = tl.load(x_ptr + offsets, mask=mask)\n    y = clamp(x)\n")
    nb.cells.insert(
        3, new_code_cell("import numpy as np\n\n\n@triton.jit\ndef clamp(x):\n    return x")
    )
    (fix,), (note,) = handin.review(as_json(nb))
    assert "uses `clamp`, defined only in cell 4, which grading does not run" in fix
    assert "(relu-kernel)" in fix and "cell 4 is your own" in note
    graded, dropped = assemble.assemble(release, nb)  # and indeed it does not run
    assert "def clamp" not in "".join(c.source for c in graded.cells)


def test_edited_given_cells_and_parameters_are_noted_not_fixed(release):
    nb = answered(release, "    y = relu_reference(x)\n")
    for cell in nb.cells:
        if "def relu_reference" in cell.source:
            cell.source += "\n# my note"
            reference = nb.cells.index(cell) + 1
        if "parameters" in cell.metadata.get("tags", []):
            cell.source = cell.source.replace("20_011", "11")
    fix, notes = handin.review(as_json(nb))
    assert fix == []
    assert any(f"cell {reference} is a given cell you edited" in n for n in notes)
    assert any("your sizes are for your own runs" in n for n in notes)
    assert any("uses `relu_reference` from cell" in n for n in notes)


def test_a_repeated_answer_cell_is_told(release):
    nb = answered(release)
    nb.cells.insert(2, copy.deepcopy([c for c in nb.cells if c.get("id") == "relu-kernel"][0]))
    fix, _ = handin.review(as_json(nb))
    assert fix == ["the answer cell relu-kernel appears twice: grading runs the last one only"]


def test_a_visible_test_says_it_once_in_jupyterlab_and_nothing_elsewhere(
    release, tmp_path, monkeypatch, capsys
):
    nb = answered(release, "    y = helper(x)\n")
    nb.cells.append(new_code_cell("def helper(x):\n    return x"))
    nbformat.write(nb, tmp_path / "setup.ipynb")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    checks.call_graded(lambda: None)
    assert capsys.readouterr().out == ""  # no JupyterLab: at grading, in scripts
    monkeypatch.setenv("JPY_SESSION_NAME", "00_setup/setup.ipynb")
    checks.call_graded(lambda: None)
    checks.call_graded(lambda: None)
    out = capsys.readouterr().out
    assert out.count("HAND-IN CHECK: your answer in cell") == 1 and "`helper`" in out
    report = handin.check()
    assert report.notebook == tmp_path / "setup.ipynb" and not report.ok
    assert "FIX: your answer" in capsys.readouterr().out


def test_check_says_how_when_it_finds_no_notebook(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert handin.check().notebook is None
    assert "pass its path: handin.check('setup.ipynb')" in capsys.readouterr().out
