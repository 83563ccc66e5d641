"""The GPU's compiler, on the laptop: in interpreter mode, every kernel that a graded call launches
is also compiled by Triton's front end for sm_80 and sm_90, and a kernel that the compiler
refuses fails the check with the compiler's message and a hint. The interpreter accepts code that
no GPU compiles (a variable that a loop reassigns with another dtype or shape), which would pass
every test on a laptop and fail them all at grading. On a GPU nothing changes.

How. `checking(kernel)` wraps one `kernel[grid](...)`: each run of the interpreted kernel under
it (through any autotuner or heuristics wrapper) becomes the signature, constants and options a
GPU launcher would compile, sent with the source of every `@triton.jit` function it reaches and
the globals they name to a helper process (`grader.runtime.compile_helper`) that imports Triton
without the interpreter. The helper stops after TTGIR, where compile errors arise, skipping LLVM
IR, PTX and ptxas, which take most of the time (for a 128x256x64 float16 matmul tile, 0.1 s to
TTGIR against 2 to 3 s to a cubin, on one CPU core). Each new launch costs tens of milliseconds
per target, spent while the interpreter runs the launch (the helper is another process, on
another core where there is one); a refusal is raised once the launch is over, in place of what
it returned or raised. Its verdict is kept in the process and in a file beside Triton's cache,
keyed by the program's sources, the launch, Triton's release and this check's code, and sealed
with that key (a file cut short or altered is compiled again).

Not seen: what only a launch finds (too much shared memory, addresses out of bounds), errors of
later stages, launches with tuples or with constexprs other than numbers, strings, booleans, None
or dtypes, and launches outside graded calls. A kernel that only some GPUs can run (09's float8
matmul, which Triton refuses for sm_80) is declared with `needs`.
"""

from __future__ import annotations

import ast
import atexit
import functools
import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from grader.runtime import device, hints, stubs, syntax

TARGETS = (80, 90)  # the compute capabilities of the GPUs the course supports
# Per kernel name, the capabilities of the only targets it is compiled for (`needs`).
NEEDS: dict[str, tuple[int, ...]] = {}
# Modules a kernel may name that the helper imports by name; any other module a kernel reaches
# into is sent as the attributes the kernel names.
IMPORTABLE = frozenset({"triton", "math", "torch", "numpy"})
_PLAIN = (bool, int, float, str, type(None))


class GPUCompileError(hints.HintedError):
    """Triton's compiler refuses a kernel that the interpreter ran; the message gives the
    compiler's own words and, after its first line, the hints (grader.runtime.hints)."""


class CheckUnavailable(RuntimeError):
    """The compile check itself could not run (its helper process failed)."""


# -- the launch, as a GPU would compile it ---------------------------------------------------------


def interpreted(kernel):
    """The interpreted kernel under `kernel` (through autotuners, heuristics and stand-ins that
    forward `fn`), or None for a compiled one."""
    from triton.runtime import JITFunction, KernelInterface

    for _ in range(8):
        inner = getattr(kernel, "fn", None)
        if inspect.isfunction(inner):
            ok = isinstance(kernel, KernelInterface) and not isinstance(kernel, JITFunction)
            return kernel if ok else None
        kernel = inner
    return None


_JIT_OPTIONS = ("do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline")


def _jit_options(kernel) -> dict:
    """The arguments `@triton.jit(...)` was given that change what it compiles."""
    given = getattr(kernel, "kwargs", None) or {}
    return {k: given[k] for k in _JIT_OPTIONS if given.get(k) is not None}


@functools.cache
def _params(kernel):
    """The kernel's parameters, as triton.jit reads them."""
    from triton.runtime import JITFunction

    return JITFunction(kernel.fn, **_jit_options(kernel)).params


def _value(v):
    """A constexpr value as JSON, or None where it cannot be sent."""
    import triton.language as tl

    if isinstance(v, tl.constexpr):
        v = v.value
    if isinstance(v, tl.dtype):
        return {"dtype": str(v)}
    if isinstance(v, _PLAIN):
        return {"value": v}
    return None


def specialization(kernel, args, kwargs):
    """(signature, constexprs, attrs, options) of a launch of interpreted `kernel`, as the GPU
    launcher would compile it; None where an argument cannot be sent to the helper."""
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import mangle_type

    params = _params(kernel)
    names = [p.name for p in params]
    bound = {**dict(zip(names, args, strict=False)), **kwargs}  # the rest come as keywords
    signature, constexprs, attrs = {}, {}, []
    for index, p in enumerate(params):
        value = bound.get(p.name, p.default)
        kind = "constexpr" if p.is_constexpr else mangle_type(value, not p.do_not_specialize)
        if not isinstance(kind, str):
            return None  # a tuple argument: not checked
        signature[p.name] = kind
        if kind == "constexpr":
            constexprs[p.name] = _value(value)
            if constexprs[p.name] is None:
                return None
            continue
        align = not p.do_not_specialize_on_alignment
        if kind.startswith("*"):
            mark = BaseBackend.get_tensor_specialization(value, align=align)
        elif kind[0] in "iu" and kind != "u1" and not p.do_not_specialize:
            mark = BaseBackend.get_int_specialization(value, align=align)
        else:
            mark = ""
        if mark:
            attrs.append([index, BaseBackend.parse_attr(mark)])
    options = {k: v for k, v in kwargs.items() if k not in names and isinstance(v, _PLAIN)}
    return signature, constexprs, attrs, options


# -- the program: the kernel's source and everything it names --------------------------------------


@functools.cache
def _source(fn) -> tuple[str, int, list[str]]:
    """The dedented source of `fn`, its first line, and the names it uses."""
    lines, first = inspect.getsourcelines(fn)
    text = textwrap.dedent("".join(lines))
    names = set()
    for node in ast.walk(syntax.parse(text)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    names -= set(inspect.signature(fn).parameters)  # a parameter hides any global
    return text, first, sorted(names)


def program(kernel) -> dict:
    """The interpreted `kernel` and every `@triton.jit` function it reaches, as the helper
    defines them: the source, its first line, and what each global name it uses holds."""
    functions: dict[str, dict] = {}
    ids: dict[int, str] = {}

    def add(obj) -> str:
        if id(obj) in ids:
            return ids[id(obj)]
        fid = ids[id(obj)] = f"f{len(ids)}"
        fn = obj.fn
        text, first, names = _source(fn)
        scope = {**fn.__globals__, **inspect.getclosurevars(fn).nonlocals}
        functions[fid] = spec = {
            "name": fn.__name__,
            "module": fn.__module__,
            "first": first,
            "source": text,
            "jit": _jit_options(obj),
        }
        spec["globals"] = {n: describe(scope[n], names) for n in names if n in scope}
        return fid

    def describe(v, names, modules=()):
        import triton.language as tl

        if v is not None and interpreted(v) is v:
            fn = v.fn
            if fn.__module__.partition(".")[0] == "triton":  # triton.language's own
                return {"import": [fn.__module__, fn.__qualname__]}
            return {"jit": add(v)}
        if isinstance(v, types.ModuleType):
            if v.__name__.partition(".")[0] in IMPORTABLE:
                return {"module": v.__name__}
            if v in modules:
                return {"other": "module"}
            inside = (*modules, v)
            attrs = {n: describe(getattr(v, n), names, inside) for n in names if hasattr(v, n)}
            return {"namespace": attrs, "name": v.__name__}
        if isinstance(v, tl.constexpr | tl.dtype):
            sent = _value(v)
            if sent is None:
                return {"other": type(v.value).__name__}
            return {"constexpr": sent} if isinstance(v, tl.constexpr) else sent
        if isinstance(v, _PLAIN):
            return {"value": v}
        module = getattr(v, "__module__", None) or ""
        qualname = getattr(v, "__qualname__", None)
        if module.partition(".")[0] == "triton" and qualname and "<" not in qualname:
            return {"import": [module, qualname]}
        return {"other": type(v).__name__}

    add(kernel)
    return {"kernel": "f0", "functions": functions}


# -- the helper process ----------------------------------------------------------------------------


class _Helper:
    """The helper process (grader.runtime.compile_helper), started at the first request and
    ended with this process; one request at a time."""

    def __init__(self):
        self.lock = threading.Lock()
        self.process = self.log = None
        atexit.register(self.stop)

    def stop(self):
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait()
            self.process = None

    def ask(self, request: dict) -> list[dict]:
        """The helper's verdict per target for `request`."""
        with self.lock:
            if self.process is None:
                root = str(Path(__file__).resolve().parents[2])  # where `grader` is
                env = dict(os.environ)
                env.pop("TRITON_INTERPRET", None)
                env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
                self.log = tempfile.TemporaryFile(mode="w+")
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "grader.runtime.compile_helper"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=self.log,
                    cwd=tempfile.gettempdir(),  # no file beside the notebook shadows a module there
                    env=env,
                    text=True,
                )
            try:
                self.process.stdin.write(json.dumps(request) + "\n")
                self.process.stdin.flush()
                reply = self.process.stdout.readline()
            except BrokenPipeError:
                reply = ""
            if reply:
                answer = json.loads(reply)
                if "internal" in answer:
                    raise CheckUnavailable(
                        "the GPU compile check failed; report this message with the output of "
                        f"`python -m grader doctor`: {answer['internal']}"
                    )
                return answer["results"]
            status = self.process.wait()
            self.process = None
            self.log.seek(0)
            said = self.log.read()[-3000:].strip() or "nothing"
            raise CheckUnavailable(
                f"the GPU compile check's helper process ended (exit status {status}) without "
                f"an answer. Run `python -m grader doctor` to check the installation, and "
                f"report this message with its output. The helper wrote: {said}"
            )


_HELPER = _Helper()
_ASKING = ThreadPoolExecutor(1, thread_name_prefix="gpu-compile")  # asks the helper, in turn
_VERDICTS: dict[str, list] = {}  # request digest -> the verdict per target
COMPILED: list[dict] = []  # each verdict this process obtained: kernel, functions, target, error


@functools.cache
def _version() -> str:
    """What a verdict depends on besides the request: Triton's release and this check's code."""
    import triton

    here = Path(__file__).parent
    code = b"".join((here / name).read_bytes() for name in ("gpu_compile.py", "compile_helper.py"))
    return f"{triton.__version__}-{hashlib.sha256(code).hexdigest()}"


def _kept(digest: str) -> Path:
    """Where a verdict is kept for later processes: beside Triton's own cache."""
    from triton import knobs

    return Path(knobs.cache.dir) / "course-gpu-compile" / f"{digest}.json"


def _seal(digest: str, results: list) -> str:
    return hashlib.sha256((digest + json.dumps(results, sort_keys=True)).encode()).hexdigest()


def _keep(digest: str, results: list) -> None:
    path = _kept(digest)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps({"results": results, "seal": _seal(digest, results)}))
        os.replace(partial, path)
    except OSError:
        pass  # a cache that cannot be written costs a compile next time, nothing else


def _kept_verdict(digest: str) -> list | None:
    """The verdict an earlier process kept for `digest`; None where there is none, or where the
    file is not what _keep wrote for this digest (cut short, altered, another's), which is then
    compiled again, never trusted."""
    try:
        kept = json.loads(_kept(digest).read_text())
        return kept["results"] if kept["seal"] == _seal(digest, kept["results"]) else None
    except (OSError, ValueError, TypeError, KeyError):
        return None


def needs(kernel_name: str, feature: str) -> None:
    """Declare that the kernel called `kernel_name` needs `feature` (a key of
    device.FEATURE_CAPABILITY, such as "sm_90" for float8 e4m3 dots), so that the check compiles
    it only for the targets that have it, as the notebook gates its tests on the device."""
    least = device.FEATURE_CAPABILITY[feature]
    NEEDS[kernel_name] = tuple(c for c in TARGETS if divmod(c, 10) >= least)


def targets(kernel_name: str) -> list[int]:
    """The capabilities a launch of `kernel_name` is compiled for."""
    return list(NEEDS.get(kernel_name, TARGETS))


def verdicts(kernel, args, kwargs, only: list[int] | None = None) -> list[dict] | None:
    """Per target, {"target", "error", "warps"} for a launch of interpreted `kernel` (error None
    where it compiles), for the targets in `only` if given; None where the launch cannot be
    checked. A verdict is kept per program and launch, in this process and on disk."""
    pending = asked(kernel, args, kwargs, only)
    return None if pending is None else pending()


def asked(kernel, args, kwargs, only: list[int] | None = None):
    """What `verdicts` returns, as a function that waits for it: where no verdict is kept, the
    helper compiles the launch meanwhile, on another core, while the interpreter runs it. None
    where the launch cannot be checked."""
    spec = specialization(kernel, args, kwargs)
    if spec is None:
        return None
    request = {
        "program": program(kernel),
        **dict(zip(("signature", "constexprs", "attrs", "options"), spec, strict=True)),
        "targets": [t for t in targets(kernel.fn.__name__) if only is None or t in only],
    }
    text = json.dumps(request, sort_keys=True) + _version()
    digest = hashlib.sha256(text.encode()).hexdigest()
    kept = _VERDICTS[digest] if digest in _VERDICTS else _kept_verdict(digest)
    answer = None if kept is not None else _ASKING.submit(_HELPER.ask, request)

    def settled() -> list[dict]:
        if digest not in _VERDICTS:
            results = kept if answer is None else answer.result()
            if answer is not None:
                _keep(digest, results)
            _VERDICTS[digest] = results
            names = [f["name"] for f in request["program"]["functions"].values()]
            COMPILED.extend({"kernel": names[0], "functions": names, **r} for r in results)
        return _VERDICTS[digest]

    return settled


def compiled_warps(kernel, args, kwargs, capability: int = 90) -> int | None:
    """The warps one program of `kernel[grid](*args, **kwargs)` (interpreted) runs on a GPU of
    `capability`, read from its TTGIR: `num_warps`, plus those warp specialization added. None
    where the launch cannot be checked or does not compile for that target."""
    results = verdicts(kernel, args, kwargs, only=[capability])
    return next((r["warps"] for r in results or () if r["error"] is None), None)


_LOOP = [
    re.compile(r"variable (\w+) has initial type (.+?) but is re-assigned to (.+?) in loop"),
    re.compile(r"Loop carried variable (\w+) changed type, was (.+?) but is now ([^)'\"]+)"),
    re.compile(r"cannot reassign constexpr (\w+) in the loop"),
]


def _hint(message: str) -> hints.Hint:
    for pattern in _LOOP:
        found = pattern.search(message)
        if found:
            return hints.loop_carried(*found.groups())
    where = re.search(r"^at (\d+):\d+:", message, re.MULTILINE)
    line = int(where.group(1)) if where else None
    # a dtype an operation refuses or shapes that clash, else the line the compiler points at
    return hints.compile_error(message) or hints.gpu_compile(line)


def check_launch(kernel, args, kwargs) -> None:
    """Compile one launch of interpreted `kernel` for every target; raise GPUCompileError if one
    refuses it. A kernel that still holds the exercise stub is left to the interpreter, whose
    error names the stub."""
    __tracebackhide__ = True
    _refuse(kernel, verdicts(kernel, args, kwargs))


def _refuse(kernel, results: list[dict] | None) -> None:
    """Raise GPUCompileError where a target refused `kernel` (results: from `verdicts`)."""
    __tracebackhide__ = True
    failed = [r for r in results or () if r["error"] is not None]
    if not failed:
        return
    first = failed[0]["error"]["message"]
    shown = [f"The compiler's message (sm_{failed[0]['target']}):", first.strip()]
    for other in failed[1:]:
        if other["error"]["message"] != first:
            shown += [f"For sm_{other['target']}:", other["error"]["message"].strip()]
    said = "\n".join(shown)
    if "Raise" in said and stubs.STUB_LINE.removesuffix("()") in said:
        return
    names = " and ".join(f"sm_{r['target']}" for r in failed)
    raise GPUCompileError(
        f"Triton's compiler refuses `{kernel.fn.__name__}` for the GPU ({names}): the interpreter "
        "runs it, but on such a GPU this launch does not compile, and the test fails at grading.\n"
        + said,
        (_hint(first),),
    ) from None  # the refusal, not what the interpreter then did with the launch, is the cause


@contextmanager
def checking(kernel):
    """Around one `kernel[grid](...)`: in interpreter mode, every run of the interpreted kernel
    under `kernel` (an autotuner's trials included) is compiled for the GPU targets first."""
    inner = None if device.current().is_gpu else interpreted(kernel)
    if inner is None or "run" in vars(inner):  # a GPU, or a launch inside a checked one
        yield
        return
    run = type(inner).run

    def checked(*args, grid, warmup, **kwargs):
        __tracebackhide__ = True
        pending = asked(inner, args, kwargs)
        try:
            return run(inner, *args, grid=grid, warmup=warmup, **kwargs)
        finally:  # a refusal replaces whatever the interpreter returned or raised
            _refuse(inner, pending and pending())

    inner.run = checked
    try:
        yield
    finally:
        del inner.run
