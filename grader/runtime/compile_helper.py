"""The helper process of `grader.runtime.gpu_compile`: `python -m grader.runtime.compile_helper`
imports Triton without the interpreter and answers requests, one JSON line each on stdin and
stdout. A request holds a program (the sources of a kernel and of the `@triton.jit` functions it
reaches, with the globals each names), the launch's signature, constants, attributes, options
and targets; the answer says, per target, whether Triton's front end compiles the kernel, and if
not, the compiler's message. Each function is defined anew at its own line numbers (registered
in linecache, so triton.jit reads the same text as on a GPU); a stage hook ends the pipeline after
TTGIR.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.metadata
import json
import linecache
import os
import pkgutil
import re
import sys
import traceback
import types

import triton
import triton.language as tl
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime import cache

from grader.runtime import syntax


class _Done(Exception):
    """Raised by the stage after TTGIR, with the TTGIR: the front end is through."""


def _warps(ttgir: str) -> int | None:
    """The warps a program of the compiled kernel runs: the module's, plus those of each
    partition that warp specialization added (`ttg.warp_specialize ... num_warps(n)`)."""
    found = re.search(r'"ttg.num-warps" = (\d+)', ttgir)
    if found is None:
        return None
    return int(found.group(1)) + sum(map(int, re.findall(r"\bnum_warps\((\d+)\)", ttgir)))


def _stop_after_ttgir(*args):
    """knobs.runtime.add_stages_inspection_hook: keep the stages up to TTGIR, then stop. Triton
    3.9 also calls it without arguments, for a part of its cache key."""
    if not args:
        return "front-end-only", "front-end-only"
    stages = args[1]
    names = list(stages)
    for name in names[names.index("ttgir") + 1 :]:
        del stages[name]

    def done(module, metadata):
        raise _Done(str(module))

    stages["llir"] = done


class _NoFiles(cache.CacheManager):
    """A Triton cache manager that keeps nothing: a front-end compile never finishes a kernel,
    so none of its IR is worth a file."""

    def get_file(self, filename):
        return None

    def put(self, data, filename, binary=True):
        return filename

    def get_group(self, filename):
        return None

    def put_group(self, filename, group):
        return None


class _Opaque:
    """Stands in for a global the helper cannot rebuild (a tensor, a function of the notebook):
    the compiler refuses it as it refuses the real one."""

    def __init__(self, kind: str):
        self.kind = kind

    def __repr__(self):
        return f"<{self.kind}>"


def _define(fid: str, spec: dict, scope: dict):
    """The Python function of one sent spec, defined in `scope` at its source's line numbers and
    registered in linecache, so that triton.jit reads the same source."""
    padded = ["\n"] * (spec["first"] - 1) + spec["source"].splitlines(keepends=True)
    filename = f"<{fid}: {spec['name']}>"
    linecache.cache[filename] = (sum(map(len, padded)), None, padded, filename)
    tree = syntax.parse(spec["source"])
    (node,) = tree.body
    node.decorator_list = []
    ast.increment_lineno(tree, spec["first"] - 1)
    exec(compile(tree, filename, "exec"), scope)
    return scope[node.name]


def _resolve(sent: dict, made: dict):
    """The value of a global as gpu_compile.program sent it; `made` holds the jit functions."""
    if "module" in sent:
        return importlib.import_module(sent["module"])
    if "namespace" in sent:
        namespace = types.ModuleType(sent["name"])
        for attr, value in sent["namespace"].items():
            setattr(namespace, attr, _resolve(value, made))
        return namespace
    if "constexpr" in sent:
        return tl.constexpr(_resolve(sent["constexpr"], made))
    if "dtype" in sent:
        return tl.dtype(sent["dtype"])
    if "value" in sent:
        return sent["value"]
    if "import" in sent:
        return pkgutil.resolve_name(":".join(sent["import"]))  # [module, qualified name]
    if "jit" in sent:
        return made[sent["jit"]]
    return _Opaque(sent["other"])


def _build(program: dict):
    """The kernel of a sent program, as a JITFunction whose globals are rebuilt."""
    made: dict[str, object] = {}
    scopes = {}
    for fid, spec in program["functions"].items():
        scope = scopes[fid] = {"__builtins__": builtins, "__name__": spec["module"]}
        scope.update({n: _resolve(g, made) for n, g in spec["globals"].items() if "jit" not in g})
        made[fid] = triton.jit(_define(fid, spec, scope), **spec["jit"])
    for fid, spec in program["functions"].items():  # calls among them, once all exist
        scopes[fid].update({n: made[g["jit"]] for n, g in spec["globals"].items() if "jit" in g})
    return made[program["kernel"]]


def _said(error: BaseException) -> str:
    """What the compiler said: an error in a function the kernel calls is the cause of the
    kernel's own, which points at the call."""
    parts = []
    while error is not None:
        text = str(error).strip()
        if text and text not in parts:
            parts.append(text)
        error = error.__cause__
    return "\nin the function called there:\n".join(parts)


def compile_request(request: dict) -> list[dict]:
    """Per target, {"target": capability, "error": None or {"type", "message"}, "warps": the
    warps of a program, warp-specialized partitions included, where it compiled}."""
    kernel = _build(request["program"])
    constexprs = {name: _resolve(sent, {}) for name, sent in request["constexprs"].items()}
    attrs = {(index,): value for index, value in request["attrs"]}
    results = []
    for capability in request["targets"]:
        source = ASTSource(kernel, request["signature"], constexprs, attrs)
        target = GPUTarget("cuda", capability, 32)
        error, warps = None, None
        try:
            triton.compile(source, target=target, options=dict(request["options"]))
        except _Done as done:
            warps = _warps(done.args[0])
        except Exception as refused:
            error = {"type": type(refused).__name__, "message": _said(refused)}
        results.append({"target": capability, "error": error, "warps": warps})
    return results


def serve() -> None:
    """Answer requests until stdin closes."""
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever else prints (the compiler's diagnostics) goes to stderr
    knobs.cache.manager_class = _NoFiles
    # triton.compile keys that cache by a hash of Triton's own files, its 500 MB library
    # included: 0.4 s of CPU in every helper, for a key _NoFiles never files anything under.
    # Triton's own compile workers set the key the same way.
    version = importlib.metadata.version("triton")
    cache.triton_key = lambda: f"{version}-front-end-only"
    knobs.runtime.add_stages_inspection_hook = _stop_after_ttgir
    knobs.runtime.override_arch = None
    knobs.nvidia.mock_ptx_version = "no ptxas: the front end only"
    for line in sys.stdin:
        try:
            reply = {"results": compile_request(json.loads(line))}
        except Exception:
            reply = {"internal": traceback.format_exc()}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve()
