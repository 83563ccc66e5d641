"""The class report for one graded assignment: grades as CSV for an LMS (one row per student, a
column per graded cell), and a report in Markdown (and HTML) with plots of the score distribution,
the pass rate of each graded cell, and the speed measured by the speed cells; then the list of
submissions that need a human look, and why.

Student ids and the reasons for a look hold what students wrote (file names, error messages): in
the report each is Markdown-escaped, so that it shows as text in report.md and report.html alike;
in the CSV a cell that a spreadsheet would read as a formula is quoted."""

from __future__ import annotations

import csv
import statistics
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from grader.grading.findings import GRADER_TROUBLE, KINDS, Finding, Speed


@dataclass
class StudentRow:
    """One student's result: scores per graded cell (None where nothing was recorded), what
    the speed cells measured, and every reason for a human look."""

    student: str
    scores: dict[str, float | None]
    findings: list[Finding] = field(default_factory=list)
    speed: list[Speed] = field(default_factory=list)
    seconds_late: float = 0.0
    penalty: float = 0.0
    dropped: str = ""  # what of the submission did not run (grader.grading.assemble.Dropped)
    ran_on: dict[str, str] = field(default_factory=dict)  # grader.grading.assemble.ran_on

    @property
    def total(self) -> float:
        return max(0.0, sum(s or 0.0 for s in self.scores.values()) - self.penalty)


@dataclass
class ClassResults:
    """Everything the report shows. `max_scores` lists the graded cells in notebook order."""

    assignment: str
    device: str
    grades_speed: bool
    max_scores: dict[str, float]
    students: list[StudentRow]
    sandboxed: bool = True  # False: graded with `--sandbox none`, said at the top of the report
    versions: dict[str, str] = field(default_factory=dict)  # the grader's (published.versions)

    def other_versions(self) -> list[StudentRow]:
        """The students whose notebook last ran on other versions of torch or Triton."""
        return [
            s for s in self.students
            if any(s.ran_on.get(k, v) != v for k, v in self.versions.items())
        ]  # fmt: skip

    @property
    def max_total(self) -> float:
        return sum(self.max_scores.values())

    def needs_look(self) -> list[StudentRow]:
        return [s for s in self.students if s.findings]

    def grader_trouble(self) -> list[StudentRow]:
        """The students for whom a step of the grader itself failed (a feedback page not
        written, an inspection that raised): the batch is not done until they are."""
        return [s for s in self.students if any(f.kind in GRADER_TROUBLE for f in s.findings)]

    def ungraded(self, cell: str) -> bool:
        """Whether the graded cell `cell` is a speed cell this device does not grade."""
        return cell.startswith("speed-") and not self.grades_speed


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what spreadsheets read as a formula


def spreadsheet_text(text: str) -> str:
    """`text` as a CSV cell no spreadsheet runs: one that starts a formula gets a leading '."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


MARKDOWN_SPECIAL = set("\\`*_{}[]<>()#+!|&~$")  # what may start markup, a tag or an entity


def markdown_text(text: str) -> str:
    """`text` as Markdown that renders as exactly that text, on one line within a table: each
    character that could start markup, a link, an HTML tag or entity, math or a table's `|`
    backslash-escaped."""
    return "".join("\\" + c if c in MARKDOWN_SPECIAL else c for c in " ".join(text.split()))


def write_csv(results: ClassResults, path: Path) -> Path:
    """One row per student: id, score (after any late penalty), max, a column per graded cell,
    the late penalty, the reasons for a human look (empty when none), and what of the
    submission did not run at grading (empty when nothing)."""
    cells = list(results.max_scores)
    header = ["student_id", "score", "max_score", *cells, "late_penalty", "needs_review"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([*header, "dropped_at_grading"])
        for s in sorted(results.students, key=lambda s: s.student):
            scores = [f"{s.scores[c]:g}" if s.scores.get(c) is not None else "" for c in cells]
            totals = [f"{s.total:g}", f"{results.max_total:g}"]
            review = "; ".join(str(f) for f in s.findings)
            texts = [spreadsheet_text(t) for t in (review, s.dropped)]
            w.writerow([spreadsheet_text(s.student), *totals, *scores, f"{s.penalty:g}", *texts])
    return path


# -- plots -----------------------------------------------------------------------------------


@contextmanager
def _figure(path: Path, size: tuple[float, float]):
    """The axes of a figure of `size` inches, saved to `path` when the block ends."""
    import matplotlib

    matplotlib.use("Agg")  # files only, on machines without a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size)
    try:
        yield ax
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def plot_scores(results: ClassResults, path: Path) -> Path:
    totals = [s.total for s in results.students]
    top = results.max_total or 1.0
    with _figure(path, (7, 3.5)) as ax:
        ax.hist(totals, bins=[top * i / 10 for i in range(11)], color="C0", edgecolor="white")
        if totals:
            mean = statistics.fmean(totals)
            ax.axvline(mean, color="C3", linestyle="--", label=f"mean {mean:.2f}")
            ax.legend()
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set(xlim=(0, top), xlabel=f"score (of {top:g})", ylabel="students")
        ax.set_title(f"{results.assignment}: scores of {len(totals)} submissions")
    return path


def pass_rates(results: ClassResults) -> dict[str, float]:
    """{grade_id: fraction of students with every point of that cell}."""
    n = len(results.students) or 1
    return {
        cell: sum(1 for s in results.students if (s.scores.get(cell) or 0.0) >= top) / n
        for cell, top in results.max_scores.items()
    }


def plot_pass_rates(results: ClassResults, path: Path) -> Path:
    rates = pass_rates(results)
    with _figure(path, (7, 0.45 * len(rates) + 1.2)) as ax:
        for i, (cell, rate) in enumerate(rates.items()):
            if results.ungraded(cell):
                ax.barh(i, rate, color="lightgray", hatch="//", edgecolor="gray")
                ax.text(rate + 0.01, i, "not graded on this device", va="center", fontsize=8)
            else:
                ax.barh(i, rate, color="C2")
                ax.text(rate + 0.01, i, f"{rate:.0%}", va="center", fontsize=8)
        ax.set_yticks(range(len(rates)), list(rates))
        ax.invert_yaxis()
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1], ["0%", "25%", "50%", "75%", "100%"])
        ax.set(xlim=(0, 1.2), xlabel="students with full points")
        ax.set_title(f"{results.assignment}: pass rate per graded cell")
    return path


def speed_measurements(results: ClassResults) -> dict[str, list[Speed]]:
    """{speed cell: the verdicts that measured something}, cells in notebook order; none where
    the batch does not grade speed."""
    if not results.grades_speed:
        return {}
    found: dict[str, list[Speed]] = {c: [] for c in results.max_scores if c.startswith("speed-")}
    for s in results.students:
        for v in s.speed:
            if v.graded_here and v.measured is not None:
                found.setdefault(v.grade_id, []).append(v)
    return {c: v for c, v in found.items() if v}


def plot_speed(results: ClassResults, path: Path) -> Path | None:
    """Each student's speed in each speed cell, relative to the cell's threshold (1 passes);
    None when no speed cell measured anything (off the GPU)."""
    measured = speed_measurements(results)
    if not measured:
        return None
    with _figure(path, (1.3 * len(measured) + 3, 4)) as ax:
        for i, verdicts in enumerate(measured.values()):
            spread = [i + 0.3 * ((k * 0.618) % 1 - 0.5) for k in range(len(verdicts))]  # no overlap
            colors = ["C2" if v.passed else "C3" for v in verdicts]
            ax.scatter(spread, [v.relative for v in verdicts], c=colors, s=20, zorder=3)
        ax.axhline(1.0, color="gray", linestyle="--", label="threshold")
        ax.set_xticks(range(len(measured)), list(measured), rotation=30, ha="right", fontsize=8)
        ax.set(ylim=(0, None), ylabel="measured / threshold")
        ax.legend(fontsize=8)
        title = f"{results.assignment}: speed on {results.device} (green: passed)"
        ax.set_title(title, fontsize=10)
    return path


# -- the report ------------------------------------------------------------------------------


def _image(alt: str, path: str | None) -> list[str]:
    return [f"![{alt}]({path})", ""] if path else []


def _cell_table(results: ClassResults) -> list[str]:
    rates = pass_rates(results)
    lines = ["| graded cell | points | full points | mean score |", "|---|---:|---:|---:|"]
    for cell, top in results.max_scores.items():
        scores = [s.scores.get(cell) or 0.0 for s in results.students]
        mean = statistics.fmean(scores) if scores else 0.0
        note = " (not graded on this device)" if results.ungraded(cell) else ""
        lines.append(f"| `{cell}`{note} | {top:g} | {rates[cell]:.0%} | {mean:.2f} |")
    return lines


def _speed_section(results: ClassResults, figure: str | None) -> list[str]:
    speed_cells = [c for c in results.max_scores if c.startswith("speed-")]
    if not speed_cells:
        return ["This assignment has no speed cells."]
    measured = speed_measurements(results)
    if not measured:
        why = "no speed cell printed a measurement (see the feedback of each student)"
        if not results.grades_speed:
            why = "the grading device is not a GPU of the supported class (NVIDIA, sm_80 or newer)"
        return [
            f"**Speed was not graded on this device** ({results.device}): {why}. Every speed "
            f"cell ({', '.join(f'`{c}`' for c in speed_cells)}) scored 0 with a message saying "
            "so, and the scores above leave those points out of reach. Grade the submissions "
            "again on a GPU to grade speed."
        ]
    lines = [
        *_image("speed relative to each threshold", figure),
        "| speed cell | measured | median | threshold | median / threshold | passed |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for cell, verdicts in measured.items():
        relative = statistics.median(v.relative for v in verdicts)
        passed = sum(v.passed for v in verdicts)
        first = verdicts[0]
        if all(v.comparisons == 1 for v in verdicts):
            median = f"{statistics.median(v.measured for v in verdicts):g}{first.unit}"
            threshold = f"{'at most ' if first.at_most else ''}{first.needed:g}{first.unit}"
        else:  # several comparisons per cell: only their ratios to the thresholds compare
            median, threshold = "(several comparisons)", "each its own"
        lines.append(
            f"| `{cell}` | {len(verdicts)} | {median} | {threshold} | {relative:.2f} "
            f"| {passed} of {len(verdicts)} |"
        )
    return lines


def _students(rows: list[StudentRow], what: str, said) -> list[str]:
    """A table of `rows`, by student: its score and `said(row)` in a column named `what`."""
    lines = [f"| student | score | {what} |", "|---|---:|---|"]
    for s in sorted(rows, key=lambda s: s.student):
        lines.append(f"| {markdown_text(s.student)} | {s.total:g} | {said(s)} |")
    return lines


def _review_section(results: ClassResults) -> list[str]:
    flagged = results.needs_look()
    if not flagged:
        return ["None: every submission was graded without trouble."]
    counts = {k: sum(1 for s in flagged if any(f.kind == k for f in s.findings)) for k in KINDS}
    return [
        "Scores of these submissions are in the gradebook and the CSV as nbgrader gave them; "
        "look at each before releasing grades.",
        "",
        ", ".join(f"{label}: {counts[k]}" for k, label in KINDS.items() if counts[k]),
        "",
        *_students(
            flagged, "why", lambda s: "<br>".join(markdown_text(str(f)) for f in s.findings)
        ),
    ]


def _dropped_section(results: ClassResults) -> list[str]:
    rows = [s for s in results.students if s.dropped]
    if not rows:
        return ["Nothing: every submission held its answers alone."]
    return [
        "Grading ran the released notebook with each student's answer cells; what these students "
        "wrote elsewhere did not run, so it cannot have changed a score. Their notebooks warned "
        "them before they handed in (the hand-in check).",
        "",
        *_students(rows, "did not run", lambda s: markdown_text(s.dropped)),
    ]


def _versions_section(results: ClassResults) -> list[str]:
    mine = ", ".join(f"{k} {v}" for k, v in results.versions.items()) or "versions unknown"
    rows = results.other_versions()
    if not rows:
        return [f"Graded with {mine}; no notebook says it last ran on other versions."]

    def said(s: StudentRow) -> str:
        return markdown_text(", ".join(f"{k} {v}" for k, v in s.ran_on.items()))

    return [
        f"Graded with {mine}. These notebooks last ran on other versions (as their setup cell "
        "recorded). A check whose verdict differs between the two is a defect of the course: "
        "compare their feedback with what they saw.",
        "",
        *_students(rows, "last ran on", said),
    ]


UNSANDBOXED = (
    "> **Graded without the sandbox** (`--sandbox none`): each student's code ran with the "
    "grader's own rights, able to read and write the course directory, the gradebook, the hidden "
    "tests and the other students' files, and to reach the network. These scores are only as "
    "trustworthy as every submission; grade again with bubblewrap installed before publishing."
)


def _trouble(results: ClassResults) -> list[str]:
    trouble = results.grader_trouble()
    if not trouble:
        return []
    kinds = sorted({KINDS[f.kind] for s in trouble for f in s.findings if f.kind in GRADER_TROUBLE})
    return [
        f"> **The grader had trouble with {len(trouble)} of these submissions** "
        f"({', '.join(kinds)}): see 'Needs a human look' below. Fix the cause and run the same "
        "command again before releasing grades or feedback.",
        "",
    ]


def render_markdown(results: ClassResults, figures: dict[str, str | None]) -> str:
    """The report as Markdown; `figures` maps "scores", "cells" and "speed" to image paths
    relative to the report (None where there is no figure)."""
    totals = [s.total for s in results.students]
    top = results.max_total
    full = sum(1 for t in totals if t >= top > 0)
    lines = [
        f"# {results.assignment}: class report",
        "",
        f"Graded on {results.device}. {len(totals)} submissions, "
        f"{len(results.needs_look())} of them need a human look.",
        "",
        *(() if results.sandboxed else (UNSANDBOXED, "")),
        *_trouble(results),
        "| | |",
        "|---|---:|",
        f"| submissions | {len(totals)} |",
        f"| points available | {top:g} |",
    ]
    if totals:
        lines += [
            f"| mean score | {statistics.fmean(totals):.2f} |",
            f"| median score | {statistics.median(totals):g} |",
            f"| full marks | {full} |",
        ]
    lines += ["", "## Scores", "", *_image("score distribution", figures.get("scores"))]
    lines += ["## Graded cells", "", *_image("pass rate per graded cell", figures.get("cells"))]
    lines += _cell_table(results)
    lines += ["", "## Speed", ""] + _speed_section(results, figures.get("speed"))
    lines += ["", "## Needs a human look", ""] + _review_section(results)
    lines += ["", "## Dropped at grading", ""] + _dropped_section(results)
    lines += ["", "## Versions", ""] + _versions_section(results)
    return "\n".join(lines) + "\n"


def render_html(markdown: str, title: str) -> str | None:
    """The Markdown report as a standalone HTML page (mistune comes with nbconvert); None
    when mistune is not installed."""
    try:
        import mistune
    except ImportError:
        return None
    body = mistune.create_markdown(plugins=["table"], escape=False)(markdown)
    style = (
        "body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}"
        "img{max-width:100%}"
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{style}</style></head>\n<body>\n{body}</body></html>\n"
    )


def write(results: ClassResults, out: Path) -> dict[str, Path]:
    """grades.csv, report.md, report.html and the figures, into `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    figures = {}
    if results.students:
        figures["scores"] = plot_scores(results, out / "scores.png")
        figures["cells"] = plot_pass_rates(results, out / "pass_rate.png")
        if (speed := plot_speed(results, out / "speed.png")) is not None:
            figures["speed"] = speed
    written = {"csv": write_csv(results, out / "grades.csv"), **figures}
    markdown = render_markdown(results, {k: path.name for k, path in figures.items()})
    (out / "report.md").write_text(markdown, encoding="utf-8")
    written["markdown"] = out / "report.md"
    html = render_html(markdown, f"{results.assignment}: class report")
    if html is not None:
        (out / "report.html").write_text(html, encoding="utf-8")
        written["html"] = out / "report.html"
    return written
