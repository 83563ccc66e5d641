"""`make wheelhouse`'s lists are complete and consistent: grader/wheelhouse.txt holds what the
notebook runner needs beyond a GPU image's torch, triton, numpy, matplotlib and tqdm (and
everything they need), wheelhouse-extras.txt holds matplotlib and tqdm for an image without them,
every version matches pyproject.toml's pin, and every pinned package's requirements are met by
the other pins. Requirements are read from the packages installed here, with the markers of the
wheelhouse's Python (the Makefile's WHEEL_PYTHON) on x86-64 Linux."""

import importlib.metadata as metadata
import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

pytestmark = pytest.mark.tooling

# What `make test-gpu` imports: papermill (and through it nbclient, nbformat), a kernel, widgets,
# jupytext for `grader build`, and pytest for the GPU tests.
RUNNER = ("papermill", "nbclient", "nbformat", "ipykernel", "ipywidgets", "jupytext", "pytest")
IMAGE = ("torch", "triton", "numpy")  # on every GPU image the course runs on
IMAGE_USUALLY = ("matplotlib", "tqdm")  # on most: wheelhouse-extras.txt for the others
# Declared but never imported by anything the runner uses.
UNUSED = {"aiohttp": "papermill declares it on Python 3.12 only, and never imports it"}
# What `make autograde` needs beyond the runner (wheelhouse-grading.txt): nbgrader, and
# kernelguard for the findings (grader/grading/detectors.py); and what nbgrader declares for its
# JupyterLab extensions only (tests/test_offline_grading.py runs its steps without them).
GRADING = ("nbgrader", "kernelguard")
GRADING_UNUSED = ("jupyterlab", "jupyterlab-server", "notebook")


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path):
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: '{line}' must pin one version (name==version)"
            pins[canonical(name)] = version
    return pins


@pytest.fixture
def markers(root):
    python = re.search(r"^WHEEL_PYTHON\s*\?=\s*([\d.]+)", (root / "Makefile").read_text(), re.M)
    return {
        "python_version": python.group(1),
        "python_full_version": f"{python.group(1)}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }


def requirements(name, markers, extras=()):
    """The requirements of the installed `name` (with `extras`) that apply on the wheelhouse's
    platform."""
    try:
        declared = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return None
    found = [Requirement(r) for r in declared]
    return [
        r
        for r in found
        if r.marker is None
        or any(r.marker.evaluate({**markers, "extra": e}) for e in ("", *extras))
    ]


def closure(roots, markers, skip=()):
    """Every package `roots` need, themselves included (as installed here), the extras they ask
    of each other followed; nothing of `skip` nor what only it needs."""
    seen, todo = set(), [(canonical(r), ()) for r in roots]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen or name in skip:
            continue
        seen.add((name, extras))
        todo += [
            (canonical(r.name), tuple(sorted(r.extras)))
            for r in requirements(name, markers, extras) or []
        ]
    return {name for name, _ in seen}


def difference(listed, needed):
    """(needed but not listed, listed but not needed), each sorted."""
    return sorted(set(needed) - set(listed)), sorted(set(listed) - set(needed))


def unmet(pins, markers):
    """Requirements of pinned packages that the pins do not meet, for each package installed
    here at its pinned version (a different installed version says nothing about the pin's)."""
    out = []
    for name, version in pins.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        if Version(installed) != Version(version):
            continue
        for req in requirements(name, markers):
            other = pins.get(canonical(req.name))
            if other and not req.specifier.contains(other, prereleases=True):
                out.append(f"{name}=={version} needs {req}, but {req.name}=={other} is pinned")
    return out


@pytest.fixture
def lists(root):
    return read_pins(root / "grader" / "wheelhouse.txt"), read_pins(
        root / "grader" / "wheelhouse-extras.txt"
    )


@pytest.fixture
def grading(root):
    return read_pins(root / "grader" / "wheelhouse-grading.txt")


def test_wheelhouse_holds_what_the_runner_needs_beyond_the_image(lists, markers):
    default, _ = lists
    needed = closure(RUNNER, markers) - closure(IMAGE + IMAGE_USUALLY, markers) - set(UNUSED)
    missing, extra = difference(default, needed)
    assert not missing, f"add to grader/wheelhouse.txt: {missing}"
    assert not extra, f"grader/wheelhouse.txt lists what nothing needs: {extra}"


def test_extras_hold_matplotlib_and_tqdm_with_what_they_need(lists, markers):
    default, extras = lists
    needed = closure(IMAGE_USUALLY, markers) - closure(IMAGE, markers) - set(default)
    missing, extra = difference(extras, needed)
    assert not missing, f"add to grader/wheelhouse-extras.txt: {missing}"
    assert not extra, f"grader/wheelhouse-extras.txt lists what nothing needs: {extra}"
    assert not set(default) & set(extras), "a package is in both lists"


def test_versions_match_pyproject_and_each_other(root, lists, markers):
    default, extras = lists
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + [
        r for group in project["optional-dependencies"].values() for r in group
    ]
    exact = {
        canonical(r.name): str(next(iter(r.specifier)).version)
        for r in map(Requirement, declared)
        if len(r.specifier) == 1 and next(iter(r.specifier)).operator == "=="
    }
    pins = default | extras
    shared = set(exact) & set(pins)
    assert {"papermill", "ipykernel", "ipywidgets", "jupytext", "pytest", "matplotlib"} <= shared
    for name in shared:
        assert pins[name] == exact[name], (
            f"{name}: wheelhouse {pins[name]}, pyproject {exact[name]}"
        )
    assert not unmet(pins, markers), unmet(pins, markers)


def test_the_checks_reject_a_missing_package_and_a_clashing_pin(lists, markers):
    default, _ = lists
    needed = closure(RUNNER, markers) - closure(IMAGE + IMAGE_USUALLY, markers) - set(UNUSED)
    without_tornado = {k: v for k, v in default.items() if k != "tornado"}
    assert difference(without_tornado, needed) == (["tornado"], [])
    assert difference({**default, "six": "1.17.0"}, needed) == ([], ["six"])
    # ipykernel (installed here at its pin, which pyproject.toml fixes) needs tornado>=6.5.7
    assert metadata.version("ipykernel") == default["ipykernel"]
    clash = unmet({**default, "tornado": "6.0"}, markers)
    assert any(p.startswith("ipykernel==") and "tornado" in p for p in clash), clash


def test_grading_list_holds_what_nbgrader_needs_beyond_the_runner(lists, grading, markers):
    default, extras = lists
    needed = closure(GRADING, markers, skip=GRADING_UNUSED) - closure(
        RUNNER + IMAGE + IMAGE_USUALLY, markers
    )
    missing, extra = difference(grading, needed)
    assert not missing, f"add to grader/wheelhouse-grading.txt: {missing}"
    assert not extra, f"grader/wheelhouse-grading.txt lists what nothing needs: {extra}"
    assert not set(grading) & (set(default) | set(extras)), "a package is in two lists"
    assert not unmet(default | extras | grading, markers), unmet(default | grading, markers)


def test_grading_list_follows_extras_and_leaves_out_only_the_lab(grading, markers):
    assert "tinycss2" in grading  # nbconvert asks for bleach[css]
    assert not set(map(canonical, GRADING_UNUSED)) & set(grading)
    without = closure(GRADING, markers) - closure(GRADING, markers, skip=GRADING_UNUSED)
    assert {"jupyterlab", "notebook", "babel"} <= without, without
