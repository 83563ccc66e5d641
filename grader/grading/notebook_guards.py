"""nbgrader's Execute for this course (grader/grading/nbgrader_config.py installs it): each cell
where grader.grading.roles says it runs, and a notebook that cannot swamp its own grading.

The given and answer cells run in the student's sandboxed kernel; the test cells, and the given
cells they need, in the judge (grader.grading.judge), in this process, the student's kernel
serving the judge's calls (grader.runtime.serve) over a socket in its private folder. The
judge's outputs become the cell's, which nbgrader scores; the error of a cell with hidden tests
shows its message alone, as a traceback would quote the hidden lines.

Past nbgrader_policy.OUTPUT_LIMIT bytes of the kernel's output, what cells print or display is
dropped; errors and results are kept, cut short, so that each cell scores as it would have; a
cell that lost output says so once on the stream it lost."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import nbformat
from nbclient.util import run_sync
from nbgrader.preprocessors import Execute

from grader.grading import cost, jail, nbgrader_policy, roles

KEPT_CHARS = 2000  # of an error's or a result's text, once the output limit is passed
SERVE = "import grader.runtime.serve as _serve; _serve.serve({path!r}); del _serve"
SERVED_WAIT = 30.0  # seconds for the student's kernel to end serving after the judge's cell
HIDDEN = "### BEGIN HIDDEN TESTS"  # nbgrader's marker of a hidden region
NO_BENCHMARKS = "\nRUN_BENCHMARKS = False  # at grading, only the graded cells measure"


def _cut(text: str) -> str:
    return text if len(text) <= KEPT_CHARS else text[:KEPT_CHARS] + " [...]"


class JudgedExecute(Execute):
    """nbgrader's Execute with the judge and the output limit: see the module's docstring."""

    def preprocess(self, nb, resources, km=None):
        self._kept = 0
        self._noted: set[tuple[int, str]] = set()
        student = resources.get("nbgrader", {}).get("student", "")
        self._timer = cost.Recorder(str(resources.get("unique_key", "")), str(student))
        for cell in nb.cells:  # no sweep, timing or profile of a given cell: they score nothing
            if "parameters" in cell.metadata.get("tags", []):
                cell.source += NO_BENCHMARKS
        self._plan = roles.plan(nb, *self._answers({"notebook": nb, **resources}))
        folder = Path(resources.get("metadata", {}).get("path") or ".").resolve()
        with self._judge(folder, nb):
            done = super().preprocess(nb, resources, km)
        self._timer.save()
        return done

    def _answers(self, resources) -> tuple[frozenset[str], frozenset[str]]:
        """The names the answer cells of the authors' notebook bind, and those they read
        (grader.grading.roles)."""
        from nbgrader.coursedir import CourseDirectory

        info = resources.get("nbgrader")
        if not info:  # a notebook run outside nbgrader's autograde: its own answer cells
            return roles.answers(self.nb if getattr(self, "nb", None) else resources["notebook"])
        coursedir = CourseDirectory(parent=self)
        folder = coursedir.format_path(coursedir.source_directory, ".", info.get("assignment"))
        source = Path(folder) / f"{info.get('notebook')}.ipynb"
        return roles.answers(nbformat.read(source, as_version=4))

    @contextmanager
    def _judge(self, folder: Path, nb):
        """The judge, its socket in the kernel's private folder (the jail's, else one of its
        own); on a GPU, the activity log the kernel's CUDA starts (grader.grading.activity)."""
        from grader.grading import activity
        from grader.grading.judge import Judge, Speed
        from grader.runtime import watches

        runtime = os.environ.get("JUPYTER_RUNTIME_DIR")  # the jail's private folder, if jailed
        made = None if runtime else tempfile.mkdtemp(prefix="course-judge-")
        where = Path(runtime or made)
        gpu = os.environ.get("COURSE_MODE") == "gpu"
        self.judge = Judge(where / "judge.sock", folder, "cuda" if gpu else "cpu",
                           self._plan.settings)  # fmt: skip
        self.judge.sources = roles.sources(nb)
        self.judge.launchable = roles.launchable(nb)
        self.judge.prefix = lambda reached: roles.replay(nb, self._plan, self._index, reached)
        spec = where.parent / "spec.json"  # the jail's: ncu runs in the student's sandbox too
        self.judge.profiled = jail.ncu_runner(spec, str(folder)) if spec.is_file() else None
        log, why, self._kernel_env = None, None, {}
        library = os.environ.get(activity.LIBRARY)
        if gpu and library:
            log = activity.Log(where / "activity.sock")
            self._kernel_env = {"CUDA_INJECTION64_PATH": library, activity.SOCKET: str(log.path)}
        elif gpu:
            why = os.environ.get(activity.UNBUILT) or "the GPU activity library was not built"
        self._speed = Speed(self.judge, log, why)
        try:
            with watches.measured_elsewhere(self._speed):
                yield
        finally:
            self.judge.close()
            if log is not None:
                log.close()
            if made:
                shutil.rmtree(made, ignore_errors=True)

    @contextmanager
    def setup_kernel(self, **kwargs):
        started = time.perf_counter()
        with ExitStack() as stack:
            before = {k: os.environ.get(k) for k in self._kernel_env}
            os.environ.update(self._kernel_env)  # the activity library, for the kernel's CUDA
            try:
                stack.enter_context(super().setup_kernel(**kwargs))
            finally:  # taken away once the kernel runs: the judge's own CUDA must not load it
                for key in before:
                    os.environ.pop(key, None)
                os.environ.update({k: v for k, v in before.items() if v is not None})
            self._timer.times.kernel_start = time.perf_counter() - started
            try:
                yield
            finally:
                started = time.perf_counter()
        self._timer.times.kernel_stop = time.perf_counter() - started

    def preprocess_cell(self, cell, resources, index):
        where = self._plan.where[index]
        self._index = index
        if cell.cell_type == "code":  # the judge's speed cells know which cells follow which
            self._speed.next_cell()
        started = time.perf_counter()
        if where == roles.JUDGE:
            done = self._judged(cell, resources, index)
        else:
            done = super().preprocess_cell(cell, resources, index)
            if where == roles.BOTH:
                self._replayed(cell, index)
        if cell.cell_type == "code":
            self._timer.times.cells.append(time.perf_counter() - started)
        return done

    def _judged(self, cell, resources, index):
        """Run a test cell in the judge, the student's kernel serving; its outputs the judge's."""
        self.code_cells_executed += 1
        with self._served(index):
            outputs = self.judge.run(cell.source, timeout=self._get_timeout(cell))
        if HIDDEN in cell.source:  # no traceback, which would quote the hidden lines
            for o in outputs:
                if o["output_type"] == "error":
                    o["traceback"] = [f"{o['ename']}: {o['evalue']}"]
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        cell.execution_count = self.judge.shell.shell.execution_count - 1
        return cell, resources

    def _replayed(self, cell, index) -> None:
        """Run a given cell the judge needs in the judge too, silently, for the names later test
        cells read."""
        with self._served(index):
            outputs = self.judge.run(cell.source, timeout=self._get_timeout(cell), silent=True)
        failed = "the judge's copy of cell %s failed: %s: %s"
        for o in outputs:
            if o.get("output_type") == "error":
                self.log.warning(failed, index, o["ename"], o["evalue"])

    @contextmanager
    def _served(self, index: int):
        """The student's kernel serving the judge while the block runs, where the cell at
        `index` reads any of the student's names."""
        served = self._plan.served[index]
        if not served:
            yield
            return
        code = SERVE.format(path=str(self.judge.path))
        msg_id = self.kc.execute(
            code, silent=True, store_history=False, allow_stdin=False, stop_on_error=False
        )
        try:
            self.judge.begin(served)
            yield
        finally:
            self.judge.end()
            run_sync(self._ended)(msg_id)

    async def _ended(self, msg_id: str) -> None:
        """Wait for the serving request's reply; interrupt the kernel if it does not come."""
        for attempt in range(2):
            deadline = time.monotonic() + SERVED_WAIT
            while time.monotonic() < deadline:
                try:
                    msg = await self.kc.shell_channel.get_msg(timeout=1)
                except Exception:  # queue.Empty, or the channel closed with the kernel
                    if not await self.kc.is_alive():
                        return
                    continue
                if msg.get("parent_header", {}).get("msg_id") == msg_id:
                    return
            if attempt == 0:
                self.log.warning("the kernel did not stop serving the judge; interrupting it")
                await self.km.interrupt_kernel()

    def output(self, outs, msg, display_id, cell_index):
        content = msg["content"]
        size = len(json.dumps(content))
        if self._kept + size <= nbgrader_policy.OUTPUT_LIMIT:
            self._kept += size
        elif msg["msg_type"] == "error":
            content["evalue"] = _cut(str(content.get("evalue", "")))
            content["traceback"] = [_cut("\n".join(map(str, content.get("traceback", []))))]
        elif msg["msg_type"] == "execute_result":
            content["data"] = {"text/plain": _cut(str(content.get("data", {}).get("text/plain")))}
            content["metadata"] = {}
        else:
            stream = content.get("name") if msg["msg_type"] == "stream" else "stdout"
            if (cell_index, stream) in self._noted:
                return None
            self._noted.add((cell_index, stream))
            note = nbgrader_policy.OUTPUT_CUT.format(limit=nbgrader_policy.OUTPUT_LIMIT >> 20)
            msg = {**msg, "msg_type": "stream", "content": {"name": stream, "text": note + "\n"}}
            display_id = None
        return super().output(outs, msg, display_id, cell_index)
