"""Can the course's timings be trusted? Two checks, on a GPU.

1. Repeatability: the same kernel timed twice in one run (a copy, 02's vector add, 03's softmax,
   04's matmul); the two medians must differ by less than 3%.
2. Speed thresholds: for each notebook, one Jupyter kernel runs the solution's cells once (with
   RUN_BENCHMARKS = False, as tests/test_known_wrong.py does), then re-runs the notebook's speed
   cells `--runs` times with the reference solution (each must score full points every time;
   before each round, the ungraded cells that bind what the speed cells read run again: 08
   measures in such a cell and its speed cells only grade),
   then swaps in a slow but correct variant from tests/known_wrong/ (SLOW) and re-runs the same
   speed cells `--runs` times (each must score 0 every time). Every score and every printed
   ratio is kept. Results are appended to a JSON file after every round, so a run stopped by a
   time limit keeps what it measured.

    python bench/trust.py                                   # 1 only
    python bench/trust.py --notebooks 02_first_kernels 03_softmax [--runs 10] [--all-variants]
    python bench/trust.py --notebooks 07_flash_attention --variants 0   # the reference alone
    python bench/trust.py --notebooks all
    python bench/trust.py --estimate                        # GPU time per notebook; no GPU needed

Part 2 needs the Jupyter stack (jupyter_client, ipykernel, jupytext): on a GPU image without it,
install the wheelhouse as .ci/gpu does. `bench/report.py` runs part 1 always and part 2 with
--trust, and puts the summary of the JSON file into its report. Importing this module needs no
GPU.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed `grader`
    sys.path.insert(0, str(ROOT))

from bench import _notebook, _report  # noqa: E402
from grader.runtime.published import Verdict  # noqa: E402

DEFAULT_OUT = ROOT / "build" / "report" / "trust.json"
REPEAT_LIMIT = 0.03  # two medians of one kernel, one run: at most 3% apart
RUNS = 10
# the estimate's cost model: perf.compare times candidate and baseline twice each with
# timing.bench (2 to 6 rounds of 25 ms warm-up and 100 ms of samples), then verifies
SECONDS_PER_COMPARISON = 1.5
# one pass over a notebook's cells with RUN_BENCHMARKS = False: imports, compiles, correctness
# at GPU sizes, each speed cell once
SECONDS_PER_NOTEBOOK_PASS = 45.0
# swapping a variant in and re-running its exercise's test cells once
SECONDS_PER_SWAP = 15.0
TIMED = {"perf.compare", "perf.grade"}
JUPYTER_HINT = (
    "install jupyter_client, ipykernel and jupytext (offline: `make wheelhouse` on a machine "
    "with network, then install the wheels as .ci/gpu does)"
)


# -- 1. the same kernel timed twice ----------------------------------------------------------------


def default_kernels() -> dict[str, tuple[str, object]]:
    """name -> (problem, make): `make()` returns the function to time. A copy, 02's vector add,
    03's softmax, 04's matmul."""
    import torch

    from bench import elementwise, ladder
    from bench import softmax as softmax_bench
    from grader.runtime import perf

    def add():
        ref = elementwise.load()
        x = torch.randn(1 << 26, device="cuda")
        y, out = torch.randn_like(x), torch.empty_like(x)
        return lambda: ref.add(x, y, out)

    def softmax():
        ref = softmax_bench.load()
        x = torch.randn(8192, 4096, device="cuda")
        out = torch.empty_like(x)
        return lambda: ref.softmax(x, out)

    def matmul():
        ref = ladder.load()
        a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2))
        c = torch.empty_like(a)
        return lambda: ref.matmul(a, b, c)

    return {
        "copy": ("256 MiB read + written", lambda: perf.copy_baseline(1 << 28)),
        "02 vector add": ("64 Mi float32", add),
        "03 softmax": ("8192 x 4096 float32", softmax),
        "04 matmul": ("4096^3 float16", matmul),
    }


def repeatability(kernels: dict[str, tuple[str, object]]) -> _report.Section:
    """Each kernel timed twice in a row with timing.bench: rows, and goals (medians less than 3%
    apart)."""
    section = _report.Section("repeatability", "Timing trust: the same kernel timed twice")
    for name, (problem, make) in kernels.items():
        goal = section.goal(
            f"{name} timed twice: medians apart by", REPEAT_LIMIT, "%", higher_is_better=False
        )
        section.attempt(name, _twice, section, goal, name, problem, make)
    return section


def _twice(section, goal, name, problem, make) -> None:
    from grader.runtime import timing

    fn = make()
    fn()  # compile outside the timed region
    first, second = timing.bench(fn), timing.bench(fn)
    goal.measured = abs(second.median_ms - first.median_ms) / first.median_ms
    goal.detail = f"{first.median_ms * 1e3:.1f} us, then {second.median_ms * 1e3:.1f} us"
    section.rows.append(
        _report.Row(
            name,
            problem,
            "itself, timed again",
            second.median_ms / first.median_ms,
            ms=first.median_ms,
            baseline_ms=second.median_ms,
            note=f"spread {first.spread:.1%}, {second.spread:.1%}; rounds {first.rounds}, "
            f"{second.rounds}",
        )
    )
    print(f"{name}: {first} | {second} | {goal.measured:.2%} apart", flush=True)


# -- 2. speed thresholds over repeated runs --------------------------------------------------------


def parse_output(printed: list) -> tuple[float | None, list[dict], str]:
    """(score, ratios, text) of a speed cell's output, as `Session.run` collects it: text, and
    the speed records the cell published (dicts). The score is the last text if it is a number
    (the cell's last expression), each ratio a {'measured', 'needed'} pair from one record."""
    texts = [p for p in printed if isinstance(p, str)]
    records = [Verdict.read(p) for p in printed if not isinstance(p, str)]
    score = None
    if texts:
        try:
            score = float(texts[-1].strip())
            texts = texts[:-1]
        except ValueError:
            pass
    ratios = [
        {
            "measured": r.measured / 100 if r.unit == "%" else r.measured,
            "needed": r.needed / 100 if r.unit == "%" else r.needed,
        }
        for r in records
        if r.measured is not None
    ]
    return score, ratios, "".join(texts)


def summarize(records: list[dict]) -> list[dict]:
    """Per notebook, speed cell and solution (the reference or a slow variant): how many runs
    scored full points, how many 0, how many failed to run, the range of measured / needed over
    every printed ratio, and whether that is what was expected (full points every run for the
    reference, 0 every run for a slow variant)."""
    groups: dict[tuple, dict] = {}
    for r in records:
        key = (r["notebook"], r["cell"], r["variant"])
        g = groups.setdefault(
            key,
            {
                "notebook": key[0],
                "cell": key[1],
                "variant": key[2],
                "runs": 0,
                "passed": 0,
                "failed": 0,
                "errors": 0,
                "headroom": [],
            },
        )
        g["runs"] += 1
        if r["status"] != "ok" or r["score"] is None:
            g["errors"] += 1
        elif r["score"] >= r["points"]:
            g["passed"] += 1
        elif r["score"] == 0:
            g["failed"] += 1
        g["headroom"] += [x["measured"] / x["needed"] for x in r["ratios"] if x["needed"]]
    summary = []
    for g in groups.values():
        reference = g["variant"] == "reference"
        headroom = g.pop("headroom")
        g["lowest"] = min(headroom) if headroom else None
        g["highest"] = max(headroom) if headroom else None
        g["expected"] = "full points every run" if reference else "0 every run"
        g["ok"] = g["runs"] > 0 and g[("passed" if reference else "failed")] == g["runs"]
        summary.append(g)
    return summary


def latest(path: Path) -> dict | None:
    """The summary of a trust file for the report: the latest record of each notebook."""
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    newest = {}
    for entry in data.get("notebooks", []):
        newest[entry["notebook"]] = entry  # later entries replace earlier ones
    records = [r for entry in newest.values() for r in entry["records"]]
    return {
        "file": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
        "summary": summarize(records),
        "seconds": {n: e["seconds"] for n, e in newest.items()},
        "estimated": {n: e["estimate"]["seconds"] for n, e in newest.items()},
        "errors": [f"{n}: {err}" for n, e in newest.items() for err in e["errors"]],
        "complete": {n: e["complete"] for n, e in newest.items()},
    }


def _top_level(statements):
    """Statements executed when a cell runs: into if/for/while/with/try, not into functions."""
    for s in statements:
        yield s
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for name in ("body", "orelse", "finalbody"):
            yield from _top_level(getattr(s, name, []))
        for handler in getattr(s, "handlers", []):
            yield from _top_level(handler.body)


def assigned(source: str) -> set[str]:
    """Names a cell binds when it runs (assignments, defs, loop targets), not those inside
    functions."""
    names = set()
    for s in _top_level(ast.parse(source).body):
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(s.name)
        elif isinstance(s, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(s, ast.For):
            names |= {n.id for n in ast.walk(s.target) if isinstance(n, ast.Name)}
    return names


def read(source: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}


def producers(speed_sources: list[str], candidates: list) -> list:
    """The ungraded cells among `candidates` (objects with .source) that bind a name a speed
    cell reads: what a round re-runs before the speed cells (08 measures in such a cell)."""
    wanted = set().union(*(read(s) for s in speed_sources)) if speed_sources else set()
    return [c for c in candidates if assigned(c.source) & wanted]


def _trips(iterable: ast.expr) -> int:
    if isinstance(iterable, ast.Tuple | ast.List | ast.Set):
        return len(iterable.elts)
    if (
        isinstance(iterable, ast.Call)
        and isinstance(iterable.func, ast.Name)
        and iterable.func.id == "range"
        and len(iterable.args) == 1
        and isinstance(iterable.args[0], ast.Constant)
    ):
        return int(iterable.args[0].value)
    return 1  # a computed collection: counted once, so the estimate is a lower bound


def _name(func: ast.expr) -> str | None:
    """`f` for a call of f, `module.f` for a call of module.f."""
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else "?"
        return f"{owner}.{func.attr}"
    return func.id if isinstance(func, ast.Name) else None


def timed_calls(node: ast.AST, functions: dict, depth: int = 0) -> dict[str, int]:
    """Timed comparisons (perf.compare, perf.grade) a piece of code makes, following calls into
    the notebook's own functions and multiplying by the length of loops over literal tuples,
    lists and range(k)."""
    counts = {"compare": 0}

    def add(other, times=1):
        for k in counts:
            counts[k] += times * other[k]

    if isinstance(node, ast.For):
        add(timed_calls(node.iter, functions, depth))
        for s in node.body + node.orelse:
            add(timed_calls(s, functions, depth), _trips(node.iter))
        return counts
    if isinstance(node, ast.Call):
        name = _name(node.func)
        if name in TIMED:
            counts["compare"] += 1
        elif name in functions and depth < 8:
            for s in functions[name].body:
                add(timed_calls(s, functions, depth + 1))
    for child in ast.iter_child_nodes(node):
        if isinstance(node, ast.Module) and isinstance(child, ast.FunctionDef | ast.ClassDef):
            continue  # defining a function times nothing; calling it does
        add(timed_calls(child, functions, depth))
    return counts


def _nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {}) if hasattr(cell, "metadata") else {}


def _is_speed(cell) -> bool:
    return _nbgrader(cell).get("grade_id", "").startswith("speed-")


def slow_variants(notebook: str) -> dict[str, dict[str, str]]:
    """grade_id -> {name: source} of the notebook's slow but correct variants."""
    module = importlib.import_module(f"tests.known_wrong.nb{notebook}")
    return getattr(module, "SLOW", {})


def notebooks_with_variants() -> list[str]:
    folder = ROOT / "tests" / "known_wrong"
    names = sorted(p.stem[2:] for p in folder.glob("nb*.py"))
    return [n for n in names if slow_variants(n)]


def span(cells, grade_id: str) -> list:
    """The code cells after exercise `grade_id` up to its last graded cell, speed cells included,
    stopping at the next exercise (as tests/notebook_session.Session.span)."""
    index = next(c.index for c in cells if c.grade_id == grade_id)
    last = index
    for c in cells[index + 1 :]:
        if c.nbgrader.get("solution"):
            break
        if c.nbgrader.get("grade"):
            last = c.index
    return [c for c in cells[index + 1 : last + 1] if c.kind == "code"]


def estimate(notebook: str, runs: int = RUNS, variants: int | None = 1) -> dict:
    """GPU seconds that `run_notebook` is expected to take, from the notebook's code: the speed
    cells after each exercise with slow variants, the timed comparisons a round of them makes,
    and the cost model above. `variants`: slow variants per exercise (None: every one)."""
    cells = _notebook.cells(notebook)
    functions = _notebook.functions(notebook)
    speed_cells, comparisons, total = 0, 0, SECONDS_PER_NOTEBOOK_PASS
    chosen = 0
    for grade_id, slow in slow_variants(notebook).items():
        cells_after = span(cells, grade_id)
        speed = [c for c in cells_after if (c.grade_id or "").startswith("speed-")]
        ungraded = [c for c in cells_after if not c.nbgrader]
        counts = {"compare": 0}
        for c in [*producers([s.source for s in speed], ungraded), *speed]:
            counted = timed_calls(ast.parse(c.source), functions)
            counts = {k: counts[k] + counted[k] for k in counts}
        n_variants = len(slow) if variants is None else min(variants, len(slow))
        round_s = counts["compare"] * SECONDS_PER_COMPARISON
        total += runs * (1 + n_variants) * round_s + n_variants * SECONDS_PER_SWAP
        speed_cells += len(speed)
        comparisons += counts["compare"]
        chosen += n_variants
    return {
        "notebook": notebook,
        "speed cells": speed_cells,
        "comparisons per round": comparisons,
        "slow variants": chosen,
        "seconds": total,
    }


def save(path: Path, entry: dict) -> None:
    """Put `entry` (one notebook's run, possibly unfinished) into the trust file: replaces the
    entry with the same `started` stamp, keeps every other."""
    data = json.loads(path.read_text()) if path.exists() else {"notebooks": []}
    kept = [
        e
        for e in data["notebooks"]
        if (e["notebook"], e["started"]) != (entry["notebook"], entry["started"])
    ]
    data["notebooks"] = [*kept, entry]
    path.parent.mkdir(parents=True, exist_ok=True)
    _report.atomic_write(path, json.dumps(data, indent=1))


def run_notebook(notebook: str, runs: int, variants: int | None, path: Path) -> dict:
    """Part 2 for one notebook, with `variants` slow variants per exercise (None: every one; 0:
    the reference alone); the entry is saved to `path` after every round."""
    try:
        from tests.notebook_session import Session
    except ImportError as exc:
        raise RuntimeError(
            f"the notebook runs need the Jupyter stack: {exc}; {JUPYTER_HINT}"
        ) from exc
    from grader.runtime import device

    entry = {
        "notebook": notebook,
        "device": device.current().describe(),
        "commit": _report.git_commit(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "runs": runs,
        "estimate": estimate(notebook, runs, variants),
        "complete": False,
        "seconds": 0.0,
        "records": [],
        "errors": [],
    }
    start = time.perf_counter()

    def checkpoint():
        entry["seconds"] = time.perf_counter() - start
        save(path, entry)

    print(f"== {notebook}: about {entry['estimate']['seconds'] / 60:.1f} min", flush=True)
    checkpoint()
    session = None
    try:
        session = Session(notebook)
        print(f"   solution run once ({time.perf_counter() - start:.0f} s)", flush=True)
        for grade_id, slow in slow_variants(notebook).items():
            chosen = list(slow.items())[:variants]
            _exercise(session, notebook, grade_id, chosen, runs, entry, checkpoint)
        entry["complete"] = True
    except Exception as exc:  # noqa: BLE001 - kept in the file with what was measured
        entry["errors"].append(_report.first_line(exc))
        raise
    finally:
        checkpoint()
        if session is not None:
            session.close()
    return entry


def _exercise(session, notebook, grade_id, variants, runs, entry, checkpoint):
    index, last = session.span(grade_id, speed=True)
    span = session.code_cells(index + 1, last + 1)
    speed = [c for c in span if _is_speed(c)]
    setup = [c for c in span if not _is_speed(c)]
    before = producers([c.source for c in speed], [c for c in setup if not _nbgrader(c)])
    reference = session.cells[index].source
    for variant, source in [("reference", None), *variants]:
        if source is not None:
            problem = _swap(session, source, setup)
            if problem:
                entry["errors"].append(f"{grade_id} / {variant}: {problem}")
                checkpoint()
                continue
        for round_ in range(1, runs + 1):
            started = time.perf_counter()
            records = _round(session, notebook, variant, round_, before, speed, entry)
            entry["records"] += records
            checkpoint()
            scores = ", ".join(f"{r['score']}" for r in records)
            print(
                f"   {grade_id} / {variant}: run {round_}/{runs} scores {scores} "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
        if source is not None:
            problem = _swap(session, reference, setup)
            if problem:
                raise RuntimeError(f"the reference of {grade_id} does not come back: {problem}")


def _swap(session, source, setup) -> str | None:
    """Put `source` in the exercise cell's place and re-run its other cells once."""
    status, detail = session.run(source)
    if status != "ok":
        return f"does not define itself: {detail}"
    for cell in setup:
        status, detail = session.run(cell.source)
        if status != "ok":
            return f"fails {cell.id}: {detail}"
    return None


def _round(session, notebook, variant, round_, before, speed, entry) -> list[dict]:
    for cell in before:
        status, detail = session.run(cell.source)
        if status != "ok":
            entry["errors"].append(f"{variant}, run {round_}: {cell.id} fails: {detail}")
    records = []
    for cell in speed:
        printed = []
        started = time.perf_counter()
        status, detail = session.run(cell.source, printed)
        score, ratios, text = parse_output(printed)
        records.append(
            {
                "notebook": notebook,
                "cell": cell.id,
                "variant": variant,
                "run": round_,
                "points": float(_nbgrader(cell).get("points", 0)),
                "score": score,
                "ratios": ratios,
                "status": status,
                "error": detail,
                "seconds": time.perf_counter() - started,
                "printed": text[-2000:],
            }
        )
    return records


# -- the command line ----------------------------------------------------------------------------


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--notebooks", nargs="+", default=[], help="NN_topic names, or 'all': run part 2"
    )
    parser.add_argument("--runs", type=int, default=RUNS, help="rounds per solution (10)")
    parser.add_argument(
        "--variants", type=int, default=1, help="slow variants per exercise (1; 0: none)"
    )
    parser.add_argument(
        "--all-variants", action="store_const", const=None, dest="variants",
        help="every slow variant, not only the first",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON file to append to")
    parser.add_argument("--estimate", action="store_true", help="print the GPU time and stop")
    parser.add_argument("--no-repeat", action="store_true", help="skip part 1")
    return parser.parse_args(argv)


def chosen_notebooks(names: list[str]) -> list[str]:
    """The notebooks asked for ('all': every one with slow variants), checked to exist."""
    try:
        known = notebooks_with_variants()
    except ImportError as exc:  # tests/known_wrong reads notebooks with jupytext
        raise SystemExit(
            f"the notebook runs need the Jupyter stack: {exc}; {JUPYTER_HINT}"
        ) from exc
    if names == ["all"]:
        return known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"no slow variants for {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def run_notebooks(names: list[str], runs: int, variants: int | None, path: Path) -> list[str]:
    """Part 2 for each notebook in turn; returns the failures (the others still run)."""
    failures = []
    for notebook in names:
        try:
            run_notebook(notebook, runs, variants, path)
        except Exception as exc:  # noqa: BLE001 - one notebook's failure does not stop the rest
            failures.append(f"{notebook}: {_report.first_line(exc)}")
            print(f"   {notebook} stopped: {_report.first_line(exc)}", flush=True)
    return failures


def main(argv=None) -> int:
    args = parse(argv)
    names = chosen_notebooks(args.notebooks) if args.notebooks else []
    if args.estimate:
        for name in names or notebooks_with_variants():
            e = estimate(name, args.runs, args.variants)
            print(
                f"{name}: {e['speed cells']} speed cells, {e['comparisons per round']} timed "
                f"comparisons per round, {e['slow variants']} slow variant(s): about "
                f"{e['seconds'] / 60:.1f} min"
            )
        return 0
    from grader.runtime import device

    dev = device.setup()
    if not dev.supports("timing"):
        print(
            f"bench/trust.py measures on a CUDA GPU; this machine runs {dev.describe()}. "
            "Nothing was measured.",
            file=sys.stderr,
        )
        return 2
    if not args.no_repeat:
        section = repeatability(default_kernels()).record()
        print(
            "\n".join(
                _report.section_markdown(section) + [""] + _report.goals_markdown(section["goals"])
            )
        )
    failures = run_notebooks(names, args.runs, args.variants, args.out)
    summary = latest(args.out)
    if names and summary:
        print("\n".join(_report.trust_markdown(summary)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
