"""CPU seconds per test file (`pytest --cpu-times`; per test, `--cpu-times-json PATH`): user +
system time of the test's process and of the children it waited for (notebook kernels, nbgrader,
the sandbox), measured around each phase of each test, so a module's fixtures count in the file
that uses them. Under pytest-xdist each worker measures its own tests and the totals are summed
where reports meet. What is not reaped up a chain of waiting parents is not counted: an orphan,
and the kernel in grader.grading.jail (bubblewrap's PID namespace), about 4 s per student graded
in the sandbox as measured against a cgroup's cpuacct.usage, which counts everything.

Wall time on a shared machine says little; CPU time is what a second job beside this one takes
away, and what the suite's budget on two cores is kept in."""

from __future__ import annotations

import collections
import json
import resource

import pytest

PROPERTY = "cpu_s"


def cpu_seconds() -> float:
    """User + system seconds of this process and its waited-for children so far."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def pytest_addoption(parser):
    parser.addoption("--cpu-times", action="store_true", help="print CPU seconds per test file")
    parser.addoption(
        "--cpu-times-json", metavar="PATH", help="write CPU seconds per test to PATH, as JSON"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    start = item.stash.get(_START, None)
    outcome = yield
    if start is not None:
        outcome.get_result().user_properties.append((PROPERTY, round(cpu_seconds() - start, 3)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    item.stash[_START] = cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    item.stash[_START] = cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    item.stash[_START] = cpu_seconds()
    yield


_START = pytest.StashKey[float]()
_tests: dict[str, float] = collections.defaultdict(float)  # {node id: CPU seconds}


def pytest_runtest_logreport(report):
    seconds = dict(report.user_properties).get(PROPERTY)
    if seconds is not None:
        _tests[report.nodeid] += seconds


def pytest_terminal_summary(terminalreporter, config):
    where = config.getoption("--cpu-times-json")
    if not (config.getoption("--cpu-times") or where) or hasattr(config, "workerinput"):
        return
    files: dict[str, float] = collections.defaultdict(float)
    for nodeid, seconds in _tests.items():
        files[nodeid.split("::")[0]] += seconds
    terminalreporter.section("CPU seconds per test file (user + system, children included)")
    for name, seconds in sorted(files.items(), key=lambda f: -f[1]):
        terminalreporter.write_line(f"{seconds:9.1f}  {name}")
    terminalreporter.write_line(f"{sum(files.values()):9.1f}  in all")
    if where:
        with open(where, "w") as f:
            json.dump(dict(sorted(_tests.items())), f, indent=1)
