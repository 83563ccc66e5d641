"""The table and the JSON file a notebook run ends with: per notebook its wall time, how many
graded cells passed, each speed cell's score, and what went wrong."""

from __future__ import annotations

import json
import platform
from pathlib import Path

from grader.authoring.execute import Outcome


def _speed_text(outcome: Outcome) -> str:
    if outcome.grades is None or not outcome.grades.speed:
        return "-"
    return ", ".join(
        f"{grade_id.removeprefix('speed-')} {'not run' if s is None else f'{s:g}/{points:g}'}"
        for grade_id, (s, points) in outcome.grades.speed.items()
    )


def table(outcomes: list[Outcome]) -> str:
    """A plain-text table, one row per notebook and a total."""
    rows = [("notebook", "seconds", "graded passed", "speed scores", "status")]
    for o in outcomes:
        status = "ok" if o.ok else "FAILED"
        graded = "-" if o.grades is None else f"{o.grades.passed}/{o.grades.total}"
        rows.append((o.name, f"{o.seconds:.1f}", graded, _speed_text(o), status))
    failed = sum(not o.ok for o in outcomes)
    total = sum(o.seconds for o in outcomes)
    rows.append(("total", f"{total:.1f}", "", "", f"{failed} of {len(outcomes)} failed"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows
    ]
    problems = [
        f"{o.name}: {p}" for o in outcomes for p in ((o.error,) if o.error else ()) + o.problems
    ]
    if problems:
        lines += ["", "problems:"] + [f"  {p}" for p in problems]
    return "\n".join(lines)


def as_dict(outcomes: list[Outcome], device_text: str, versions: dict[str, str | None]) -> dict:
    """What `write` saves: the machine, the versions and one entry per notebook."""
    return {
        "device": device_text,
        "python": platform.python_version(),
        "versions": versions,
        "seconds": round(sum(o.seconds for o in outcomes), 1),
        "ok": all(o.ok for o in outcomes),
        "notebooks": [
            {
                "name": o.name,
                "seconds": round(o.seconds, 1),
                "ok": o.ok,
                "error": o.error,
                "problems": list(o.problems),
                "graded_passed": None if o.grades is None else o.grades.passed,
                "graded_total": None if o.grades is None else o.grades.total,
                "speed": {}
                if o.grades is None
                else {
                    grade_id: {"score": score, "points": points}
                    for grade_id, (score, points) in o.grades.speed.items()
                },
                "output": str(o.output),
            }
            for o in outcomes
        ],
    }


def write(path: Path, summary: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n")
