"""Run every benchmark in one process and write the report: build/report/report.json (every
figure), report.md (tables: the machine, the goals with pass/miss and margin, each benchmark)
and PNG plots (the reference kernels on the measured roofline, the matmul ladder, attention
against sequence length).

    python bench/report.py [--out build/report] [--full] [--only NAME ...]
                           [--trust NN_topic ... | --trust all] [--trust-runs 10] [--all-variants]

In order: the roofline's ceilings (grader.runtime.roofline.measure_ceilings), the same kernels timed
twice (bench/trust.py, part 1), 02's kernels (bench/elementwise.py), 03's softmax
(bench/softmax.py), 04's ladder (bench/ladder.py), 05's autotuned matmul (bench/matmul.py), 07's
FlashAttention (bench/attention.py), 09's Hopper matmuls and attention (bench/hopper_gemm.py,
bench/hopper_attention.py, sm_90), 10's backward (bench/backward.py), the host time per call of
05's, 03's and 07's launchers against torch's (bench/host.py). A failure in one is recorded in the
report and the others still run; the report is rewritten after each. By default
per-config sweeps are skipped, to keep the run to a few minutes of GPU time (aimed at 3-4 on an
H100); --full keeps them. --trust runs bench/trust.py's notebook part for the named notebooks
(minutes each; `python bench/trust.py --estimate` says how many); the report includes whatever
build/report/trust.json holds, from this run or earlier ones.

`make bench` runs this. Off a GPU it says why it cannot measure and exits with status 2;
otherwise 1 if any benchmark failed, else 0 (missed goals are reported, not failures).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed `grader`
    sys.path.insert(0, str(ROOT))

from bench import (  # noqa: E402
    _report,
    attention,
    backward,
    elementwise,
    hopper_attention,
    hopper_gemm,
    host,
    ladder,
    matmul,
    softmax,
    trust,
)

DEFAULT_OUT = ROOT / "build" / "report"


def ceilings(args) -> _report.Section:
    from grader.runtime import roofline

    section = _report.Section("ceilings", "Roofline ceilings, measured")
    c = roofline.measure_ceilings()
    section.data["ceilings"] = {"bandwidth": c.bandwidth, "flops": c.flops, "source": c.source}
    section.rows.append(
        _report.Row("device copy", "1 GiB read + written", rate=c.bandwidth / 1e9, unit="GB/s")
    )
    for precision, rate in c.flops.items():
        section.rows.append(
            _report.Row(
                f"cuBLAS {precision}", "8192^3 (fp32: 4096^3)", rate=rate / 1e12, unit="TFLOP/s"
            )
        )
    return section


def repeatability(args) -> _report.Section:
    return trust.repeatability(trust.default_kernels())


def matmul_section(args) -> _report.Section:
    options = [] if args.full else ["--squares-only", "--no-per-config"]
    parsed = matmul.parse(options)
    summary, per_config = matmul.measure(parsed)
    return matmul.section(summary, per_config, parsed.sizes)


SECTIONS = {
    "ceilings": ceilings,
    "repeatability": repeatability,
    "elementwise": lambda args: elementwise.measure(),
    "softmax": lambda args: softmax.measure(args.full),
    "ladder": lambda args: ladder.measure(args.full),
    "matmul": matmul_section,
    "attention": lambda args: attention.measure(args.full),
    "hopper": lambda args: hopper_gemm.measure(),
    "hopper_attention": lambda args: hopper_attention.measure(),
    "backward": lambda args: backward.measure(configs=args.full),
    "host": lambda args: host.measure(),
}


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the report's folder")
    parser.add_argument("--full", action="store_true", help="keep the per-config sweeps")
    parser.add_argument("--only", nargs="+", choices=sorted(SECTIONS), help="these benchmarks only")
    parser.add_argument(
        "--trust", nargs="+", default=[], help="notebooks for bench/trust.py, or all"
    )
    parser.add_argument("--trust-runs", type=int, default=trust.RUNS, help="rounds per solution")
    parser.add_argument("--all-variants", action="store_true", help="every slow variant")
    return parser.parse_args(argv)


def run_section(key: str, args) -> dict:
    """One benchmark, timed; whatever it raises is kept as its error."""
    print(f"== {key}", flush=True)
    start = time.perf_counter()
    try:
        section = SECTIONS[key](args)
    except Exception as exc:  # noqa: BLE001 - recorded; the next benchmark still runs
        traceback.print_exc()
        section = _report.Section(key, key, errors=[_report.first_line(exc)])
    section.seconds = time.perf_counter() - start
    _release_memory()
    print(f"   {key}: {section.seconds:.0f} s, {len(section.errors)} error(s)", flush=True)
    return section.record()


def _release_memory() -> None:
    import torch

    gc.collect()
    try:
        torch.cuda.empty_cache()
    except RuntimeError:  # a kernel left the device in an error state: the next section says so
        pass


def main(argv=None) -> int:
    args = parse(argv)
    from grader.runtime import device

    dev = device.setup()
    if not dev.supports("timing"):
        print(
            f"bench/report.py measures on a CUDA GPU; this machine runs {dev.describe()}. "
            "Nothing was measured and no report was written.",
            file=sys.stderr,
        )
        return 2
    trust_notebooks = trust.chosen_notebooks(args.trust) if args.trust else []
    options = {"full": args.full, "only": args.only or "all", "trust": trust_notebooks or "none"}
    report = _report.new_report(_report.environment(), options)
    start = time.perf_counter()
    for key in args.only or SECTIONS:
        record = run_section(key, args)
        report["sections"].append(record)
        if key == "ceilings" and "ceilings" in record["data"]:
            report["ceilings"] = record["data"]["ceilings"]
        report["elapsed_s"] = time.perf_counter() - start
        _report.write(report, args.out, plots=False)  # a run cut short keeps what it measured
    failures = []
    if trust_notebooks:
        failures = trust.run_notebooks(
            trust_notebooks,
            args.trust_runs,
            None if args.all_variants else 1,
            args.out / "trust.json",
        )
    report["trust"] = trust.latest(args.out / "trust.json")
    report["elapsed_s"] = time.perf_counter() - start
    report["clocks_after"] = {k: v for k, v in _report.nvidia_smi().items() if "clock" in k.lower()}
    _report.write(report, args.out)
    print("\n".join(_report.goals_markdown(_report.goals(report))))
    print(f"\nreport written to {args.out}/report.md, report.json and the plots", flush=True)
    broken = [s["key"] for s in report["sections"] if s["errors"]] + failures
    if broken:
        print(f"errors in: {', '.join(broken)} (see the report)", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
