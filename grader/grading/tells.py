"""Tell-tale outputs of an autograded notebook: what its test cells show that their own code
cannot have produced. A second line behind grader.grading.scan, for attacks the scan did not
read: it catches careless ones only (a student's code that rewrites a test cell can also make it
print what the original prints), so it flags, never scores.

- A test cell whose last line is a statement, or a call to `print`, has no result to show: an
  `execute_result` there was made by something else (a display hook, a rewritten cell).
- A test cell whose last line prints, unconditionally, and that raised no error must have
  printed: silence means it did not run as written (an input transformer, a hook, a swallowed
  exception).
- The test cells of an exercise whose solution cell still holds the released stub must fail:
  one that passes did not run the stub."""

from __future__ import annotations

import ast

from grader.grading import scan

STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")  # grader/grading/nbgrader_config.py


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _last(source: str) -> ast.stmt | None:
    try:
        body = scan.parse(source).body
    except SyntaxError:
        return None
    return body[-1] if body else None


def _prints(statement: ast.stmt | None) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and isinstance(statement.value.func, ast.Name)
        and statement.value.func.id == "print"
    )


def tells(nb) -> list[str]:
    """What the test cells of autograded notebook `nb` show that their code cannot produce."""
    found = []
    stub = None  # the solution cell, holding the stub, whose tests follow
    for cell in nb.cells:
        meta = _meta(cell)
        if cell.cell_type != "code":
            continue
        if meta.get("solution"):
            lines = [line.strip() for line in cell.source.splitlines()]
            held = any(pair == STUB for pair in zip(lines, lines[1:], strict=False))
            stub = meta.get("grade_id", "a solution cell") if held else None
            continue
        if not meta.get("grade"):
            continue
        label = meta.get("grade_id", "a test cell")
        outputs = cell.get("outputs", [])
        kinds = {o.get("output_type") for o in outputs}
        last = _last(cell.source)
        if "execute_result" in kinds and (not isinstance(last, ast.Expr) or _prints(last)):
            found.append(f"cell {label} shows a result, but its last line has none to show")
        if (
            _prints(last)
            and "error" not in kinds
            and not any(
                o.get("output_type") == "stream" and o.get("name") == "stdout" for o in outputs
            )
        ):
            found.append(f"cell {label} printed nothing, but its last line prints")
        if stub and "error" not in kinds and not label.startswith("speed-"):
            found.append(f"cell {label} passed, but solution cell {stub} still holds the stub")
    return found
