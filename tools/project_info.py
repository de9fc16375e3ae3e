"""Facts about the project that the website states, each read from the one place it is set.

- the package's version: `__version__` in transformer/__init__.py (what pyproject.toml's
  dynamic version reads), parsed without importing the package and torch;
- the Python versions supported: pyproject.toml's classifiers (what CI tests);
- the repository's public address: `Repository` under [project.urls] in pyproject.toml,
  or None while none is published (pages then say so instead of linking to a guess);
- the distribution's name, `transformer-book`.
"""

from __future__ import annotations

import ast
import re
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@cache
def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def package_version() -> str:
    """transformer.__version__, e.g. '0.1.0'."""
    tree = ast.parse((ROOT / "transformer" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise SystemExit("transformer/__init__.py has no __version__; run `make export`")


def python_versions() -> str:
    """'3.11, 3.12 or 3.13': the `Programming Language :: Python :: 3.N` classifiers."""
    found = [c.rsplit(" :: ", 1)[1] for c in _project().get("classifiers", [])
             if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    if not found:
        raise SystemExit("pyproject.toml names no `Programming Language :: Python :: 3.N` classifier")
    found.sort(key=lambda v: tuple(map(int, v.split("."))))
    return found[0] if len(found) == 1 else ", ".join(found[:-1]) + " or " + found[-1]


def repository_url() -> str | None:
    """The public address of the repository, or None while none has been published."""
    return _project().get("urls", {}).get("Repository") or None


def distribution_name() -> str:
    return _project()["name"]
