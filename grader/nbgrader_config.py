"""nbgrader's configuration for this course; found through JUPYTER_CONFIG_PATH=grader."""

import os

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

# The course directory defaults to build/ beside this package; commands may pass another root.
c.CourseDirectory.root = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build"
)
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"

# The stub nbgrader leaves in each solution region. grader.stubs recognises it everywhere,
# including inside @triton.jit kernels, and turns it into one sentence.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Interpreter mode runs kernels as Python on the CPU: give cells time. A cell that still runs out
# of time is interrupted and costs its own points, not the notebook's.
c.Execute.timeout = 600
c.Execute.interrupt_on_timeout = True
c.Execute.kernel_name = "python3"
