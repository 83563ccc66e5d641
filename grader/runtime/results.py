"""A local record of what you measured: each kernel's work, traffic and time on each device, kept
across notebooks so that 08 can draw your own roofline of everything you wrote in the course."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.runtime import device, roofline


def path() -> Path:
    """$COURSE_RESULTS, else build/results.json in the course's checkout."""
    default = Path(__file__).resolve().parents[2] / "build" / "results.json"
    return Path(os.environ.get("COURSE_RESULTS") or default)


@dataclass(frozen=True)
class Entry:
    notebook: str
    kernel: str
    device: str
    precision: str
    flops: float
    bytes_moved: float
    seconds: float
    when: str

    def point(self) -> roofline.Point:
        return roofline.Point(
            f"{self.notebook[:2]} {self.kernel}", self.flops, self.bytes_moved, self.seconds
        )


def load(device_name: str | None = None) -> list[Entry]:
    """Every recorded entry, or those of one device; an absent file is an empty record."""
    try:
        raw = json.loads(path().read_text())
    except FileNotFoundError:
        return []
    entries = [Entry(**e) for e in raw]
    return [e for e in entries if device_name is None or e.device == device_name]


def record(
    notebook: str,
    kernel: str,
    *,
    flops: float,
    bytes_moved: float,
    seconds: float,
    precision: str = "fp32",
) -> Entry:
    """Keep (or replace) the measurement of `kernel` from `notebook` on the current GPU."""
    dev = device.current()
    if not dev.is_gpu:
        raise RuntimeError("only GPU timings are recorded: interpreter times mean nothing")
    numbers = map(float, (flops, bytes_moved, seconds))
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    entry = Entry(notebook, kernel, dev.name, precision, *numbers, when)
    kept = [e for e in load() if (e.notebook, e.kernel, e.device) != (notebook, kernel, dev.name)]
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False, suffix=".tmp") as f:
        json.dump([asdict(e) for e in [*kept, entry]], f, indent=1)
    os.replace(f.name, target)  # whole file or nothing, even if the kernel dies mid-write
    return entry
