"""The student kit: what students receive instead of the repository (docs/instructors.md, "The
student kit"). `build_kits()` writes one kit per assignment, or one of several notebooks
(`together`): build/student-kit/<label>/<KIT_NAME>/ and its zip, whose top folder is <KIT_NAME>
for every kit. A kit holds the notebooks of course/ with their released files, the student runtime
(grader/__init__.py and grader/runtime/), pinned requirements, two scripts, a README, and a
container recipe (a Dockerfile and .devcontainer/devcontainer.json) that installs through them.

No answer may travel with it. `leaks()` compares every normalized code line of a kit with the
lines of the answers, hidden tests and reference kernels; a line of an answer may appear only in a
side file released with a later notebook. `answers_held()` refuses a kit file that holds most
(ANSWER_SHARE) of another notebook's graded answer, except a reference kernel of
REFERENCE_KERNELS (05's gemm.py holds 04's blocked matmul, 10's flash_forward.py 07's forward
kernel) in a kit without the notebook it answers, handed out after that notebook's deadline. So
04 and 05 never share a kit, nor 07 and 10.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import re
import shutil
import stat
import sys
import tokenize
import tomllib
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from grader.authoring import build
from grader.runtime import syntax

KIT_NAME = "gpu-kernels-course"
OUT = build.BUILD / "student-kit"
RUNTIME = build.ROOT / "grader" / "runtime"
FILES = Path(__file__).parent / "kit_files"  # README, scripts, container recipe: copied as they are
# The third-party modules that released code may import, and the package that provides each;
# `requirements()` pins them at pyproject.toml's versions and `imports_outside()` refuses a kit
# that imports anything else.
PROVIDERS = {name: name for name in "torch triton numpy matplotlib ipywidgets tqdm".split()}
PROVIDERS["IPython"] = "ipykernel"
# Not imported by any released code, but what students open the notebooks with.
TOOLS = ("ipykernel", "jupyterlab")
# What `bash setup.sh` says it downloads (the `# download:` line of requirements.txt): pip's
# wheel sizes in MB for the pinned versions on Linux x86-64 and Python 3.11 (`pip install
# --dry-run --ignore-installed -r requirements.txt`): the two largest by package and version, then
# the packages and MB in all. tests/test_kit.py checks them against the pins and pip's total.
DOWNLOAD_LARGEST = {"torch": ("2.13.0", 192), "triton": ("3.9.0", 286)}
DOWNLOAD_ALL = (111, 580)
# Side files under solutions/ that hold the reference answer of an earlier notebook's exercise,
# and the notebook they answer: released only with a later notebook (`leaks()`), in a kit without
# the notebook they answer (`answers_held()`).
REFERENCE_KERNELS = {
    "05_autotuning/gemm.py": "04_matmul",
    "09_hopper/gemm.py": "04_matmul",
    "10_flash_backward/flash_forward.py": "07_flash_attention",
}
MARKERS = {
    "solution": ("### BEGIN SOLUTION", "### END SOLUTION"),
    "hidden test": ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"),
}
# A kit file that holds this share of the lines of another notebook's graded answer holds the
# answer: a copy with a line or two changed is still the answer, but notebooks share idioms (00's
# ReLU and 02's masked add start alike).
ANSWER_SHARE = 0.8
# Normalized lines this short (`else:`, `return`, `pass`), and returns of an empty or constant
# value, are syntax any two programs share: they name nothing of an answer.
TRIVIAL = 6
EMPTY_RETURNS = frozenset(
    f"return{value}" for value in ("[]", "{}", "()", "None", "True", "False", "0", '""', "''")
)
# Lines of the released runtime and side files that equal a line of an answer or hidden test by
# coincidence, by kit path and normalized line, each with the reason it gives nothing away. Any
# other match fails the build; add one here only after reading both places.
COINCIDENCES = {
    ("course/05_autotuning/gemm.py", "kw=config.kwargs"): "describe() reads a config's "
    "parameters, as 05's pruning answer does; the pruning rule is not in gemm.py",
    ("course/09_hopper/gemm.py", "kw=config.kwargs"): "09 releases 05's gemm.py as it is, for "
    "its helpers and its tuned kernel; as the line before",
    ("grader/runtime/attention.py", "b,h,n,d=shape"): "unpacks an attention shape, as 01's "
    "hidden test does; the checks around it are not there",
    ("grader/runtime/widgets/online_softmax.py", "m=m_new"): "the step-through explorer "
    "updates the running max the prose derives; 06's kernel is Triton, the explorer NumPy",
    ("grader/runtime/widgets/roofline.py", 'ifop=="matmul":'): "the explorer picks a shape by "
    "op name, as 01's answer dispatches on it; the FLOP and byte formulas are not there",
    ("grader/runtime/widgets/roofline.py", 'ifopin("attention_naive","attention_tiled"):'): "as "
    "the line before",
}
ZIP_TIME = (2026, 1, 1, 0, 0, 0)  # fixed, so two builds of one kit are byte-identical


class KitError(RuntimeError):
    """The kit cannot be built; the message says what to change."""


@dataclass(frozen=True)
class Secret:
    """A normalized code line that students must not receive: part of an answer (`solution`), a
    hidden test, or a reference kernel; `notebook` is the one whose exercise it belongs to."""

    line: str
    kind: str
    notebook: str
    where: str


@dataclass(frozen=True)
class Leak:
    """A line of the kit that is a secret: the kit file (relative to the kit), where in it (a
    notebook's cell and line, or a file's line), and the secret."""

    path: str
    where: str
    secret: Secret

    def __str__(self) -> str:
        return (
            f"{self.path}, {self.where}: a {self.secret.kind} line of {self.secret.notebook} "
            f"({self.secret.where}): {self.secret.line}"
        )


@dataclass(frozen=True)
class Kit:
    """A built kit: its folder, its zip and the notebooks it holds."""

    folder: Path
    zip: Path
    notebooks: tuple[str, ...]


@dataclass(frozen=True)
class Answer:
    """The graded answer of one solution cell: its solution regions' normalized code lines."""

    notebook: str
    grade_id: str
    lines: frozenset[str]


# -- lines and how they are compared


@functools.cache  # every kit holds the same runtime: each of its files is read once per process
def code_lines(text: str) -> tuple[tuple[int, str], ...]:
    """(line number, line without comments and whitespace) of Python source; lines too short to
    name anything (TRIVIAL) and returns of an empty value (EMPTY_RETURNS) are left out. Source that
    does not tokenize (a notebook's shell escape) is cut at its first `#` instead."""
    lines = text.splitlines()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                row, col = tok.start
                lines[row - 1] = lines[row - 1][:col]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        lines = [line.split("#", 1)[0] for line in lines]
    norms = ((i, re.sub(r"\s+", "", line)) for i, line in enumerate(lines, 1))
    return tuple((i, n) for i, n in norms if len(n) >= TRIVIAL and n not in EMPTY_RETURNS)


def regions(source: str, kind: str) -> tuple[list[str], str]:
    """The lines inside `kind`'s markers (MARKERS), and the source without them (markers
    included), as nbgrader's release leaves it apart from its `# YOUR CODE HERE` stub."""
    begin, end = MARKERS[kind]
    inside, outside, depth = [], [], 0
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == begin:
            depth += 1
        elif stripped == end:
            depth -= 1
        elif depth:
            inside.append(line)
        else:
            outside.append(line)
    return inside, "\n".join(outside)


@dataclass(frozen=True)
class Course:
    """What the leak check compares a kit with, read from solutions/: the secrets, and the lines
    students are given anyway (the released text of every notebook)."""

    secrets: dict[str, list[Secret]]
    given: frozenset[str]


def course(solutions: Path = build.SOLUTIONS, extra_kernels: Iterable[Path] = ()) -> Course:
    """Every notebook's answers and hidden tests (by their markers), the reference kernels of
    REFERENCE_KERNELS, and the Triton kernels of `extra_kernels` (files of the tests and the
    benchmarks, which may be reference answers in another form); and the code lines every
    released notebook gives students."""
    secrets: dict[str, list[Secret]] = {}
    given: set[str] = set()

    def add(text: str, kind: str, notebook: str, where: str) -> None:
        for _, line in code_lines(text):
            secrets.setdefault(line, []).append(Secret(line, kind, notebook, where))

    for a in build.assignments(solutions):
        where = str(a.source.relative_to(solutions.parent))
        for cell in build.to_notebook(a.source).cells:
            if cell.cell_type != "code":  # prose, and the code it shows
                given.update(line for _, line in code_lines(cell.source))
                continue
            answer, rest = regions(cell.source, "solution")
            hidden, rest = regions(rest, "hidden test")
            add("\n".join(answer), "solution", a.name, f"{where}, cell {cell.id}")
            add("\n".join(hidden), "hidden test", a.name, f"{where}, cell {cell.id}")
            given.update(line for _, line in code_lines(rest))
        for side in sorted(a.source.parent.rglob("*.py")):
            rel = side.relative_to(solutions).as_posix()
            if side != a.source and rel not in REFERENCE_KERNELS:  # drafts to start from
                given.update(line for _, line in code_lines(side.read_text()))
    for rel, answers in REFERENCE_KERNELS.items():
        for kernel in triton_kernels((solutions / rel).read_text()):
            add(kernel, "reference kernel", answers, f"solutions/{rel}")
    for path in extra_kernels:
        for kernel in triton_kernels(path.read_text()):
            add(kernel, "reference kernel", "no notebook", str(path.relative_to(build.ROOT)))
    for line in given:  # students have these lines in the open, so they are no secret
        secrets.pop(line, None)
    return Course(secrets, frozenset(given))


def answers(solutions: Path = build.SOLUTIONS) -> list[Answer]:
    """The graded answer of every solution cell of every notebook."""
    found = []
    for a in build.assignments(solutions):
        for cell in build.to_notebook(a.source).cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("solution"):
                inside = "\n".join(regions(cell.source, "solution")[0])
                lines = frozenset(line for _, line in code_lines(inside))
                if lines:
                    found.append(Answer(a.name, meta["grade_id"], lines))
    return found


def answers_held(folder: Path, graded: Iterable[Answer], notebooks: Iterable[str]) -> list[str]:
    """Each file of the kit at `folder` that holds ANSWER_SHARE or more of the lines of another
    notebook's graded answer (its own notebook's are `leaks()`'s to find), with the answer. A
    reference kernel of REFERENCE_KERNELS is allowed in its side file when the kit does not hold
    the notebook it answers (`notebooks`, the kit's)."""
    held: dict[str, set[str]] = {}  # by kit file, every cell of a notebook together
    for piece in kit_text(folder):
        held.setdefault(piece.path, set()).update(line for _, line in code_lines(piece.text))
    allowed_here = {
        f"course/{rel}": answered
        for rel, answered in REFERENCE_KERNELS.items()
        if answered not in set(notebooks)
    }
    found = []
    for path, lines in held.items():
        for answer in graded:
            if answer.notebook == notebook_of(path) or allowed_here.get(path) == answer.notebook:
                continue
            common = len(answer.lines & lines)
            if common >= ANSWER_SHARE * len(answer.lines):
                found.append(
                    f"{path} holds {common} of the {len(answer.lines)} lines of "
                    f"{answer.notebook}'s graded answer {answer.grade_id!r}"
                )
                if path.removeprefix("course/") in REFERENCE_KERNELS:
                    found[-1] += (
                        f": give {answer.notebook} and {notebook_of(path)} kits of their own, "
                        f"and hand {notebook_of(path)} out after {answer.notebook}'s deadline"
                    )
    return found


def triton_kernels(source: str) -> list[str]:
    """The source of every function decorated with a `triton.jit` in a Python file."""
    tree = syntax.parse(source)
    lines = source.splitlines()
    return [
        "\n".join(lines[node.lineno - 1 : node.end_lineno])
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any("jit" in ast.unparse(d) for d in node.decorator_list)
    ]


def notebook_of(path: str) -> str | None:
    """The notebook a kit file is released with (course/NN_topic/...), or None."""
    parts = Path(path).parts
    return parts[1] if len(parts) > 2 and parts[0] == "course" else None


def allowed(secret: Secret, path: str) -> bool:
    """The rule: an answer or reference kernel of notebook X may appear only in a side file (not
    the notebook) released with a notebook later than X, given out after X's deadline; a hidden
    test, or a kernel of the tests and benchmarks, may appear nowhere. COINCIDENCES are the
    exceptions, read one by one."""
    owner = notebook_of(path)
    return (path, secret.line) in COINCIDENCES or (
        secret.kind != "hidden test"
        and secret.notebook[:2].isdigit()
        and owner is not None
        and not path.endswith(".ipynb")
        and owner > secret.notebook
    )


@dataclass(frozen=True)
class Text:
    """One piece of a kit's text: a notebook's cell (`where` names it) or a whole file."""

    path: str
    where: str
    text: str
    is_code: bool


def kit_text(folder: Path) -> Iterator[Text]:
    """Every cell of every notebook of a kit, and every other file whole."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if path.suffix == ".ipynb":
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
            for i, cell in enumerate(cells):
                source = "".join(cell["source"])
                yield Text(rel, f"cell {i}", source, cell["cell_type"] == "code")
        elif path.suffix != ".zip":
            text = path.read_text(encoding="utf-8", errors="replace")
            yield Text(rel, "", text, path.suffix == ".py")


def leaks(folder: Path, known: Course) -> list[Leak]:
    """Every line of the kit at `folder` that is a secret it may not hold (see `allowed`). A line
    that several secrets share is allowed where one of them is: a reference kernel released with
    a later notebook may share lines with a kernel of the benchmarks (its argument list, its
    accumulator), and the release, which the rule allows, shows those lines anyway."""
    found = []
    for piece in kit_text(folder):
        for lineno, line in code_lines(piece.text):
            secrets = known.secrets.get(line, [])
            if secrets and not any(allowed(secret, piece.path) for secret in secrets):
                where = f"{piece.where}, line {lineno}" if piece.where else f"line {lineno}"
                found.append(Leak(piece.path, where, secrets[0]))
    return found


def test_and_bench_kernels(root: Path = build.ROOT) -> list[Path]:
    """The files of tests/ and bench/ that define Triton kernels."""
    return sorted(
        p
        for folder in ("tests", "bench")
        for p in (root / folder).rglob("*.py")
        if "triton.jit" in p.read_text(encoding="utf-8")
    )


# -- what the kit holds


def selected(names: Iterable[str], course_dir: Path = build.COURSE) -> list[str]:
    """The notebooks named (all of course/ when none is), in course order; an unknown name is an
    error that lists the known ones."""
    known = sorted(p.name for p in course_dir.iterdir() if p.is_dir() and p.name[:2].isdigit())
    names = list(names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KitError(
            f"no notebook named {', '.join(unknown)} in {course_dir}; the notebooks are: "
            f"{' '.join(known)} (run `make release` first if course/ is missing one)"
        )
    return [n for n in known if n in names] if names else known


def versions(root: Path = build.ROOT) -> dict[str, str]:
    """Exact versions by package: pyproject.toml's pins, torch's and triton's from the Makefile
    (pyproject.toml gives them as ranges)."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    reqs = [*project["dependencies"], *project["optional-dependencies"]["course"]]
    exact = (re.fullmatch(r"([A-Za-z0-9_.-]+)==([\w.]+)", r.strip()) for r in reqs)
    pins = {m.group(1).lower(): m.group(2) for m in exact if m}
    makefile = (root / "Makefile").read_text()
    pinned = re.findall(r"^(TORCH|TRITON)\s*\?=\s*\w+==([\w.]+)", makefile, re.M)
    return pins | {var.lower(): version for var, version in pinned}


def requirements(gpu: bool, root: Path = build.ROOT) -> str:
    """requirements.txt (CPU) or requirements-gpu.txt: what released code imports, and the tools
    that open it, pinned."""
    pins = versions(root)
    packages = dict.fromkeys([*PROVIDERS.values(), *TOOLS])
    if gpu:
        packages.pop("triton")  # the CUDA build of torch pins its own
        head = "# NVIDIA GPU: a CUDA build of torch (setup.sh gpu), which brings its own Triton."
        download = (
            "# download: torch's CUDA build with NVIDIA's CUDA libraries and Triton, several GB in "
            "all (pip shows each package's size as it downloads it)"
        )
    else:
        head = "# CPU (the default): torch's CPU build (setup.sh), and Triton for its interpreter."
        count, total = DOWNLOAD_ALL
        largest = ", ".join(f"{p} {mb} MB" for p, (_, mb) in DOWNLOAD_LARGEST.items())
        rest = total - sum(mb for _, mb in DOWNLOAD_LARGEST.values())
        download = (
            f"# download: about {total} MB in {count} packages (these and what they need): "
            f"{largest}, the others {rest} MB"
        )
    missing = [p for p in packages if p not in pins]
    if missing:
        raise KitError(f"pyproject.toml pins no exact version of {', '.join(missing)}")
    return "\n".join([head, download, *(f"{p}=={pins[p]}" for p in packages)]) + "\n"


def imports_outside(folder: Path) -> list[str]:
    """Third-party modules imported by the kit's code that PROVIDERS does not cover."""
    local = {"grader"} | {p.stem for p in (folder / "course").rglob("*.py")}
    known = sys.stdlib_module_names | local | PROVIDERS.keys()
    return [
        f"{piece.path}: imports {name}"
        for piece in kit_text(folder)
        if piece.is_code
        for name in imported(piece.text, piece.path)
        if name.split(".")[0] not in known
    ]


@functools.cache
def imported(source: str, path: str) -> tuple[str, ...]:
    """The modules a piece of code imports (absolute imports only), shell escapes left out."""
    source = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )
    names = []
    for node in ast.walk(syntax.parse(source, path)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.append(node.module or "")
    return tuple(names)


# -- writing it


_IGNORE = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", "*.pyc", "*.executed.ipynb")


def write_zip(folder: Path, target: Path) -> None:
    """`folder` as a zip with `folder`'s name as its top folder; fixed times, scripts executable."""
    with zipfile.ZipFile(target, "w") as z:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(f"{folder.name}/{path.relative_to(folder).as_posix()}", ZIP_TIME)
            mode = 0o755 if path.suffix == ".sh" else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            z.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)


def build_kits(
    names: Iterable[str] = (),
    out: Path = OUT,
    course_dir: Path = build.COURSE,
    known: Course | None = None,
    together: bool = False,
) -> list[Kit]:
    """Write, into `out` (emptied first), one kit per notebook of `names` (default all), or one kit
    of them all when `together`. Refuses, and leaves nothing in `out`, when any kit would leak an
    answer or import an unpinned package."""
    notebooks = selected(names, course_dir)
    if out.exists():
        shutil.rmtree(out)
    known = known or course(extra_kernels=test_and_bench_kernels())
    graded = answers()
    groups = [notebooks] if together else [[name] for name in notebooks]
    try:
        return [build_kit(group, out, course_dir, known, graded) for group in groups]
    except KitError:
        shutil.rmtree(out, ignore_errors=True)
        raise


def build_kit(
    names: Iterable[str] = (),
    out: Path = OUT,
    course_dir: Path = build.COURSE,
    known: Course | None = None,
    graded: list[Answer] | None = None,
) -> Kit:
    """Write one kit of the notebooks `names` (default all) into `out`: the folder
    out/<label>/<KIT_NAME>/ and out/<KIT_NAME>-<label>.zip, the label naming its notebooks.
    Refuses a kit that would leak an answer, hold another notebook's graded answer or import an
    unpinned package, and then leaves nothing of it behind."""
    notebooks = selected(names, course_dir)
    label = "+".join(notebooks)
    folder = out / label / KIT_NAME
    target = out / f"{KIT_NAME}-{label}.zip"
    shutil.rmtree(folder.parent, ignore_errors=True)
    target.unlink(missing_ok=True)
    folder.mkdir(parents=True)
    for name in notebooks:
        shutil.copytree(course_dir / name, folder / "course" / name, ignore=_IGNORE)
    shutil.copytree(RUNTIME, folder / "grader" / "runtime", ignore=_IGNORE)
    shutil.copyfile(RUNTIME.parent / "__init__.py", folder / "grader" / "__init__.py")
    shutil.copytree(FILES, folder, ignore=_IGNORE, dirs_exist_ok=True)
    (folder / "requirements.txt").write_text(requirements(gpu=False))
    (folder / "requirements-gpu.txt").write_text(requirements(gpu=True))
    for script in folder.glob("*.sh"):
        script.chmod(0o755)

    known = known or course(extra_kernels=test_and_bench_kernels())
    graded = answers() if graded is None else graded
    problems = [str(leak) for leak in leaks(folder, known)]
    problems += answers_held(folder, graded, notebooks)
    problems += imports_outside(folder)
    if problems:
        shutil.rmtree(folder.parent)
        if not any(out.iterdir()):
            out.rmdir()
        raise KitError(
            f"the kit of {', '.join(notebooks)} would hold what students must not receive, or "
            "need a package it does not pin:\n  " + "\n  ".join(problems)
        )
    write_zip(folder, target)
    return Kit(folder, target, tuple(notebooks))
