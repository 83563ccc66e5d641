"""What a student's code can do to the cells that run after it, read from its source (`ast`),
never run. The answer cells are the only code of the student's that grading runs (the rest of
the notebook is the release's: grader.grading.assemble), in the same kernel as the test cells
that follow, so each is scanned for:

- hooks ("changes how later cells run"): IPython's input transformers, event hooks, custom
  exception handlers, the display of results (formatters, display hooks), sys.excepthook,
  sys.displayhook, tracing, the shell itself, magics that configure it;
- cheating: replacing functions or flags of grader, torch, triton or builtins, or rebinding a
  name the test cells read (`checks`, `relu_reference`, `print`), through any route the scan can
  follow: aliases, attribute chains, `sys.modules[...]`, `importlib.import_module(...)`,
  `__import__`, `setattr`, `__dict__`, `vars()`, `globals()`, `mock.patch`, a function that
  returns the module, code in an `exec` string;
- dynamic code: `exec`, `eval`, `compile` and their kin, and names built at run time where they
  reach any of the above (`getattr(checks, "ch" + "eck")`, `setattr(obj, name, value)`);
- forged output: speed verdicts published or imitated by the student's code;
- reading the launch recorder (Triton's `KernelInterface`, `grader.runtime.launches`): code that
  can tell a checked call from a timed one.

A scan cannot follow everything Python allows: it flags what it cannot read (dynamic code)
instead of guessing, and the autograded notebook's outputs are checked again after the run
(grader.grading.tells). Its reasons name the cell and the route."""

from __future__ import annotations

import ast
import builtins
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from grader.runtime.published import SPEED_MIMETYPE

WATCHED = ("grader", "torch", "triton")  # replacing their functions can fake a result
# Stores into these change how the kernel runs cells; reading IPython.display is fine.
KERNEL = ("IPython", "ipykernel", "traitlets", "zmq", "jupyter_client", "nbclient", "nbgrader")
SHELL = "get_ipython()"
NAMESPACE = "__main__"  # the notebook's own namespace (globals(), vars(), sys.modules[...])
BUILTINS = frozenset(dir(builtins))
REACHING = frozenset(
    {"exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "globals"}
    | {"vars", "locals", "breakpoint"}
)
MAGICS = frozenset({"time", "timeit", "matplotlib", "capture"})  # change nothing that follows
# Functions of the runtime whose names, assigned on any object, look like a patch of them.
RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
PATCHED_NAMES = frozenset(
    node.name
    for module in ("checks", "perf", "timing", "integrity", "launches")
    for node in ast.parse((RUNTIME / f"{module}.py").read_text()).body
    if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
)

# What each part of the IPython shell lets a cell do to the cells after it.
SHELL_PARTS = {
    "input_transformers_post": "adds an IPython input transformer: it can rewrite the test cells",
    "input_transformers_cleanup": "adds an IPython input transformer: it can rewrite the test "
    "cells",
    "input_transformer_manager": "changes IPython's input transformers: it can rewrite the test "
    "cells",
    "ast_transformers": "adds an IPython AST transformer: it can rewrite the test cells",
    "set_custom_exc": "sets a custom exception handler: it can hide the tests' failures",
    "CustomTB": "sets a custom exception handler: it can hide the tests' failures",
    "showtraceback": "replaces how IPython shows errors: it can hide the tests' failures",
    "_showtraceback": "replaces how IPython shows errors: it can hide the tests' failures",
    "InteractiveTB": "replaces how IPython shows errors: it can hide the tests' failures",
    "display_formatter": "changes how results are displayed: it can show a score the tests did "
    "not give",
    "displayhook": "changes how results are displayed: it can show a score the tests did not give",
    "display_pub": "changes how output is published: it can show a score the tests did not give",
    "ast_node_interactivity": "changes which results a cell shows: it can show a score the tests "
    "did not give",
    "user_ns": "writes the notebook's namespace through the shell",
    "user_global_ns": "writes the notebook's namespace through the shell",
    "push": "writes the notebook's namespace through the shell",
}
SYS_HOOKS = {
    "excepthook": "replaces sys.excepthook: it can hide the tests' failures",
    "displayhook": "replaces sys.displayhook: it can show a score the tests did not give",
    "settrace": "traces the code that follows: it can change the test cells as they run",
    "setprofile": "profiles the code that follows: it can change the test cells as they run",
    "monitoring": "monitors the code that follows: it can change the test cells as they run",
    "addaudithook": "adds an audit hook: it runs inside the test cells",
    "stdout": "replaces sys.stdout: it can hide or fake what the tests print",
    "stderr": "replaces sys.stderr: it can hide what the tests report",
    "meta_path": "changes how modules are imported",
    "path_hooks": "changes how modules are imported",
}
ALWAYS_DYNAMIC = {
    "builtins.exec": "runs code from a string with exec",
    "builtins.eval": "runs code from a string with eval",
    "builtins.compile": "compiles code from a string",
    "builtins.breakpoint": "starts a debugger",
    "runpy.run_path": "runs a file with runpy",
    "runpy.run_module": "runs a module with runpy",
    "types.FunctionType": "builds a function from code objects",
    "types.CodeType": "builds a code object",
    "marshal.loads": "loads code with marshal",
    "pickle.loads": "loads objects with pickle",
    "code.InteractiveInterpreter": "runs code through an interpreter of its own",
    "code.InteractiveConsole": "runs code through an interpreter of its own",
    "threading.settrace": "traces the code that follows: it can change the test cells as they run",
    "ctypes": "uses ctypes",
}
DUNDER_PATCHES = frozenset(
    {"__code__", "__defaults__", "__kwdefaults__", "__globals__", "__dict__", "__class__"}
    | {"__closure__", "__bases__", "__getattr__", "__getattribute__", "__setattr__", "__call__"}
)
VERDICT_WRITERS = frozenset(
    f"grader.runtime.perf.{name}" for name in ("publish_verdict", "Verdict", "score_verdict")
)
# Code that reads these can tell a call the launch check records from one it does not.
RECORDER = (
    "triton.runtime.KernelInterface",
    "triton.runtime.jit.KernelInterface",
    "grader.runtime.launches",
)
VERDICT_TEXT = re.compile(  # "PASS 1.53x eager", "NOT YET 71% of ...", "(needs 1.2x)"
    r"^\s*(PASS|NOT YET)\b[^\n]*?\d(\.\d+)?\s*(x|%)|\(needs [\d.]+\s*(x|%)\)", re.MULTILINE
)


@dataclass(frozen=True)
class Route:
    """One thing a cell does to the cells after it. `kind` is a finding kind
    (grader.grading.findings.KINDS): "hooks", "cheating", "dynamic-code" or "forged-output"."""

    kind: str
    cell: str
    what: str

    def __str__(self) -> str:
        return f"cell {self.cell} {self.what}"


def python(source: str) -> str:
    """Cell source as Python: IPython magics and shell escapes commented out."""
    return "\n".join(
        "#" + line if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n")
    )


def magics(source: str) -> list[str]:
    """The line and cell magics of `source` that can change later cells (`%config`, `%run`)."""
    found = []
    for line in source.split("\n"):
        text = line.lstrip()
        if text.startswith("%"):
            name = text.lstrip("%").split(maxsplit=1)[0] if text.strip("%") else ""
            if name and name not in MAGICS:
                found.append(name)
    return found


# Batches grade students on several threads, and CPython 3.11 can fail ast.parse run on two at
# once ("AST constructor recursion depth mismatch", python/cpython#106905): one at a time.
_PARSING = threading.Lock()


def parse(source: str) -> ast.Module:
    """ast.parse, one thread at a time (SyntaxError as it raises it). Source nested too deeply
    to parse raises SyntaxError too: Python cannot compile it either, so, as any cell that is
    not Python, it fails when it runs and costs only its own cell."""
    with _PARSING:
        try:
            return ast.parse(source)
        except (RecursionError, MemoryError) as exc:
            raise SyntaxError(f"nested too deeply to parse ({type(exc).__name__})") from None


def _parse(source: str) -> ast.Module | None:
    try:
        return parse(python(source))
    except SyntaxError:
        return None


def _text(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _strings(node) -> list[str]:
    """The literal text of a string constant or an f-string's constant parts."""
    if isinstance(node, ast.JoinedStr):
        return ["".join(_text(v) or "0" for v in node.values)]
    text = _text(node)
    return [text] if text is not None else []


class Names:
    """What names refer to, over every code cell of a notebook in order: a flow-insensitive
    over-approximation, one namespace, so that an alias made anywhere is known everywhere."""

    def __init__(self):
        self.env: dict[str, str] = {}
        self.returns: dict[str, str] = {}  # user functions (and lambdas) that return an origin
        # every name the code binds: no builtin there, but for those that reach other code (a
        # parameter named `exec` must not hide the builtin passed to it)
        self.bound: set[str] = set()

    def learn(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.bound.add(node.id)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.bound.add(node.name)
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.env[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else (a.name.split(".")[0])
                    )
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        self.env[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self._bind(target, node.value)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                self._bind(node.optional_vars, node.context_expr)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
                code = _text(node.args[0]) if node.func.id in ("exec", "eval") else None
                inner = _parse(code) if code else None
                if inner is not None:
                    self.learn(inner)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for r in ast.walk(node):
                    if isinstance(r, ast.Return) and r.value is not None:
                        origin = self.resolve(r.value)
                        if origin:
                            self.returns[node.name] = origin

    def _bind(self, target, value) -> None:
        if isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
            for t, v in zip(target.elts, value.elts, strict=False):
                self._bind(t, v)
        elif isinstance(target, ast.Name):
            if isinstance(value, ast.Lambda):
                origin = self.resolve(value.body)
                if origin:
                    self.returns[target.id] = origin
                return
            origin = self.resolve(value)
            if origin:
                self.env[target.id] = origin

    def resolve(self, node) -> str | None:
        """The dotted origin of an expression ("grader.runtime.checks.check", "builtins.exec",
        "get_ipython().events", "__main__.relu"), or None where it is nothing the scan follows."""
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            if node.id == "get_ipython":
                return "IPython.get_ipython"
            if node.id == "__builtins__":
                return "builtins"
            builtin = node.id in REACHING or (node.id in BUILTINS and node.id not in self.bound)
            return f"builtins.{node.id}" if builtin else None
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if node.attr == "__globals__":  # a function's module: the notebook's, or the grader's
                return base.rsplit(".", 1)[0] if base and "." in base else NAMESPACE
            if node.attr == "__builtins__":
                return "builtins"
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Subscript):
            return self._item(self.resolve(node.value), _text(node.slice))
        if isinstance(node, ast.NamedExpr):
            return self.resolve(node.value)
        if isinstance(node, ast.IfExp):
            return self.resolve(node.body) or self.resolve(node.orelse)
        if isinstance(node, ast.BoolOp):
            return next((o for o in map(self.resolve, node.values) if o), None)
        if isinstance(node, ast.Call):
            return self._called(node)
        return None

    def _item(self, base: str | None, key: str | None) -> str | None:
        if base is None or key is None:
            return None
        if base == "sys.modules":
            return key
        if base.endswith(".__dict__"):
            return f"{base[: -len('.__dict__')]}.{key}"
        if base == NAMESPACE:
            return f"{NAMESPACE}.{key}"
        return None

    def _called(self, node: ast.Call) -> str | None:
        if isinstance(node.func, ast.Lambda):
            return self.resolve(node.func.body)
        if isinstance(node.func, ast.Name) and node.func.id in self.returns:
            return self.returns[node.func.id]
        f = self.resolve(node.func)
        args = node.args
        first = _text(args[0]) if args else None
        if f is None:
            return None
        if f.endswith("get_ipython") or f.endswith("InteractiveShell.instance"):
            return SHELL
        if f in ("builtins.globals", "builtins.locals") or (f == "builtins.vars" and not args):
            return NAMESPACE
        if f == "builtins.vars" and args:
            base = self.resolve(args[0])
            return f"{base}.__dict__" if base else None
        if f in ("importlib.import_module", "importlib.__import__", "builtins.__import__"):
            if first is None:
                return None
            fromlist = len(args) > 3 or any(k.arg == "fromlist" for k in node.keywords)
            if f == "importlib.import_module" or fromlist:
                return first
            return first.split(".")[0]
        if f in ("builtins.getattr", "operator.attrgetter") and len(args) >= 2:
            base, name = self.resolve(args[0]), _text(args[1])
            return f"{base}.{name}" if base and name else None
        if f in ("sys.modules.get", "sys.modules.__getitem__") and first:
            return first
        if f.endswith(".__dict__.get") and first:
            return f"{f[: -len('.__dict__.get')]}.{first}"
        return None


class _Cell:
    """The scan of one cell: what it does, as Routes, with the names the notebook knows."""

    def __init__(self, names: Names, label: str, protected: dict[str, str], released: dict):
        self.names, self.label = names, label
        self.protected, self.released = protected, released  # name -> why; name -> origin
        self.found: list[Route] = []

    def add(self, kind: str, what: str) -> None:
        route = Route(kind, self.label, what)
        if route not in self.found:
            self.found.append(route)

    def scan(self, tree: ast.AST, through: str = "") -> None:
        self.through = through
        self._statements(tree.body if isinstance(tree, ast.Module) else [tree], top=True)
        inner = set()  # the bases of attribute chains: a chain is judged whole
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                inner.add(id(node.value))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute | ast.Name) and id(node) in inner):
                self._node(node)

    # -- names bound at the top level: rebinding what the tests read -----------------------------

    def _statements(self, body: list, top: bool, declared: frozenset = frozenset()) -> None:
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if top or stmt.name in declared:
                    self._rebinds(stmt.name, None)
                inner = {n for s in ast.walk(stmt) if isinstance(s, ast.Global) for n in s.names}
                self._statements(stmt.body, top=False, declared=frozenset(inner))
                continue
            for node in self._own_nodes(stmt):
                for name, value in self._bindings(node):
                    if top or name in declared:
                        self._rebinds(name, value)

    def _own_nodes(self, stmt):
        """The nodes of `stmt`, not descending into functions and classes it defines."""
        todo = [stmt]
        while todo:
            node = todo.pop()
            yield node
            for child in ast.iter_child_nodes(node):
                if not isinstance(
                    child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda
                ) and not isinstance(child, ast.comprehension):
                    todo.append(child)

    def _bindings(self, node):
        """(name, value or None) for each name `node` binds in its scope."""
        if isinstance(node, ast.Import | ast.ImportFrom):
            for a in node.names:
                if a.name == "*":
                    yield "*", None
                    continue
                name = a.asname or a.name.split(".")[0]
                module = getattr(node, "module", None)
                origin = f"{module}.{a.name}" if module else (a.name if a.asname else name)
                yield name, origin
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
                        yield t.id, self.names.resolve(node.value) if node.value else None
        elif isinstance(node, ast.For | ast.AsyncFor | ast.withitem | ast.Delete):
            targets = (
                node.targets
                if isinstance(node, ast.Delete)
                else [node.target if not isinstance(node, ast.withitem) else node.optional_vars]
            )
            for target in targets:
                for t in ast.walk(target) if target is not None else []:
                    if isinstance(t, ast.Name):
                        yield t.id, None
        elif isinstance(node, ast.ExceptHandler) and node.name:
            yield node.name, None

    def _rebinds(self, name: str, origin: str | None) -> None:
        if name == "*":
            self.add("cheating", f"imports *{self.through}: it can rebind any name the tests read")
            return
        if name not in self.protected:
            return
        if origin is not None and origin == self.released.get(name):
            return  # the same import again
        self.add("cheating", f"{self.protected[name]}{self.through}")

    # -- everything else, anywhere in the cell --------------------------------------------------

    def _node(self, node) -> None:
        if isinstance(node, ast.Attribute | ast.Subscript) and isinstance(
            node.ctx, ast.Store | ast.Del
        ):  # any target: assignment, for, with, del, nested in tuples
            self._store(node)
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Load):
            self._use(node)
        for text in _strings(node) if isinstance(node, ast.Constant | ast.JoinedStr) else []:
            if SPEED_MIMETYPE in text or "gpu-kernels-course" in text:
                self.add("forged-output", "displays data of the speed verdicts' own type")
            elif VERDICT_TEXT.search(text):
                line = " ".join(text.split())[:60]
                self.add("forged-output", f"prints text that imitates a speed verdict ({line!r})")

    def _use(self, node) -> None:
        origin = self.names.resolve(node)
        if origin is None or origin == "IPython.get_ipython":
            return  # the shell itself is judged by what is done with it
        if origin.startswith(SHELL + ".events.register"):
            return  # the call names the event
        if origin.startswith(SHELL):
            part = origin[len(SHELL) :].lstrip(".").split(".")[0]
            self.add("hooks", SHELL_PARTS.get(part) or f"uses the IPython shell ({origin})")
        elif origin.split(".")[0] in KERNEL and not origin.startswith("IPython.display"):
            self.add("hooks", f"reaches into the kernel's machinery ({origin})")
        elif origin.startswith("sys.") and origin.split(".")[1] in SYS_HOOKS:
            if origin.split(".")[1] in ("settrace", "setprofile", "monitoring", "addaudithook"):
                self.add("hooks", SYS_HOOKS[origin.split(".")[1]])
        elif origin in VERDICT_WRITERS:
            self.add("forged-output", f"publishes a speed verdict of its own ({origin})")
        elif any(origin == r or origin.startswith(r + ".") for r in RECORDER):
            self.add(
                "cheating",
                f"reads the launch check's machinery ({origin}): it can tell a checked call "
                "from a timed one",
            )
        for prefix, why in ALWAYS_DYNAMIC.items():
            if origin == prefix or origin.startswith(prefix + "."):
                self.add("dynamic-code", why + self.through)

    def _store(self, target: ast.Attribute | ast.Subscript) -> None:
        origin = self.names.resolve(target)
        if isinstance(target, ast.Subscript):
            base = self.names.resolve(target.value)
            if (
                base
                and _text(target.slice) is None
                and (base in ("sys.modules", NAMESPACE) or base.endswith(".__dict__"))
            ):
                self.add("dynamic-code", f"writes {base}[...] under a name built at run time")
            elif base == "sys.modules" and origin:
                kind = "cheating" if origin.split(".")[0] in WATCHED else "hooks"
                self.add(kind, f"replaces the module {origin} in sys.modules{self.through}")
                return
        if origin is None and isinstance(target, ast.Attribute):
            self._unknown_attribute(target)
        if origin is not None:
            self._replaces(origin)

    def _unknown_attribute(self, target: ast.Attribute) -> None:
        owner = ast.unparse(target.value)[:60]
        if target.attr in DUNDER_PATCHES:
            self.add("cheating", f"replaces the {target.attr} of {owner}")
        elif target.attr in PATCHED_NAMES and not (
            isinstance(target.value, ast.Name) and target.value.id in ("self", "cls")
        ):
            self.add(
                "cheating",
                f"replaces {owner}.{target.attr}, named as a function of the grader's runtime",
            )

    def _replaces(self, origin: str) -> None:
        """A store into `origin` (an attribute, an item of sys.modules or of a namespace)."""
        root, _, rest = origin.partition(".")
        if origin.startswith(SHELL):
            part = origin[len(SHELL) :].lstrip(".").split(".")[0]
            self.add(
                "hooks", SHELL_PARTS.get(part) or f"replaces part of the IPython shell ({origin})"
            )
        elif root == NAMESPACE and rest:
            self._rebinds(rest.split(".")[0], None)
        elif root == "sys" and rest.split(".")[0] in SYS_HOOKS:
            self.add("hooks", SYS_HOOKS[rest.split(".")[0]] + self.through)
        elif root in WATCHED:
            self.add("cheating", f"replaces {origin}{self.through}")
        elif root == "builtins":
            self.add("cheating", f"replaces the builtin {rest or 'namespace'}{self.through}")
        elif root in KERNEL:
            self.add("hooks", f"patches {origin}: it can change how the test cells run")
        elif rest.split(".")[-1] in DUNDER_PATCHES:
            self.add("cheating", f"replaces {origin}{self.through}")

    def _call(self, node: ast.Call) -> None:
        f = self.names.resolve(node.func)
        args = node.args
        if f is None:
            if isinstance(node.func, ast.Attribute) and node.func.attr == "__setattr__":
                self._setattr(node.func.value, args[0] if args else None)
            return
        name = f.rsplit(".", 1)[-1]
        if f.startswith(SHELL + ".events.register"):
            event = _text(args[0]) if args else None
            self.add(
                "hooks",
                f"registers an IPython {event or 'event'} hook: it can rewrite the test cells",
            )
        elif f in ("builtins.setattr", "builtins.delattr") and args:
            self._setattr(args[0], args[1] if len(args) > 1 else None)
        elif f.endswith("__setattr__") and f.split(".")[0] in ("builtins", "object"):
            self._setattr(args[0] if args else None, args[1] if len(args) > 1 else None)
        elif f.endswith(".__setattr__"):
            self._setattr(node.func.value, args[0] if args else None)
        elif f == "builtins.getattr" and len(args) >= 2 and _text(args[1]) is None:
            base = self.names.resolve(args[0])
            if base:
                self.add(
                    "dynamic-code", f"reads an attribute of {base} by a name built at run time"
                )
        elif f in ("importlib.import_module", "builtins.__import__", "importlib.__import__"):
            if not args or _text(args[0]) is None:
                self.add("dynamic-code", "imports a module whose name is built at run time")
        elif f in ("importlib.reload",):
            self.add("dynamic-code", "reloads a module")
        elif name in ("update", "setdefault", "pop", "popitem", "clear", "__setitem__"):
            self._namespace_method(f[: -len(name) - 1], node)
        elif name in ("patch", "object", "dict") and ("mock" in f or "monkeypatch" in f):
            self._patch(f, node)
        if f in ALWAYS_DYNAMIC or f in ("builtins.exec", "builtins.eval", "builtins.compile"):
            code = _text(args[0]) if args else None
            tree = _parse(code) if code else None
            if tree is not None:  # what the string does is scanned as the cell's own code
                saved = self.through
                self.scan(tree, through=f" (through {name})")
                self.through = saved

    def _setattr(self, target, attribute) -> None:
        base = self.names.resolve(target) if target is not None else None
        name = _text(attribute) if attribute is not None else None
        if name is None:
            what = f"of {base}" if base else "of an object"
            self.add("dynamic-code", f"sets an attribute {what} by a name built at run time")
        elif base is not None:
            self._replaces(f"{base}.{name}")
        elif target is not None:
            self._unknown_attribute(ast.Attribute(target, name, ast.Store()))

    def _namespace_method(self, owner: str, node: ast.Call) -> None:
        if owner == NAMESPACE:
            for k in node.keywords:
                if k.arg:
                    self._rebinds(k.arg, None)
                else:
                    self.add("dynamic-code", "rewrites the notebook's namespace")
            key = _text(node.args[0]) if node.args else None
            if node.args and key is None:
                self.add("dynamic-code", "rewrites the notebook's namespace")
            elif key is not None:
                self._rebinds(key, None)
        elif owner.endswith(".__dict__"):
            base = owner[: -len(".__dict__")]
            keys = [k.arg for k in node.keywords if k.arg]
            keys += [_text(node.args[0])] if node.args and _text(node.args[0]) else []
            for key in keys or ["__dict__"]:
                self._replaces(f"{base}.{key}")
        elif owner == "sys.modules":
            self.add("hooks", "rewrites sys.modules: it changes what later imports find")

    def _patch(self, f: str, node: ast.Call) -> None:
        args = node.args
        if f.endswith("patch") and args and _text(args[0]):
            self._replaces(_text(args[0]))
        elif f.endswith("object") and args:
            self._setattr(args[0], args[1] if len(args) > 1 else None)
        elif f.endswith("dict") and args:
            base = self.names.resolve(args[0]) or _text(args[0])
            if base:
                self._replaces(f"{base}.__dict__")


# -- a notebook --------------------------------------------------------------------------------


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _loads(trees) -> set[str]:
    return {
        n.id
        for tree in trees
        for n in ast.walk(tree)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }


def protected_names(released) -> tuple[dict[str, str], dict[str, str]]:
    """({name: why rebinding it is flagged}, {name: what the release imports under it}): the
    names the release's test cells read (or its parameters cell sets, for the hidden tests) that
    the release binds outside its solution cells, and the builtins the test cells use. The names
    the solution cells bind (the exercise's own) are the student's to bind."""
    given, tests, solutions, parameters = [], [], [], []
    for cell in released.cells:
        tree = _parse(cell.source) if cell.cell_type == "code" else None
        if tree is None:
            continue
        meta = _meta(cell)
        if meta.get("solution"):
            solutions.append(tree)
        elif meta.get("grade"):
            tests.append(tree)
        else:
            given.append(tree)
            if "parameters" in cell.metadata.get("tags", []):
                parameters.append(tree)
    bound, imported = {}, {}
    for tree in given:
        for name, origin, node in _top_bindings(tree):
            bound[name] = origin
            if isinstance(node, ast.Import | ast.ImportFrom):
                imported[name] = origin
    exercise = {name for tree in solutions for name, _, _ in _top_bindings(tree)}
    read = _loads(tests)
    setting = {name for tree in parameters for name in _loads([tree]) | _stores(tree)}
    protected = {}
    for name in sorted((read | setting) & set(bound) - exercise):
        if name in imported:
            protected[name] = f"rebinds {name}, the release's {imported[name]}, which the tests use"
        else:
            protected[name] = f"rebinds {name}, which the test cells read"
    for name in sorted(read & BUILTINS - set(bound) - exercise):
        protected[name] = f"shadows the builtin {name}, which the test cells use"
    for name, origin in imported.items():
        if name not in protected and origin.split(".")[0] in WATCHED:
            protected[name] = f"rebinds {name}, the release's {origin}"
    return protected, imported


def _top_bindings(tree: ast.Module):
    """(name, origin or None, binding node) for each name `tree` binds at its top level."""
    probe = _Cell(Names(), "", {}, {})
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield stmt.name, None, stmt
            continue
        for node in probe._own_nodes(stmt):
            for name, origin in probe._bindings(node):
                yield name, origin, node


def _stores(tree) -> set[str]:
    return {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def answer_cells(graded) -> list[tuple[str, object]]:
    """(label, cell) of each answer cell of an assembled notebook (grader.grading.assemble): the
    only code of the student's that grading runs."""
    return [
        (_meta(c).get("grade_id") or c.get("id") or f"#{i}", c)
        for i, c in enumerate(graded.cells)
        if c.cell_type == "code" and _meta(c).get("solution")
    ]


def scan(graded, released) -> list[Route]:
    """Every route by which the answer cells of `graded`, the notebook assembled from the
    release and the student's answers, reach the cells after them."""
    names = Names()
    trees = [_parse(c.source) for c in graded.cells if c.cell_type == "code"]
    for _ in range(2):  # functions that return a module, defined after their first use
        for tree in trees:
            if tree is not None:
                names.learn(tree)
    protected, imported = protected_names(released)
    found = []
    for label, written in answer_cells(graded):
        source = written.source
        cell = _Cell(names, label, protected, imported)
        for magic in magics(source):
            cell.add("hooks", f"runs the magic %{magic}: it can change how later cells run")
        tree = _parse(source)
        if tree is None:
            continue  # it fails when it runs, and costs only its own cell
        cell.scan(tree)
        found += cell.found
    return found
