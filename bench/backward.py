"""Benchmark notebook 10's backward pass (delta, the dK/dV kernel and the dQ kernel, from the O and
log-sum-exp of 07's forward as flash_forward.py stores them) against the backward passes of
SDPA's FlashAttention-2 and cuDNN backends, at B 4, H 32, N 4096, float16, for D = 64 and 128,
causal and not, each case timed alternately in one run (grader.runtime.perf.compare_all). SDPA's
backward passes are timed as the notebook times them: `torch.autograd.grad` on the graph of one
forward.

Goals (issue of notebook 10): at least 1.0x SDPA flash's backward in every case, and at least
0.8x cuDNN's at D = 128, causal and not; cuDNN at D = 64 is reported. The kernels, launchers and
tiles are the notebook's cells, read from solutions/10_flash_backward/flash_backward.py. With
`--configs` (or `make bench BENCH_ARGS=--full`), each kernel is also timed alone with every tile
configuration of DKDV_CANDIDATES and DQ_CANDIDATES, to choose the notebook's GPU_DKDV_CONFIGS and
GPU_DQ_CONFIGS. On a GPU, from the repository root:

    python bench/backward.py [--configs] [--out build/bench-backward.md]

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
    section.note = f"B {b}, H {h}, N {n}; tiles (BLOCK_M, BLOCK_N, warps, stages): " + "; ".join(
        f"D {d}: dK/dV {ref.backward_configs(d)[0]}, dQ {ref.backward_configs(d)[1]}"
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
    """Your backward against each SDPA backend that runs here: {backend: speedup}."""
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
    comparisons = perf.compare_all(
        lambda: ref.attention_gradients(q, k, v, o, do, lse, grads, causal, delta=delta),
        {f"{name} backward": fn for name, fn in baselines.items()},
        name="10 backward",
        verify=verify,
    )
    found = {}
    for name, c in zip(baselines, comparisons, strict=True):
        if c.flags:
            raise RuntimeError(f"{problem}: these times cannot be trusted: {'; '.join(c.flags)}")
        work = ref.backward_flops(b, h, n, d, causal)
        section.rows.append(_report.row_from(c, "10 backward", problem, work, "TFLOP/s"))
        found[name] = c.speedup
    return found


def _configs(section, ref, d: int) -> None:
    """Each kernel alone with every candidate tile configuration, non-causal and causal: a row per
    configuration that compiles and is right, an error line for one that does not."""
    import torch

    from grader.runtime import timing

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
                label = f"{kernel} {'x'.join(map(str, config[:2]))} w{config[2]} s{config[3]}"
                call = functools.partial(run, config=config)
                try:
                    call()
                    ref.within_rounding(out, want, room, kernel)
                except Exception as exc:  # noqa: BLE001 - out of shared memory, wrong: reported
                    section.errors.append(f"{problem}, {label}: {_report.first_line(exc)}")
                    continue
                t = timing.bench(call)
                section.rows.append(
                    _report.Row(
                        label,
                        problem,
                        rate=t.per_second(share * work) / 1e12,
                        unit="TFLOP/s",
                        ms=t.median_ms,
                    )  # fmt: skip
                )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", action="store_true", help="time every tile configuration")
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    return _report.run_alone("bench/backward.py", lambda: measure(configs=args.configs), args.out)


if __name__ == "__main__":
    sys.exit(main())
