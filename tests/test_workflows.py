"""The CI workflows do what docs/versions.md and the README say: the CPU workflow runs `.ci/run`
on Python 3.11 with a pip cache and keeps the JUnit report; the GPU workflow runs `.ci/gpu` on a
self-hosted GPU runner with time limits, never for a fork's pull request, keeps Triton's kernel
cache and uploads what the Makefile writes; the weekly workflow tests the newest torch CPU build
and triton; the kit's container recipe is built and run with Docker when what it is made of
changes."""

import pytest
import yaml

pytestmark = pytest.mark.tooling

FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"


def load(root, name):
    return yaml.safe_load((root / ".github" / "workflows" / name).read_text())


def triggers(workflow):
    # YAML 1.1 reads the key `on` as True
    found = workflow.get("on", workflow.get(True))
    return {found: None} if isinstance(found, str) else dict(found or {})


def steps(job):
    return job.get("steps", [])


def runs(job):
    return "\n".join(s.get("run", "") for s in steps(job))


def uploads(job):
    paths = []
    for s in steps(job):
        if s.get("uses", "").startswith("actions/upload-artifact"):
            paths += [p.strip() for p in s["with"]["path"].splitlines() if p.strip()]
    return paths


def common_problems(workflow):
    problems = []
    if "pull_request_target" in triggers(workflow):
        problems.append("pull_request_target runs a fork's code with the repository's secrets")
    for name, job in workflow["jobs"].items():
        if "timeout-minutes" not in job:
            problems.append(f"job {name} has no timeout-minutes")
    return problems


def cpu_problems(workflow):
    problems = common_problems(workflow)
    if not {"push", "pull_request"} <= set(triggers(workflow)):
        problems.append("the CPU workflow must run on push and pull_request")
    jobs = workflow["jobs"]
    if not any("make test-grader-pins" in runs(j) for j in jobs.values()):
        problems.append("the CPU workflow must run the corpora on the grader's pins")
    if not any("make test-extended" in runs(j) for j in jobs.values()):
        problems.append("the CPU workflow must run the tests marked extended")
    job = jobs.get("test", {})
    if ".ci/run" not in runs(job):
        problems.append("the CPU workflow must run .ci/run")
    setup = [s for s in steps(job) if s.get("uses", "").startswith("actions/setup-python")]
    if not setup or str(setup[0]["with"].get("python-version")) != "3.11":
        problems.append("the CPU workflow must set up Python 3.11")
    elif setup[0]["with"].get("cache") != "pip":
        problems.append("the CPU workflow must cache pip")
    if "build/junit.xml" not in uploads(job):
        problems.append("the CPU workflow must upload build/junit.xml")
    return problems


TRITON_CACHE = "~/.triton/cache"  # Triton's default cache, which `grader run` leaves as it is


def gpu_problems(workflow, makefile):
    problems = common_problems(workflow)
    on = triggers(workflow)
    gpu_jobs = {n: j for n, j in workflow["jobs"].items() if ".ci/gpu" in runs(j)}
    if not gpu_jobs:
        problems.append("no job of the GPU workflow runs .ci/gpu")
    for name, job in gpu_jobs.items():
        labels = job["runs-on"] if isinstance(job["runs-on"], list) else [job["runs-on"]]
        if not {"self-hosted", "gpu"} <= set(labels):
            problems.append(f"job {name} must run on a self-hosted runner labelled gpu")
        if "pull_request" in on and FORK_GUARD not in str(job.get("if", "")):
            problems.append(f"job {name} runs for pull requests without the fork guard")
        cached = [s for s in steps(job) if s.get("uses", "").startswith("actions/cache")]
        if not any(s.get("with", {}).get("path") == TRITON_CACHE for s in cached):
            problems.append(f"job {name} must keep Triton's kernel cache ({TRITON_CACHE})")
        paths = uploads(job)
        for wanted in ("build/executed/", "build/report/"):
            if wanted not in paths:
                problems.append(f"job {name} must upload {wanted}")
        for path in paths:
            folder = path.split("*")[0].rstrip("/")
            if folder not in makefile:
                problems.append(f"job {name} uploads {path}, which the Makefile never writes")
    if "push" in on and on["push"] and "main" not in on["push"].get("branches", []):
        problems.append("the GPU workflow runs on pushes to main only")
    if not {"schedule", "workflow_dispatch"} <= set(on):
        problems.append("the GPU workflow must run on a schedule and by hand")
    return problems


def newest_problems(workflow):
    problems = common_problems(workflow)
    on = set(triggers(workflow))
    if on - {"schedule", "workflow_dispatch"} or "schedule" not in on:
        problems.append("the newest-versions workflow runs on a schedule (and by hand) only")
    (job,) = workflow["jobs"].values()
    env = job.get("env", {})
    if "whl/cpu" not in env.get("TORCH", "") or env.get("TRITON") != "triton":
        problems.append("the newest-versions workflow must ask for the newest torch CPU and triton")
    if ".ci/run" not in runs(job) or "grader doctor" not in runs(job):
        problems.append("the newest-versions workflow must run .ci/run and the doctor")
    return problems


def kit_container_problems(workflow):
    problems = common_problems(workflow)
    (job,) = workflow["jobs"].values()
    if "make kit-container" not in runs(job):
        problems.append("the kit-container workflow must run make kit-container")
    if job.get("env", {}).get("CONTAINER_ENGINE") != "docker":
        problems.append(
            "the kit-container workflow must name docker, so that a missing engine fails"
        )
    for event in ("push", "pull_request"):
        if "grader/authoring/kit_files/**" not in (triggers(workflow).get(event) or {}).get(
            "paths", []
        ):
            problems.append(f"the kit-container workflow must run on a {event} to the kit's files")
    return problems


@pytest.fixture
def makefile(root):
    return (root / "Makefile").read_text()


def test_cpu_workflow(root):
    assert cpu_problems(load(root, "cpu.yml")) == []
    assert "build/junit.xml" in (root / ".ci" / "run").read_text()


def test_gpu_workflow(root, makefile):
    assert gpu_problems(load(root, "gpu.yml"), makefile) == []


def test_newest_workflow(root):
    assert newest_problems(load(root, "newest.yml")) == []


def test_kit_container_workflow(root):
    workflow = load(root, "kit-container.yml")
    assert kit_container_problems(workflow) == []
    (job,) = workflow["jobs"].values()
    del job["env"]["CONTAINER_ENGINE"]  # a runner without Docker would then skip, not fail
    triggers(workflow)["push"]["paths"].remove("grader/authoring/kit_files/**")
    assert kit_container_problems(workflow) == [
        "the kit-container workflow must name docker, so that a missing engine fails",
        "the kit-container workflow must run on a push to the kit's files",
    ]


def test_every_workflow_is_checked(root):
    names = {p.name for p in (root / ".github" / "workflows").iterdir()}
    assert names == {"cpu.yml", "gpu.yml", "newest.yml", "kit-container.yml"}


def test_the_checks_reject_unsafe_or_incomplete_workflows(root, makefile):
    gpu = load(root, "gpu.yml")
    on = triggers(gpu)

    forks = {**gpu, "on": {**on, "pull_request": None}}
    assert any("without the fork guard" in p for p in gpu_problems(forks, makefile))
    guarded = {
        **forks,
        "jobs": {n: {**j, "if": f"${{{{ {FORK_GUARD} }}}}"} for n, j in gpu["jobs"].items()},
    }
    assert not any("fork guard" in p for p in gpu_problems(guarded, makefile))

    target = {**gpu, "on": {**on, "pull_request_target": None}}
    assert any("pull_request_target" in p for p in gpu_problems(target, makefile))

    hosted = {**gpu, "jobs": {n: {**j, "runs-on": "ubuntu-latest"} for n, j in gpu["jobs"].items()}}
    assert any("self-hosted" in p for p in gpu_problems(hosted, makefile))

    jobs = {
        n: {k: v for k, v in j.items() if k != "timeout-minutes"} for n, j in gpu["jobs"].items()
    }
    untimed = {**gpu, "jobs": jobs}
    assert any("no timeout-minutes" in p for p in gpu_problems(untimed, makefile))

    assert any("never writes" in p for p in gpu_problems(gpu, makefile.replace("build/report", "")))

    cold = {
        **gpu,
        "jobs": {
            n: {**j, "steps": [s for s in steps(j) if "actions/cache" not in s.get("uses", "")]}
            for n, j in gpu["jobs"].items()
        },
    }
    assert any("Triton's kernel cache" in p for p in gpu_problems(cold, makefile))

    cpu = load(root, "cpu.yml")
    job = cpu["jobs"]["test"]
    no_run = {
        **cpu,
        "jobs": {
            **cpu["jobs"],
            "test": {**job, "steps": [s for s in steps(job) if "run" not in s]},
        },
    }
    assert any(".ci/run" in p for p in cpu_problems(no_run))
    no_pins = {**cpu, "jobs": {"test": job}}
    assert any("grader's pins" in p for p in cpu_problems(no_pins))
    assert any("marked extended" in p for p in cpu_problems(no_pins))
