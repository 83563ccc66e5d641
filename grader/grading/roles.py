"""Where each cell of a notebook runs at grading, decided from the notebook and its source alone,
before anything runs.

- An answer cell (nbgrader's solution cells) runs in the student's kernel alone.
- A test cell (a graded cell that is no answer) runs in the judge alone (grader.grading.judge):
  the student's process never sees its source, hidden tests, expected values or verdict.
- A given cell (any other code cell, whatever the student did to it) runs in the student's
  kernel; and in the judge too where a later judge cell reads a name it binds (`needed`), so that
  references, inputs, tolerances and checking helpers are the release's code.

In the judge, the names the answer cells of the source notebook (the authors' answers) bind are
the student's, served by the student's kernel as the judge runs (`served`); so is a given Triton
kernel that calls one of them (09's `tile_order_kernel` calls the student's `tile_coords`), which
the judge cannot compile. Nothing else the student binds is asked for, and a given name the
student rebinds stays the release's in the judge. A kernel is launched there only under a name
the notebook binds to a Triton kernel and to nothing else, through names it does not rebind
(`kernels`): a wrapper under a kernel's name, or a kernel class of the student's own made by a
`jit` of theirs, could compute with torch and launch the kernel for show."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

from grader.runtime import syntax
from grader.runtime.handin import Names, jit, names, python

STUDENT, JUDGE, BOTH, NONE = "student", "judge", "both", "none"
CHANGERS = ("setattr", "delattr", "vars")  # calls that change the object they are given


def kind(cell) -> str:
    """ "answer", "test", "given" or "markdown"."""
    if cell.get("cell_type") != "code":
        return "markdown"
    meta = cell.get("metadata", {}).get("nbgrader", {})
    meta = meta if isinstance(meta, dict) else {}
    if meta.get("solution"):
        return "answer"
    if meta.get("grade"):
        return "test"
    return "given"


def answers(source_nb) -> tuple[frozenset[str], frozenset[str]]:
    """The names the authors' answer cells bind at their top level, and the globals they read."""
    found = [names(cell.source) for cell in source_nb.cells if kind(cell) == "answer"]
    return (
        frozenset(name for n in found for name in n.binds),
        frozenset(name for n in found for name in n.reads),
    )


@dataclass(frozen=True)
class Plan:
    """Per cell: where it runs (STUDENT, JUDGE, BOTH or NONE for markdown) and the names the
    student's kernel serves while the judge runs it. `settings`: the release's names a test cell
    sets and an answer reads (05's tests change SMEM_LIMIT, which prune_configs reads), sent with
    each call to the student's kernel."""

    where: tuple[str, ...]
    served: tuple[tuple[str, ...], ...]
    settings: tuple[str, ...]


def plan(nb, answers: frozenset[str], answer_reads: frozenset[str]) -> Plan:
    """The plan of notebook `nb` (as graded: the release, with the student's answer cells and the
    hidden tests), the authors' answer cells binding `answers` and reading `answer_reads`."""
    cells = list(nb.cells)
    kinds = [kind(c) for c in cells]
    empty = Names(frozenset(), frozenset(), {})
    found = [
        names(c.source) if k != "markdown" else empty for c, k in zip(cells, kinds, strict=True)
    ]
    # the student's names, position by position: a name is the student's from the answer cell
    # that binds it until a given cell binds it again; a given kernel that calls one is too
    owner: dict[str, str] = {}
    served: list[tuple[str, ...]] = []
    for k, n in zip(kinds, found, strict=True):
        served.append(tuple(sorted(name for name, who in owner.items() if who == STUDENT)))
        if k == "answer":
            for name in n.binds & answers:
                owner[name] = STUDENT
        elif k == "given":
            for name in n.binds:
                owner[name] = JUDGE
            changed = True
            while changed:
                changed = False
                for kernel, body in n.kernels.items():
                    theirs = {m for m, who in owner.items() if who == STUDENT}
                    if owner.get(kernel) != STUDENT and body & theirs:
                        owner[kernel] = STUDENT
                        changed = True
    # which given cells the judge needs: those binding a name a later judge cell reads, and the
    # first code cell (the imports, which choose the device)
    where = [
        {"answer": STUDENT, "test": JUDGE, "given": STUDENT, "markdown": NONE}[k] for k in kinds
    ]
    needed: set[str] = set()
    first = next((i for i, k in enumerate(kinds) if k != "markdown"), -1)
    for i in range(len(cells) - 1, -1, -1):
        if kinds[i] == "given" and (found[i].binds & needed or i == first):
            where[i] = BOTH
        if where[i] in (JUDGE, BOTH):
            needed |= found[i].reads
    set_by_tests = {
        name for k, n in zip(kinds, found, strict=True) if k == "test" for name in n.binds
    }
    given = {name for k, n in zip(kinds, found, strict=True) if k == "given" for name in n.binds}
    settings = tuple(sorted(set_by_tests & given & answer_reads - answers))
    return Plan(tuple(where), tuple(served), settings)


def _root(node) -> str | None:
    """The global name an expression starts from: `triton` of `triton.autotune(...)`."""
    while isinstance(node, ast.Call | ast.Attribute | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def bindings(tree: ast.Module) -> tuple[dict[str, frozenset[str]], dict[str, str]]:
    """Of one cell: {global name it binds to a Triton kernel (a def under @triton.jit, autotune
    or heuristics, or `name = triton.jit(fn)`): the global names that decorator or call goes
    through}, and {name: what} for each global name it binds another way (an import from Triton
    aside), or whose object's attribute it sets."""
    kernels, other = {}, {}
    made = {id(t): _root(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
            and jit(n.value) for t in n.targets}  # fmt: skip
    scopes = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef | ast.comprehension

    def visit(node, local: bool, declared: frozenset[str]) -> None:
        for child in ast.iter_child_nodes(node):
            stored = not isinstance(getattr(child, "ctx", ast.Load()), ast.Load)
            name = (
                child.id if isinstance(child, ast.Name) and stored else getattr(child, "name", None)
            )
            if isinstance(child, ast.alias):  # `import x as k`, `from m import k`; Triton's own
                module = getattr(node, "module", None) or child.name  # binds nothing of theirs
                name = None if local or module.split(".")[0] == "triton" else (
                    child.asname or child.name.split(".")[0])  # fmt: skip
            decorators = [] if isinstance(child, ast.ClassDef) else getattr(
                child, "decorator_list", [])  # fmt: skip
            if name is not None and (not local or name in declared):
                if id(child) in made or any(map(jit, decorators)):
                    roots = {made.get(id(child))} | {_root(d) for d in decorators}
                    kernels[name] = kernels.get(name, frozenset()) | (roots - {None})
                else:
                    other.setdefault(name, f"binds {name} to what is not a Triton kernel")
            elif stored and isinstance(child, ast.Attribute | ast.Subscript):
                root = _root(child)  # `k.run = f`, `k.__dict__["run"] = f`: k is changed
                if root is not None:
                    other.setdefault(root, f"changes {ast.unparse(child)}")
            elif isinstance(child, ast.Call) and getattr(child.func, "id", None) in CHANGERS:
                if child.args and isinstance(child.args[0], ast.Name):  # setattr(k, "run", f)
                    k = child.args[0].id
                    other.setdefault(k, f"changes {k} with {child.func.id}")
            if isinstance(child, scopes):
                inner = (g.names for g in ast.walk(child) if isinstance(g, ast.Global))
                visit(child, True, frozenset(n for names in inner for n in names))
            else:
                visit(child, local, declared)

    visit(tree, False, frozenset())
    return kernels, other


def kernels(sources: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """Over cells' sources: (the names they bind to Triton kernels and to nothing else, through
    names they do not rebind (`jit`, `triton`), the names the kernels' decorators go through). A
    wrapper, or a kernel class of the student's own, could compute with torch and launch the
    kernel for show."""
    made, other = {}, set()
    for source in sources:
        try:
            found, rest = bindings(syntax.parse(python(source)))
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            continue
        for name, roots in found.items():
            made[name] = made.get(name, frozenset()) | roots
        other |= rest.keys()
    launched = frozenset(name for name, roots in made.items() if not {name, *roots} & other)
    return launched, frozenset().union(*made.values())


def launchable(nb) -> frozenset[str]:
    """The names the answer and given cells of `nb` bind to Triton kernels, and to nothing else,
    through Triton's own decorators: the only names under which the judge asks the student's
    kernel to launch (`kernels`)."""
    return kernels(c.source for c in nb.cells if kind(c) in ("answer", "given"))[0]


def sources(nb) -> dict[str, tuple[str, int]]:
    """{name: (source, first line)} of each top-level function of the notebook's answer and given
    cells, decorators included, the last definition winning: what a judge's proxy shows."""
    found = {}
    for cell in nb.cells:
        if kind(cell) not in ("answer", "given"):
            continue
        code = python(cell.source)
        try:
            tree = syntax.parse(code)
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            continue
        lines = code.splitlines()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                text = "\n".join(lines[first - 1 : node.end_lineno])
                found[node.name] = (text, first)
    return found


def closure(
    cells: dict[int, Names], kept: set[int], reads: frozenset[str] = frozenset()
) -> set[int]:
    """`kept` (positions in `cells`, each cell's names) and, to a fixed point, every cell binding
    a name that `reads` holds or a kept cell reads: a function reads the globals of cells before
    or after its own."""
    kept = set(kept)
    while True:
        needed = set(reads).union(*(cells[i].reads for i in kept))
        more = {i for i, found in cells.items() if found.binds & needed} - kept
        if not more:
            return kept
        kept |= more


def replay(nb, plan: Plan, before: int, reached: str) -> list[str]:
    """The source of a Nsight Compute child (grader.runtime.profile) that calls `reached`, a
    function the notebook binds before cell `before`: every answer cell before it, and of the
    given cells before it those binding a name that `reached` or a kept cell reads, with the first
    code cell (the imports, which choose the device); a demonstration nothing reads is left out.
    Each in a `try` of its own, so that one that fails leaves the rest to run, as in the kernel."""
    first = next((i for i, c in enumerate(nb.cells) if kind(c) != "markdown"), -1)
    cells = {
        i: names(nb.cells[i].source)
        for i in range(min(before, len(nb.cells)))
        if plan.where[i] in (STUDENT, BOTH)
    }
    kept = {i for i in cells if kind(nb.cells[i]) == "answer" or i == first}
    kept = closure(cells, kept, frozenset({reached}))
    found = []
    for i in sorted(kept):
        code = textwrap.indent(python(nb.cells[i].source), "    ") or "    pass"
        found.append(f"try:\n{code}\n    pass\nexcept Exception:\n    pass\n")
    return found
