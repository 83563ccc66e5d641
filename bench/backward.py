"""Benchmark notebook 10's backward pass (delta, the dK/dV kernel and the dQ kernel, from the O and
log-sum-exp of 07's forward as flash_forward.py stores them) against the backward passes of
SDPA's FlashAttention-2 and cuDNN backends, at B 4, H 32, N 4096, float16, for D = 64 and 128,
causal and not, each case timed alternately in one run (grader.runtime.perf.compare_all). SDPA's
backward passes are timed as the notebook times them: `torch.autograd.grad` on the graph of one
forward.

Goals (issue of notebook 10): at least 1.0x SDPA flash's backward in every case, and at least
0.8x cuDNN's at D = 128, causal and not; cuDNN at D = 64 is reported. The kernels, launchers and
tiles are the notebook's cells, read from solutions/10_flash_backward/flash_backward.py.

Where cuDNN stays ahead at D = 128, by Nsight Compute on an H200
(results/2026-11-30-h200-backward-ncu-d128.json): its backward is one persistent kernel, a
program per SM, of three warpgroups (384 threads) issuing wgmma at 168 registers a thread, its SMs
busy 64% of the time. The notebook's dK/dV and dQ kernels run 8 warps at 255 registers a thread,
one program per SM (12.5% occupancy), busy 47% and 70%; dK/dV alone takes longer than cuDNN's
whole main kernel (6.33 against 5.86 ms at base clocks). Triton 3.6 does not close the gap by
itself: with either kernel's loop written `tl.range(..., warp_specialize=True)`, or with
`num_stages=2` or `flatten=True` there, each kernel took within 2% of its time without, at four
tile configurations each (results/2026-11-30-h200-backward-loop-options.json).

Beside them, and no goal: the one-kernel form of FlashAttention-2's CUDA backward and cuDNN's
(bench/_backward_atomic.py), the dK/dV program also adding dS K into a float32 dQ with
`tl.atomic_add` (five products per tile pair instead of seven), then a kernel converting dQ to
float16. Each case times it, the notebook's delta, the zeroing of dQ and the conversion included,
against SDPA flash, cuDNN and the notebook's two kernels in one run ("10 backward, one kernel
with atomic dQ" rows; against "10 backward, two kernels", above 1 means the one kernel is
faster), checks it against the float32 formula after timing, and notes whether dQ has the same
bits in two calls.

With `--configs` (or `make bench BENCH_ARGS=--full`), each kernel is also timed alone with every
tile configuration of DKDV_CANDIDATES and DQ_CANDIDATES, to choose the notebook's
GPU_DKDV_CONFIGS and GPU_DQ_CONFIGS, and the whole one-kernel backward with every one of
ATOMIC_CANDIDATES. `--check-atomic` only checks the one-kernel form against the notebook's two
kernels and float64 autograd at small shapes (in Triton's interpreter on a CPU, also on a GPU)
and exits 1 on a mismatch. On a GPU, from the repository root:

    python bench/backward.py [--configs] [--out build/bench-backward.md]
    python bench/backward.py --check-atomic

Importing this module needs no GPU.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed `grader`
    sys.path.insert(0, str(ROOT))

from bench import _notebook, _report  # noqa: E402

NOTEBOOK = "10_flash_backward"
EXERCISES = ["bwd-delta", "bwd-dkdv", "bwd-dkdv-causal", "bwd-dq"]
SHAPE = (4, 32, 4096)  # B, H, N
HEAD_DIMS = (64, 128)
VS_FLASH = 1.0  # the backward against SDPA flash's, every case
VS_CUDNN = 0.8  # against cuDNN's, at D = 128
# (BLOCK_M, BLOCK_N, num_warps, num_stages) tried for each kernel with --configs
DKDV_CANDIDATES = [
    (32, 128, 4, 3),
    (32, 128, 8, 3),
    (32, 128, 4, 4),
    (32, 128, 4, 5),
    (64, 128, 8, 3),
    (64, 128, 4, 2),
    (32, 64, 4, 3),
    (64, 64, 4, 3),
    (16, 128, 4, 4),
]
DQ_CANDIDATES = [
    (128, 32, 4, 3),
    (128, 32, 8, 3),
    (128, 32, 4, 4),
    (128, 32, 4, 5),
    (128, 64, 8, 3),
    (128, 64, 4, 2),
    (64, 32, 4, 3),
    (64, 64, 4, 3),
    (128, 16, 4, 4),
]
# the same for the one-kernel form with atomic dQ, timed whole (delta, zeroing, conversion)
ATOMIC_CANDIDATES = [
    (32, 64, 4, 3),
    (32, 128, 4, 3),
    (32, 128, 8, 3),
    (64, 64, 4, 3),
    (64, 128, 8, 3),
    (64, 128, 8, 2),
    (32, 128, 8, 2),
    (16, 128, 4, 3),
]
ATOMIC = "10 backward, one kernel with atomic dQ"  # the rows' name
# (B, H, N, D) of --check-atomic: ragged lengths (N not a multiple of the tiles), B and H above 1
CHECK_SHAPES_GPU = [(1, 2, 64, 64), (2, 3, 1000, 64), (1, 2, 1531, 128), (2, 2, 2048, 128)]
CHECK_SHAPES_INTERPRETER = [(1, 2, 64, 16), (1, 2, 80, 32), (2, 1, 45, 64)]


def load():
    """The notebook's imports cell (with flash_forward.py), its four exercise cells with their
    solutions, the backward helpers and the float32 check of a timed call."""
    names = ["DEVICE", "backward_of", "GRAD_TOLERANCE", "attention_gradients", "backward_formula",
             "within_rounding", "matches_formula"]  # fmt: skip
    return _notebook.load(NOTEBOOK, EXERCISES, names)


def measure(configs: bool = False) -> _report.Section:
    """The four cases against SDPA flash and cuDNN, with the goals; with `configs`, each kernel's
    tile configurations too. Needs a GPU."""
    section = _report.Section("backward", "10 · FlashAttention backward against SDPA (float16)")
    b, h, n = SHAPE
    goals = {}
    for d in HEAD_DIMS:
        for causal in (False, True):
            what = f"D {d}{' causal' if causal else ''}"
            goals[d, causal] = (
                section.goal(f"10 backward {what}, as a multiple of SDPA flash's speed", VS_FLASH),
                section.goal(
                    f"10 backward {what}, as a multiple of cuDNN's speed",
                    VS_CUDNN if d == 128 else None,
                ),
            )
    ref = load()
    from bench import _backward_atomic as atomic  # imports triton: after load() chose the mode

    section.note = f"B {b}, H {h}, N {n}; tiles (BLOCK_M, BLOCK_N, warps, stages): " + "; ".join(
        f"D {d}: dK/dV {ref.backward_configs(d)[0]}, dQ {ref.backward_configs(d)[1]}, "
        f"one kernel with atomic dQ {atomic.atomic_config(d)}"
        for d in HEAD_DIMS
    )
    for (d, causal), (vs_flash, vs_cudnn) in goals.items():
        what = f"D {d} {'causal' if causal else 'non-causal'}"
        found = section.attempt(what, _case, section, ref, d, causal)
        if found:
            vs_flash.measured, vs_cudnn.measured = found.get("SDPA flash"), found.get("SDPA cuDNN")
    if configs:
        for d in HEAD_DIMS:
            section.attempt(f"tile configurations at D {d}", _configs, section, ref, d)
    return section


def _inputs(ref, d: int, causal: bool):
    """q, k, v, dO at SHAPE and head dim d; O and lse of 07's forward."""
    import torch

    from grader.runtime import checks

    b, h, n = SHAPE
    gen = checks.generator(checks.new_seed())
    q, k, v, do = (checks.randn((b, h, n, d), gen=gen, dtype=torch.float16) for _ in "qkvo")
    o, lse = ref.attention_forward(q, k, v, causal)
    return q, k, v, do, o, lse


def _case(section, ref, d: int, causal: bool) -> dict[str, float]:
    """Your backward against each SDPA backend that runs here: {backend: speedup}. Then, on the
    same inputs, the one-kernel form with atomic dQ (`_atomic`)."""
    import torch
    from torch.nn.attention import SDPBackend

    from grader.runtime import perf

    b, h, n = SHAPE
    q, k, v, do, o, lse = _inputs(ref, d, causal)
    grads = torch.empty((3, b, h, n, d), device="cuda", dtype=torch.float16)
    delta = torch.empty_like(lse)
    problem = f"B {b}, H {h}, N {n}, D {d}{', causal' if causal else ''}"

    def verify():
        ref.matches_formula(grads, q, k, v, o, do, lse, causal, context="after timing")

    def two_kernels():
        ref.attention_gradients(q, k, v, o, do, lse, grads, causal, delta=delta)

    baselines = {}
    for name, backend in (
        ("SDPA flash", SDPBackend.FLASH_ATTENTION),
        ("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION),
    ):
        try:
            baselines[name] = ref.backward_of(ref.sdpa_backend(backend), q, k, v, do, causal)
        except RuntimeError as exc:  # a backend that cannot run this shape or device
            section.errors.append(f"{problem}: {name} cannot run here: {_report.first_line(exc)}")
    if not baselines:
        raise RuntimeError(f"{problem}: no SDPA backend runs here to compare with")
    named = {f"{name} backward": fn for name, fn in baselines.items()}
    comparisons = perf.compare_all(two_kernels, named, name="10 backward", verify=verify)
    found = {}
    work = ref.backward_flops(b, h, n, d, causal)
    for name, c in zip(baselines, comparisons, strict=True):
        if c.flags:
            raise RuntimeError(f"{problem}: these times cannot be trusted: {'; '.join(c.flags)}")
        section.rows.append(_report.row_from(c, "10 backward", problem, work, "TFLOP/s"))
        found[name] = c.speedup
    inputs = (q, k, v, do, o, lse)
    named["10 backward, two kernels"] = two_kernels
    section.attempt(f"{problem}, {ATOMIC}", _atomic, section, ref, inputs, causal, named, work)
    return found


def _atomic(section, ref, inputs, causal: bool, baselines: dict, work: float) -> None:
    """The one-kernel backward with atomic dQ (bench/_backward_atomic.py), a measured alternative
    and no goal: timed against `baselines` (SDPA's and the notebook's two kernels, on the same
    `inputs`) in one run, a row each; its output checked against the float32 formula after
    timing, as the two kernels' is, and the bits of its dQ compared across two calls (float32
    atomics add in any order)."""
    import torch

    from bench import _backward_atomic as atomic
    from grader.runtime import perf

    q, k, v, do, o, lse = inputs
    b, h, n, d = q.shape
    problem = f"B {b}, H {h}, N {n}, D {d}{', causal' if causal else ''}"
    mine = torch.empty((3, b, h, n, d), device="cuda", dtype=torch.float16)
    delta = torch.empty_like(lse)
    dq_acc = torch.empty(q.shape, device="cuda", dtype=torch.float32)

    def run():
        atomic.attention_gradients_atomic(
            ref, q, k, v, o, do, lse, mine, causal, delta=delta, dq_acc=dq_acc
        )

    def verify():
        ref.matches_formula(mine, q, k, v, o, do, lse, causal, context=f"{ATOMIC}, after timing")

    run()
    first = mine[0].clone()
    run()
    differ = (first.view(torch.int16) != mine[0].view(torch.int16)).float().mean().item()
    note = (
        "dQ: the same bits in two calls"
        if differ == 0
        else f"dQ: {differ:.1%} of its elements differ between two calls"
    )
    for c in perf.compare_all(run, baselines, name=ATOMIC, verify=verify):
        if c.flags:
            raise RuntimeError(f"{problem}: these times cannot be trusted: {'; '.join(c.flags)}")
        section.rows.append(_report.row_from(c, ATOMIC, problem, work, "TFLOP/s", note))


def _configs(section, ref, d: int) -> None:
    """Each kernel alone with every candidate tile configuration, and the whole one-kernel
    backward with atomic dQ with each of its own, non-causal and causal: a row per configuration
    that compiles and is right, an error line for one that does not."""
    import torch

    from bench import _backward_atomic as atomic

    b, h, n = SHAPE
    for causal in (False, True):
        q, k, v, do, o, lse = _inputs(ref, d, causal)
        expected, slack = ref.backward_formula(q, k, v, o, do, lse, causal)
        delta = ref.attention_delta(o, do, torch.empty_like(lse))
        dkdv = torch.empty((2, b, h, n, d), device="cuda", dtype=torch.float16)
        dq = torch.empty_like(q)
        problem = f"B {b}, H {h}, N {n}, D {d}{', causal' if causal else ''}"
        work = ref.backward_flops(b, h, n, d, causal)
        runs = [
            ("dK/dV", ref.attention_dkdv, dkdv, 1, DKDV_CANDIDATES, 8 / 10),
            ("dQ", ref.attention_dq, dq, 0, DQ_CANDIDATES, 6 / 10),
        ]
        for kernel, launcher, out, part, candidates, share in runs:
            want, room = (t[1:] if part else t[0] for t in (expected, slack))
            run = functools.partial(launcher, q, k, v, do, lse, delta, out, causal)
            for config in candidates:
                label = _label(kernel, config)
                check = functools.partial(ref.within_rounding, out, want, room, kernel)
                call = functools.partial(run, config=config)
                _timed_config(section, problem, label, call, check, share * work)
        # the whole backward: delta, zeroing dQ, the one kernel and the conversion
        grads = torch.empty((3, b, h, n, d), device="cuda", dtype=torch.float16)
        scratch = dict(delta=torch.empty_like(lse), dq_acc=torch.empty_like(q, dtype=torch.float32))
        run = functools.partial(
            atomic.attention_gradients_atomic, ref, q, k, v, o, do, lse, grads, causal, **scratch
        )
        check = functools.partial(ref.within_rounding, grads, expected, slack, ATOMIC)
        for config in ATOMIC_CANDIDATES:
            label = _label("one kernel, atomic dQ", config)
            call = functools.partial(run, config=config)
            _timed_config(section, problem, label, call, check, work)


def _label(kernel: str, config) -> str:
    """'dK/dV 32x128 w4 s3' for a (BLOCK_M, BLOCK_N, num_warps, num_stages) config."""
    return f"{kernel} {'x'.join(map(str, config[:2]))} w{config[2]} s{config[3]}"


def _timed_config(section, problem: str, label: str, call, check, work: float) -> None:
    """call() once and check() its output, then a row of its time and of `work` FLOPs per
    second; an error line instead if it does not compile, run or pass."""
    from grader.runtime import timing

    try:
        call()
        check()
    except Exception as exc:  # noqa: BLE001 - out of shared memory, wrong: reported
        section.errors.append(f"{problem}, {label}: {_report.first_line(exc)}")
        return
    t = timing.bench(call)
    rate = t.per_second(work) / 1e12
    section.rows.append(_report.Row(label, problem, rate=rate, unit="TFLOP/s", ms=t.median_ms))


def check_atomic() -> int:
    """The one-kernel backward with atomic dQ against the notebook's two kernels and float64
    autograd of the eager formula, causal and not, at CHECK_SHAPES_* (the interpreter's on a CPU):
    a line per case; 1 if any fails. A case passes if it is within the float32 formula's rounding
    room (matches_formula, as the timed calls are checked) and its largest error against float64
    exceeds the two kernels' by at most one float16 rounding of the largest gradient."""
    import torch

    from grader.runtime import checks

    ref = load()
    from bench import _backward_atomic as atomic  # imports triton: after load() chose the mode

    print(f"one kernel with atomic dQ against the two kernels, on {ref.DEVICE.describe()}")
    failed = 0
    for b, h, n, d in ref.DEVICE.pick(gpu=CHECK_SHAPES_GPU, interpreter=CHECK_SHAPES_INTERPRETER):
        for causal in (False, True):
            gen = checks.generator(checks.VISIBLE_SEED)
            q, k, v, do = (checks.randn((b, h, n, d), gen=gen, dtype=torch.float16) for _ in "qkvd")
            o, lse = ref.attention_forward(q, k, v, causal)
            two, one = (torch.empty((3, b, h, n, d), device=q.device, dtype=q.dtype) for _ in "21")
            ref.attention_gradients(q, k, v, o, do, lse, two, causal)
            atomic.attention_gradients_atomic(ref, q, k, v, o, do, lse, one, causal)
            first = one[0].clone()
            atomic.attention_gradients_atomic(ref, q, k, v, o, do, lse, one, causal)
            same = torch.equal(first.view(torch.int16), one[0].view(torch.int16))
            args = (t.double() for t in (q, k, v, do))
            exact = torch.stack(ref.attention_backward_reference(*args, causal)[:3])
            errors = [(g.double() - exact).abs().amax(dim=(1, 2, 3, 4)) for g in (one, two)]
            room = 2.0**-11 * exact.abs().amax(dim=(1, 2, 3, 4))
            verdict = "ok"
            try:
                ref.matches_formula(one, q, k, v, o, do, lse, causal, context=ATOMIC)
            except checks.KernelCheckError as exc:
                verdict = f"FAILED, not within the formula's rounding: {_report.first_line(exc)}"
            if bool((errors[0] > errors[1] + room).any()):
                verdict = "FAILED, further from float64 than the two kernels by more than rounding"
            failed += verdict != "ok"
            print(
                f"B {b}, H {h}, N {n}, D {d}, {'causal' if causal else 'non-causal'}: {verdict}; "
                "max |error| against float64 (dQ, dK, dV): one kernel "
                + ", ".join(f"{e:.1e}" for e in errors[0].tolist())
                + ", two kernels "
                + ", ".join(f"{e:.1e}" for e in errors[1].tolist())
                + f"; max |one - two| {(one.double() - two.double()).abs().max():.1e}"
                + f"; dQ bits {'the same' if same else 'not the same'} in two calls"
            )
    print(f"{failed} case(s) failed" if failed else "all cases passed")
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", action="store_true", help="time every tile configuration")
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    parser.add_argument(
        "--check-atomic",
        action="store_true",
        help="only check the one-kernel form with atomic dQ at small shapes (CPU or GPU)",
    )
    args = parser.parse_args(argv)
    if args.check_atomic:
        return check_atomic()
    return _report.run_alone("bench/backward.py", lambda: measure(configs=args.configs), args.out)


if __name__ == "__main__":
    sys.exit(main())
