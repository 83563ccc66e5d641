"""Host time per call of the course's reference launchers (05's tuned matmul, 03's softmax, 07's
FlashAttention) beside torch's own call for the same operation (torch.mm, torch.softmax, SDPA),
with each one's GPU time: a call whose host time exceeds its GPU time is host-bound.

Host time is grader.runtime.timing.host_time: batches of back-to-back calls issued while the GPU
is still busy with matrix products queued before them (checked by an event that must still be
pending once the batch is issued), so no call waits for the GPU; the median over the batches,
divided by the calls per batch. GPU time is grader.runtime.timing.bench (CUDA events, L2 flushed).

    python bench/host.py [--out build/bench-host.md]

Importing this module needs no GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed `grader`
    sys.path.insert(0, str(ROOT))

from bench import _report, attention, matmul, softmax  # noqa: E402

# goal: host time of one call of 05's tuned matmul, once tuned, at most this (microseconds)
MATMUL_HOST_US = 25.0
MATMUL_SIZES = [512, 2048]  # square, float16: a problem shorter than the host time, and 05's
SOFTMAX_SHAPE = softmax.SHAPES[0]
ATTENTION_SHAPE = attention.SHAPES[0]  # (B, H, N, D), float16, not causal
METHOD = (
    "Host time: batches of 100 back-to-back calls issued while the GPU is still busy with work "
    "queued before them (an event after that work is still pending when the batch is issued), "
    "median of 5 batches, per call. GPU time: grader.runtime.timing.bench (CUDA events, L2 "
    "flushed before each call)."
)


def _pair(section, kernel, problem, mine, baseline_name, theirs) -> tuple[float, float]:
    """One row: host us per call of `mine` and of `theirs`, and their GPU times."""
    from grader.runtime import timing

    host_mine, host_theirs = timing.host_time(mine), timing.host_time(theirs)
    gpu_mine, gpu_theirs = timing.bench(mine), timing.bench(theirs)
    bound = "host-bound" if host_mine.us > gpu_mine.median_ms * 1e3 else "GPU-bound"
    section.rows.append(
        _report.Row(
            kernel,
            problem,
            baseline_name,
            host_theirs.us / host_mine.us,
            host_mine.us,
            "us host/call",
            ms=host_mine.us / 1e3,
            baseline_ms=host_theirs.us / 1e3,
            note=(
                f"{baseline_name}: {host_theirs.us:.1f} us host/call; GPU time per call "
                f"{gpu_mine.median_ms * 1e3:.1f} us vs {gpu_theirs.median_ms * 1e3:.1f} us; "
                f"{kernel} is {bound} here"
            ),
        )
    )
    return host_mine.us, gpu_mine.median_ms * 1e3


def measure() -> _report.Section:
    """Every pair of launchers, one row each; the goal on 05's host time. Needs a GPU."""
    section = _report.Section(
        "host", "Host time per call: the reference launchers against torch's", note=METHOD
    )
    goal = section.goal(
        f"05 tuned matmul: host time per call, float16 {MATMUL_SIZES[-1]}^3 (us)",
        MATMUL_HOST_US,
        unit=" us",
        higher_is_better=False,
    )
    for n in MATMUL_SIZES:
        got = section.attempt(f"05 matmul {n}", _matmul, section, n)
        if got and n == MATMUL_SIZES[-1]:
            goal.measured = got[0]
            goal.detail = f"GPU time per call {got[1]:.1f} us"
    section.attempt("03 softmax", _softmax, section)
    section.attempt("07 attention", _attention, section)
    return section


def _matmul(section, n: int) -> tuple[float, float]:
    import torch

    sys.path.insert(0, str(ROOT / "solutions" / "05_autotuning"))
    import gemm

    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    out, theirs = torch.empty_like(a), torch.empty_like(a)
    tuned = gemm.Tuned(matmul.reference_space())
    tuned(a, b, out)  # tunes
    return _pair(
        section,
        "05 tuned matmul (gemm.Tuned)",
        f"{n}x{n}x{n} float16",
        lambda: tuned(a, b, out),
        "torch.mm",
        lambda: torch.mm(a, b, out=theirs),
    )


def _softmax(section) -> None:
    import torch

    ref = softmax.load()
    x = torch.randn(*SOFTMAX_SHAPE, device="cuda")
    out = torch.empty_like(x)
    ref.softmax(x, out)
    _pair(
        section,
        "03 softmax",
        f"{SOFTMAX_SHAPE[0]} x {SOFTMAX_SHAPE[1]} float32",
        lambda: ref.softmax(x, out),
        "torch.softmax",
        lambda: torch.softmax(x, dim=1),
    )


def _attention(section) -> None:
    import torch

    ref = attention.load_reference()
    b, h, n, d = ATTENTION_SHAPE
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.empty_like(q)
    ref.flash_attention(q, k, v, out)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    _pair(
        section,
        "07 FlashAttention",
        f"B, H, N, D = {b}, {h}, {n}, {d} float16",
        lambda: ref.flash_attention(q, k, v, out),
        "SDPA",
        lambda: sdpa(q, k, v),
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    return _report.run_alone("bench/host.py", measure, args.out)


if __name__ == "__main__":
    sys.exit(main())
