"""Where nbconvert's templates are, however the grading packages were installed.

nbgrader's feedback pages extend nbconvert's `classic` HTML template, which nbconvert ships as
data files under `share/jupyter/nbconvert/templates` of the prefix it is installed into, and
finds through Jupyter's data path (JUPYTER_PATH, the user's and the system's folders). An install
with `pip install --target DIR` (the offline wheelhouse on a GPU machine, `.ci/gpu`) puts them
in DIR/share/jupyter, which no Jupyter path names: every feedback page then fails with "No template
sub-directory with name 'classic' found". `environment` adds that folder to JUPYTER_PATH for
nbgrader's runs, and `require_templates` says what to do when no folder has them.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

TEMPLATE = Path("nbconvert") / "templates" / "classic"  # what nbgrader's feedback page extends


class MissingTemplates(RuntimeError):
    """nbconvert's HTML templates are in none of the folders Jupyter looks in."""


def _beside(package: str) -> list[Path]:
    """The share/jupyter folders an install of `package` may have put beside it: DIR/share/jupyter
    for `pip install --target DIR`, PREFIX/share/jupyter for PREFIX/lib/pythonX.Y/site-packages."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    site = Path(next(iter(spec.submodule_search_locations))).resolve().parent
    prefixes = [site, *site.parents[2:3]]
    return [p / "share" / "jupyter" for p in prefixes]


def search_path(env: dict[str, str]) -> list[Path]:
    """The Jupyter data folders a process started with `env` reads, in order."""
    from jupyter_core import paths

    given = [Path(p) for p in env.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    saved = os.environ.get("JUPYTER_PATH")
    os.environ.pop("JUPYTER_PATH", None)
    try:
        defaults = [Path(p) for p in paths.jupyter_path()]
    finally:
        if saved is not None:
            os.environ["JUPYTER_PATH"] = saved
    return [*given, *defaults]


def environment(env: dict[str, str]) -> dict[str, str]:
    """`env` with the share/jupyter folder beside nbconvert (and nbgrader) put on JUPYTER_PATH
    where it holds nbconvert's templates and Jupyter would not look there."""
    known = {p.resolve() for p in search_path(env) if p.exists()}
    extra = [
        str(d)
        for d in dict.fromkeys(d for p in ("nbconvert", "nbgrader") for d in _beside(p))
        if (d / TEMPLATE).is_dir() and d.resolve() not in known
    ]
    if not extra:
        return env
    return {
        **env,
        "JUPYTER_PATH": os.pathsep.join([*extra, env.get("JUPYTER_PATH", "")]).rstrip(os.pathsep),
    }


def require_templates(env: dict[str, str]) -> Path:
    """The folder nbgrader's feedback will take nbconvert's `classic` template from, for a
    process started with `environment(env)`; MissingTemplates, saying what to do, when none."""
    folders = search_path(environment(env))
    for folder in folders:
        if (folder / TEMPLATE).is_dir():
            return folder / TEMPLATE
    spec = importlib.util.find_spec("nbconvert")
    where = next(iter(spec.submodule_search_locations)) if spec else "nowhere"
    raise MissingTemplates(
        f"nbconvert's HTML templates ({TEMPLATE}) are in none of Jupyter's data folders, so "
        "nbgrader could write no feedback page. nbconvert is installed at "
        f"{where}, without its share/jupyter data files beside it (copied as a package folder, "
        "or installed by a tool that drops data files): reinstall it with pip "
        "(`pip install --target DIR` keeps them in DIR/share/jupyter), or set JUPYTER_PATH to "
        f"the folder that holds {TEMPLATE}. Looked in: " + ", ".join(map(str, folders))
    )
