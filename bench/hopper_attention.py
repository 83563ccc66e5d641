"""Benchmark notebook 09's attention (version 5: 07's kernel on tensor descriptors, its D = 128
loop warp-specialized on sm_90) against SDPA's cuDNN backend, at B 4, H 32, N 4096, float16,
for D = 64 and 128, causal and not, each pair timed alternately in one run
(grader.runtime.perf.compare, as the speed cells do); SDPA's FlashAttention-2 backend is timed
beside it, for reference.

Target (issue of notebook 09): 0.9x cuDNN at D = 128, causal and not; the other cases are
reported. The kernel, its launcher and its tiles are the notebook's cells, read from
solutions/09_hopper/hopper.py. Needs an sm_90 GPU; on an older one the section says so. On a GPU,
from the repository root:

    python bench/hopper_attention.py [--out build/bench-hopper-attention.md]

Importing this module needs no GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed `grader`
    sys.path.insert(0, str(ROOT))

from bench import _notebook, _report  # noqa: E402

NOTEBOOK = "09_hopper"
SHAPE = (4, 32, 4096)  # B, H, N: 07's
HEAD_DIMS = (64, 128)
TARGET = 0.9  # version 5 against cuDNN at D = 128
TOLERANCE = 2e-3  # of float16 outputs against cuDNN's, as 07's speed cells allow


def load():
    """The notebook's imports cell (with 05's gemm.py) and version 5's cells."""
    return _notebook.load(NOTEBOOK, names=["HOPPER", "attention_tma", "attention_tiles"])


def measure() -> _report.Section:
    """Version 5 against cuDNN in the four cases. Needs a GPU."""
    from grader.runtime import device

    section = _report.Section("hopper_attention", "09 · attention on descriptors")
    targets = {
        (d, causal): section.goal(
            f"09 v5 D {d}{' causal' if causal else ''}, as a multiple of cuDNN's speed",
            TARGET if d == 128 else None,
        )
        for d in HEAD_DIMS
        for causal in (False, True)
    }
    if not device.current().supports("sm_90"):
        section.errors.append(f"needs an sm_90 GPU: {device.current().describe()}")
        return section
    ref = load()
    section.note = "v5: the notebook's tiles, " + "; ".join(
        f"D {d}: {ref.attention_tiles(d)}" for d in HEAD_DIMS
    )
    for (d, causal), goal in targets.items():
        what = f"v5 D {d} {'causal' if causal else 'non-causal'}"
        goal.measured = section.attempt(what, _case, section, ref, d, causal)
    return section


def _case(section, ref, d: int, causal: bool) -> float:
    import torch

    from grader.runtime import attention, checks, perf

    b, h, n = SHAPE
    gen = checks.generator(checks.new_seed())
    q, k, v = (checks.randn((b, h, n, d), gen=gen, dtype=torch.float16) for _ in "qkv")
    mine = torch.empty_like(q)
    cudnn_sdpa, flash_sdpa = attention.sdpa("CUDNN_ATTENTION"), attention.sdpa("FLASH_ATTENTION")
    want = cudnn_sdpa(q, k, v, causal)  # the inputs stay as they are
    problem = f"B {b}, H {h}, N {n}, D {d}{', causal' if causal else ''}"

    def verify():
        checks.compare(mine, want, rtol=TOLERANCE, atol=TOLERANCE, context="after timing")

    cudnn, flash = perf.compare_all(
        lambda: ref.attention_tma(q, k, v, mine, causal=causal),
        {
            "SDPA cuDNN": lambda: cudnn_sdpa(q, k, v, causal),
            "SDPA flash": lambda: flash_sdpa(q, k, v, causal),
        },
        name="09 v5",
        verify=verify,
    )
    if cudnn.flags:
        raise RuntimeError(f"{problem}: these times cannot be trusted: {'; '.join(cudnn.flags)}")
    for c in (cudnn, flash):
        section.rows.append(
            _report.row_from(
                c, "09 v5 descriptors", problem, attention.flops(b, h, n, d, causal), "TFLOP/s"
            )
        )
    return cudnn.speedup


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    return _report.run_alone("bench/hopper_attention.py", measure, args.out)


if __name__ == "__main__":
    sys.exit(main())
