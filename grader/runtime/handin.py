"""Before you hand in: what grading will run of your notebook, and what it will not.

Grading runs the notebook as it was released, with the code of your answer cells (the cells that
held `# YOUR CODE HERE`) and nothing else of yours: a given cell you edited runs as released, a
cell you added does not run, and files beside the notebook are not there. `check()` reads your
saved notebook and says where that matters:

- an answer cell that uses a name (a helper, an import, a constant) defined only in a cell that
  grading does not run: your answer would fail there, so move that code into the answer cell;
- given cells you edited, and added cells: fine for trying things out, but they do not run;
- an answer cell repeated.

The course's checks call `advise()` each time they call your code: in JupyterLab it prints, once,
anything `check()` would ask you to fix. The notebook is found through JupyterLab (the variable
`JPY_SESSION_NAME` it gives the kernel), or from the path you pass. Given cells are recognised by
the checksum nbgrader stored in their metadata at release (`nbgrader.utils.compute_checksum`'s
recipe). What a cell binds and reads is `names`'s reading, the one grading plans the judge's
cells with (grader.grading.roles). Nothing here runs your code or changes a grade.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import os
import symtable
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.runtime import syntax

JIT_DECORATORS = ("jit", "autotune", "heuristics")


@dataclass(frozen=True)
class Cell:
    """One code cell of the saved notebook, as the check sees it."""

    index: int  # 1-based, as people count cells
    kind: str  # "answer", "given", "edited" (a given cell changed) or "added"
    grade_id: str | None
    source: str
    parameters: bool = False


@dataclass
class Report:
    """What `check` found: the notebook read, and what to fix or know, as sentences."""

    notebook: Path | None
    fix: list[str] = field(default_factory=list)  # an answer that will fail at grading
    note: list[str] = field(default_factory=list)  # what does not run, harmlessly

    @property
    def ok(self) -> bool:
        return self.notebook is not None and not self.fix


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def checksum(cell: dict) -> str:
    """nbgrader's checksum of a cell with nbgrader metadata (its `compute_checksum`)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    solution, grade = bool(meta.get("solution")), bool(meta.get("grade"))
    locked = False if solution else True if grade else bool(meta.get("locked", False))
    parts = [_text(cell.get("source", "")), cell.get("cell_type", ""), grade, solution, locked]
    parts += [meta["grade_id"], *([float(meta["points"])] if grade else [])]
    return hashlib.md5("".join(map(str, parts)).encode("utf-8")).hexdigest()


def cells(nb: dict) -> list[Cell]:
    """The code cells of a notebook (its JSON), each told apart as answer, given, edited or
    added."""
    found = []
    for i, cell in enumerate(nb.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        parameters = "parameters" in cell.get("metadata", {}).get("tags", [])
        if not grade_id:
            kind = "added"
        elif meta.get("solution"):
            kind = "answer"
        elif meta.get("checksum") and meta["checksum"] != checksum(cell):
            kind = "edited"
        else:
            kind = "given"
        found.append(Cell(i, kind, grade_id, _text(cell.get("source", "")), parameters))
    return found


def python(source: str) -> str:
    """Cell source as Python: IPython magics and shell escapes commented out."""
    return "\n".join(
        "#" + line if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n")
    )


@dataclass(frozen=True)
class Names:
    """What one cell binds at its top level and which globals it reads (its functions' included)."""

    binds: frozenset[str]
    reads: frozenset[str]
    kernels: dict  # {name of a @triton.jit function it defines: the globals its body reads}


def names(source: str) -> Names:
    """The names one cell binds and reads; a cell that is not Python binds and reads none."""
    code = python(source)
    try:
        table = symtable.symtable(code, "<cell>", "exec")
        tree = syntax.parse(code)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return Names(frozenset(), frozenset(), {})
    binds = {
        s.get_name()
        for s in table.get_symbols()
        if s.is_assigned() or s.is_imported() or s.is_namespace()
    }
    reads = _read_first(tree)  # at the top level: names read before the cell binds them

    def nested(t) -> None:  # in functions and comprehensions: any global they read
        for child in t.get_children():
            reads.update(s.get_name() for s in child.get_symbols() if s.is_global())
            nested(child)

    nested(table)
    kernels = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(map(jit, node.decorator_list)):
            kernels[node.name] = frozenset(
                n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id != node.name
            )
    reads -= set(dir(builtins)) - binds
    return Names(frozenset(binds), frozenset(reads), kernels)


def jit(node) -> bool:
    """Whether `node` (a decorator, or what an assignment's value calls) is triton.jit,
    triton.autotune(...) or triton.heuristics(...), by its last name."""
    while isinstance(node, ast.Call):
        node = node.func
    last = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return last in JIT_DECORATORS


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
          ast.SetComp, ast.DictComp, ast.GeneratorExp)  # fmt: skip


def _read_first(tree: ast.Module) -> set[str]:
    """The names whose first use by the module's own statements, in the order Python evaluates
    them, is a read (`x += 1` and `y = f(y)` read first): only those need an earlier cell."""
    first: dict[str, bool] = {}  # name: whether its first use is a read

    def visit(node) -> None:
        if isinstance(node, SCOPES):
            return  # their reads are the symbol table's (`names`); a def binds its name
        if isinstance(node, ast.Name):
            first.setdefault(node.id, isinstance(node.ctx, ast.Load))
            return
        if isinstance(node, ast.Assign | ast.AnnAssign):
            for part in (node.value, *getattr(node, "targets", [getattr(node, "target", None)])):
                if part is not None:
                    visit(part)
            return
        if isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Name):
                first.setdefault(node.target.id, True)
            visit(node.value)
            visit(node.target)
            return
        if isinstance(node, ast.For | ast.AsyncFor):
            for part in (node.iter, node.target, *node.body, *node.orelse):
                visit(part)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    for statement in tree.body:
        visit(statement)
    return {name for name, read in first.items() if read}


def review(nb: dict) -> tuple[list[str], list[str]]:
    """(what to fix, what to know) of a notebook's JSON, as sentences."""
    found = cells(nb)
    # names that the cells grading runs define (as you wrote them, for answers)
    runs = set().union(*(names(c.source).binds for c in found if c.kind in ("answer", "given")))
    added: dict[str, list[int]] = {}
    edited: dict[str, list[int]] = {}
    for c in found:
        for name in names(c.source).binds if c.kind in ("added", "edited") else ():
            (added if c.kind == "added" else edited).setdefault(name, []).append(c.index)
    fix, note = [], []
    for c in found:
        if c.kind != "answer":
            continue
        needs = names(c.source).reads
        for name in sorted(needs & set(added) - runs):
            fix.append(
                f"your answer in cell {c.index} ({c.grade_id}) uses `{name}`, defined only in "
                f"cell {_cells(added[name])}, which grading does not run: define it in the "
                "answer cell itself"
            )
        for name in sorted(needs & set(edited) - set(added) - runs):
            note.append(
                f"your answer in cell {c.index} ({c.grade_id}) uses `{name}` from cell "
                f"{_cells(edited[name])}, a given cell you edited: at grading it gets the "
                f"released `{name}`, if that cell defines one"
            )
    answers = [c.grade_id for c in found if c.kind == "answer"]
    for grade_id in sorted({g for g in answers if answers.count(g) > 1}):
        fix.append(f"the answer cell {grade_id} appears twice: grading runs the last one only")
    for c in (c for c in found if c.kind == "edited"):
        what = "your sizes are for your own runs" if c.parameters else "your edits there"
        note.append(f"cell {c.index} is a given cell you edited: grading runs it as released "
                    f"({what} do not count)")  # fmt: skip
    mine = [c.index for c in found if c.kind == "added" and c.source.strip()]
    if mine:
        note.append(
            f"{'cells' if len(mine) > 1 else 'cell'} {_cells(mine)} "
            f"{'are' if len(mine) > 1 else 'is'} your own: fine for trying things out, but "
            f"grading does not run {'them' if len(mine) > 1 else 'it'}"
        )
    return fix, note


def _cells(indices: list[int]) -> str:
    return ", ".join(map(str, indices))


def _notebook(path: str | os.PathLike | None) -> Path | None:
    if path is not None:
        return Path(path)
    session = os.environ.get("JPY_SESSION_NAME")
    if not session:
        return None
    for candidate in (Path(session), Path.cwd() / Path(session).name):
        if candidate.suffix == ".ipynb" and candidate.is_file():
            return candidate
    return None


def check(path: str | os.PathLike | None = None) -> Report:
    """Read the saved notebook (`path`, else the one JupyterLab runs this kernel for) and print
    what grading will and will not run of it. Save the notebook first (Ctrl-S): the check reads
    the file, not what is on the screen."""
    notebook = _notebook(path)
    if notebook is None or not notebook.is_file():
        print("Hand-in check: no saved notebook to read here. In JupyterLab it finds the "
              "notebook itself; elsewhere pass its path: handin.check('setup.ipynb').")  # fmt: skip
        return Report(None)
    fix, note = review(json.loads(notebook.read_text(encoding="utf-8")))
    age = time.time() - notebook.stat().st_mtime
    saved = f"saved {age / 60:.0f} min ago" if age >= 60 else "saved just now"
    print(f"Hand-in check of {notebook.name} ({saved}; save first if you changed it since).")
    print("Grading runs the notebook as released, with the code of your answer cells only.")
    for line in fix:
        print(f"  FIX: {line}")
    for line in note:
        print(f"  note: {line}")
    if not fix:
        print("Your answers stand on their own: nothing they need is left out at grading.")
    return Report(notebook, fix, note)


_told: set[str] = set()  # what advise() has said in this session
_read: dict[tuple, list[str]] = {}  # (path, mtime, size) -> what to fix, for the saved file


def advise() -> None:
    """Print each thing `check()` would ask to fix, once a session, where JupyterLab names the
    notebook (silent elsewhere: at grading, in scripts) and only as the saved file says."""
    notebook = _notebook(None)
    if notebook is None:
        return
    info = notebook.stat()
    key = (str(notebook), info.st_mtime_ns, info.st_size)
    if key not in _read:
        try:
            _read.clear()
            _read[key] = review(json.loads(notebook.read_text(encoding="utf-8")))[0]
        except (OSError, ValueError):  # being saved right now: read it at the next call
            return
    for line in _read[key]:
        if line not in _told:
            _told.add(line)
            print(f"HAND-IN CHECK: {line} (handin.check() says more)")
