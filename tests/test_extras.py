"""The optional dependencies of pyproject.toml, by use, and the pinned set that `make
install` installs: every package an extra names is pinned (requirements-dev.txt, or the
benchmark's requirements-bench.txt, which it includes), and `dev` is every extra."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SELF = "transformer-book"


def normal(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    """'pyright[nodejs]>=1.1.400' -> 'pyright'."""
    return normal(re.match(r"[A-Za-z0-9_.-]+", line.strip()).group(0))


def extras(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, list[str]]:
    return tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]


def expanded(name: str, table: dict[str, list[str]]) -> set[str]:
    """The packages an extra names, its own `transformer-book[...]` references followed."""
    found: set[str] = set()
    for line in table[name]:
        if requirement_name(line) == SELF:
            for other in re.search(r"\[(.*)\]", line).group(1).split(","):
                found |= expanded(other.strip(), table)
        else:
            found.add(requirement_name(line))
    return found


def pinned(*files: str) -> set[str]:
    return {requirement_name(line.split("==")[0]) for file in files
            for line in (ROOT / file).read_text().splitlines() if "==" in line
            and not line.lstrip().startswith("#")}


def test_every_package_of_an_extra_is_pinned_for_make_install():
    table = extras()
    pins = pinned("requirements-dev.txt", "requirements-bench.txt")
    unpinned = {name: sorted(expanded(name, table) - pins) for name in table}
    assert not any(unpinned.values()), f"not pinned in requirements-dev.txt: {unpinned}"


def test_dev_is_every_extra():
    table = extras()
    others = set().union(*(expanded(name, table) for name in table if name != "dev"))
    assert expanded("dev", table) == others


def test_the_extras_are_by_use():
    assert set(extras()) == {"notebooks", "test", "docs", "grading", "benchmarks", "dev"}
    assert "nbgrader" in expanded("grading", extras()) and "nbgrader" not in expanded("test", extras())
    assert "sphinx" in expanded("docs", extras()) and "sphinx" not in expanded("notebooks", extras())


def test_the_checks_see_a_missing_pin_and_a_missing_extra(tmp_path):
    """An extra that names an unpinned package, or a dev that leaves one out, is caught."""
    (tmp_path / "pyproject.toml").write_text(
        '[project.optional-dependencies]\n'
        'a = ["numpy>=1", "not-a-pinned-thing>=1"]\n'
        'b = ["transformer-book[a]", "Sphinx_Book.Theme>=1"]\n'
        'dev = ["transformer-book[a]"]\n')
    table = extras(tmp_path / "pyproject.toml")
    assert expanded("b", table) == {"numpy", "not-a-pinned-thing", "sphinx-book-theme"}
    assert "not-a-pinned-thing" in expanded("a", table) - pinned("requirements-dev.txt")
    assert expanded("dev", table) != expanded("a", table) | expanded("b", table)
