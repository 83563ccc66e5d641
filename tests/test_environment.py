"""environment.yml, pyproject.toml and the Makefile name the same versions; the Makefile's
grader pins are the GPU grading image's, as its recordings name them."""

import re
import tomllib

import pytest
import yaml

from grader.runtime import recorded

pytestmark = pytest.mark.tooling


def pins(requirements):
    out = {}
    for req in requirements:
        m = re.match(r"^([A-Za-z0-9_.-]+)\s*(==|>=)\s*([\w.]+)$", req.strip())
        if m:
            out[m.group(1).lower()] = (m.group(2), m.group(3))
    return out


def test_environment_yml_matches_pyproject(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    declared = pins(project["dependencies"])
    for extra in ("course", "dev"):
        declared |= pins(project["optional-dependencies"][extra])
    env = yaml.safe_load((root / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda = pins(pip_section)
    assert "-e ." in pip_section, "environment.yml must install the grader package itself"

    makefile = (root / "Makefile").read_text()
    make_pins = dict(re.findall(r"^(TORCH|TRITON)\s*\?=\s*\w+==([\w.]+)", makefile, re.M))
    for name in ("torch", "triton"):
        op, _ = declared[name]
        assert op == ">=", f"pyproject must leave {name} to the Makefile's pin"
        pinned = ("==", make_pins[name.upper()])
        assert conda[name] == pinned, f"{name}: environment.yml vs Makefile"
    exact = {k: v for k, v in declared.items() if v[0] == "=="}
    assert exact, "pyproject pins nothing exactly"
    for name, pin in exact.items():
        assert conda.get(name) == pin, f"{name}: pyproject {pin}, environment.yml {conda.get(name)}"
    extra = set(conda) - set(declared)
    assert not extra, f"environment.yml has packages pyproject lacks: {sorted(extra)}"


def test_the_grader_pins_are_the_gpu_images_that_recorded_the_course(root):
    """`make test-grader-pins` runs the corpora on the torch and Triton every GPU recording was
    made with: the grader's toolchain, beside the kit's."""
    makefile = (root / "Makefile").read_text()
    grader = dict(re.findall(r"^GRADER_(TORCH|TRITON)\s*\?=\s*\w+==([\w.]+)", makefile, re.M))
    environments = [recorded.load(f.stem)["environment"] for f in recorded.folder().glob("*.json")]
    assert environments, "no recordings found"
    for name in ("TORCH", "TRITON"):
        versions = {e[name.lower()].split("+")[0] for e in environments}
        assert versions == {grader[name]}, (
            f"GRADER_{name} is {grader[name]}; the GPU recordings were made with {versions}: "
            "re-record them, or move the pin"
        )
