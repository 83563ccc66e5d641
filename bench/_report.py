"""The benchmark report's parts: the figures each benchmark returns (rows, goals, roofline points,
series for plots), the machine they were measured on, and the report itself as JSON, markdown
tables and PNG plots under build/report/. Everything here renders from plain data, so the report
can be drawn (and tested) without a GPU."""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = 1
NOT_AVAILABLE = "not available"
# nvidia-smi --query-gpu fields, queried one at a time so that one unknown field costs only itself
SMI_FIELDS = {
    "SM clock": "clocks.current.sm",
    "max SM clock": "clocks.max.sm",
    "memory clock": "clocks.current.memory",
    "max memory clock": "clocks.max.memory",
    "power limit": "power.limit",
    "driver": "driver_version",
}
PLOTS = {"roofline": "roofline.png", "ladder": "matmul_ladder.png", "attention": "attention.png"}


@dataclass
class Row:
    """One kernel timed against one baseline in the same run."""

    kernel: str
    problem: str
    baseline: str = ""
    ratio: float | None = None  # baseline time / kernel time: above 1, the kernel is faster
    rate: float | None = None  # in `unit`
    unit: str = ""
    ms: float | None = None
    baseline_ms: float | None = None
    note: str = ""


@dataclass
class Goal:
    """A figure and what it should be. No target: reported only."""

    name: str
    measured: float | None
    target: float | None = None
    unit: str = "x"
    higher_is_better: bool = True
    detail: str = ""

    @property
    def verdict(self) -> str:
        if self.measured is None or not math.isfinite(self.measured):
            return "not measured"
        if self.target is None:
            return "reported"
        if self.higher_is_better:
            return "pass" if self.measured >= self.target else "miss"
        return "pass" if self.measured <= self.target else "miss"

    @property
    def margin(self) -> float | None:
        """How far the measurement is on the right side of the target, in `unit` (negative: a
        miss by that much)."""
        if self.verdict not in ("pass", "miss"):
            return None
        room = self.measured - self.target
        return room if self.higher_is_better else -room

    def record(self) -> dict:
        margin = self.margin
        relative = margin / abs(self.target) if margin is not None and self.target else None
        return _finite(asdict(self)) | {
            "verdict": self.verdict,
            "margin": margin,
            "relative": relative,
        }


@dataclass
class Point:
    """A kernel on the roofline: its work, its traffic, its time."""

    label: str
    flops: float
    bytes_moved: float
    seconds: float
    precision: str = "fp16"


@dataclass
class Section:
    """What one benchmark measured; `errors` say what failed, if anything did."""

    key: str
    title: str
    rows: list[Row] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    data: dict = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    seconds: float | None = None
    note: str = ""  # how the rows were measured, where the table alone does not say

    def goal(self, name: str, target: float | None, unit: str = "x", **kw) -> Goal:
        """Declare a goal before measuring it: if the measurement fails, the report still lists
        it, as not measured."""
        self.goals.append(Goal(name, None, target, unit, **kw))
        return self.goals[-1]

    def attempt(self, what: str, fn, *args):
        """fn(*args), or None with the error kept in `errors` (and its traceback on stderr):
        one failed measurement does not stop the others."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - recorded in the report
            traceback.print_exc()
            self.errors.append(f"{what}: {first_line(exc)}")
            return None

    def record(self) -> dict:
        out = asdict(self)
        out["goals"] = [g.record() for g in self.goals]
        return out


def row_from(comparison, kernel: str, problem: str, amount: float, unit: str, note="") -> Row:
    """A Row from a grader.runtime.perf.Comparison; `amount` is what the rate counts (bytes: GB/s,
    FLOPs: TFLOP/s)."""
    scale = {"GB/s": 1e9, "TFLOP/s": 1e12}[unit]
    return Row(
        kernel,
        problem,
        comparison.baseline_name,
        comparison.speedup,
        comparison.candidate.per_second(amount) / scale,
        unit,
        comparison.candidate.median_ms,
        comparison.baseline.median_ms,
        note,
    )


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


def geomean(values) -> float:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not values:
        return math.nan
    return math.exp(sum(math.log(v) for v in values) / len(values))


# -- the machine ---------------------------------------------------------------------------------


def _run(command: list[str]) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, cwd=ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def nvidia_smi() -> dict[str, str]:
    """Clocks, power limit and driver of GPU 0 from nvidia-smi, each 'not available' with the
    reason when it cannot be read."""
    if shutil.which("nvidia-smi") is None:
        return {k: f"{NOT_AVAILABLE} (no nvidia-smi)" for k in SMI_FIELDS}
    found = {}
    for label, name in SMI_FIELDS.items():
        out = _run(["nvidia-smi", "-i", "0", f"--query-gpu={name}", "--format=csv,noheader"])
        found[label] = out.splitlines()[0].strip() if out else f"{NOT_AVAILABLE} ({name})"
    return found


def git_commit() -> str:
    commit = _run(["git", "rev-parse", "HEAD"])
    if not commit:
        return NOT_AVAILABLE
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return commit + (" (with uncommitted changes)" if dirty else "")


def environment() -> dict[str, str]:
    """The machine and software a report was measured on."""
    import torch

    from grader.runtime import device

    dev = device.current()
    env = {
        "device": dev.describe(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "git commit": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "CUDA (torch build)": str(torch.version.cuda),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = NOT_AVAILABLE
    if dev.is_gpu:
        props = torch.cuda.get_device_properties(0)
        env["SMs"] = str(props.multi_processor_count)
        env["GPU memory"] = f"{props.total_memory / 2**30:.0f} GiB"
    else:
        env["SMs"] = NOT_AVAILABLE
    env |= nvidia_smi()
    return env


# -- the report ---------------------------------------------------------------------------------


def new_report(env: dict, options: dict) -> dict:
    return {
        "schema": SCHEMA,
        "environment": env,
        "options": options,
        "ceilings": None,
        "sections": [],
        "trust": None,
        "plots": {},
    }


def goals(report: dict) -> list[dict]:
    return [g | {"section": s["title"]} for s in report["sections"] for g in s["goals"]]


def _number(v, digits=2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def _table(headers: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in r) + " |")
    return lines


def _measured(goal: dict) -> str:
    unit = goal["unit"]
    if goal["measured"] is None:
        return "n/a"
    if unit == "%":
        return f"{goal['measured']:.1%}"
    return f"{_number(goal['measured'], 3)}{unit}"


def _target(goal: dict) -> str:
    if goal["target"] is None:
        return "none (reported)"
    sign = ">=" if goal["higher_is_better"] else "<"
    if goal["unit"] == "%":
        return f"{sign} {goal['target']:.0%}"
    return f"{sign} {_number(goal['target'], 3)}{goal['unit']}"


def _verdict(goal: dict) -> str:
    if goal["margin"] is None:
        return goal["verdict"]
    if goal["unit"] == "%":
        by = f"{abs(goal['margin']):.1%}"
    else:
        by = f"{abs(goal['margin']):.3f}{goal['unit']} ({abs(goal['relative']):.1%})"
    return f"**{goal['verdict']}** by {by}"


def markdown(report: dict) -> str:
    """The report as markdown: the machine, the goal table, each benchmark's rows, timing trust,
    errors and plots."""
    report = _finite(report)
    env = report["environment"]
    lines = ["# Benchmark report", ""]
    lines += _table(["", ""], [[k, v] for k, v in env.items()])
    options = ", ".join(f"{k}={v}" for k, v in report["options"].items())
    lines += ["", f"Options: {options or 'defaults'}."]
    if report.get("elapsed_s") is not None:
        lines.append(f"The run took {report['elapsed_s']:.0f} s.")
    if report.get("clocks_after"):
        after = ", ".join(f"{k} {v}" for k, v in report["clocks_after"].items())
        lines.append(f"After the run: {after}.")
    ceilings = report.get("ceilings")
    if ceilings:
        rates = ", ".join(f"{p} {f / 1e12:.0f}" for p, f in ceilings["flops"].items())
        lines += [
            "",
            f"Ceilings ({ceilings['source']}): copy {ceilings['bandwidth'] / 1e12:.2f} TB/s "
            f"(bytes read + written); matmul TFLOP/s: {rates}.",
        ]
    lines += ["", "## Goals", ""] + goals_markdown(goals(report))
    for s in report["sections"]:
        lines += ["", f"## {s['title']}", ""] + section_markdown(s)
    lines += trust_markdown(report.get("trust"))
    lines += ["", "## Plots", ""]
    for name, what in report.get("plots", {}).items():
        lines.append(f"![{name}]({what})" if what.endswith(".png") else f"- {name}: {what}")
    return "\n".join(lines) + "\n"


def goals_markdown(all_goals: list[dict]) -> list[str]:
    """The table goal / measured / target / verdict (with the margin), and the count."""
    if not all_goals:
        return ["No goal was measured."]
    lines = _table(
        ["goal", "measured", "target", "verdict", "section", "detail"],
        [
            [g["name"], _measured(g), _target(g), _verdict(g), g.get("section", ""), g["detail"]]
            for g in all_goals
        ],
    )
    counts = {v: sum(g["verdict"] == v for g in all_goals) for v in ("pass", "miss")}
    return lines + ["", f"{counts['pass']} passed, {counts['miss']} missed."]


def section_markdown(s: dict) -> list[str]:
    """One benchmark's rows as a table, with its time and the error that stopped it, if any."""
    lines = []
    if s.get("note"):
        lines += [s["note"], ""]
    if s["seconds"] is not None:
        lines.append(f"Measured in {s['seconds']:.0f} s.")
    if s["errors"]:
        lines += ["", "**Errors:**", ""] + [f"- {e}" for e in s["errors"]]
    if s["rows"]:
        lines += [""] + _table(
            ["kernel", "problem", "rate", "vs", "ratio", "kernel ms", "baseline ms", "note"],
            [
                [
                    r["kernel"],
                    r["problem"],
                    f"{_number(r['rate'], 1)} {r['unit']}" if r["rate"] is not None else "",
                    r["baseline"],
                    f"{_number(r['ratio'], 3)}x" if r["ratio"] is not None else "",
                    _number(r["ms"], 4),
                    _number(r["baseline_ms"], 4),
                    r["note"],
                ]
                for r in s["rows"]
            ],
        )
    return lines


def trust_markdown(trust: dict | None) -> list[str]:
    """The speed-threshold runs of bench/trust.py, summarised (see trust.summarize)."""
    lines = ["", "## Speed thresholds over repeated runs", ""]
    if not trust:
        return lines + [
            "Not run: `python bench/trust.py --notebooks NN_topic ...` (or `bench/report.py "
            "--trust ...`) runs each notebook's speed cells repeatedly with the reference and "
            "with a slow variant."
        ]
    lines.append(f"From {trust['file']}, the latest run of each notebook:")
    for notebook, seconds in trust["seconds"].items():
        estimated = trust["estimated"][notebook]
        stopped = "" if trust["complete"][notebook] else "; stopped before the end"
        lines.append(f"- {notebook}: {seconds:.0f} s (estimated {estimated:.0f} s){stopped}")
    if trust.get("errors"):
        lines += [f"- **error** {e}" for e in trust["errors"]]
    lines += [""] + _table(
        [
            "notebook",
            "speed cell",
            "solution",
            "runs",
            "full points",
            "zero",
            "errors",
            "measured / needed",
            "expected",
            "verdict",
        ],
        [
            [
                t["notebook"],
                t["cell"],
                t["variant"],
                t["runs"],
                t["passed"],
                t["failed"],
                t["errors"],
                f"{_number(t['lowest'], 2)} to {_number(t['highest'], 2)}",
                t["expected"],
                "**ok**" if t["ok"] else "**NOT OK**",
            ]
            for t in trust["summary"]
        ],
    )
    return lines


# -- plots --------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a GPU server
    import matplotlib.pyplot as plt

    return plt


def plot_roofline(report: dict, path: Path) -> None:
    from grader.runtime import roofline

    c = report.get("ceilings")
    ceilings = (
        roofline.Ceilings(c["bandwidth"], dict(c["flops"]), c["source"])
        if c
        else roofline.datasheet_h100()
    )
    points = [
        roofline.Point(p["label"], p["flops"], p["bytes_moved"], p["seconds"])
        for s in report["sections"]
        for p in s["points"]
    ]
    if not points:
        raise ValueError("no kernel was measured")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 6))
    roofline.plot(
        ceilings, points, ax=ax, title=f"The reference kernels; ceilings {ceilings.source}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_ladder(report: dict, path: Path) -> None:
    ladder = [e for s in report["sections"] for e in s["data"].get("ladder", [])]
    if not ladder:
        raise ValueError("no matmul version was measured")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(ladder) + 1.5))
    labels = [e["label"] for e in ladder]
    rates = [e["tflops"] for e in ladder]
    colors = ["gray" if e["label"].startswith("cuBLAS") else "C0" for e in ladder]
    ax.barh(labels, rates, color=colors)
    for i, e in enumerate(ladder):
        note = f"{e['tflops']:.0f}" + (f"  ({e['ratio']:.2f}x cuBLAS)" if e.get("ratio") else "")
        ax.annotate(note, (e["tflops"], i), xytext=(4, 0), textcoords="offset points", va="center")
    ax.invert_yaxis()
    ax.set_xlabel("TFLOP/s (float16 inputs)")
    ax.set_xlim(0, max(rates) * 1.35)
    ax.set_title("The matmul ladder (04's versions, 05's autotuned) against cuBLAS")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_attention(report: dict, path: Path) -> None:
    sweep = [e for s in report["sections"] for e in s["data"].get("sweep", [])]
    if not sweep:
        raise ValueError("no attention sweep was measured")
    plt = _pyplot()
    cases = sorted({(e["d"], e["causal"]) for e in sweep})
    fig, axes = plt.subplots(1, len(cases), figsize=(4.2 * len(cases), 4), squeeze=False)
    for ax, (d, causal) in zip(axes[0], cases, strict=True):
        mine = sorted(
            (e for e in sweep if (e["d"], e["causal"]) == (d, causal)), key=lambda e: e["n"]
        )
        for key, label in (
            ("yours", "07 kernel"),
            ("flash", "SDPA flash"),
            ("cudnn", "SDPA cuDNN"),
        ):
            xs = [e["n"] for e in mine if e.get(key)]
            ax.plot(xs, [e[key] for e in mine if e.get(key)], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
        ax.set_title(f"D={d}, {'causal' if causal else 'not causal'}")
        ax.grid(alpha=0.3)
        ax.set_ylim(0, None)
    axes[0][0].set_ylabel("TFLOP/s (float16)")
    axes[0][0].legend()
    fig.suptitle("FlashAttention forward: the course's kernel against SDPA's backends")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


DRAW = {"roofline": plot_roofline, "ladder": plot_ladder, "attention": plot_attention}


def draw(report: dict, out: Path) -> dict[str, str]:
    """Every plot whose data the report holds: name -> file, or the reason it was not drawn."""
    done = {}
    for name, fn in DRAW.items():
        try:
            fn(report, out / PLOTS[name])
            done[name] = PLOTS[name]
        except Exception as exc:  # noqa: BLE001 - a plot that cannot be drawn is reported
            done[name] = f"not drawn: {type(exc).__name__}: {exc}"
    return done


def atomic_write(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        f.write(text)
    os.replace(f.name, path)


def _finite(value):
    """`value` with every NaN or infinity replaced by None: JSON has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write(report: dict, out: Path, plots: bool = True) -> None:
    """report.json, report.md and (with `plots`) the PNGs, into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    if plots:
        report["plots"] = draw(report, out)
    text = json.dumps(_finite(report), indent=1, default=str, allow_nan=False)
    atomic_write(out / "report.json", text)
    atomic_write(out / "report.md", markdown(report))


def run_alone(script: str, measure, out: Path | None) -> int:
    """A benchmark script run on its own: measure on a GPU (else say why not and return 2), print
    the rows and goals as markdown, write them to `out` if given; 1 if anything failed."""
    from grader.runtime import device

    dev = device.setup()
    if not dev.supports("timing"):
        print(
            f"{script} measures on a CUDA GPU; this machine runs {dev.describe()}. "
            "Nothing was measured.",
            file=sys.stderr,
        )
        return 2
    start = time.perf_counter()
    section = measure()
    section.seconds = time.perf_counter() - start
    record = section.record()
    lines = [f"# {record['title']}", "", f"On {dev.describe()}, {time.strftime('%Y-%m-%d %H:%M')}."]
    lines += [""] + section_markdown(record) + ["", "## Goals", ""]
    text = "\n".join(lines + goals_markdown(record["goals"])) + "\n"
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"written to {out}")
    return 1 if section.errors else 0
