"""An nbgrader preprocessor that keeps one student's notebook from swamping its own grading;
grader/grading/nbgrader_config.py installs it in `nbgrader autograde`.

- `CappedExecute`: nbclient keeps every output in memory and in the graded notebook. Past
  nbgrader_policy.OUTPUT_LIMIT bytes of output, what cells print or display is dropped; errors and
  results are kept, cut short, so that each cell scores as it would have; a cell that lost output
  says so once on the stream it lost (stderr included, which still costs a test cell).
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

from nbgrader.preprocessors import Execute

from grader.grading import cost, feedback, nbgrader_policy

KEPT_CHARS = 2000  # of an error's or a result's text, once the output limit is passed


def _cut(text: str) -> str:
    return text if len(text) <= KEPT_CHARS else text[:KEPT_CHARS] + " [...]"


class CappedExecute(Execute):
    """nbgrader's Execute, keeping at most nbgrader_policy.OUTPUT_LIMIT bytes of output, and the
    copy of the outputs that the feedback page shows: taken as the first cell holding hidden
    tests starts, or after the last cell where none does (grader.grading.feedback)."""

    def preprocess(self, nb, resources, km=None):
        self._kept = 0
        self._noted: set[tuple[int, str]] = set()
        self._timer = cost.Recorder(str(resources.get("unique_key", "")))
        nb.metadata.pop(feedback.SNAPSHOT, None)  # one the submission brought is not the grader's
        done = super().preprocess(nb, resources, km)
        if feedback.SNAPSHOT not in nb.metadata:
            feedback.snapshot(nb, len(nb.cells))
        feedback.settle(nb)
        self._timer.save()
        return done

    @contextmanager
    def setup_kernel(self, **kwargs):
        started = time.perf_counter()
        with super().setup_kernel(**kwargs):
            self._timer.times.kernel_start = time.perf_counter() - started
            try:
                yield
            finally:
                started = time.perf_counter()
        self._timer.times.kernel_stop = time.perf_counter() - started

    def preprocess_cell(self, cell, resources, index):
        if feedback.SNAPSHOT not in self.nb.metadata and feedback.holds_hidden_tests(cell):
            feedback.snapshot(self.nb, index)
        started = time.perf_counter()
        done = super().preprocess_cell(cell, resources, index)
        if cell.cell_type == "code":
            self._timer.times.cells.append(time.perf_counter() - started)
        return done

    def output(self, outs, msg, display_id, cell_index):
        size = len(json.dumps(msg["content"]))
        if self._kept + size <= nbgrader_policy.OUTPUT_LIMIT:
            self._kept += size
            return super().output(outs, msg, display_id, cell_index)
        content = msg["content"]
        if msg["msg_type"] == "error":
            content["evalue"] = _cut(str(content.get("evalue", "")))
            content["traceback"] = [_cut("\n".join(map(str, content.get("traceback", []))))]
            return super().output(outs, msg, display_id, cell_index)
        if msg["msg_type"] == "execute_result":
            content["data"] = {"text/plain": _cut(str(content.get("data", {}).get("text/plain")))}
            content["metadata"] = {}
            return super().output(outs, msg, display_id, cell_index)
        stream = content.get("name") if msg["msg_type"] == "stream" else "stdout"
        if (cell_index, stream) in self._noted:
            return None
        self._noted.add((cell_index, stream))
        note = nbgrader_policy.OUTPUT_CUT.format(limit=nbgrader_policy.OUTPUT_LIMIT >> 20)
        msg = {**msg, "msg_type": "stream", "content": {"name": stream, "text": note + "\n"}}
        return super().output(outs, msg, None, cell_index)
