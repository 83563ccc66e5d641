"""What a notebook publishes besides its text, named where the grading side and the recordings
can read it without importing torch: the verdict of each comparison of a speed cell, and the
versions the notebook ran on, as data."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from importlib import metadata

# The display-data type of the versions a notebook ran on, which `device.setup` publishes in the
# setup cell: the batch grader's report names the students whose versions are not the grader's.
VERSIONS_MIMETYPE = "application/vnd.gpu-kernels-course.versions+json"
TOOLCHAIN = ("torch", "triton")  # what a verdict may depend on

# The display-data type of a speed verdict (`Verdict`, shown by `perf.publish_verdict`): the batch
# grader's report, its checks of the scores and bench/trust.py read verdicts only from it, never
# from printed text.
SPEED_MIMETYPE = "application/vnd.gpu-kernels-course.speed+json"


@dataclass(frozen=True)
class Verdict:
    """One comparison of a speed cell, published as data. `measured` and `needed` are in `unit`:
    "x" (a speedup over `comparison`) or "%" (a share of the copy bandwidth); `measured` is None
    where the measurement stopped. `flags` say why the figure cannot be trusted: a
    flagged verdict never passes."""

    comparison: str
    measured: float | None
    needed: float
    unit: str = "x"
    flags: tuple[str, ...] = ()
    at_most: bool = False  # `needed` is a ceiling: the DRAM bytes counted over the fewest

    @property
    def passed(self) -> bool:
        if self.measured is None or self.flags:
            return False
        return self.measured <= self.needed if self.at_most else self.measured >= self.needed

    def line(self) -> str:
        """The verdict for people: "1.53x eager (needs 1.2x)", "71% of copy bandwidth (needs
        80%)", "1.02x the fewest DRAM bytes (at most 1.1x)"."""
        bound = "at most" if self.at_most else "needs"
        if self.measured is None:
            return f"no figure against {self.comparison} ({bound} {self.needed:g}{self.unit})"
        if self.at_most:
            return f"{self.measured:.2f}x {self.comparison} (at most {self.needed:g}x)"
        if self.unit == "%":
            return f"{self.measured:.0f}% of {self.comparison} (needs {self.needed:g}%)"
        return f"{self.measured:.2f}x {self.comparison} (needs {self.needed:g}x)"

    def record(self) -> dict:
        """The JSON published under SPEED_MIMETYPE."""
        return {**asdict(self), "flags": list(self.flags), "passed": self.passed}

    @classmethod
    def read(cls, record: dict) -> Verdict:
        """The verdict `record()` published (an older recording's has no `at_most`)."""
        return cls(record["comparison"], record["measured"], record["needed"], record["unit"],
                   tuple(record["flags"]), record.get("at_most", False))  # fmt: skip


def versions() -> dict[str, str]:
    """The versions of the TOOLCHAIN installed here, read without importing it."""
    found = {}
    for name in TOOLCHAIN:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "none"
    return found
