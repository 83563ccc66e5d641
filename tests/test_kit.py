"""The student kit (`make student-kit`, grader/authoring/kit.py): it holds what students receive
and nothing of the answers, and it works from a fresh folder on its own.

The leak check compares normalized code lines (whitespace and comments dropped), not markers: a
solution line pasted without its markers, re-indented or commented, is caught. Lines the release
legitimately contains are not secrets: a line that an answer shares with the code students are
given (`return out`, the imports, the launch grid), and the drafts 08 hands out to be fixed;
`kit.COINCIDENCES` lists, one by one with its reason, the few lines of the runtime that equal an
answer's line by chance. A reference kernel (05's gemm.py, 04's blocked matmul) may travel only
as a side file of a later notebook.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader import cli
from grader.authoring import build, kernel_connection, kit

pytestmark = pytest.mark.tooling

EXPECTED_TOP = {
    "README.md",
    "setup.sh",
    "lab.sh",
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


@pytest.fixture(scope="module")
def built(tmp_path_factory, known):
    return kit.build_kit(out=tmp_path_factory.mktemp("kit"), known=known)


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


def test_the_kit_holds_what_students_receive_and_nothing_else(built):
    folder = built.folder
    assert {p.name for p in folder.iterdir()} == EXPECTED_TOP
    assert {p.name for p in (folder / "grader").iterdir()} == {"__init__.py", "runtime"}
    held = files(folder)
    assert not [p for p in held if NEVER & set(Path(p).parts)]
    assert not [p for p in held if "__pycache__" in p or p.endswith(".pyc")]
    # every notebook of course/ with its side files, byte for byte, and the runtime whole
    assert built.notebooks == tuple(sorted(p.name for p in build.COURSE.iterdir() if p.is_dir()))
    course = {f"course/{p}" for p in files(build.COURSE) if "__pycache__" not in p}
    course -= {"course/08_verify/my_draft.py"}  # a student's own file, git-ignored
    assert course <= held
    assert {"course/05_autotuning/gemm.py", "course/08_verify/drafts/draft_a.py"} <= held
    runtime = {
        f"grader/runtime/{p}"
        for p in files(kit.RUNTIME)
        if "__pycache__" not in p and not p.endswith(".pyc")
    }
    assert runtime <= held
    for rel in course | runtime:
        original = build.ROOT / rel if rel.startswith("grader") else build.COURSE / rel[7:]
        assert (folder / rel).read_bytes() == original.read_bytes(), rel


def test_the_zip_is_the_folder_and_two_builds_are_identical(built, known, tmp_path):
    with zipfile.ZipFile(built.zip) as z:
        names = set(z.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    assert names == {f"{kit.KIT_NAME}/{p}" for p in files(built.folder)}
    assert modes[f"{kit.KIT_NAME}/setup.sh"] & 0o111, "setup.sh must unzip executable"
    again = kit.build_kit(out=tmp_path / "again", known=known)
    assert again.zip.read_bytes() == built.zip.read_bytes()


def test_nothing_of_the_answers_is_in_the_kit(built, known):
    assert kit.leaks(built.folder, known) == []
    assert kit.imports_outside(built.folder) == []


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
    (copy / "course" / "04_matmul" / "gemm.py").unlink()
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


def test_some_notebooks_and_the_order_warning(tmp_path, known):
    first = kit.build_kit(["01_roofline", "00_setup"], out=tmp_path / "a", known=known)
    assert first.notebooks == ("00_setup", "01_roofline")
    assert {p.name for p in (first.folder / "course").iterdir()} == {"00_setup", "01_roofline"}
    assert first.warnings == ()
    both = kit.build_kit(["04_matmul", "05_autotuning"], out=tmp_path / "b", known=known)
    assert len(both.warnings) == 1
    assert "hand 05_autotuning out only after 04_matmul's deadline" in both.warnings[0]
    later = kit.build_kit(["05_autotuning"], out=tmp_path / "c", known=known)
    assert later.warnings == ()


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
    python = folder / ".venv" / "bin" / "python"
    installed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    )
    names = {p["name"].lower() for p in json.loads(installed.stdout)}
    assert {"torch", "triton", "jupyterlab", "ipywidgets"} <= names
    assert not names & set(NOT_FOR_STUDENTS)

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
