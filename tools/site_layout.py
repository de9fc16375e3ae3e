"""Where a build of the website lives: its editions, its languages, and for each build
its Sphinx source tree, its HTML and Sphinx's cache (`Site`).

Used by tools/website.py (the build), tools/site_files.py and tools/code_links.py (the
HTML after Sphinx), tools/pdf.py (the site it prints) and tools/book.py (where `make
book` says the site is).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tools.notebooks import ROOT

BUILD = ROOT / "_build"  # the reader's site: _build/html/
EDITIONS = ("full", "student")  # with solutions (folded) / as `make student` hands out
# The English site, and the Chinese edition's (`make site LANGUAGE=zh`: the chapters in tools/i18n_catalogues.py's
# EDITION, translated, in _build/zh/html/; lang="zh-CN").
LANGUAGES = ("en", "zh")


@dataclass(frozen=True)
class Site:
    """Where one build of the site lives: its source tree, its HTML, Sphinx's cache.

    The full edition (solutions folded under each exercise) goes to _build/html/, the
    student edition (no solutions, no hidden tests) to _build/student/html/.
    """

    root: Path = BUILD
    edition: str = "full"
    language: str = "en"

    def __post_init__(self) -> None:
        if self.edition not in EDITIONS:
            raise SystemExit(f"edition must be one of {', '.join(EDITIONS)}, not {self.edition!r}")
        if self.language not in LANGUAGES:
            raise SystemExit(f"language must be one of {', '.join(LANGUAGES)}, not {self.language!r}")

    @property
    def other_language(self) -> Path:
        """Where the same site in the other language lives: _build/zh/ beside _build/."""
        return self.root / "zh" if self.language == "en" else self.root.parent

    @property
    def src(self) -> Path:
        return self.root / "site-src"

    @property
    def html(self) -> Path:
        return self.root / "html"

    @property
    def doctrees(self) -> Path:
        return self.root / "doctrees"


READER = Site()  # the reader's site: the full edition, in English, in _build/
HTML = READER.html
