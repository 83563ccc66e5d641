"""The grader's three layers and the direction of their imports: the student runtime imports no
other layer and none of the tools students do not install (nbgrader, jupytext, papermill); the
course build never imports batch grading. Read from the source with ast, so a lazy import inside
a function counts as much as one at the top."""

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

GRADER = ROOT / "grader"
LAYERS = ("runtime", "authoring", "grading")
# what each layer may not import: other layers of the package, and tools students lack
FORBIDDEN = {
    "runtime": (
        "grader.authoring",
        "grader.grading",
        "grader.cli",
        "grader.__main__",
        "nbgrader",
        "jupytext",
        "papermill",
        "nbclient",
        "nbconvert",
    ),
    "authoring": ("grader.grading",),
    "grading": (),
}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in a file, `from a import b` as a and as a.b."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative imports would hide the layer; the package uses none
                found.append((node.lineno, "." * node.level + (node.module or "")))
                continue
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def violations(layer: str, grader: Path = GRADER) -> list[str]:
    bad = []
    for path in sorted((grader / layer).rglob("*.py")):
        where = path.relative_to(grader.parent)
        for line, module in imports(path):
            if module.startswith("."):
                bad.append(f"{where}:{line}: relative import {module}")
            elif any(module == f or module.startswith(f + ".") for f in FORBIDDEN[layer]):
                bad.append(f"{where}:{line}: imports {module}")
    return bad


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_point_one_way(layer):
    assert not violations(layer), "\n".join(violations(layer))


def test_every_module_is_in_a_layer():
    top = sorted(p.name for p in GRADER.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "cli.py"], (
        f"grader/ holds only the package's entry points; put {top} in a layer's sub-package"
    )
    assert {p.name for p in GRADER.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(
        LAYERS
    )


def test_the_check_can_fail(tmp_path):
    """A runtime module importing the grading layer, lazily inside a function, is caught."""
    fake = tmp_path / "grader"
    for layer in LAYERS:
        (fake / layer).mkdir(parents=True)
    (fake / "runtime" / "sneaky.py").write_text(
        "def f():\n    from grader.grading import gradebook\n    import nbgrader\n"
    )
    found = violations("runtime", fake)
    assert any("grader.grading" in v for v in found) and any("nbgrader" in v for v in found)


def modules(grader: Path = GRADER) -> dict[str, set[str]]:
    """{module: the modules of the package it imports}, from the source (lazy imports included):
    `from a import b` counts as a.b where that is a module, else as a."""
    names = {
        ".".join(p.relative_to(grader.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in grader.rglob("*.py")
    }
    return {
        name: {m if m in names else m.rpartition(".")[0] for _, m in imports(path)}
        & (names.keys() - {name})
        for name, path in names.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`: each a path that comes back to its start, found by a
    depth-first walk (one per back edge)."""
    found, state, path = [], {}, []

    def walk(node):
        state[node] = "open"
        path.append(node)
        for other in sorted(graph.get(node, ())):
            if state.get(other) == "open":
                found.append(path[path.index(other) :] + [other])
            elif other not in state:
                walk(other)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return found


def test_no_import_cycles():
    assert not cycles(modules()), "\n".join(" -> ".join(c) for c in cycles(modules()))


def test_the_cycle_check_can_fail(tmp_path):
    """Two modules importing each other, one of them lazily, are a cycle."""
    fake = tmp_path / "grader"
    (fake / "grading").mkdir(parents=True)
    (fake / "grading" / "a.py").write_text("from grader.grading import b\n")
    (fake / "grading" / "b.py").write_text("def f():\n    import grader.grading.a\n")
    assert cycles(modules(fake)) == [["grader.grading.a", "grader.grading.b", "grader.grading.a"]]
