"""A second static detector beside grader.grading.scan: kernelguard (PyPI; MIT), a maintained
rule-based detector of kernel-benchmark hacks, run on the trusted side over the answer cells of a
submission. It reads their source; nothing of the student's runs here.

kernelguard looks for most of its hacks inside the functions it is told are entry points (and
what they call): here, the names the answer cells bind that the release's other cells read, the
student's functions that the tests and speed cells call. Not every name they bind: a helper that
keeps a scratch buffer by shape and returns it would then look like a kept output (it matched
LAST_CALL_REPLAY that way). Of its rules, only those that kernelguard ranks strong enough to
reject a submission on their own become findings, each a `scan.Route` of kind "cheating". Its
weaker signals (dynamic code, `sys.modules`, workspace caches, CUDA graphs, side streams) it marks
as telemetry only; the scan reports dynamic code itself, and the runtime guards
(grader.runtime.perf, integrity, launches) catch the work a speed cell does not see by its
effects.

What it adds to the scan, on the course's attack corpus (results/2026-11-26-kernelguard.md): a
launcher that keeps the outputs of earlier calls, keyed by its inputs' addresses, and returns
them again. The answer cells are read one by one, so that a finding names its cell, and then
together, for a hack split over two cells (a wrapper defined in one, applied in another)."""

from __future__ import annotations

import ast

import kernelguard

from grader.grading import scan


def answer_cells(submitted, released) -> list[tuple[str, str]]:
    """(grade_id, source) of the cells of `submitted` that answer a solution cell of the release,
    in notebook order: what the trusted side takes from a submission."""
    wanted = {
        meta["grade_id"]
        for cell in released.cells
        if (meta := cell.get("metadata", {}).get("nbgrader", {})).get("solution")
        and meta.get("grade_id")
    }
    found = []
    for cell in submitted.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code" and grade_id in wanted:
            found.append((grade_id, cell.source))
    return found


def entry_points(released) -> set[str]:
    """The names the release's cells outside its answer cells read: among them, the student's
    functions that the tests and the speed cells call."""
    found = set()
    for cell in released.cells:
        if cell.cell_type != "code" or cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            continue
        try:
            tree = scan.parse(scan.python(cell.source))
        except SyntaxError:
            continue
        found |= {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
    return found


def _bound(trees: list[ast.Module]) -> list[str]:
    """The names the cells bind at their top level (functions, classes, assignments), in order."""
    names = []
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.append(node.name)
            elif isinstance(node, ast.Assign):
                names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return list(dict.fromkeys(names))


def _strong(code: str, entry_points: list[str]) -> set[str]:
    """kernelguard's strong rules that `code` matches."""
    # kernelguard keeps its settings in module globals, and CPython 3.11 cannot parse on two
    # threads at once (scan.parse): one analysis at a time, under the scan's own lock
    with scan._PARSING:
        kernelguard.configure_runtime(config_data={"entrypoints": {"names": entry_points}})
        matched = kernelguard.analyze_code(code, compute_structural_hash=False)
    return {
        m["pattern"]
        for m in matched["matched_patterns"]
        if kernelguard.get_rule_policy(m["pattern"]).max_outcome == kernelguard.AUTO_FILTER
    }


def _read(labels, code, entry_points, known=frozenset(), how=""):
    """(the strong rules `code` matches, or None where kernelguard fails on it; a route on each
    cell of `labels` that names the rules not `known` already, or the failure)."""
    try:
        rules = _strong(code, entry_points)
    except Exception as exc:  # it recurses over the syntax tree: a long expression stops it
        what = f"is code that kernelguard cannot read{how} ({type(exc).__name__})"
        return None, [scan.Route("dynamic-code", label, what) for label in labels]
    new = sorted(rules - known)
    if not new:
        return rules, []
    families = dict.fromkeys(
        kernelguard.get_rule_policy(rule).technique_family.replace("_", " ") for rule in new
    )
    what = (
        f"matches kernelguard's rule{'s' if len(new) > 1 else ''} {', '.join(new)} "
        f"({', '.join(families)}){how}"
    )
    return rules, [scan.Route("cheating", label, what) for label in labels]


def routes(cells: list[tuple[str, str]], called: set[str]) -> list[scan.Route]:
    """What kernelguard finds in the answer cells `cells` ((label, source), in notebook order),
    with the names of theirs in `called` (entry_points) as the entry points it searches: a
    "cheating" route for each cell that matches its strong rules, and a "dynamic-code" route for
    each cell it fails to read. A cell that is not Python is left out, as the scan leaves it (it
    fails when it runs, and costs only its own points)."""
    readable = []
    for label, source in cells:
        code = scan.python(source)
        try:
            readable.append((label, code, scan.parse(code)))
        except SyntaxError:
            continue
    bound = _bound([tree for _, _, tree in readable])
    names = [name for name in bound if name in called] or ["custom_kernel"]
    found, alone, read = [], set(), []
    for label, code, _ in readable:
        rules, more = _read([label], code, names)
        found += more
        if rules is not None:
            alone |= rules
            read.append((label, code))
    if len(read) > 1:
        how = " with the other answer cells"
        joined = "\n\n".join(code for _, code in read)
        rules, together = _read([label for label, _ in read], joined, names, alone, how)
        needed = _needed(read, names, rules - alone) if together and rules is not None else read
        if len(needed) < len(read):  # name only the cells that match together
            joined = "\n\n".join(code for _, code in needed)
            together = _read([label for label, _ in needed], joined, names, alone, how)[1]
        found += together
    return found


def _needed(read: list[tuple[str, str]], names: list[str], rules: set[str]):
    """The fewest of the cells `read` ((label, code)) that, joined, still match `rules`: each is
    left out in turn, and stays out where the others still match them, so that a cell that only
    stands beside the ones that cheat together is not named."""
    kept = list(read)
    for cell in list(kept):
        rest = [c for c in kept if c is not cell]
        if len(rest) < 2:
            break
        try:
            if rules <= _strong("\n\n".join(code for _, code in rest), names):
                kept = rest
        except Exception:  # noqa: BLE001 - kernelguard fails on a part: the cell stays
            continue
    return kept
