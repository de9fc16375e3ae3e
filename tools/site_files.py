"""The files of a website build: the Sphinx source tree written only where its content
changes (so that Sphinx rebuilds only what changed), the signature of what every page's
navigation depends on; and, after Sphinx, the HTML whose source is gone removed and each
page that exists in both languages linked to its twin (`link_languages`).

Used by tools/website.py (`assemble`, `build`, the downloads it puts beside the HTML).
"""

from __future__ import annotations

import hashlib
import html
import os
import re
from pathlib import Path

import nbformat

from tools.notebooks import ROOT
from tools.site_layout import Site

GENERATED = "_generated"  # inside the source tree: included by pages, not pages themselves


def write_if_changed(path: Path, data: bytes | str) -> bool:
    """Write `data` to `path` unless the file already holds it; whether it was written."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    if path.exists() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def navigation_signature(wanted: dict[Path, bytes | str], src: Path) -> str:
    """What every page's sidebar and prev/next links depend on: the pages and their titles."""
    digest = hashlib.sha256()
    for path in sorted(wanted):
        digest.update(path.relative_to(src).as_posix().encode() + b"\n")
        data = wanted[path]
        data = data.encode("utf-8") if isinstance(data, str) else data
        if path.name == "chapter_map.md":  # the chapters' titles and exports
            digest.update(data)
        elif path.suffix == ".md":  # a page's title is its first line
            digest.update(data.split(b"\n", 1)[0])
    return digest.hexdigest()


def write_tree(src: Path, wanted: dict[Path, bytes | str]) -> int:
    """Make the source tree `src` hold exactly `wanted` (path -> content): write what
    changed, delete the files no longer wanted and the folders left empty; return the
    files written or deleted."""
    before = {p for p in src.rglob("*") if p.is_file()} if src.exists() else set()
    changed = sum(write_if_changed(path, data) for path, data in wanted.items())
    for path in sorted(before - set(wanted)):
        path.unlink()
        changed += 1
    for path in sorted((p for p in src.rglob("*") if p.is_dir()), reverse=True):
        if not any(path.iterdir()):
            path.rmdir()
    return changed


def remove_stale_pages(site: Site) -> None:
    """Delete the HTML of pages whose source is gone (Sphinx leaves it behind)."""
    documents = {p.relative_to(site.src).with_suffix(".html") for p in site.src.rglob("*")
                 if p.suffix in (".md", ".ipynb") and GENERATED not in p.parts}
    special = {Path("genindex.html"), Path("search.html"), Path("py-modindex.html")}
    for page in site.html.rglob("*.html"):
        relative = page.relative_to(site.html)
        if relative.parts[0] not in ("_static", "_sources") and relative not in documents | special:
            page.unlink()


LANGUAGE_NAMES = {"en": "English", "zh": "中文"}  # each in its own language
SWITCH = '<a class="btn btn-sm language-switch" href="{href}" hreflang="{lang}" lang="{lang}">{name}</a>'
HEADER_BUTTONS = '<div class="article-header-buttons">'


DOC_ROLE = re.compile(r"\{doc\}`(?:([^`<]*?)\s*<([^`>]+)>|([^`]+))`")


def english_title(target: str) -> str:
    """The title of an English chapter or page, as {doc}`target` would show it."""
    path = ROOT / (f"{target}.ipynb" if target.startswith("chapters/") else f"book/{target}.md")
    if not path.exists():  # Sphinx's own check names a link to nothing; here, its name
        return target
    if path.suffix == ".ipynb":
        notebook = nbformat.read(path, as_version=4)
        text = next((c.source for c in notebook.cells if c.cell_type == "markdown"), "")
    else:
        text = path.read_text(encoding="utf-8")
    match = re.search(r"^#\s+(.+?)\s*$", text, re.M)
    return match.group(1) if match else target


def link_to_english(text: str, page: Path, documents: set[str], site: Site) -> str:
    """A Chinese page's {doc} links to documents the Chinese site lacks (a chapter not yet
    translated), turned into links to the English site's page, by a relative path that
    works from disk as the language switch's does. page: the page's path in the source
    tree; documents: the source tree's documents, without suffix."""
    english = site.other_language / "html"

    def replace(match: re.Match) -> str:
        label, target = (match.group(1), match.group(2)) if match.group(2) else (None, match.group(3))
        name = target.strip().lstrip("/") if target.startswith("/") else \
            os.path.normpath((page.parent / target.strip()).as_posix())
        if name in documents:
            return match.group(0)
        here = site.html / page.with_suffix(".html")
        href = Path(os.path.relpath(english / f"{name}.html", here.parent)).as_posix()
        return f'<a href="{html.escape(href)}" hreflang="en">{html.escape(label or english_title(name))}</a>'

    return DOC_ROLE.sub(replace, text)


def chinese_pages(site: Site, wanted: dict[Path, bytes | str]) -> dict[Path, str]:
    """The edition's book pages in Chinese (tools/i18n.py build wrote them to
    root/pages/NAME.md) for the source tree, each {doc} link to a document the Chinese site
    lacks pointed at the English site."""
    pages = {site.src / path.name: path.read_text(encoding="utf-8")
             for path in sorted((site.root / "pages").glob("*.md"))}
    documents = {path.relative_to(site.src).with_suffix("").as_posix() for path in [*wanted, *pages]
                 if path.suffix in (".md", ".ipynb") and GENERATED not in path.parts}
    return {path: link_to_english(text, path.relative_to(site.src), documents, site)
            for path, text in pages.items()}


def link_languages(site: Site) -> int:
    """Link each page that exists in both languages (a chapter of the Chinese edition, the
    landing page) to its twin, in both sites, by a relative path that works from disk; a
    button at the top right, beside the download button. Returns the links added."""
    other = Site(site.other_language, site.edition, "zh" if site.language == "en" else "en")
    if not other.html.is_dir():
        return 0
    linked = 0
    for page in sorted(site.html.rglob("*.html")):
        relative = page.relative_to(site.html)
        twin = other.html / relative
        translated = relative.parts[0] == "chapters" or len(relative.parts) == 1  # not api/
        if translated and twin.exists() and relative.name not in ("genindex.html", "search.html"):
            for here, there, language in ((page, twin, other.language), (twin, page, site.language)):
                text = here.read_text(encoding="utf-8")
                if "language-switch" in text or HEADER_BUTTONS not in text:
                    continue
                href = Path(os.path.relpath(there, here.parent)).as_posix()
                switch = SWITCH.format(href=href, lang="zh-CN" if language == "zh" else "en",
                                       name=LANGUAGE_NAMES[language])
                here.write_text(text.replace(HEADER_BUTTONS, HEADER_BUTTONS + switch, 1),
                                encoding="utf-8")
                linked += 1
    return linked
