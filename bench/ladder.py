"""Benchmark notebook 04's matmul ladder against cuBLAS (torch.matmul), float16: v0 naive (one
program per output element, at the notebook's small NAIVE_N), then at LADDER_N v1 blocked and
v2 grouped (the notebook's VERSIONS) and v3, the launcher's pipelined defaults (DEFAULT_CONFIG);
with --full also the notebook's sweep of num_warps x num_stages and its best, "v3 pipelined".
05's autotuned matmul joins the ladder from bench/matmul.py in the report.

The kernels, launchers, configurations and sizes are read from solutions/04_matmul/matmul.py
(the `matmul-kernel` exercise cell and the cell defining `matmul_naive`). On a GPU, from the
repository root:

    python bench/ladder.py [--out build/bench-ladder.md] [--full]

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

NOTEBOOK = "04_matmul"
MAX_ERROR = 1e-2  # largest |difference| to cuBLAS, relative to its largest |element|, float16
V3 = "v3 launcher defaults"  # the notebook's graded configuration; placed on the roofline


def load():
    """The notebook's blocked kernel, its launcher and defaults, and the naive kernel."""
    return _notebook.load(NOTEBOOK, ["matmul-kernel"], ["matmul_naive"])


def describe(cfg: dict) -> str:
    return (
        f"{cfg['block_m']}x{cfg['block_n']}x{cfg['block_k']} G{cfg['group_m']} "
        f"w{cfg['num_warps']} s{cfg['num_stages']}"
    )


def measure(full: bool = False) -> _report.Section:
    """Every version against cuBLAS at its size. Needs a GPU."""
    import torch

    from grader.runtime import device

    section = _report.Section("ladder", "04 · The matmul ladder (float16)")
    section.data["ladder"] = []
    ref = load()
    at = {"DEVICE": device.current()}
    naive_n = _notebook.value(NOTEBOOK, "NAIVE_N", at)
    ladder_n = _notebook.value(NOTEBOOK, "LADDER_N", at)
    versions = dict(_notebook.value(NOTEBOOK, "VERSIONS"))
    versions[V3] = ref.DEFAULT_CONFIG[torch.float16]
    section.attempt(
        "v0 naive",
        _versions,
        section,
        naive_n,
        {"v0 naive": None},
        lambda a, b, c, cfg: ref.matmul_naive(a, b, c),
    )
    section.attempt(
        "v1-v3",
        _versions,
        section,
        ladder_n,
        versions,
        lambda a, b, c, cfg: ref.matmul(a, b, c, **cfg),
    )
    if full:
        section.attempt("v3 sweep", _sweep, section, ref, ladder_n, versions["v2 grouped"])
    return section


def _problem(n):
    import torch

    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    return a, b, torch.empty(n, n, device="cuda", dtype=torch.float16)


def _versions(section, n, versions: dict, launch) -> None:
    """cuBLAS, then each version with `launch(a, b, c, config)`, at size n."""
    import torch

    from grader.runtime import timing

    a, b, c = _problem(n)
    theirs = torch.empty_like(c)
    flops, moved = 2 * n**3, 3 * n * n * 2
    cublas = timing.bench(lambda: torch.matmul(a, b, out=theirs))
    section.data["ladder"].append(_entry(f"cuBLAS ({n})", n, cublas, None))
    for name, cfg in versions.items():
        launch(a, b, c, cfg)
        error = float((c.float() - theirs.float()).abs().max() / theirs.float().abs().max())
        if error > MAX_ERROR:
            raise AssertionError(f"{name} differs from cuBLAS by {error:.1e} of its largest value")
        t = timing.bench(lambda cfg=cfg: launch(a, b, c, cfg))
        section.data["ladder"].append(_entry(f"{name} ({n})", n, t, cublas))
        section.rows.append(
            _report.Row(
                f"04 {name}",
                f"{n}^3",
                "cuBLAS",
                cublas.median_ms / t.median_ms,
                t.per_second(flops) / 1e12,
                "TFLOP/s",
                t.median_ms,
                cublas.median_ms,
                describe(cfg) if cfg else "one program per element",
            )
        )
        if name == V3:
            seconds = t.median_ms * 1e-3
            section.points.append(_report.Point("04 matmul v3", flops, moved, seconds, "fp16"))
        print(f"{name} ({n}): {t.per_second(flops) / 1e12:.1f} TFLOP/s", flush=True)


def _entry(label, n, t, cublas) -> dict:
    return {
        "label": label,
        "n": n,
        "seconds": t.median_ms * 1e-3,
        "tflops": t.per_second(2 * n**3) / 1e12,
        "ratio": cublas.median_ms / t.median_ms if cublas else None,
    }


def _sweep(section, ref, n, base: dict) -> None:
    """The notebook's num_warps x num_stages sweep on v2's tiles; the best joins the ladder."""
    import torch
    import triton

    from grader.runtime import timing

    a, b, c = _problem(n)
    theirs = torch.empty_like(c)
    cublas = timing.bench(lambda: torch.matmul(a, b, out=theirs))
    best = None
    for w in _notebook.value(NOTEBOOK, "WARPS"):
        for s in _notebook.value(NOTEBOOK, "STAGES"):
            cfg = {**base, "num_warps": w, "num_stages": s}
            try:
                t = timing.bench(lambda cfg=cfg: ref.matmul(a, b, c, **cfg))
            except triton.runtime.OutOfResources as exc:  # does not fit: noted, as in 04
                section.rows.append(
                    _report.Row("04 v3 sweep", f"{n}^3", note=f"{describe(cfg)}: {exc}")
                )
                continue
            section.rows.append(
                _report.Row(
                    "04 v3 sweep",
                    f"{n}^3",
                    "cuBLAS",
                    cublas.median_ms / t.median_ms,
                    t.per_second(2 * n**3) / 1e12,
                    "TFLOP/s",
                    t.median_ms,
                    cublas.median_ms,
                    describe(cfg),
                )
            )
            if best is None or t.median_ms < best[1].median_ms:
                best = (cfg, t)
    if best:
        entry = _entry(f"v3 pipelined, best of sweep ({n})", n, best[1], cublas)
        section.data["ladder"].append(entry | {"note": describe(best[0])})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    parser.add_argument("--full", action="store_true", help="the num_warps x num_stages sweep")
    args = parser.parse_args(argv)
    return _report.run_alone("bench/ladder.py", lambda: measure(args.full), args.out)


if __name__ == "__main__":
    sys.exit(main())
