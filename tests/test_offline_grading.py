"""Grading where nbgrader came from the offline wheelhouse, and a batch whose feedback fails.

- nbconvert's templates, which nbgrader's feedback pages extend, are found beside a
  `pip install --target` folder (grader.grading.jupyter_data), and their absence stops a batch
  before it grades anyone, saying what to do;
- the sandbox binds such a folder for the kernel, never one that holds the repository;
- nbgrader's command-line steps run without the packages wheelhouse-grading.txt leaves out;
- a batch whose feedback pages could not be written says so in its report and CSV and exits 1,
  and the same command run again once the cause is gone gives every page and exits 0.
"""

import contextlib
import csv
import importlib.machinery
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.grading import jail, jupyter_data
from tests import hostile, light, shared

LEFT_OUT = ("jupyterlab", "jupyterlab_server", "notebook")  # see grader/wheelhouse-grading.txt


def _target_install(tmp_path: Path, templates: bool) -> Path:
    """A folder laid out as `pip install --target` leaves nbconvert."""
    site = tmp_path / "site"
    (site / "nbconvert").mkdir(parents=True)
    (site / "nbconvert" / "__init__.py").write_text("")
    if templates:
        (site / "share" / "jupyter" / jupyter_data.TEMPLATE).mkdir(parents=True)
    return site


@pytest.fixture
def only(monkeypatch, tmp_path):
    """Jupyter's own data folders reduced to an empty one, and nbconvert found in `site`."""
    from jupyter_core import paths

    empty = tmp_path / "system"
    empty.mkdir()
    monkeypatch.setattr(paths, "jupyter_path", lambda *a: [str(empty)])
    monkeypatch.delenv("JUPYTER_PATH", raising=False)

    def install(site: Path):
        real = importlib.util.find_spec

        def find_spec(name, *args):
            if name not in ("nbconvert", "nbgrader"):
                return real(name, *args)
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(site / name)]
            return spec

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)

    return install


def test_templates_beside_a_target_install_are_put_on_jupyter_path(only, tmp_path):
    site = _target_install(tmp_path, templates=True)
    only(site)
    env = jupyter_data.environment({"PATH": "/usr/bin"})
    assert env["JUPYTER_PATH"].split(":")[0] == str(site / "share" / "jupyter")
    assert jupyter_data.require_templates({}) == site / "share" / "jupyter" / jupyter_data.TEMPLATE


def test_missing_templates_stop_the_batch_with_what_to_do(only, tmp_path):
    only(_target_install(tmp_path, templates=False))
    assert "JUPYTER_PATH" not in jupyter_data.environment({})
    with pytest.raises(jupyter_data.MissingTemplates, match="reinstall it with pip"):
        jupyter_data.require_templates({})


def test_jupyter_path_given_is_kept_and_searched_first(only, tmp_path):
    only(_target_install(tmp_path, templates=False))
    given = tmp_path / "mine"
    (given / jupyter_data.TEMPLATE).mkdir(parents=True)
    assert jupyter_data.require_templates({"JUPYTER_PATH": str(given)}) == (
        given / jupyter_data.TEMPLATE
    )


def test_the_sandbox_binds_a_package_folder_outside_the_python_but_not_the_repository(
    monkeypatch, tmp_path, root
):
    site = tmp_path / "site"
    (site / "course_probe").mkdir(parents=True)
    (site / "course_probe" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    # the probe alone: on a GPU image the real kernel modules lie in a --target folder too
    monkeypatch.setattr(jail, "KERNEL_MODULES", ("course_probe",))
    spec = jail.Spec(str(tmp_path / "jail"), [sys.executable, "-m", "ipykernel_launcher"], 1, 1, 1)
    assert jail.package_folders(sys.executable) == [str(site.resolve())]
    assert jail.environment(spec, {})["PYTHONPATH"].split(":") == [
        jail.RUNTIME,
        str(site.resolve()),
    ]
    monkeypatch.setattr(jail, "KERNEL_MODULES", ("grader",))  # found in the repository
    monkeypatch.syspath_prepend(str(root))
    with pytest.raises(jail.JailError, match="holds the course's repository"):
        jail.package_folders(sys.executable)


@pytest.mark.tooling
@pytest.mark.parametrize("step", ["autograde", "generate_feedback"])
def test_nbgrader_steps_run_without_what_the_grading_wheelhouse_leaves_out(step):
    blocked = "; ".join(f"sys.modules[{m!r}] = None" for m in LEFT_OUT)
    code = (
        f"import sys; {blocked}\n"
        "from nbgrader.apps.nbgraderapp import NbGraderApp\n"
        "from nbgrader.converters import Autograde, GenerateFeedback\n"
        "from nbconvert.exporters import HTMLExporter\n"
        f"NbGraderApp.launch_instance(['{step}', '--help'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ModuleNotFoundError" not in done.stderr


# -- a batch whose feedback fails ---------------------------------------------------------------

ASSIGNMENT, NOTEBOOK = light.ASSIGNMENT, light.NOTEBOOK  # a notebook that imports nothing
STUDENT = "ada"
LIMITS = ["--cell-timeout", "120", "--speed-cell-timeout", "120", "--timeout", "600"]


def _grade(root: Path, inbox: Path):
    from grader import cli

    argv = ["autograde", ASSIGNMENT, "--root", str(root), "--mode", "interpreter"]
    argv += ["--submissions", str(inbox), "--sandbox", "none", "--jobs", "1", *LIMITS]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = cli.main(argv)
    out = root / "grading" / ASSIGNMENT
    with open(out / "grades.csv", newline="") as f:
        review = {row["student_id"]: row["needs_review"] for row in csv.DictReader(f)}
    return code, printed.getvalue(), (out / "report.md").read_text(), review, out


@pytest.mark.slow
@pytest.mark.tooling
def test_a_batch_whose_feedback_fails_says_so_and_exits_1(monkeypatch, tmp_path, registered_light):
    from grader.grading import autograde

    root = shared.copy_course(registered_light, tmp_path / "course")
    materials = hostile.Materials(ASSIGNMENT, NOTEBOOK, light.source(), light.source())
    inbox = tmp_path / "inbox"
    (inbox / STUDENT / ASSIGNMENT).mkdir(parents=True)
    nbformat.write(materials.answered(), inbox / STUDENT / ASSIGNMENT / f"{NOTEBOOK}.ipynb")
    real = autograde.nbgrader_args

    def broken_feedback(batch, *args):  # nbconvert cannot find the page's template
        if args[0] == "generate_feedback":
            args = (*args, "--HTMLExporter.template_name=no-such-template")
        return real(batch, *args)

    monkeypatch.setattr(autograde, "nbgrader_args", broken_feedback)
    code, printed, report, review, out = _grade(root, inbox)
    student = STUDENT
    assert code == 1, printed[-3000:]
    assert "every submission was graded without trouble" not in report
    assert "The grader had trouble with 1 of these submissions" in report
    assert "no feedback page" in review[student] and "no-such-template" in review[student]
    assert not (out / "feedback" / student).exists()
    assert "no-such-template" in (out / "feedback.log").read_text()

    monkeypatch.setattr(autograde, "nbgrader_args", real)  # the cause fixed: the same command
    code, printed, report, review, out = _grade(root, inbox)
    assert code == 0, printed[-3000:]
    assert "None: every submission was graded without trouble." in report
    assert review[student] == ""
    assert (out / "feedback" / student / f"{NOTEBOOK}.html").is_file()


def _heavy_modules_after(root, code: str) -> list[str]:
    """Which of torch, Triton and the RFC 3987 grammar a fresh Python has loaded after `code`."""
    probe = code + (
        "import json, sys\n"
        "heavy = ('torch', 'triton', 'rfc3987_syntax')\n"
        "print(json.dumps([m for m in heavy if sys.modules.get(m)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=root, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_nbgrader_processes_start_without_torch(root):
    """What nbgrader imports of the grader in each student's process (its config, the guards,
    the judge) leaves torch and Triton out until a notebook's cells import them: the judge runs
    the release's given cells, the student's kernel serves."""
    code = (
        "import runpy\n"
        "from grader.authoring import nbgrader_main\n"
        "nbgrader_main.lean()\n"
        "runpy.run_path('grader/grading/nbgrader_config.py', {'get_config': lambda: __import__("
        "'traitlets.config', fromlist=['Config']).Config()})\n"
        "import grader.grading.notebook_guards, grader.grading.judge, grader.grading.cost\n"
    )
    assert _heavy_modules_after(root, code) == []


def test_the_batch_process_starts_without_torch(root):
    """The trusted batch (`python -m grader autograde`, a Slurm task) in interpreter mode
    imports neither torch nor Triton before it grades: the students' kernels do that, each in
    its own process."""
    code = (
        "from grader.authoring import nbgrader_main\n"
        "nbgrader_main.lean()\n"
        "import grader.cli, grader.grading.autograde, grader.grading.classreport\n"
        "import grader.grading.slurm\n"
        "from grader.runtime import device\n"
        "device.setup('interpreter')\n"
    )
    assert _heavy_modules_after(root, code) == []
