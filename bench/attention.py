"""Benchmark the course's FlashAttention kernel against PyTorch's SDPA flash and cuDNN backends.

The kernel is not copied here: `load_reference()` imports the two exercise cells (grade_ids
`flash-attention-kernel`, the non-causal kernel with its loop, and `flash-attention-causal`, the
causal kernel) of solutions/07_flash_attention/flash_attention.py through bench/_notebook.py,
with the given cells that define the launcher (its Checks cell) and the reference it reads, so
the notebook is the one definition of the kernels, their launcher and its default tile
configurations (GPU_CONFIGS).

On a GPU, from the repository root:

    python bench/attention.py --out build/bench-attention.md

For every shape, causal and not, it times SDPA's flash and cuDNN backends (each skipped with the
reason when unavailable) and the kernel with its default configuration and with every candidate
in CANDIDATES; each configuration is first checked against SDPA's output and left out if wrong or
if it does not compile (for instance, too much shared memory). It prints and writes a markdown
table of TFLOP/s and ratios, then one table per shape of every configuration, so that the best
configuration per head dim can be read off one run and copied into GPU_CONFIGS. `measure()` is
what bench/report.py runs: the default configuration on SHAPES (the goal: at least 1.25x SDPA
flash, geometric mean), the speed cells' thresholds (against SDPA flash at D=64 and 128, causal
and not; against naive eager attention at D=64, and at D=128 the ratio reported without a target,
as the cell shows it), each with the bound of the kernel's loop (bench/_attention_bound.py), and
a sweep over sequence lengths for the plot.
Importing this module needs no GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed `grader`
    sys.path.insert(0, str(ROOT))

from bench import _notebook, _report  # noqa: E402

NOTEBOOK = "07_flash_attention"
CELL_IDS = ["flash-attention-kernel", "flash-attention-causal"]  # the loop's, the causal kernel's
# the given cells: the launcher's (the Checks cell), and the reference's that the Checks cell reads
GIVEN = ["attention_reference", "flash_attention"]

# (B, H, N, D) of the benchmark; each runs causal and not, in float16
SHAPES = [(4, 16, 1024, 64), (4, 16, 4096, 64), (4, 16, 4096, 128), (2, 16, 16384, 128)]
# (BLOCK_M, BLOCK_N, num_warps, num_stages) tried on top of the notebook's default
CANDIDATES = [
    (128, 64, 4, 3),
    (128, 64, 4, 4),
    (128, 64, 8, 3),
    (128, 64, 8, 4),
    (128, 128, 8, 2),
    (128, 128, 8, 3),
    (128, 32, 4, 4),
    (64, 64, 4, 3),
]
# the sequence-length sweep of the report's plot: B * N = 16384 tokens, 16 heads, float16
SWEEP_LENGTHS = [1024, 2048, 4096, 8192, 16384]
SWEEP_TOKENS, SWEEP_HEADS = 16384, 16
VS_FLASH = 1.25  # goal: geometric mean of the default configuration's speed over SDPA flash's


def reference_source() -> str:
    """The notebook's exercise cells with their solutions and its launcher, as Python source."""
    return _notebook.module_source(NOTEBOOK, CELL_IDS, GIVEN)


def load_reference(directory: Path = _notebook.MODULE_DIR):
    """Import the notebook's kernel and launcher cells as a module (Triton reads a kernel's source
    from a file)."""
    return _notebook.load(NOTEBOOK, CELL_IDS, GIVEN, directory=directory)


def bench_shape(ref, b, h, n, d, causal, configs):
    """TFLOP/s of the baselines and of each configuration (None with a reason when it failed)."""
    import torch

    from grader.runtime import attention as attn
    from grader.runtime import checks, timing

    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    work = attn.flops(b, h, n, d, causal)
    rows, expected = {}, None
    for name, backend in (("SDPA flash", "FLASH_ATTENTION"), ("SDPA cuDNN", "CUDNN_ATTENTION")):
        fn = attn.sdpa(backend)
        try:
            got = fn(q, k, v, causal)
        except Exception as exc:  # noqa: BLE001 - a backend missing here is reported, not fatal
            rows[name] = (None, _report.first_line(exc))
            continue
        expected = got if expected is None else expected
        t = timing.bench(lambda fn=fn: fn(q, k, v, causal))
        rows[name] = (t.per_second(work) / 1e12, "")
    if expected is None:
        raise RuntimeError("neither SDPA backend runs here: nothing to check the kernel against")
    out = torch.empty_like(q)
    for config in configs:
        label = "config {}x{} w{} s{}".format(*config)
        try:
            ref.flash_attention(q, k, v, out, causal=causal, config=config)
            checks.compare(out, expected, rtol=2e-3, atol=2e-3, name="out")
        except Exception as exc:  # noqa: BLE001 - out of shared memory, wrong, ...: reported
            rows[label] = (None, _report.first_line(exc))
            continue
        t = timing.bench(
            lambda c=config: ref.flash_attention(q, k, v, out, causal=causal, config=c)
        )
        rows[label] = (t.per_second(work) / 1e12, "")
    return rows


def ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def measure_case(ref, b, h, n, d, causal, candidates) -> dict:
    """One shape, causal or not: TFLOP/s of SDPA flash and cuDNN, of the notebook's default
    configuration ('yours') and of the best of it and `candidates`."""
    default = ref.attention_config(n, d, False)
    configs = [default] + [c for c in candidates if c != default]
    rows = bench_shape(ref, b, h, n, d, causal, configs)
    default_label = "config {}x{} w{} s{}".format(*default)
    timed = {k: v[0] for k, v in rows.items() if k.startswith("config") and v[0]}
    best = max(timed, key=timed.get) if timed else None
    return {
        "b": b,
        "h": h,
        "n": n,
        "d": d,
        "causal": causal,
        "rows": rows,
        "flash": rows["SDPA flash"][0],
        "cudnn": rows["SDPA cuDNN"][0],
        "default": default_label[7:],
        "yours": rows[default_label][0],
        "best": best[7:] if best else None,
        "best_rate": timed.get(best),
    }


def report(ref, shapes, candidates) -> str:
    import torch

    lines = [
        f"# FlashAttention forward: the course's kernel vs SDPA ({torch.cuda.get_device_name()})",
        "",
        f"torch {torch.__version__}, triton {__import__('triton').__version__}; float16; "
        "TFLOP/s = 4 B H N^2 D (half for causal) / median time.",
        "",
        "| B, H, N, D | causal | SDPA flash | SDPA cuDNN | default config | TFLOP/s "
        "| vs flash | vs cuDNN | best config | TFLOP/s | vs flash | vs cuDNN |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    details, vs_flash_default, vs_flash_best = [], [], []
    for b, h, n, d in shapes:
        for causal in (False, True):
            case = measure_case(ref, b, h, n, d, causal, candidates)
            flash, cudnn, mine = case["flash"], case["cudnn"], case["yours"]
            best, best_rate = case["best"], case["best_rate"]
            if flash and mine:
                vs_flash_default.append(mine / flash)
            if flash and best_rate:
                vs_flash_best.append(best_rate / flash)
            fmt = lambda x: f"{x:.0f}" if x else "n/a"  # noqa: E731
            lines.append(
                f"| {b}, {h}, {n}, {d} | {causal} | {fmt(flash)} | {fmt(cudnn)} | "
                f"{case['default']} | {fmt(mine)} | {ratio(mine, flash)} | "
                f"{ratio(mine, cudnn)} | {best or 'n/a'} | {fmt(best_rate)} | "
                f"{ratio(best_rate, flash)} | {ratio(best_rate, cudnn)} |"
            )
            details.append(f"\n## {b}, {h}, {n}, {d}, causal={causal}\n")
            details.append("| variant | TFLOP/s | vs flash | note |\n|---|---|---|---|")
            for name, (rate, note) in case["rows"].items():
                details.append(f"| {name} | {fmt(rate)} | {ratio(rate, flash)} | {note} |")
            print(lines[-1], flush=True)
    for what, values in (("default", vs_flash_default), ("best", vs_flash_best)):
        if values:
            lines.append(
                f"\nGeometric mean vs SDPA flash, {what} configuration: "
                f"{statistics.geometric_mean(values):.2f}x over {len(values)} cases."
            )
    return "\n".join(lines + details) + "\n"


def measure(full: bool = False) -> _report.Section:
    """bench/report.py's section: SHAPES with the default configuration (and, with `full`, every
    candidate), the goal against SDPA flash, the ratio to cuDNN at D=128, and the sweep over
    SWEEP_LENGTHS for the plot. Needs a GPU."""
    from tqdm.auto import tqdm

    from grader.runtime import attention as attn

    section = _report.Section("attention", "07 · FlashAttention forward against SDPA (float16)")
    ref = load_reference()
    vs_flash = section.goal(
        f"07 FlashAttention: speed / SDPA flash's, geometric mean over {len(SHAPES)} shapes, "
        "causal and not",
        VS_FLASH,
    )
    vs_cudnn = section.goal(
        "07 FlashAttention: speed / SDPA cuDNN's at D=128, geometric mean", None
    )
    measured = {}
    for b, h, n, d in SHAPES:
        for causal in (False, True):
            case = section.attempt(
                f"B, H, N, D = {b}, {h}, {n}, {d}, causal={causal}",
                measure_case,
                ref,
                b,
                h,
                n,
                d,
                causal,
                CANDIDATES if full else [],
            )
            if case:
                measured[b, h, n, d, causal] = case
                section.rows += _case_rows(case)
    cases = list(measured.values())
    flash = [c["yours"] / c["flash"] for c in cases if c["yours"] and c["flash"]]
    cudnn = [c["yours"] / c["cudnn"] for c in cases if c["d"] == 128 and c["yours"] and c["cudnn"]]
    vs_flash.measured = _report.geomean(flash)
    vs_flash.detail = f"over {len(flash)} of {2 * len(SHAPES)} cases"
    vs_cudnn.measured = _report.geomean(cudnn)
    vs_cudnn.detail = f"over {len(cudnn)} cases"
    for c in cases:
        if (c["b"], c["h"], c["n"], c["d"], c["causal"]) == (4, 16, 4096, 128, False) and c[
            "yours"
        ]:
            work = attn.flops(4, 16, 4096, 128)
            moved = 8 * 4 * 16 * 4096 * 128  # q, k, v read and out written, 2 bytes each
            section.points.append(
                _report.Point("07 attention", work, moved, work / (c["yours"] * 1e12))
            )
    needs = _notebook.value(NOTEBOOK, "SPEED_NEEDS")  # the speed cells' thresholds
    graded_at = _notebook.value(NOTEBOOK, "NAIVE_GRADED_AT")
    speed_n = (*_notebook.value(NOTEBOOK, "SPEED_BHN"),)
    for d in (64, 128):
        goal = section.goal(
            f"07 FlashAttention: speed / SDPA flash's at D={d}, the worse of causal and not "
            "(the speed cells' threshold)",
            needs["SDPA flash"],
        )
        ratios = [
            c["yours"] / c["flash"]
            for c in cases
            if (c["b"], c["h"], c["n"], c["d"]) == (*speed_n, d) and c["yours"] and c["flash"]
        ]
        goal.measured = min(ratios) if ratios else None
        goal.detail = f"over {len(ratios)} of 2 cases"
    for d in (64, 128):
        graded = d in graded_at
        goal = section.goal(
            f"07 FlashAttention: speed / naive eager's at D={d}, non-causal "
            + (
                "(the speed cell's threshold)"
                if graded
                else "(shown by the speed cell, not graded)"
            ),
            needs["naive eager"] if graded else None,
        )
        got = section.attempt(f"D={d} against naive eager", measure_vs_naive, ref, d)
        if got:
            kernel, bound, problem, work = got
            goal.measured = kernel.speedup
            goal.detail = f"the kernel's two products alone, no softmax: {bound.speedup:.2f}x"
            section.rows.append(
                _report.row_from(kernel, "07 FlashAttention", problem, work, "TFLOP/s")
            )
            section.rows.append(
                _report.row_from(bound, "07 matmuls only (a bound)", problem, work, "TFLOP/s")
            )
    section.data["sweep"] = []
    jobs = [(d, causal, n) for d in (64, 128) for causal in (False, True) for n in SWEEP_LENGTHS]
    for d, causal, n in tqdm(jobs, desc="attention sweep"):
        b, h = max(1, SWEEP_TOKENS // n), SWEEP_HEADS
        case = measured.get((b, h, n, d, causal)) or section.attempt(
            f"sweep N={n}, D={d}, causal={causal}", measure_case, ref, b, h, n, d, causal, []
        )
        if case:
            keys = ("b", "h", "n", "d", "causal", "yours", "flash", "cudnn")
            section.data["sweep"].append({k: case[k] for k in keys})
    return section


def measure_vs_naive(ref, d: int):
    """As 07's speed cell times it: the kernel against naive eager attention at the cell's
    (B, H, N), non-causal, alternating; then the kernel's two products alone
    (bench/_attention_bound.py) against the same baseline: what this loop could reach if the
    online softmax cost nothing. Returns the two perf.Comparison, the problem's name and FLOPs."""
    import torch

    from bench import _attention_bound
    from grader.runtime import attention as attn
    from grader.runtime import checks, perf

    naive = _notebook.load(NOTEBOOK, names=["attention_reference"]).attention_reference
    b, h, n = _notebook.value(NOTEBOOK, "SPEED_BHN")
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    out, scratch = torch.empty_like(q), torch.empty_like(q)
    expected = attn.flash(q, k, v)

    def verify():
        checks.compare(out, expected, rtol=2e-3, atol=2e-3, name="out")

    def eager():
        return naive(q, k, v)

    kernel = perf.compare(
        lambda: ref.flash_attention(q, k, v, out),
        eager,
        names=("kernel", "naive eager"),
        verify=verify,
    )
    config = ref.attention_config(n, d, False)
    bound = perf.compare(
        lambda: _attention_bound.matmuls_only(q, k, v, scratch, config),
        eager,
        names=("matmuls only", "naive eager"),
    )
    return kernel, bound, f"B, H, N, D = {b}, {h}, {n}, {d}", attn.flops(b, h, n, d)


def _case_rows(case) -> list[_report.Row]:
    problem = "B, H, N, D = {b}, {h}, {n}, {d}{c}".format(
        **case, c=", causal" if case["causal"] else ""
    )
    rows = []
    for baseline in ("flash", "cudnn"):
        if case["yours"] and case[baseline]:
            rows.append(
                _report.Row(
                    "07 FlashAttention",
                    problem,
                    f"SDPA {baseline} ({case[baseline]:.0f} TFLOP/s)",
                    case["yours"] / case[baseline],
                    case["yours"],
                    "TFLOP/s",
                    note=f"config {case['default']}",
                )
            )
    if case["best"] and case["best"] != case["default"] and case["flash"]:
        rows.append(
            _report.Row(
                "07 FlashAttention, best candidate",
                problem,
                "SDPA flash",
                case["best_rate"] / case["flash"],
                case["best_rate"],
                "TFLOP/s",
                note=f"config {case['best']}",
            )
        )
    failed = [f"{k}: {note}" for k, (rate, note) in case["rows"].items() if rate is None]
    if failed:
        rows.append(_report.Row("07 not measured", problem, note="; ".join(failed)))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the markdown report here")
    parser.add_argument("--quick", action="store_true", help="the default configuration only")
    args = parser.parse_args(argv)
    from grader.runtime import device

    dev = device.setup()
    if not dev.is_gpu:
        print("bench/attention.py needs a CUDA GPU; this machine runs the interpreter only.")
        return 2
    ref = load_reference()
    text = report(ref, SHAPES, [] if args.quick else CANDIDATES)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
