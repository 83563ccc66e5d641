"""nbgrader's configuration for this course; found through JUPYTER_CONFIG_PATH=grader/grading."""

import os
import sys

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:  # the grader package, also where it is not installed (a GPU image)
    sys.path.insert(0, ROOT)
from grader.grading import nbgrader_policy  # noqa: E402

# The course directory defaults to build/ beside this package; commands may pass another root.
c.CourseDirectory.root = os.path.join(ROOT, "build")
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"

# The stub nbgrader leaves in each solution region. grader.runtime.stubs recognises it everywhere,
# including inside @triton.jit kernels, and turns it into one sentence.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Interpreter mode runs kernels as Python on the CPU, and on a GPU a cell may compile and autotune:
# give cells time. nbclient asks timeout_func for each cell's limit (speed cells get longer; see
# grader/grading/nbgrader_policy.py; COURSE_CELL_TIMEOUT and COURSE_SPEED_CELL_TIMEOUT set
# them). A cell that runs out of time is interrupted and costs its own points, not the notebook's.
c.Execute.timeout = nbgrader_policy.CELL_TIMEOUT
c.Execute.timeout_func = nbgrader_policy.cell_timeout
c.Execute.interrupt_on_timeout = True
c.Execute.kernel_name = "python3"
# After the last cell every output is in the notebook and the kernel (its sandbox with it) is
# thrown away: killed at once rather than given seconds for a graceful exit (torch and CUDA
# teardown took 2-3 s a student on an H100; results/2026-11-24-h100-grading-cost.md).
c.Execute.shutdown_kernel = "immediate"

# What nbgrader grades is the notebook grader.grading.assemble made: the release, with the
# student's answer cells (its metadata and every other cell are the release's). nbgrader's
# OverwriteCells then puts the hidden tests into the test cells, from the gradebook. One
# student's notebook cannot hold unbounded output (kept up to nbgrader_policy.OUTPUT_LIMIT);
# grader.grading.findings flags a notebook that passed it for a human look.
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.Autograde.autograde_preprocessors = [
    "grader.grading.notebook_guards.JudgedExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# A test cell with any stderr output scores 0; library warnings are not the student's failure.
c.IgnorePattern.enabled = True  # off by default in nbgrader 0.9.6
c.IgnorePattern.pattern = nbgrader_policy.STDERR_NOISE

# Read-only cells: grading runs the release's, whatever the student changed. The build marks them
# non-editable itself, all but the parameters cell, which students may change while they work
# (grader/authoring/build.py); nbgrader's own locking would make that one non-editable too.
c.LockCells.lock_readonly_cells = False

# Feedback is made from the autograded notebook: every output, the test cells' being the judge's
# (grader.grading.judge), whose hidden tests never reached the student's process; ClearHiddenTests
# clears them from the test cells' source, as course/ does.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "nbgrader.preprocessors.ClearHiddenTests",
]

# LMS downloads (`nbgrader zip_collect`): the file-name pattern, Canvas's by default; see
# grader/grading/nbgrader_policy.py.
c.FileNameCollectorPlugin.named_regexp = nbgrader_policy.LMS_FILE_PATTERN

# Late submissions: nbgrader records how late each one is; the penalty is the instructor's call
# (LateSubmissionPlugin.penalty_method: "none", the default, or "zero", or a plugin of your own).
c.LateSubmissionPlugin.penalty_method = "none"
