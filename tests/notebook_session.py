"""A Jupyter kernel that has run one solution notebook, and the notebook's cells: the mechanism
by which tests/test_known_wrong.py swaps exercise cells and bench/trust.py re-runs speed cells."""

import tempfile
from pathlib import Path

from jupyter_client.manager import KernelManager

from grader.authoring import build, kernel_connection
from grader.grading import roles
from grader.runtime import perf
from grader.runtime.handin import names


def segments(source):
    """A test cell's source as [(hidden, code)]: the runs of lines outside nbgrader's hidden
    regions (what the student's copy holds and runs) and inside them, in order, markers kept.
    Regions are at the top level of a cell, so running the pieces in turn runs the cell."""
    pieces = [(False, [])]
    for line in source.splitlines(keepends=True):
        if "### BEGIN HIDDEN TESTS" in line:
            pieces.append((True, []))
        pieces[-1][1].append(line)
        if "### END HIDDEN TESTS" in line:
            pieces.append((False, []))
    return [(h, "".join(lines)) for h, lines in pieces if "".join(lines).strip()]


def unneeded(cells) -> frozenset[str]:
    """The ids of the given code cells that no answer or test cell needs, by grader.grading.roles's
    reading of what each cell binds and reads: the notebook's demonstrations. The first code
    cell, which chooses the device, is needed."""
    code = {i: c for i, c in enumerate(cells) if c.cell_type == "code"}
    kept = {i for i, c in code.items() if roles.kind(c) in ("answer", "test")} | {min(code)}
    kept = roles.closure({i: names(c.source) for i, c in code.items()}, kept)
    return frozenset(c.id for i, c in code.items() if i not in kept)


class Session:
    """A kernel that has run one solution notebook, and the notebook's cells."""

    def __init__(
        self,
        notebook: str,
        env: dict[str, str] | None = None,
        hidden_tests: bool = True,
        needed_only: bool = False,
    ):
        """Start a kernel (with `env` for its environment where given, the tests' otherwise)
        and run the solution notebook in it; without `hidden_tests`, as a student's copy runs
        (the hidden tests' regions left out: the state the cells build is the same, as the
        released notebook runs without them). With `needed_only`, the demonstrations
        (`unneeded`) are left out, here and from `code_cells`."""
        assignment = next(a for a in build.assignments() if a.name == notebook)
        self.cells = build.to_notebook(assignment.source).cells
        self.left_out = unneeded(self.cells) if needed_only else frozenset()
        self.sockets = tempfile.TemporaryDirectory(prefix="kernel-")
        self.km = KernelManager(
            kernel_name="python3", **kernel_connection.sockets(Path(self.sockets.name))
        )
        self.km.start_kernel(cwd=str(assignment.source.parent), **({"env": env} if env else {}))
        self.kc = self.km.client()
        try:
            self.kc.start_channels()
            self.kc.wait_for_ready(timeout=60)
            for cell in self.code_cells(0, len(self.cells)):
                visible = "".join(code for hidden, code in segments(cell.source) if not hidden)
                status, detail = self.run(cell.source if hidden_tests else visible)
                assert status == "ok", f"the solution itself fails in {cell.id}: {detail}"
                if "parameters" in cell.metadata.get("tags", []):
                    self.run("RUN_BENCHMARKS = False")  # graded cells only: no sweeps
        except BaseException:
            self.close()  # no kernel left running behind a failed start
            raise

    def code_cells(self, start, stop):
        return [
            c for c in self.cells[start:stop] if c.cell_type == "code" and c.id not in self.left_out
        ]

    def run(self, code, results=None):
        """Execute code; returns (status, error text). Results, displayed and printed text go to
        `results`, and before its text each speed verdict a cell publishes, as a dict."""
        errors = []

        def hook(msg):
            kind = msg["msg_type"]
            if kind == "error":
                errors.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
            elif results is not None and kind in ("execute_result", "display_data"):
                data = msg["content"]["data"]
                if perf.SPEED_MIMETYPE in data:
                    results.append(data[perf.SPEED_MIMETYPE])
                results.append(data.get("text/plain", ""))
            elif results is not None and kind == "stream":
                results.append(msg["content"]["text"])

        reply = self.kc.execute_interactive(code, timeout=600, output_hook=hook)
        return reply["content"]["status"], "; ".join(errors)[:500]

    def span(self, grade_id, speed=False):
        """The exercise cell's index and the index of its last test cell (speed cells too when
        `speed`), stopping at the next exercise."""
        index = next(i for i, c in enumerate(self.cells) if c.id == grade_id)
        last = index
        for i in range(index + 1, len(self.cells)):
            meta = self.cells[i].metadata.get("nbgrader", {})
            if meta.get("solution"):
                break
            if meta.get("grade") and (speed or not meta["grade_id"].startswith("speed-")):
                last = i
        assert last > index, f"{grade_id} has no test cell after it"
        return index, last

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        self.sockets.cleanup()
