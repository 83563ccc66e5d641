"""grader.grading.scan: every route by which a solution cell can change the cells after it is
flagged with its reason, and nothing in the reference solutions, nor in any honest outside
solution (the known-wrong and slow-but-correct variants of tests/known_wrong/), is flagged."""

import copy
import functools
import importlib

import pytest

from grader.authoring import build
from grader.grading import assemble, scan
from tests.known_wrong import WithGiven

pytestmark = pytest.mark.tooling  # nbgrader's preprocessors make the release

STUB = "# YOUR CODE HERE\nraise NotImplementedError()"  # as grader/grading/nbgrader_config.py


@functools.cache
def notebooks(name: str):
    """(source with its solutions, release) of one notebook, made as nbgrader makes them."""
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

    (assignment,) = [a for a in build.assignments() if a.name == name]
    source = build.to_notebook(assignment.source)
    release, _ = ClearSolutions(code_stub={"python": STUB}).preprocess(copy.deepcopy(source), {})
    release, _ = ClearHiddenTests().preprocess(release, {})
    return source, release


def with_cell(nb, grade_id, source):
    nb = copy.deepcopy(nb)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    cell.source = source
    return nb


def with_variant(nb, grade_id, variant):
    """`nb` with a known-wrong variant in place: a string replaces the exercise cell; a
    WithGiven also edits the given cells after it, as tests/test_known_wrong.py applies it."""
    if not isinstance(variant, WithGiven):
        return with_cell(nb, grade_id, variant)
    nb = with_cell(nb, grade_id, variant.exercise)
    start = next(
        i
        for i, c in enumerate(nb.cells)
        if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )
    for old, new in variant.given.items():
        (cell,) = [c for c in nb.cells[start + 1 :] if old in c.source]
        cell.source = cell.source.replace(old, new)
    return nb


def routes(code, base="source"):
    """What scanning 00 finds when `code` follows the relu-kernel cell's answer (or stub)."""
    source, release = notebooks("00_setup")
    nb = source if base == "source" else release
    (cell,) = [
        c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "relu-kernel"
    ]
    return scan.scan(with_cell(nb, "relu-kernel", cell.source + "\n\n" + code), release)


ATTACKS = {
    # class 1: the kernel's own machinery
    "input transformer": (
        "ip = get_ipython()\nip.input_transformers_post.append(lambda lines: ['pass\\n'])",
        "hooks",
        "adds an IPython input transformer: it can rewrite the test cells",
    ),
    "transformer manager": (
        "get_ipython().input_transformer_manager.cleanup_transforms.append(f)",
        "hooks",
        "changes IPython's input transformers",
    ),
    "AST transformer": ("get_ipython().ast_transformers.append(t)", "hooks", "AST transformer"),
    "pre_run_cell hook": (
        "def h(info):\n    pass\nget_ipython().events.register('pre_run_cell', h)",
        "hooks",
        "registers an IPython pre_run_cell hook: it can rewrite the test cells",
    ),
    "custom exception handler": (
        "get_ipython().set_custom_exc((AssertionError,), lambda *a, **k: None)",
        "hooks",
        "sets a custom exception handler: it can hide the tests' failures",
    ),
    "sys.excepthook": ("import sys\nsys.excepthook = print", "hooks", "replaces sys.excepthook"),
    "display formatter": (
        "from IPython import get_ipython as g\nf = g().display_formatter.formatters\n"
        "f['text/plain'].for_type(float, lambda o, p, c: p.text('1.0'))",
        "hooks",
        "changes how results are displayed: it can show a score the tests did not give",
    ),
    "sys.displayhook": ("import sys as s\ns.displayhook = print", "hooks", "sys.displayhook"),
    "shell displayhook": ("get_ipython().displayhook.write = f", "hooks", "how results are"),
    "interactivity": (
        "get_ipython().ast_node_interactivity = 'all'",
        "hooks",
        "changes which results a cell shows",
    ),
    "config magic": ("%config InteractiveShell.ast_node_interactivity='all'", "hooks", "%config"),
    "tracing": ("import sys\nsys.settrace(t)", "hooks", "traces the code that follows"),
    "stdout": ("import sys, io\nsys.stdout = io.StringIO()", "hooks", "replaces sys.stdout"),
    "IPython internals": (
        "from IPython.core.interactiveshell import InteractiveShell\nInteractiveShell.run_cell = f",
        "hooks",
        "IPython.core.interactiveshell.InteractiveShell.run_cell",
    ),
    # class 2: the checker, the timer, the speed grading, through every route
    "alias": ("import grader.runtime.checks as c\nc.check = print", "cheating", "checks.check"),
    "alias of an alias": ("k = checks\nk.check = print", "cheating", "replaces grader.runtime."),
    "nested target": ("x, (checks.check, y) = 1, (f, 2)", "cheating", "checks.check"),
    "for target": ("for perf.compare in [f]:\n    pass", "cheating", "perf.compare"),
    "from-import": ("from grader.runtime import timing as t\nt.bench = f", "cheating", "bench"),
    "exec": ("exec('checks.check = print')", "cheating", "checks.check (through exec)"),
    "exec itself": ("exec('checks.check = print')", "dynamic-code", "with exec"),
    "exec aliased": ("run = exec\nrun(''.join(['chec', 'ks.check = print']))", "dynamic-code", ""),
    "exec passed": ("def f(exec):\n    exec(code)\nf(exec)", "dynamic-code", "with exec"),
    "eval": ("eval(code)", "dynamic-code", "runs code from a string with eval"),
    "compile": ("compile(code, 'x', 'exec')", "dynamic-code", "compiles code"),
    "sys.modules": (
        "import sys\nsys.modules['grader.runtime.checks'].check = print",
        "cheating",
        "replaces grader.runtime.checks.check",
    ),
    "sys.modules replaced": (
        "import sys\nsys.modules['grader.runtime.perf'] = fake",
        "cheating",
        "replaces the module grader.runtime.perf in sys.modules",
    ),
    "importlib": (
        "import importlib\nimportlib.import_module('grader.runtime.checks').check = print",
        "cheating",
        "replaces grader.runtime.checks.check",
    ),
    "importlib built name": (
        "import importlib\nm = importlib.import_module('grader.runtime.' + 'checks')",
        "dynamic-code",
        "imports a module whose name is built at run time",
    ),
    "__import__": (
        "__import__('grader.runtime.perf', fromlist=['x']).grade = f",
        "cheating",
        "replaces grader.runtime.perf.grade",
    ),
    "setattr": ("setattr(checks, 'check', print)", "cheating", "checks.check"),
    "setattr built name": ("setattr(checks, 'che' + 'ck', f)", "dynamic-code", "built at run"),
    "object.__setattr__": ("object.__setattr__(perf, 'compare', f)", "cheating", "perf.compare"),
    "getattr built name": ("getattr(checks, 'ch' + 'eck')", "dynamic-code", "built at run time"),
    "__dict__": ("checks.__dict__['check'] = print", "cheating", "checks.check"),
    "__dict__.update": ("perf.__dict__.update(compare=f)", "cheating", "perf.compare"),
    "vars": ("vars(checks)['check'] = print", "cheating", "checks.check"),
    "globals": ("globals()['checks'] = None", "cheating", "rebinds checks"),
    "globals().update": ("globals().update(relu_reference=f)", "cheating", "rebinds relu_ref"),
    "function returning the module": (
        "def m():\n    return checks\nm().check = print",
        "cheating",
        "replaces grader.runtime.checks.check",
    ),
    "mock": (
        "from unittest import mock\nmock.patch.object(checks, 'check').start()",
        "cheating",
        "checks.check",
    ),
    "__code__": ("relu_reference.__code__ = f.__code__", "cheating", "__code__ of relu_ref"),
    "builtins": ("import builtins\nbuiltins.print = f", "cheating", "replaces the builtin print"),
    "__builtins__": ("__builtins__.AssertionError = KeyError", "cheating", "AssertionError"),
    "rebound reference": ("relu_reference = lambda x: x", "cheating", "rebinds relu_reference"),
    "rebound launcher": ("def relu(x, out, block=0):\n    pass", "cheating", "rebinds relu,"),
    "rebound module": ("import numpy as torch", "cheating", "rebinds torch"),
    "shadowed builtin": ("def print(*a):\n    pass", "cheating", "shadows the builtin print"),
    "global in a function": (
        "def f():\n    global checks\n    checks = None\nf()",
        "cheating",
        "rebinds checks",
    ),
    "star import": ("from fake import *", "cheating", "imports *"),
    "patch by name": ("obj.check = print", "cheating", "named as a function of the grader"),
    "launch hook": (
        "from triton.runtime import KernelInterface\nhooked = KernelInterface.__getitem__",
        "cheating",
        "reads the launch check's machinery (triton.runtime.KernelInterface",
    ),
    "launch recorder": (
        "from grader.runtime import launches\nchecked = bool(launches._ACTIVE)",
        "cheating",
        "reads the launch check's machinery (grader.runtime.launches",
    ),
    # class 6: speed verdicts
    "printed verdict": ("print('PASS 9.9x eager (needs 1.2x)')", "forged-output", "imitates"),
    "f-string verdict": ("print(f'NOT YET {x:.2f}x')", "forged-output", "imitates"),
    "published record": (
        "display({'application/vnd.gpu-kernels-course.speed+json': {}}, raw=True)",
        "forged-output",
        "speed verdicts' own type",
    ),
    "own verdict": (
        "perf.publish_verdict(perf.Verdict('eager', 9.9, 1.2))",
        "forged-output",
        "publishes a speed verdict of its own",
    ),
}


@pytest.mark.parametrize("name", ATTACKS)
def test_each_route_is_flagged_with_its_reason(name):
    code, kind, why = ATTACKS[name]
    for base in ("source", "release"):  # on the answer, and on the blank stub
        found = routes(code, base)
        assert any(r.kind == kind and why in r.what for r in found), (name, base, found)
        assert all(r.cell == "relu-kernel" for r in found)
        assert str(found[0]).startswith("cell relu-kernel ")


def test_only_the_answer_cells_are_scanned_for_they_alone_run():
    from nbformat.v4 import new_code_cell

    source, release = notebooks("00_setup")
    nb = copy.deepcopy(source)
    nb.cells.insert(3, new_code_cell("import sys\nsys.excepthook = print", id="mine"))
    edited = with_cell(nb, "test-relu-visible", "import sys\nsys.excepthook = print")
    graded, dropped = assemble.assemble(release, edited)
    assert dropped.added == 1 and "test-relu-visible" in dropped.edited
    assert scan.scan(graded, release) == []  # neither runs at grading
    hooked = with_cell(source, "relu-kernel", "import sys\nsys.excepthook = print")
    (found,) = scan.scan(assemble.assemble(release, hooked)[0], release)
    assert (found.cell, found.kind) == ("relu-kernel", "hooks")


def test_ordinary_code_is_not_flagged():
    for code in (
        "import torch\nimport triton.language as tl\nfrom grader.runtime import checks",
        "y = torch.relu(torch.zeros(3))\ny[0] = 1\nprint(f'{y.sum():.2f}')",
        "helper = getattr(torch, 'relu')\nfrom IPython.display import display\ndisplay(y)",
        "%timeit relu(x, out)\n!ls",
        "class Tuner:\n    def __init__(self):\n        self.check = 1",
        "def f(x):\n    out = x\n    return out",
        "def f(x, input=None, sum=0):\n    return sum + input",
    ):
        assert routes(code) == [], code


NOTEBOOKS = [a.name for a in build.assignments()]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_reference_solutions_are_clean(name):
    source, release = notebooks(name)
    assert scan.answer_cells(source), "the scan saw no answer cell"
    assert scan.scan(source, release) == []


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_honest_outside_solutions_are_clean(name):
    """Every variant in tests/known_wrong/ is honest work (wrong, or right but slow)."""
    source, release = notebooks(name)
    module = importlib.import_module(f"tests.known_wrong.nb{name}")
    tried = 0
    for table in (module.WRONG, getattr(module, "SLOW", {})):
        for grade_id, variants in table.items():
            for variant, code in variants.items():
                nb = with_variant(source, grade_id, code)
                assert scan.scan(nb, release) == [], (grade_id, variant)
                tried += 1
    assert tried
