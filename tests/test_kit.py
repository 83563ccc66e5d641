"""The student kit (`make student-kit`, grader/authoring/kit.py): it holds what students receive
and nothing of the answers, and it works from a fresh folder on its own.

The leak check compares normalized code lines (whitespace and comments dropped), not markers: a
solution line pasted without its markers, re-indented or commented, is caught. Lines the release
legitimately contains are not secrets: a line that an answer shares with the code students are
given (`return out`, the imports, the launch grid), and the drafts 08 hands out to be fixed;
`kit.COINCIDENCES` lists, one by one with its reason, the few lines of the runtime that equal an
answer's line by chance. A reference kernel (05's gemm.py, 04's blocked matmul) may travel only
as a side file of a later notebook. `make student-kit` builds one kit per assignment, and no kit
file holds another notebook's graded answer whole, but for that reference kernel in a kit
without the notebook it answers; so 04 and 05 never share a kit.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
import tomllib
import zipfile
from pathlib import Path

import nbformat
import pytest
from packaging.specifiers import SpecifierSet

from grader import cli
from grader.authoring import build, kernel_connection, kit
from tests import lab_server

pytestmark = pytest.mark.tooling

EXPECTED_TOP = {
    "README.md",
    "setup.sh",
    "lab.sh",
    "Dockerfile",
    ".devcontainer",
    "requirements.txt",
    "requirements-gpu.txt",
    "course",
    "grader",
}
NEVER = {"solutions", "build", "tests", "bench", "authoring", "grading"}
# packages students do not need: the course build and batch grading, and the test tools (nbclient
# is not among them: JupyterLab's nbconvert brings it)
NOT_FOR_STUDENTS = ("nbgrader", "jupytext", "papermill", "pytest", "ruff", "playwright")


@pytest.fixture(scope="module")
def known():
    return kit.course(extra_kernels=kit.test_and_bench_kernels())


# the notebooks of one kit that may hold them together: every one but 04, whose answer 05's
# gemm.py holds, and 10, whose flash_forward.py holds 07's
TOGETHER = tuple(
    p.name
    for p in sorted(build.COURSE.iterdir())
    if p.is_dir() and p.name not in ("04_matmul", "10_flash_backward")
)


@pytest.fixture(scope="module")
def graded():
    return kit.answers()


@pytest.fixture(scope="module")
def kits(tmp_path_factory, known):
    """What `make student-kit` builds: one kit per assignment."""
    return kit.build_kits(out=tmp_path_factory.mktemp("kits"), known=known)


@pytest.fixture(scope="module")
def built(tmp_path_factory, known):
    """One kit of every notebook that may share one, to plant things in."""
    return kit.build_kit(TOGETHER, out=tmp_path_factory.mktemp("kit"), known=known)


@pytest.fixture
def copy(built, tmp_path):
    """A copy of the built kit, to plant things in."""
    return Path(shutil.copytree(built.folder, tmp_path / kit.KIT_NAME))


def files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def secret_line(lines: list[str], known: kit.Course, kind: str, notebook: str) -> str:
    """The longest of `lines` that the leak check knows as a secret of that kind and notebook
    (lines an answer shares with the given code are no secret, so not just any line will do)."""

    def is_secret(line: str) -> bool:
        norm = kit.code_lines(line.strip())
        return bool(norm) and any(
            (s.kind, s.notebook) == (kind, notebook) for s in known.secrets.get(norm[0][1], [])
        )

    return max(filter(is_secret, lines), key=lambda line: len(line.strip()))


def answer_line(known: kit.Course, notebook: str, kind: str) -> str:
    """A line of `kind` ("solution" or "hidden test") of one notebook, as its source has it."""
    source = next(a.source for a in build.assignments() if a.name == notebook)
    lines = []
    for cell in build.to_notebook(source).cells:
        lines += kit.regions(cell.source, kind)[0]
    return secret_line(lines, known, kind, notebook)


def plant_in_notebook(folder: Path, notebook: str, line: str, cell_type: str = "code") -> None:
    """Append `line` to the first cell of that type of a notebook of the kit."""
    path = next((folder / "course" / notebook).glob("*.ipynb"))
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == cell_type)
    cell["source"] = "".join(cell["source"]) + "\n" + line
    path.write_text(json.dumps(nb))


def test_each_kit_holds_what_students_receive_and_nothing_else(kits):
    # one kit per assignment, each with its own notebook alone, all with the same top folder so
    # that each unzips over the last
    notebooks = tuple(sorted(p.name for p in build.COURSE.iterdir() if p.is_dir()))
    assert [k.notebooks for k in kits] == [(name,) for name in notebooks]
    assert [k.zip.name for k in kits] == [f"{kit.KIT_NAME}-{name}.zip" for name in notebooks]
    runtime = {
        f"grader/runtime/{p}"
        for p in files(kit.RUNTIME)
        if "__pycache__" not in p and not p.endswith(".pyc")
    }
    for one in kits:
        folder = one.folder
        assert folder.name == kit.KIT_NAME
        assert {p.name for p in folder.iterdir()} == EXPECTED_TOP
        assert {p.name for p in (folder / "course").iterdir()} == set(one.notebooks)
        assert {p.name for p in (folder / "grader").iterdir()} == {"__init__.py", "runtime"}
        held = files(folder)
        assert not [p for p in held if NEVER & set(Path(p).parts)]
        assert not [p for p in held if "__pycache__" in p or p.endswith(".pyc")]
        # its notebook with its side files, byte for byte, and the runtime whole
        course = {
            f"course/{p}" for p in files(build.COURSE / one.notebooks[0]) if "__pycache__" not in p
        }
        course = {p.replace("course/", f"course/{one.notebooks[0]}/", 1) for p in course}
        course -= {"course/08_verify/my_draft.py"}  # a student's own file, git-ignored
        assert course <= held
        assert runtime <= held
        for rel in course | runtime:
            original = build.ROOT / rel if rel.startswith("grader") else build.COURSE / rel[7:]
            assert (folder / rel).read_bytes() == original.read_bytes(), rel
    held = {p for one in kits for p in files(one.folder)}
    assert {"course/05_autotuning/gemm.py", "course/08_verify/drafts/draft_a.py"} <= held


def test_the_zip_is_the_folder_and_two_builds_are_identical(built, known, tmp_path):
    with zipfile.ZipFile(built.zip) as z:
        names = set(z.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    assert names == {f"{kit.KIT_NAME}/{p}" for p in files(built.folder)}
    assert modes[f"{kit.KIT_NAME}/setup.sh"] & 0o111, "setup.sh must unzip executable"
    again = kit.build_kit(TOGETHER, out=tmp_path / "again", known=known)
    assert again.zip.read_bytes() == built.zip.read_bytes()


def test_nothing_of_the_answers_is_in_any_kit(kits, built, known, graded):
    for one in [*kits, built]:
        assert kit.leaks(one.folder, known) == []
        assert kit.answers_held(one.folder, graded, one.notebooks) == []
        assert kit.imports_outside(one.folder) == []


def solution_cell(notebook: str, grade_id: str) -> str:
    """The source of a solution cell as the solutions hold it, markers and all."""
    source = next(a.source for a in build.assignments() if a.name == notebook)
    cells = build.to_notebook(source).cells
    return next(
        c.source for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )


@pytest.mark.parametrize(
    ("target", "answer"),
    [
        # a side file of a later notebook: each line may be there (leaks), the answer whole not
        ("course/06_online_softmax/softmax_ref.py", ("03_softmax", "softmax-kernel")),
        ("grader/runtime/reference.py", ("00_setup", "relu-kernel")),
        ("README.md", ("06_online_softmax", "merge")),
    ],
)
def test_a_planted_graded_answer_of_another_notebook_is_caught(copy, known, graded, target, answer):
    notebook, grade_id = answer
    # re-indented, its comments changed: the comparison is of normalized lines
    planted = textwrap.indent(solution_cell(notebook, grade_id), "    ").replace("# ", "# see ")
    (copy / target).write_text("if True:\n" + planted + "\n")
    (answer,) = [a for a in graded if (a.notebook, a.grade_id) == (notebook, grade_id)]
    n = len(answer.lines)
    found = kit.answers_held(copy, graded, TOGETHER)
    assert found == [
        f"{target} holds {n} of the {n} lines of {notebook}'s graded answer {grade_id!r}"
    ], found
    # with one line changed it is still the answer (when it has five lines or more); with most
    # of it gone, no longer
    kept = sorted(answer.lines)
    if n >= 5:
        (copy / target).write_text("\n".join(kept[1:]) + "\nchanged = 1\n")
        assert len(kit.answers_held(copy, graded, TOGETHER)) == 1
    (copy / target).write_text("\n".join(kept[: n // 2]) + "\n")
    assert kit.answers_held(copy, graded, TOGETHER) == []


def test_04_and_05_never_share_a_kit(tmp_path, known, graded):
    # 05's gemm.py holds 04's graded answer: fine in 05's own kit, handed out after 04's deadline
    later = kit.build_kit(["05_autotuning"], out=tmp_path / "later", known=known, graded=graded)
    assert kit.answers_held(later.folder, graded, later.notebooks) == []
    (held,) = kit.answers_held(later.folder, graded, ["04_matmul", "05_autotuning"])
    assert held.startswith("course/05_autotuning/gemm.py holds ")
    assert held.endswith(
        "lines of 04_matmul's graded answer 'matmul-kernel': give 04_matmul and 05_autotuning "
        "kits of their own, and hand 05_autotuning out after 04_matmul's deadline"
    )
    with pytest.raises(kit.KitError, match=r"gemm.py holds \d+ of the \d+ lines of 04_matmul's"):
        kit.build_kits(["04_matmul", "05_autotuning"], out=tmp_path / "both", together=True)
    assert not (tmp_path / "both").exists(), "a refused kit must leave nothing to hand out"
    apart = kit.build_kits(["04_matmul", "05_autotuning"], out=tmp_path / "apart", known=known)
    assert [k.notebooks for k in apart] == [("04_matmul",), ("05_autotuning",)]


def kit_bound(source: Path) -> set[str]:
    """The names a notebook binds by importing what the kit ships: grader's runtime, or a module
    released beside the notebook."""
    side = {p.stem for p in source.parent.rglob("*.py") if p != source}
    names = set()
    for cell in build.to_notebook(source).cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in side | {"grader"}:
                        names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grader"):
                names |= {alias.asname or alias.name for alias in node.names}
    return names


def root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Call | ast.Attribute | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def answers_by_a_kit_call(solutions: Path) -> list[str]:
    """Each answer region of the solutions that is one statement whose value comes from what the
    kit ships (`return gemm.configs(full)`): the reference answer would be the kit's to give."""
    found = []
    for a in build.assignments(solutions):
        shipped = kit_bound(a.source)
        for cell in build.to_notebook(a.source).cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            region: list[str] | None = None
            for line in cell.source.splitlines():
                if line.strip() == kit.MARKERS["solution"][0]:
                    region = []
                elif line.strip() == kit.MARKERS["solution"][1] and region is not None:
                    body = ast.parse(textwrap.dedent("\n".join(region))).body
                    value = getattr(body[0], "value", None) if len(body) == 1 else None
                    if value is not None and root_name(value) in shipped:
                        found.append(f"{a.name} {grade_id}: {ast.unparse(body[0])}")
                    region = None
                elif region is not None:
                    region.append(line)
    return found


def test_no_answer_is_one_call_of_what_the_kit_ships(tmp_path):
    assert answers_by_a_kit_call(build.SOLUTIONS) == []
    # 05's Exercise 2 as it was answered when gemm.py shipped the course's config lists
    shutil.copytree(build.SOLUTIONS / "05_autotuning", tmp_path / "05_autotuning")
    source = tmp_path / "05_autotuning" / "autotuning.py"
    text = source.read_text()
    begin = text.index("### BEGIN SOLUTION", text.index("def config_space("))
    end = text.index("    ### END SOLUTION", begin)
    source.write_text(
        text[:begin] + "### BEGIN SOLUTION\n    return gemm.configs(full)\n" + text[end:]
    )
    assert answers_by_a_kit_call(tmp_path) == [
        "05_autotuning config-space: return gemm.configs(full)"
    ]


@pytest.mark.parametrize(
    ("notebook", "kind", "target"),
    [
        ("04_matmul", "solution", "course/00_setup"),
        ("07_flash_attention", "solution", "grader/runtime/checks.py"),
        ("03_softmax", "hidden test", "course/03_softmax"),
        ("06_online_softmax", "hidden test", "README.md"),
    ],
)
def test_a_planted_answer_or_hidden_test_line_is_caught(copy, known, notebook, kind, target):
    line = answer_line(known, notebook, kind)
    planted = "        " + line.strip() + "  # no markers, indented anew"
    if target.startswith("course/"):
        plant_in_notebook(copy, target.split("/")[1], planted)
    else:
        with open(copy / target, "a") as f:
            f.write("\n" + planted + "\n")
    found = kit.leaks(copy, known)
    assert [(leak.path.split("/")[:2], leak.secret.kind) for leak in found] == [
        (target.split("/")[:2], kind)
    ], "\n".join(map(str, found))
    # the line may be a secret of several notebooks; the one it was taken from is among them
    assert notebook in {s.notebook for s in known.secrets[found[0].secret.line]}


def test_a_line_shown_in_prose_is_caught(copy, known):
    line = answer_line(known, "06_online_softmax", "solution")
    plant_in_notebook(copy, "08_verify", f"```python\n{line.strip()}\n```", "markdown")
    found = kit.leaks(copy, known)
    assert [(leak.path, leak.secret.kind) for leak in found] == [
        ("course/08_verify/verify.ipynb", "solution")
    ], "\n".join(map(str, found))
    assert found[0].where.startswith("cell 0, line ")


def test_a_reference_kernel_travels_only_with_a_later_notebook(copy, known):
    gemm = copy / "course" / "05_autotuning" / "gemm.py"
    assert kit.leaks(copy, known) == []  # 05's side file may hold 04's answer
    (copy / "course" / "04_matmul").mkdir()  # as if 04 were in this kit too
    shutil.copyfile(gemm, copy / "course" / "04_matmul" / "gemm.py")
    shutil.copyfile(gemm, copy / "grader" / "runtime" / "gemm.py")
    found = kit.leaks(copy, known)
    assert {leak.path for leak in found} == {"course/04_matmul/gemm.py", "grader/runtime/gemm.py"}
    kernels = {
        (leak.path, leak.secret.notebook)
        for leak in found
        if leak.secret.kind == "reference kernel"
    }
    assert kernels == {
        ("course/04_matmul/gemm.py", "04_matmul"),
        ("grader/runtime/gemm.py", "04_matmul"),
    }
    # nor in 05's notebook itself: only side files, which the instructor hands out knowingly
    shutil.rmtree(copy / "course" / "04_matmul")
    (copy / "grader" / "runtime" / "gemm.py").unlink()
    kernel = kit.triton_kernels(gemm.read_text())[0].splitlines()
    plant_in_notebook(
        copy, "05_autotuning", secret_line(kernel, known, "reference kernel", "04_matmul")
    )
    assert [leak.path for leak in kit.leaks(copy, known)] == [
        "course/05_autotuning/autotuning.ipynb"
    ]


def test_a_kernel_of_the_tests_is_caught(copy, known):
    source = (build.ROOT / "tests" / "attention_kernels.py").read_text()
    kernel = kit.triton_kernels(source)[0].splitlines()
    line = secret_line(kernel, known, "reference kernel", "no notebook")
    with open(copy / "grader" / "runtime" / "attention.py", "a") as f:
        f.write("\n" + line + "\n")
    found = kit.leaks(copy, known)
    assert [(leak.path, leak.secret.kind) for leak in found] == [
        ("grader/runtime/attention.py", "reference kernel")
    ]


def test_a_line_one_of_its_secrets_allows_is_no_leak(tmp_path):
    """05's gemm.py, released with 05, holds 04's reference matmul; a benchmark's kernel that
    shares a line with it (an argument, an accumulator) reveals nothing more there."""
    side = tmp_path / "course" / "05_autotuning" / "gemm.py"
    side.parent.mkdir(parents=True)
    side.write_text("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\nx_desc = make(x)\n")
    line, other = (n for _, n in kit.code_lines(side.read_text()))
    bench = kit.Secret(line, "reference kernel", "no notebook", "bench/matmul.py")
    matmul = kit.Secret(line, "reference kernel", "04_matmul", "solutions/05_autotuning/gemm.py")
    known = kit.Course(
        {line: [bench, matmul], other: [dataclasses.replace(bench, line=other)]}, frozenset()
    )
    assert [(leak.where, leak.secret.notebook) for leak in kit.leaks(tmp_path, known)] == [
        ("line 2", "no notebook")
    ]


def test_the_build_refuses_a_leaking_course(tmp_path, known):
    course = Path(shutil.copytree(build.COURSE, tmp_path / "course"))
    plant_in_notebook(
        course.parent, "01_roofline", answer_line(known, "01_roofline", "hidden test")
    )
    with pytest.raises(kit.KitError, match="hidden test line of 01_roofline"):
        kit.build_kit(["01_roofline"], out=tmp_path / "kit", course_dir=course, known=known)
    assert not (tmp_path / "kit").exists(), "a refused kit must leave nothing to hand out"


def test_the_kit_holds_the_figures_its_notebooks_show(built):
    shown = 0
    for notebook in sorted((built.folder / "course").glob("*/*.ipynb")):
        for link in build.figure_links(nbformat.read(notebook, as_version=4)):
            figure = notebook.parent / link
            assert figure.is_file(), f"{notebook.parent.name}: the kit left out {link}"
            committed = build.SOLUTIONS / notebook.parent.name / link
            assert figure.read_bytes() == committed.read_bytes(), f"{link} differs"
            shown += 1
    assert shown, "no notebook of the kit shows a figure: the check above checked nothing"


def test_an_unpinned_import_is_refused(copy):
    with open(copy / "grader" / "runtime" / "results.py", "a") as f:
        f.write("\nimport pandas\n")
    assert kit.imports_outside(copy) == ["grader/runtime/results.py: imports pandas"]


def test_some_notebooks_one_kit_each_or_together(tmp_path, known):
    each = kit.build_kits(["01_roofline", "00_setup"], out=tmp_path / "a", known=known)
    assert [k.notebooks for k in each] == [("00_setup",), ("01_roofline",)]
    assert [{p.name for p in (k.folder / "course").iterdir()} for k in each] == [
        {"00_setup"},
        {"01_roofline"},
    ]
    (first,) = kit.build_kits(
        ["01_roofline", "00_setup"], out=tmp_path / "b", known=known, together=True
    )
    assert first.notebooks == ("00_setup", "01_roofline")
    assert {p.name for p in (first.folder / "course").iterdir()} == {"00_setup", "01_roofline"}
    assert first.zip == tmp_path / "b" / f"{kit.KIT_NAME}-00_setup+01_roofline.zip"


def test_an_unknown_notebook_is_named_with_the_known_ones(tmp_path, capsys):
    with pytest.raises(kit.KitError, match=r"no notebook named 04_matmull.*04_matmul 05_auto"):
        kit.selected(["04_matmull"])
    assert cli.main(["kit", "00_setup", "4_matmul", "--out", str(tmp_path / "kit")]) == 2
    assert "no notebook named 4_matmul" in capsys.readouterr().err
    assert not (tmp_path / "kit").exists()


def test_requirements_pin_what_the_kit_imports(built):
    pins = kit.versions()
    cpu = (built.folder / "requirements.txt").read_text().splitlines()
    gpu = (built.folder / "requirements-gpu.txt").read_text().splitlines()
    want = [
        "torch",
        "triton",
        "numpy",
        "matplotlib",
        "ipywidgets",
        "tqdm",
        "ipykernel",
        "jupyterlab",
    ]
    assert [x for x in cpu if not x.startswith("#")] == [f"{p}=={pins[p]}" for p in want]
    want.remove("triton")  # the CUDA build of torch brings its own
    assert [x for x in gpu if not x.startswith("#")] == [f"{p}=={pins[p]}" for p in want]
    assert not [x for x in cpu + gpu if x.startswith(NOT_FOR_STUDENTS)]
    makefile = (build.ROOT / "Makefile").read_text()
    assert f"TORCH  ?= torch=={pins['torch']}" in makefile
    # the sizes setup.sh states were measured for these pins: a pin that moves needs them anew
    for package, (version, _) in kit.DOWNLOAD_LARGEST.items():
        assert pins[package] == version, (
            f"{package} is pinned at {pins[package]}; kit.DOWNLOAD_LARGEST and DOWNLOAD_ALL were "
            f"measured for {version}: measure them again as their comment says"
        )
    count, total = kit.DOWNLOAD_ALL
    assert f"# download: about {total} MB in {count} packages" in cpu[1]
    assert cpu[1].count(" MB") == len(kit.DOWNLOAD_LARGEST) + 2
    assert gpu[1].startswith("# download: torch's CUDA build")


def pip_sizes(output: str) -> dict[str, float]:
    """MB by wheel file of what pip's output says it fetched: its own figure for a download or a
    cached file, the file's size for a local one ("Processing /path")."""
    found = {}
    scale = {"kB": 1e-3, "MB": 1.0, "GB": 1e3}
    for m in re.finditer(r"(?:Downloading|Using cached) (\S+) \(([\d.]+) ([kMG]B)\)", output):
        found[m[1].rsplit("/", 1)[-1]] = float(m[2]) * scale[m[3]]
    for m in re.finditer(r"^Processing (/\S+\.whl)", output, re.M):
        if Path(m[1]).is_file():
            found[Path(m[1]).name] = Path(m[1]).stat().st_size / 1e6
    return found


def test_pip_sizes_reads_each_way_pip_reports_a_wheel(tmp_path):
    local = tmp_path / "six-1.17.0-py2.py3-none-any.whl"
    local.write_bytes(b"x" * 2_000_000)
    output = (
        "Collecting torch==2.13.0\n"
        "  Downloading https://example.org/whl/torch-2.13.0-cp311.whl (191.8 MB)\n"
        "  Using cached triton-3.9.0-cp311.whl (285.8 MB)\n"
        "  Downloading tqdm-4.70.1-py3-none-any.whl (78 kB)\n"
        f"Processing {local} (from -r requirements.txt (line 9))\n"
    )
    assert pip_sizes(output) == pytest.approx(
        {
            "torch-2.13.0-cp311.whl": 191.8,
            "triton-3.9.0-cp311.whl": 285.8,
            "tqdm-4.70.1-py3-none-any.whl": 0.078,
            local.name: 2.0,
        }
    )


def test_make_student_kit_calls_the_builder(root):
    help_text = subprocess.run(["make", "help"], cwd=root, capture_output=True, text=True).stdout
    assert "make student-kit" in help_text
    dry = subprocess.run(
        ["make", "-n", "student-kit", "NOTEBOOKS=00_setup 01_roofline", "PY=python"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0, dry.stderr
    assert re.search(r"^python -m grader build$", dry.stdout, re.M), "course/ is rebuilt first"
    assert re.search(r"^python -m grader kit 00_setup 01_roofline$", dry.stdout, re.M)
    together = subprocess.run(
        ["make", "-n", "student-kit", "NOTEBOOKS=00_setup 01_roofline", "TOGETHER=1", "PY=py"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert re.search(r"^py -m grader kit 00_setup 01_roofline --together$", together.stdout, re.M)


def solved(notebook: Path, source: Path) -> nbformat.NotebookNode:
    """The kit's notebook with its exercises filled in from the solution (cells matched by id),
    and a last cell that prints where the runtime was imported from."""
    nb = nbformat.read(notebook, as_version=4)
    answers = {c.id: c.source for c in build.to_notebook(source).cells}
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = answers[cell.id]
    nb.cells.append(
        nbformat.v4.new_code_cell("import grader.runtime\nprint(grader.runtime.__file__)")
    )
    return nb


def torch_index() -> str:
    """Where the kit's setup takes torch from in this run: the index `make setup` was given
    (CI's TORCH, PyTorch's CPU index), or none, for a machine whose pip finds the CPU wheel
    locally."""
    m = re.search(r"--(?:extra-)?index-url[ =](\S+)", os.environ.get("TORCH", ""))
    return m.group(1) if m else ""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_kit_works_from_a_fresh_folder(built, tmp_path):
    with zipfile.ZipFile(built.zip) as z:
        z.extractall(tmp_path)
    folder = tmp_path / kit.KIT_NAME
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env |= {"PYTHON": sys.executable, "TORCH_INDEX": torch_index()}
    # pip would compile every module it installs (torch, JupyterLab: thousands, most of a minute
    # of CPU); Python compiles what the checks below import as they import it
    env |= {"PIP_COMPILE": "0"}
    started = time.monotonic()
    setup = subprocess.run(
        ["bash", "setup.sh"], cwd=folder, env=env, capture_output=True, text=True
    )
    seconds = time.monotonic() - started
    print(f"setup.sh took {seconds:.0f} s")
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    assert "known-bad combinations: none found" in setup.stdout  # the doctor, from the kit
    # it said what it would download before pip started, and pip showed each package as it went
    count, total = kit.DOWNLOAD_ALL
    said = setup.stdout.index(f"setup: downloads about {total} MB in {count} packages")
    pip_starts = re.search(r"^\s*(Collecting|Processing) ", setup.stdout, re.M)
    assert pip_starts and said < pip_starts.start(), setup.stdout[:3000]
    fetched = pip_sizes(setup.stdout)
    print(f"pip fetched {len(fetched)} wheels, {sum(fetched.values()):.0f} MB")
    assert len(fetched) >= 0.9 * count, "pip's output no longer names each package it fetches"
    assert 0.75 * total <= sum(fetched.values()) <= 1.25 * total, (
        f"setup.sh says about {total} MB; pip fetched {sum(fetched.values()):.0f} MB: measure "
        "kit.DOWNLOAD_ALL again as its comment says"
    )
    python = folder / ".venv" / "bin" / "python"
    installed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    )
    names = {p["name"].lower() for p in json.loads(installed.stdout)}
    assert {"torch", "triton", "jupyterlab", "ipywidgets"} <= names
    assert not names & set(NOT_FOR_STUDENTS)
    # the kit's JupyterLab asks nothing on its first start: setup.sh turned Jupyter's news off
    lab = ["bash", str(folder / "lab.sh")]
    with lab_server.running(tmp_path / "lab", command=lab, base_env=env) as served:
        notification = served.api("/lab/api/settings/@jupyterlab/apputils-extension:notification")
    assert notification["schema"]["properties"]["fetchNews"]["default"] == "false"

    # notebook 00, solved, top to bottom with the kit's Python, found as lab.sh finds it
    notebook = folder / "course" / "00_setup" / "setup.ipynb"
    source = next(a.source for a in build.assignments() if a.name == "00_setup")
    nbformat.write(solved(notebook, source), notebook)
    jupyter = str(folder / ".venv" / "bin" / "jupyter")
    sockets = kernel_connection.private_folder()  # the kit has no grader.authoring: sockets only
    run = subprocess.run(
        [jupyter, "nbconvert", "--to", "notebook", "--execute", "--inplace", str(notebook)]
        + ["--ExecutePreprocessor.timeout=300"]
        + [f"--KernelManager.{k}={v}" for k, v in kernel_connection.sockets(sockets).items()],
        cwd=tmp_path,
        env=env | {"PYTHONPATH": str(folder)},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    executed = nbformat.read(notebook, as_version=4)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []
    last = "".join(o.get("text", "") for o in executed.cells[-1].outputs)
    assert last.strip() == str(folder / "grader" / "runtime" / "__init__.py")


# -- the container recipe: the kit for macOS and Windows, in Docker, VS Code or Codespaces


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """A Dockerfile's instructions as (keyword, arguments), as Docker reads them: comment lines
    left out, a line ending in a backslash joined to the next."""
    found, pending = [], ""
    for line in dockerfile.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        keyword, _, arguments = (pending + line).strip().partition(" ")
        found.append((keyword.upper(), arguments.strip()))
        pending = ""
    return found


def image_env(steps: list[tuple[str, str]]) -> dict[str, str]:
    """The variables the ENV instructions set (a later one wins)."""
    return dict(
        word.split("=", 1)
        for keyword, args in steps
        if keyword == "ENV"
        for word in shlex.split(args)
    )


def test_the_container_installs_the_kits_own_pins_with_its_setup(built, tmp_path):
    folder = built.folder
    steps = instructions(folder / "Dockerfile")
    ((_, base),) = [s for s in steps if s[0] == "FROM"]
    image, _, tag = base.partition(":")
    python = tag.split("-")[0]
    requires = tomllib.loads((build.ROOT / "pyproject.toml").read_text())["project"]
    assert image == "python" and python in SpecifierSet(requires["requires-python"]), base
    env = image_env(steps)
    assert env["TRITON_INTERPRET"] == "1", "no GPU reaches the container: the interpreter runs"

    # the image's steps, with its paths under `root`: the files it copies from the kit, then its
    # one RUN, setup.sh with no argument (the CPU requirements), and no pip of its own
    root = tmp_path / "image"

    def here(path: str) -> Path:
        return root / path.lstrip("/")

    for keyword, args in steps:
        if keyword == "COPY":
            *sources, dest = shlex.split(args)
            for source in sources:
                target = here(dest) / source if dest.endswith("/") else here(dest)
                target.parent.mkdir(parents=True, exist_ok=True)
                if (folder / source).is_dir():
                    shutil.copytree(folder / source, target)
                else:
                    shutil.copyfile(folder / source, target)
    (run,) = [args for keyword, args in steps if keyword == "RUN"]
    commands = [shlex.split(command) for command in run.split("&&")]
    setup = commands[0]
    assert len(setup) == 2 and setup[0] == "bash" and setup[1].endswith("/setup.sh"), run
    assert not [word for command in commands for word in command if "pip" in word], (
        "the image installs through setup.sh and requirements.txt alone: no second list of pins"
    )
    # setup.sh run as the image runs it, with a Python that records what it is asked to do
    log = tmp_path / "calls.log"
    stub = tmp_path / "python3"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$0 $*" >>"{log}"\n'
        'if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; fi\n'
    )
    stub.chmod(0o755)
    setup_env = env | {
        "PATH": os.environ["PATH"],
        "PYTHON": str(stub),
        "VENV": str(here(env["VENV"])),
    }
    done = subprocess.run(["bash", here(setup[1])], env=setup_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [shlex.split(line) for line in log.read_text().splitlines()]
    (pip,) = [c for c in calls if c[1:4] == ["-m", "pip", "install"]]
    assert pip[0] == str(here(env["VENV"]) / "bin" / "python")
    assert pip[pip.index("--extra-index-url") + 1].endswith("/cpu"), "torch's CPU build"
    installed = here(setup[1]).parent / pip[pip.index("--requirement") + 1]
    assert installed.read_text() == (folder / "requirements.txt").read_text()
    pins = dict(
        line.split("==") for line in installed.read_text().splitlines() if not line.startswith("#")
    )
    assert pins == {package: kit.versions()[package] for package in pins}
    assert {"torch", "triton", "jupyterlab"} <= pins.keys()

    # JupyterLab on the port the image exposes; VS Code and Codespaces build the same image,
    # forward that port, and take the image's environment for the notebooks' kernel
    (cmd,) = [json.loads(args) for keyword, args in steps if keyword == "CMD"]
    (port,) = [args for keyword, args in steps if keyword == "EXPOSE"]
    assert "exec bash lab.sh " in cmd[-1] and f"--port={port}" in cmd[-1], cmd
    config = folder / ".devcontainer"
    dev = json.loads((config / "devcontainer.json").read_text())
    assert (config / dev["build"]["dockerfile"]).resolve() == (folder / "Dockerfile").resolve()
    assert (config / dev["build"]["context"]).resolve() == folder.resolve()
    assert dev["forwardPorts"] == [int(port)]
    settings = dev["customizations"]["vscode"]["settings"]
    assert settings["python.defaultInterpreterPath"] == f"{env['VENV']}/bin/python"
    # the runtime is imported from the kit's folder wherever the editor mounts it
    assert dev["containerEnv"]["PYTHONPATH"] == "${containerWorkspaceFolder}"


def container_engine() -> list[str] | None:
    """The command of a container engine that answers here (`info` succeeds): CONTAINER_ENGINE's
    (e.g. `podman --runtime runc`), which must answer, else podman's, else docker's, else None."""
    named = os.environ.get("CONTAINER_ENGINE")
    for command in [shlex.split(name) for name in ([named] if named else ["podman", "docker"])]:
        if shutil.which(command[0]):
            info = subprocess.run([*command, "info"], capture_output=True, text=True)
            if info.returncode == 0:
                return command
            if named:
                pytest.fail(f"CONTAINER_ENGINE={named}: `{named} info` failed: {info.stderr}")
    if named:
        pytest.fail(f"CONTAINER_ENGINE={named}: no {command[0]} on PATH")
    return None


@pytest.mark.container
@pytest.mark.timeout(1800)
def test_the_container_image_builds_and_runs_notebook_00_offline(built, tmp_path):
    """`make kit-container`: the kit's image built as a student builds it (minutes: torch and
    Triton are most of 600 MB), then notebook 00, solved, run in it with no network, the kit's
    folder mounted as the README says. CONTAINER_BUILD_ARGS adds options to the build (a mirror,
    a local base image)."""
    engine = container_engine()
    if engine is None:
        pytest.skip(
            "no container engine answers here (`podman info`, `docker info`): install podman "
            "or Docker, or name one in CONTAINER_ENGINE"
        )
    image = "gpu-kernels-course-test"
    extra = shlex.split(os.environ.get("CONTAINER_BUILD_ARGS", ""))
    started = time.monotonic()
    made = subprocess.run(
        [*engine, "build", *extra, "-t", image, str(built.folder)], capture_output=True, text=True
    )
    print(f"{' '.join(engine)} build took {time.monotonic() - started:.0f} s")
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]

    folder = Path(shutil.copytree(built.folder, tmp_path / kit.KIT_NAME))
    notebook = folder / "course" / "00_setup" / "setup.ipynb"
    source = next(a.source for a in build.assignments() if a.name == "00_setup")
    nbformat.write(solved(notebook, source), notebook)
    execute = (
        '"$VENV/bin/jupyter" nbconvert --to notebook --execute --inplace '
        "--ExecutePreprocessor.timeout=300 course/00_setup/setup.ipynb"
    )
    started = time.monotonic()
    ran = subprocess.run(
        [*engine, "run", "--rm", "--network", "none", "-v", f"{folder}:/course", image]
        + ["bash", "-c", execute],
        capture_output=True,
        text=True,
    )
    print(f"notebook 00 in the container took {time.monotonic() - started:.0f} s")
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    executed = nbformat.read(notebook, as_version=4)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []
    last = "".join(o.get("text", "") for o in executed.cells[-1].outputs)
    assert last.strip() == "/course/grader/runtime/__init__.py", "the runtime of the mounted kit"
