"""Execute solution notebooks with papermill (the CI's and the GPU runner's path): build the
source notebooks, run each with its parameters, and report time and outcome per notebook."""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass
from pathlib import Path

from grader import build


@dataclass(frozen=True)
class Outcome:
    name: str
    seconds: float
    output: Path
    error: str | None = None


def parse_value(text: str):
    """A papermill parameter from the command line: a Python literal, else the string itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def run_notebook(
    source_ipynb: Path, output: Path, parameters: dict | None = None, timeout: int = 600
) -> Outcome:
    """Run one notebook in its own folder; the executed copy is written even when a cell fails."""
    import papermill

    output.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    error = None
    try:
        papermill.execute_notebook(
            str(source_ipynb),
            str(output),
            parameters=parameters or {},
            kernel_name="python3",
            cwd=str(source_ipynb.parent),
            progress_bar=False,
            execution_timeout=timeout,
        )
    except papermill.PapermillExecutionError as exc:
        error = f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
    return Outcome(source_ipynb.parent.name, time.perf_counter() - start, output, error)


def run_solutions(
    names: list[str] | None = None,
    *,
    out_dir: str | Path = "build/executed",
    parameters: list[tuple[str, str]] | dict | None = None,
) -> list[Outcome]:
    """Build and execute the chosen solution notebooks (all by default); returns the failures."""
    out_dir = Path(out_dir)
    params = dict(parameters or {})
    params = {k: parse_value(v) if isinstance(v, str) else v for k, v in params.items()}
    found = build.build_sources(build.BUILD)
    chosen = [a for a in found if not names or a.name in names]
    unknown = set(names or ()) - {a.name for a in found}
    if unknown:
        raise SystemExit(f"no such notebook: {', '.join(sorted(unknown))}")
    outcomes = []
    for a in chosen:
        source = build.BUILD / "source" / a.name / a.notebook_name
        outcome = run_notebook(source, out_dir / a.name / a.notebook_name, params)
        status = "ok" if outcome.error is None else f"FAILED {outcome.error}"
        print(f"{a.name:24s} {outcome.seconds:7.1f} s  {status}", flush=True)
        outcomes.append(outcome)
    return [o for o in outcomes if o.error is not None]
