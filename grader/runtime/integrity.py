"""Integrity of a graded call: the student's Triton kernel must run and the reference must not;
the output is checked again after timing, on fresh inputs; and speed is measured in a separate
process that the notebook's state cannot reach.

What each guard catches:
- `ReferenceWatch` (a `torch.overrides.TorchFunctionMode`) records calls, made through torch's
  Python API while the graded call runs, to the functions that compute attention or its parts
  (softmax, matmul and friends, scaled_dot_product_attention): a "fallback" to the reference.
  `forbid(names, why)` refuses such a call on the spot, for notebooks' own test helpers.
- `allocations()` counts the new tensor storage torch hands out during a call: a kernel that
  quietly builds an N x N intermediate through torch is seen on the CPU too.
- `counting_launches` swaps a `LaunchCounter` in for the kernel object in the namespace where the
  launcher looks up its globals (the notebook's, usually), and restores it afterwards: a launcher
  that returns without launching the kernel (a cached or precomputed result) is caught.
- `checked_call` also records the call's Triton launches (`grader.runtime.launches`): the tensor
  arguments and the returned tensor must have been handed to the kernel, not a placeholder.
- `measure_isolated` sends the source of the kernel and launcher (`inspect.getsource`) to a fresh
  Python process, which defines them anew, checks them with the guards above on fresh inputs,
  and times them through the course's one speed path, `grader.runtime.perf.measure` (inputs
  drawn afresh before every timed call, sampled outputs checked against the inputs of their call,
  its own work checked before and after timing, a census of the GPU kernels every timed call
  ran, the host clock beside the CUDA events, the copy bandwidth and cuBLAS FLOP ceilings); it
  returns the numbers and flags, which `grade` scores as perf scores every speed cell. Patched
  torch functions, a monkeypatched timer or checker, global caches or pre-warmed tensors in the
  notebook do not exist there.

What they cannot catch: work that bypasses torch's Python API (`torch.ops.aten`, numpy, ctypes);
code written to notice the guards and behave differently under them; a timer replaced below
Python (ctypes into the CUDA driver), or the runtime's own record of its timers rewritten; and
code in the notebook that replaces the grader's own functions before the grading cells run (the
isolated process protects the measurement, not the notebook's bookkeeping). The kernel and
launcher sent to the isolated process must be self-contained apart from `math`, `torch`,
`triton` and `triton.language as tl`; anything else they use must be sent along with them.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from grader.runtime import checks, device, launches, recorded, timing
from grader.runtime.launches import IntegrityError

# Names (func.__name__) of torch functions and methods that compute attention or its parts.
REFERENCE_OPS = frozenset(
    {
        "softmax",
        "log_softmax",
        "_softmax",
        "scaled_dot_product_attention",
        "multi_head_attention_forward",
        "matmul",
        "__matmul__",
        "__rmatmul__",
        "mm",
        "bmm",
        "baddbmm",
        "addmm",
        "addbmm",
        "einsum",
        "tensordot",
        "linear",
    }
)
# Names of the torch functions that compute a softmax.
SOFTMAX_OPS = frozenset({"softmax", "_softmax", "log_softmax", "logsumexp"})


def _qualified(func) -> str:
    module = getattr(func, "__module__", None)
    name = getattr(func, "__name__", repr(func))
    if module in (None, "torch._C", "torch._C._VariableFunctions") or module.startswith("torch._"):
        owner = getattr(func, "__qualname__", name).split(".")[0]
        if owner in {"TensorBase", "Tensor"}:
            return f"Tensor.{name}"
        return f"torch.{name}"
    return f"{module}.{name}"


class ReferenceWatch(TorchFunctionMode):
    """Records calls, through torch's Python API, to functions named in `forbidden`; with
    `refuse`, raises IntegrityError at the first one, saying `refuse` as the reason."""

    def __init__(self, forbidden: Iterable[str] = REFERENCE_OPS, refuse: str | None = None):
        super().__init__()
        self.forbidden = frozenset(forbidden)
        self.refuse = refuse
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.forbidden:
            self.calls.append(_qualified(func))
            if self.refuse is not None:
                raise IntegrityError(f"the graded code called {self.calls[-1]}: {self.refuse}")
        return func(*args, **(kwargs or {}))


@contextmanager
def forbid(names: Iterable[str] = REFERENCE_OPS, why: str = "compute it with your kernel"):
    """Raise IntegrityError as soon as code in the block calls a torch function in `names`,
    through any alias (torch.softmax, Tensor.softmax, F.softmax, an imported name)."""
    with ReferenceWatch(names, refuse=why):
        yield


def _tensors(value) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _tensors(item)


class Allocations(TorchFunctionMode):
    """Bytes of new tensor storage returned by torch functions called inside the block: a view
    of, or a write into, an argument is not new. On a GPU, the peak of
    `torch.cuda.max_memory_allocated` says the same from the allocator's side."""

    def __init__(self):
        super().__init__()
        self.storages: dict[int, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        inputs = {
            t.untyped_storage().data_ptr()
            for t in _tensors([*args, *kwargs.values()])
            if t.layout == torch.strided
        }
        for t in _tensors(result):
            if t.layout == torch.strided and t.untyped_storage().data_ptr() not in inputs:
                storage = t.untyped_storage()
                self.storages.setdefault(storage.data_ptr(), storage.nbytes())
        return result

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())


@contextmanager
def allocations() -> Iterator[Allocations]:
    """`with allocations() as a: ...` then `a.bytes`: new storage torch allocated inside, to
    check that a kernel builds no large intermediate (an N x N score matrix, say)."""
    tracker = Allocations()
    with tracker:
        yield tracker


class LaunchCounter:
    """Stands in for a Triton kernel (a JITFunction or an Autotuner): `kernel[grid](...)` and
    `kernel.run(...)` are counted and forwarded; every other attribute is the kernel's own."""

    def __init__(self, kernel, name: str):
        self.kernel = kernel
        self.name = name
        self.launches = 0

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def counted(*args, **kwargs):
            self.launches += 1
            return launch(*args, **kwargs)

        return counted

    def run(self, *args, **kwargs):
        self.launches += 1
        return self.kernel.run(*args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self.kernel, attr)

    def __repr__(self) -> str:
        return f"LaunchCounter({self.name}: {self.launches} launches)"


@contextmanager
def counting_launches(namespace: MutableMapping, names: Sequence[str]):
    """Swap a LaunchCounter in for each kernel `names[i]` in `namespace`; restore on exit.
    Yields {name: counter}."""
    missing = [n for n in names if n not in namespace]
    if missing:
        raise IntegrityError(
            f"no kernel named {', '.join(missing)} where the launcher looks up its globals: "
            "keep the kernel's name as the exercise gives it"
        )
    originals = {n: namespace[n] for n in names}
    counters = {n: LaunchCounter(k, n) for n, k in originals.items()}
    namespace.update(counters)
    try:
        yield counters
    finally:
        namespace.update(originals)


def checked_call(
    launcher: Callable,
    *args,
    kernels: Sequence[str],
    forbidden: Iterable[str] = REFERENCE_OPS,
    namespace: MutableMapping | None = None,
    **kwargs,
):
    """Call launcher(*args, **kwargs) once and return its output, after proving that it launched
    each kernel in `kernels`, called none of `forbidden`, handed its tensor arguments to Triton
    launches and the tensor it returns to a launch of `kernels` (`launches.verify`).
    `namespace` defaults to the launcher's globals, where it looks its kernels up."""
    __tracebackhide__ = True
    ns = launcher.__globals__ if namespace is None else namespace
    who = f"`{getattr(launcher, '__name__', 'the launcher')}`"
    watch = ReferenceWatch(forbidden)
    with counting_launches(ns, kernels) as counters, watch, launches.recording(kernels) as rec:
        out = checks.call_graded(launcher, *args, **kwargs)
    if isinstance(out, torch.Tensor) and out.is_cuda:
        torch.cuda.synchronize()
    if watch.calls:
        raise IntegrityError(
            f"{who} called {', '.join(sorted(set(watch.calls)))} during the graded call: the "
            "result must come from your kernel, not from the PyTorch operations it replaces"
        )
    idle = [n for n, c in counters.items() if c.launches == 0]
    if idle:
        raise IntegrityError(
            f"{who} returned without launching {', '.join(idle)}: every graded call must run "
            "your Triton kernel (no cached or precomputed results)"
        )
    returned = out if isinstance(out, torch.Tensor) else None
    launches.verify(rec, [*args, *kwargs.values()], who, returned=returned)
    return out


# -- measurement in a separate process -------------------------------------------------------------


def source_of(obj) -> str:
    """The source text of a function or Triton kernel, decorators included."""
    fn = obj
    for _ in range(4):  # Autotuner -> JITFunction -> function
        if inspect.isfunction(fn):
            break
        fn = getattr(fn, "fn", fn)
    if not inspect.isfunction(fn):
        raise TypeError(f"cannot find the source of {obj!r}: pass functions or Triton kernels")
    return textwrap.dedent(inspect.getsource(fn))


@dataclass
class Measurement:
    """What the isolated process found: its checks, and per comparison the two median times."""

    ok: bool
    error: str | None = None
    device: str = ""
    checks: list[str] = field(default_factory=list)
    comparisons: dict[str, dict] = field(default_factory=dict)
    flops: dict[str, float] = field(default_factory=dict)
    bytes_moved: float = 0.0
    note: str = ""
    flags: list[str] = field(default_factory=list)  # why the times cannot be trusted
    lines: list[str] = field(default_factory=list)  # the timings, for people

    def seconds(self, variant: str) -> float | None:
        """The candidate's median seconds per call for `variant`, over every comparison; None
        where `variant` has none (the measurement was flagged before it was compared)."""
        times = [c["candidate_ms"] for c in self.comparisons.values() if c["variant"] == variant]
        return min(times) * 1e-3 if times else None

    def __str__(self) -> str:
        if not self.ok:
            return f"the isolated measurement failed: {self.error}"
        lines = [f"measured in a separate process on {self.device}"]
        lines += [f"  check: {c}" for c in self.checks]
        lines += [f"  {line}" for line in self.lines]
        for name, c in self.comparisons.items():
            flops = self.flops.get(c["variant"])
            rate = ""
            if flops:
                mine = flops / (c["candidate_ms"] * 1e-3) / 1e12
                theirs = flops / (c["baseline_ms"] * 1e-3) / 1e12
                rate = f"  ({mine:.0f} vs {theirs:.0f} TFLOP/s)"
            lines.append(f"  yours ({c['variant']}) vs {name}: {c['speedup']:.2f}x{rate}")
        if self.note:
            lines.append(f"  {self.note}")
        lines += [f"  flagged: {why}" for why in self.flags]
        return "\n".join(lines)


def measure_isolated(
    objects: Sequence,
    *,
    launcher: str,
    kernels: Sequence[str],
    problem: str,
    params: Mapping | None = None,
    timeout: float = 600,
    clock: str = "gpu",
) -> Measurement:
    """Check and time the launcher named `launcher` in a fresh Python process.

    `objects` are the functions and kernels whose source is sent (helpers first, the launcher
    last); `kernels` are the names of the kernels each call must launch. `problem` names a
    factory, "module:function", called with `params` in the new process; it returns an object
    with `variants` ({label: launcher kwargs}), `inputs(gen)`, `reference(*inputs, **kwargs)`,
    `compare(actual, expected)`, `baselines` ({name: (variant, fn(*inputs))}), `flops(variant)`
    and `bytes_moved`. Timing happens only on a GPU (`clock="cpu"` is for the grader's own
    tests); elsewhere the process checks and reports. Never raises for the candidate's faults:
    they come back as `Measurement(ok=False, error=...)`.
    """
    spec = {
        "sources": [source_of(o) for o in objects],
        "launcher": launcher,
        "kernels": list(kernels),
        "problem": problem,
        "params": dict(params or {}),
        "mode": device.current().mode,
        "clock": clock,
    }
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["COURSE_MODE"] = spec["mode"]
    with tempfile.TemporaryDirectory(prefix="isolated-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(json.dumps(spec))
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "grader.runtime.integrity",
                    str(spec_path),
                    str(result_path),
                ],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return Measurement(False, f"the isolated process ran past {timeout:g} s")
        if not result_path.exists():
            tail = (done.stderr or done.stdout or "").strip().splitlines()[-6:]
            return Measurement(
                False, f"the isolated process died (exit {done.returncode}): " + " | ".join(tail)
            )
        raw = json.loads(result_path.read_text())
    return Measurement(**raw)


def grade(
    measurement: Measurement | None, comparison: str, *, at_least: float, points: float
) -> float:
    """Full points when the isolated measurement's `comparison` shows a speedup of `at_least`
    or more, untouched by any flag (perf.score); 0 otherwise, and off the supported GPU class
    (said out loud, as perf does)."""
    from grader.runtime import perf

    if not device.current().grades_speed:
        return perf.not_graded_here(points)
    if measurement is None or not measurement.ok:
        why = (
            "no measurement: run the cell above that measures speed"
            if measurement is None
            else measurement.error
        )
        print(f"NOT YET: {why}. 0 of {points:g} points")
        return 0.0
    c = measurement.comparisons.get(comparison)
    figure = c["speedup"] if c else None
    verdict = perf.Verdict(comparison, figure, at_least, flags=tuple(measurement.flags))
    with recorded.speed_cell():
        return perf.score([verdict], points)


# -- the isolated process --------------------------------------------------------------------------

PRELUDE = "import math\n\nimport torch\nimport triton\nimport triton.language as tl\n\n\n"


def load_sources(sources: Sequence[str], folder: Path, name: str = "submitted"):
    """The module `name` made of `sources` after PRELUDE, written into `folder` (Triton reads a
    kernel's source from its file) and registered in sys.modules: what a child process runs of
    code sent from a notebook (here, and in grader.runtime.profile)."""
    path = folder / f"{name}.py"
    path.write_text(PRELUDE + "\n\n".join(sources) + "\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _resolve(dotted: str):
    module, _, attr = dotted.partition(":")
    return getattr(importlib.import_module(module), attr)


def _measure(spec: dict, folder: Path) -> dict:
    """Check the launcher with the guards of this module on fresh inputs, then time it through
    the course's one speed path (perf.measure: inputs drawn afresh before every timed call, its
    own work checked before and after, a census of the GPU's work, the ceilings), one case per
    variant against that variant's baselines."""
    from grader.runtime import perf

    dev = device.current()
    module = load_sources(spec["sources"], folder)
    launcher = getattr(module, spec["launcher"])
    problem = _resolve(spec["problem"])(**spec["params"])
    result = {"device": dev.describe(), "checks": [], "comparisons": {}, "flops": {}}
    result.update(flags=[], lines=[], bytes_moved=float(problem.bytes_moved))
    args = list(problem.inputs(checks.generator(checks.new_seed())))
    namespace = vars(module)
    with counting_launches(namespace, spec["kernels"]) as counters:
        for variant, kwargs in problem.variants.items():
            watch = ReferenceWatch()
            before = sum(c.launches for c in counters.values())
            with watch:
                out = launcher(*args, **kwargs)
            if watch.calls:
                raise IntegrityError(f"called {', '.join(sorted(set(watch.calls)))}")
            if sum(c.launches for c in counters.values()) == before:
                raise IntegrityError("returned without launching the kernel")
            problem.compare(out, problem.reference(*args, **kwargs))
            result["flops"][variant] = float(problem.flops(variant))
            result["checks"].append(f"{variant}: right, launched the kernel, no reference calls")
    sampler = timing.cpu_sampler if spec["clock"] == "cpu" else None
    if sampler is None and not dev.supports("timing"):
        result["note"] = "timing needs a GPU: checked only"
        return result
    for variant, kwargs in problem.variants.items():
        state = {}

        def run(kwargs=kwargs, state=state):
            state["out"] = launcher(*args, **kwargs)
            return state["out"]

        def verify(kwargs=kwargs, state=state):
            problem.compare(state["out"], problem.reference(*args, **kwargs))

        baselines = [
            perf.Baseline(name, lambda fn=fn: fn(*args), at_least=None)
            for name, (of, fn) in problem.baselines.items()
            if of == variant
        ]
        case = perf.Case(
            run,
            spec["kernels"],
            args,
            None,
            verify,
            baselines,
            name=variant,
            bytes_moved=problem.bytes_moved,
            flops=result["flops"][variant],
            dtype=args[0].dtype,
        )
        measured = perf.measure(case, sampler=sampler)
        result["lines"] += measured.lines
        if measured.flags:  # the measurement cannot be trusted: no further comparisons
            result["flags"] += [f"{variant}: {why}" for why in measured.flags]
            break
        for b in baselines:
            result["comparisons"][b.name] = {
                "variant": variant,
                "candidate_ms": measured.candidate_ms,
                "baseline_ms": measured.baseline_ms[b.name],
                "speedup": measured.speedup(b.name),
            }
    if spec["clock"] == "cpu":
        result["note"] = "timed with the CPU clock (the grader's own tests): not a GPU speed"
    return result


def _child(spec_path: str, result_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    result: dict = {"ok": False}
    try:
        device.setup(spec["mode"])
        with tempfile.TemporaryDirectory(prefix="submitted-") as folder:
            result.update(_measure(spec, Path(folder)))
        result["ok"] = True
    except BaseException as exc:  # the candidate's failure is the answer, not a crash
        sentence = None
        try:
            from grader.runtime import stubs

            sentence = stubs.explain(exc, "the launcher")
        except Exception:
            pass
        result["error"] = sentence or f"{type(exc).__name__}: {exc}"[:2000]
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
