"""What the answer cells of a submission do that a human should read, found in their source on
the trusted side (nothing of the student's runs here). Scores do not depend on it: every
verdict is the judge's (grader.grading.judge), in a process where no student code runs. What the
student's own process reports beside its outputs is evidence (which kernels it launched, what
they wrote, the memory it allocated), and answer cells that reach into that process can make it
lie; so this module names them:

- `reaches`: code that replaces functions or values of grader, torch or triton (an assignment
  to their attributes, `setattr`, `mock.patch`, writes through `__dict__`, `vars()` or
  `globals()`), or that binds one of the exercise's kernel names to anything but a Triton
  kernel, changes its attributes, or rebinds a name a kernel is made through (`jit`, `triton`)
  (the judge launches the student's kernels by name, and a wrapper or a kernel class of the
  student's there could compute with torch), as "cheating"; and code the judge cannot read or
  that reaches below Python
  (exec, eval, compile, ctypes, frames and the garbage collector, `/proc/self`, raw file
  descriptors, IPython magics that run code), as "dynamic-code";
- `routes`: kernelguard (PyPI; MIT), a maintained rule-based detector of kernel-benchmark
  hacks, over the answer cells: its strong rules (results kept by input address, timers
  patched) as "cheating". kernelguard looks for most of its hacks inside the functions it is
  told are entry points (and what they call): here, the names the answer cells bind that the
  release's other cells read. Not every name they bind: a helper that keeps a scratch buffer by
  shape and returns it would then look like a kept output. The answer cells are read one by
  one, so that a finding names its cell, and then together, for a hack split over two cells."""

from __future__ import annotations

import ast
import contextlib
import re
from dataclasses import dataclass

import kernelguard

from grader.grading import roles
from grader.grading.nbgrader_policy import grade_id_of
from grader.runtime import syntax
from grader.runtime.handin import names, python

WATCHED = ("grader", "torch", "triton")  # what the student's process reports its evidence with
DYNAMIC = {
    "exec": "runs code from a string with exec",
    "eval": "runs code from a string with eval",
    "compile": "compiles code from a string",
    "__import__": "imports a module by a name built at run time",
    "breakpoint": "starts a debugger",
    "setattr": "sets attributes by name (setattr)",
    "delattr": "deletes attributes by name (delattr)",
    "globals": "reaches a namespace through globals()",
    "vars": "reaches a namespace through vars()",
    "locals": "reaches a namespace through locals()",
}
BELOW = {  # modules through which code reaches below Python's objects
    "ctypes": "uses ctypes",
    "cffi": "uses cffi",
    "mmap": "maps memory with mmap",
    "gc": "reaches objects through the garbage collector",
    "inspect": "reads frames or objects with inspect",
    "importlib": "imports modules by name with importlib",
}
FRAMES = {
    "_getframe": "reads the caller's frames",
    "f_back": "walks frames",
    "f_locals": "reads a frame's variables",
    "f_globals": "reads a frame's globals",
    "settrace": "traces the code that runs",
    "setprofile": "profiles the code that runs",
}
RAW_OS = ("write", "dup", "dup2", "fdopen")  # os.*: raw file descriptors
RAW = re.compile(r"/proc/|/dev/fd/")  # a string naming a process's memory or descriptors
MAGICS = frozenset({"time", "timeit", "matplotlib", "capture"})  # run nothing of their own


@dataclass(frozen=True)
class Route:
    """One thing an answer cell does that a human should read. `kind` is a finding kind
    (grader.grading.findings.KINDS): "cheating" or "dynamic-code"."""

    kind: str
    cell: str
    what: str

    def __str__(self) -> str:
        return f"cell {self.cell} {self.what}"


def parse(source: str) -> ast.Module:
    """ast.parse, one thread at a time. Source nested too deeply to parse raises SyntaxError:
    Python cannot compile it either, so it fails when it runs and costs its own cell."""
    try:
        return syntax.parse(source)
    except (RecursionError, MemoryError) as exc:
        raise SyntaxError(f"nested too deeply to parse ({type(exc).__name__})") from None


def _dotted(node, imported: dict[str, str]) -> str | None:
    """`a.b.c` as the dotted name it reaches, through the cell's imports."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    root = imported.get(node.id)
    return ".".join([root, *reversed(parts)]) if root else None


def _watched(name: str | None) -> bool:
    return name is not None and name.split(".")[0] in WATCHED


def _imports(tree: ast.Module, imported: dict[str, str]) -> None:
    """Add to `imported` what each name a module's imports bind stands for."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported[(alias.asname or alias.name).split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"


def reaches(cells: list[tuple[str, str]], released=None) -> list[Route]:
    """What each answer cell ((label, source), in order) does to grader, torch or triton, and how
    it reaches below Python (see the module's docstring), once per cell and thing; the names the
    `released` notebook's other cells import (`checks`, `torch`) are known as theirs."""
    found: dict[tuple[str, str, str], None] = {}
    imported: dict[str, str] = {}  # what a name was imported as: the release's, then the cells'
    release = released.cells if released is not None else []
    theirs = [c.source for c in release if roles.kind(c) in ("answer", "given")]
    launched, through = roles.kernels(theirs)  # launched: roles.launchable of the release
    through |= roles.kernels(source for _, source in cells)[1]
    for cell in release:
        if roles.kind(cell) in ("given", "test"):
            with contextlib.suppress(SyntaxError):
                _imports(parse(python(cell.source)), imported)
    for label, source in cells:
        for line in source.split("\n"):
            magic = line.lstrip()
            if magic.startswith("%") and magic.strip("%"):
                name = magic.lstrip("%").split(maxsplit=1)[0]
                if name not in MAGICS:
                    found[("dynamic-code", label, f"runs the magic %{name}")] = None
        try:
            tree = parse(python(source))
        except SyntaxError:
            continue  # it fails when it runs, and costs its own cell
        _imports(tree, imported)
        for node in ast.walk(tree):
            for kind, what in _reach(node, imported):
                found[(kind, label, what)] = None
        for name, what in roles.bindings(tree)[1].items():  # the judge launches none of these
            if name in launched:  # (roles.kernels)
                found[("cheating", label, f"{what}, a kernel the grader launches")] = None
            elif name in through:
                found[("cheating", label, f"binds {name}, through which a kernel the grader "
                       "launches is made, to what is not Triton's")] = None  # fmt: skip
    return [Route(*key) for key in found]


def _reach(node, imported: dict[str, str]):
    """(kind, what) for each way `node` reaches the student's own process."""
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
        for target in getattr(node, "targets", None) or [node.target]:
            base = target.value if isinstance(target, ast.Subscript) else target
            dotted = _dotted(base, imported) if isinstance(base, ast.Attribute) else None
            if _watched(dotted):
                yield "cheating", f"replaces {dotted}"
    elif isinstance(node, ast.Import | ast.ImportFrom):
        for name in [node.module or ""] if isinstance(node, ast.ImportFrom) else []:
            if name.split(".")[0] in BELOW:
                yield "dynamic-code", BELOW[name.split(".")[0]]
        for alias in node.names if isinstance(node, ast.Import) else []:
            if alias.name.split(".")[0] in BELOW:
                yield "dynamic-code", BELOW[alias.name.split(".")[0]]
    elif isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id in DYNAMIC:
            yield "dynamic-code", DYNAMIC[node.func.id]
        dotted = _dotted(node.func, imported) or ""
        if dotted.startswith(("unittest.mock.patch", "mock.patch")):
            yield "cheating", "patches with unittest.mock"
    elif isinstance(node, ast.Attribute):
        dotted = _dotted(node, imported) or ""
        if node.attr == "__dict__" and _watched(dotted):
            yield "cheating", f"writes through {dotted}"
        if node.attr in FRAMES:
            yield "dynamic-code", FRAMES[node.attr]
        if dotted.startswith("os.") and node.attr in RAW_OS:
            yield "dynamic-code", f"uses os.{node.attr} on raw file descriptors"
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and RAW.search(node.value):
        yield "dynamic-code", "names a process's memory or file descriptors (/proc, /dev/fd)"


def answer_cells(submitted, released) -> list[tuple[str, str]]:
    """(grade_id, source) of the cells of `submitted` that answer a solution cell of the release,
    in notebook order: what the trusted side takes from a submission."""
    wanted = {grade_id_of(cell) for cell in released.cells if roles.kind(cell) == "answer"} - {None}
    return [
        (grade_id, cell.source)
        for cell in submitted.cells
        if cell.cell_type == "code" and (grade_id := grade_id_of(cell)) in wanted
    ]


def entry_points(released) -> set[str]:
    """The names the release's cells outside its answer cells read: among them, the student's
    functions that the tests and the speed cells call."""
    given = [c.source for c in released.cells if roles.kind(c) in ("given", "test")]
    return set().union(*(names(source).reads for source in given))


def _bound(trees: list[ast.Module]) -> list[str]:
    """The names the cells bind at their top level (functions, classes, assignments), in order."""
    names = []
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.append(node.name)
            elif isinstance(node, ast.Assign):
                names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return list(dict.fromkeys(names))


def _strong(code: str, entry_points: list[str]) -> set[str]:
    """kernelguard's strong rules that `code` matches."""
    with syntax.LOCK:  # kernelguard keeps its settings in module globals, and parses
        kernelguard.configure_runtime(config_data={"entrypoints": {"names": entry_points}})
        matched = kernelguard.analyze_code(code, compute_structural_hash=False)
    return {
        m["pattern"]
        for m in matched["matched_patterns"]
        if kernelguard.get_rule_policy(m["pattern"]).max_outcome == kernelguard.AUTO_FILTER
    }


def _read(labels, code, entry_points, known=frozenset(), how=""):
    """(the strong rules `code` matches, or None where kernelguard fails on it; a route on each
    cell of `labels` that names the rules not `known` already, or the failure)."""
    try:
        rules = _strong(code, entry_points)
    except Exception as exc:  # it recurses over the syntax tree: a long expression stops it
        what = f"is code that kernelguard cannot read{how} ({type(exc).__name__})"
        return None, [Route("dynamic-code", label, what) for label in labels]
    new = sorted(rules - known)
    if not new:
        return rules, []
    families = dict.fromkeys(
        kernelguard.get_rule_policy(rule).technique_family.replace("_", " ") for rule in new
    )
    what = (
        f"matches kernelguard's rule{'s' if len(new) > 1 else ''} {', '.join(new)} "
        f"({', '.join(families)}){how}"
    )
    return rules, [Route("cheating", label, what) for label in labels]


def routes(cells: list[tuple[str, str]], called: set[str]) -> list[Route]:
    """What kernelguard finds in the answer cells `cells` ((label, source), in notebook order),
    with the names of theirs in `called` (entry_points) as the entry points it searches: a
    "cheating" route for each cell that matches its strong rules, and a "dynamic-code" route for
    each cell it fails to read. A cell that is not Python is left out, as `reaches` leaves it (it
    fails when it runs, and costs only its own points)."""
    readable = []
    for label, source in cells:
        code = python(source)
        try:
            readable.append((label, code, parse(code)))
        except SyntaxError:
            continue
    bound = _bound([tree for _, _, tree in readable])
    names = [name for name in bound if name in called] or ["custom_kernel"]
    found, alone, read = [], set(), []
    for label, code, _ in readable:
        rules, more = _read([label], code, names)
        found += more
        if rules is not None:
            alone |= rules
            read.append((label, code))
    if len(read) > 1:
        how = " with the other answer cells"
        joined = "\n\n".join(code for _, code in read)
        rules, together = _read([label for label, _ in read], joined, names, alone, how)
        needed = _needed(read, names, rules - alone) if together and rules is not None else read
        if len(needed) < len(read):  # name only the cells that match together
            joined = "\n\n".join(code for _, code in needed)
            together = _read([label for label, _ in needed], joined, names, alone, how)[1]
        found += together
    return found


def _needed(read: list[tuple[str, str]], names: list[str], rules: set[str]):
    """The fewest of the cells `read` ((label, code)) that, joined, still match `rules`: each is
    left out in turn, and stays out where the others still match them, so that a cell that only
    stands beside the ones that cheat together is not named."""
    kept = list(read)
    for cell in list(kept):
        rest = [c for c in kept if c is not cell]
        if len(rest) < 2:
            break
        try:
            if rules <= _strong("\n\n".join(code for _, code in rest), names):
                kept = rest
        except Exception:  # noqa: BLE001 - kernelguard fails on a part: the cell stays
            continue
    return kept
