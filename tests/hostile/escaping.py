"""Class 9 of the attacks on grading: student text that reaches the instructor's reports. An error
message holding an HTML tag with a script, Markdown that would make a link, and a table's `|` must
show as text in report.md and report.html, never as markup."""

import copy

from tests import light
from tests.hostile import Attacker, Graded

PAYLOAD = "<img src=x onerror=alert(document.domain)> [click](javascript:alert(1)) | x"


def _raising(m):
    """The blank release whose answer cell first raises an error carrying PAYLOAD."""
    nb = copy.deepcopy(m.release)
    cell = m.cell(nb, light.ANSWER)
    cell.source = f"raise ValueError({PAYLOAD!r})\n\n" + cell.source
    return m.files(nb)


def _escaped(result: Graded) -> None:
    html = (result.out / "report.html").read_text()
    markdown = (result.out / "report.md").read_text()
    assert "<img src=x" not in html and "<a " not in html and "href" not in html
    assert html.count("&lt;img src=x onerror=alert(document.domain)&gt; [click](javascript:") == 1
    assert "\\<img src=x onerror=alert\\(document.domain\\)\\> \\[click\\]" in markdown
    assert "\\| x" in markdown


ATTACKERS = [
    Attacker(
        "markup-in-error",
        light.ASSIGNMENT,
        _raising,
        flags=frozenset({"zero-score"}),
        detail=PAYLOAD,
        total=0.0,
        check=_escaped,
    ),
]
