"""The print document of the book's PDF (tools/pdf.py): one HTML page that holds every
printed page of the website in turn.

A title page and a table of contents (its page numbers written in once the document has
been printed), then the <article> of each printed page of the site (`read_part`): the
landing page, the chapters, the back matter. Each part's ids are prefixed, so that they
stay unique, and its links to other printed pages become links within the PDF; the head
is a chapter page's (its styles, MathJax), with PRINT_CSS for paper.

Used by tools/pdf.py, which has Chromium print the document.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tools.project_info import package_version, repository_url

BACK_MATTER = ["glossary", "sources", "teachers"]  # after the chapters, in this order
PLACEHOLDER = "000"  # a page number before it is known: as wide as the real ones


@dataclass
class Part:
    """One page of the site printed in the book."""

    key: str  # docname: "index", "chapters/03_attention", "glossary"
    title: str  # its first heading, as the table of contents shows it
    body: str  # its article's HTML, ids prefixed and links rewritten

    @property
    def anchor(self) -> str:
        return "part-" + re.sub(r"\W", "-", self.key)


ARTICLE = re.compile(r'<article class="bd-article">(.*?)</article>', re.S)
HEADING = re.compile(r"<h1[^>]*>(.*?)</h1>", re.S)
ID = re.compile(r'\bid="([^"]+)"')
HREF = re.compile(r'\bhref="([^"]*)"')
SRC = re.compile(r'\bsrc="([^"]*)"')
HEADERLINK = re.compile(r'<a class="headerlink"[^>]*>.*?</a>', re.S)


def part_keys(chapters) -> list[str]:
    """The docnames of the printed pages, in order: the landing page, the chapters, the
    back matter."""
    return ["index"] + [f"chapters/{c.name}" for c in chapters] + BACK_MATTER


def read_part(html_root: Path, key: str, printed: set[str]) -> Part:
    """A page's article, ready to sit in the print document beside the others."""
    page = html_root / f"{key}.html"
    text = page.read_text(encoding="utf-8")
    found = ARTICLE.search(text)
    if not found:
        raise SystemExit(f"{page}: no <article class=\"bd-article\">; has the theme changed?")
    body = HEADERLINK.sub("", found.group(1))
    heading = HEADING.search(body)
    title = html.unescape(re.sub(r"<[^>]+>", "", heading.group(1))).strip() if heading else key
    prefix = "part-" + re.sub(r"\W", "-", key)
    here = page.parent

    def local(target: str) -> str:
        """A link from this page, as a link inside the PDF (or to nothing)."""
        if re.match(r"^[a-z]+:", target):
            return target  # mailto:, data:, an address outside the site
        path, _, fragment = target.partition("#")
        if not path:
            return f"#{prefix}--{fragment}" if fragment else f"#{prefix}"
        resolved = (here / path).resolve()
        try:
            other = resolved.relative_to(html_root.resolve()).with_suffix("").as_posix()
        except ValueError:
            return ""
        if other not in printed:
            return ""  # a page that is not printed (the API reference): the text stays
        other_prefix = "part-" + re.sub(r"\W", "-", other)
        return f"#{other_prefix}--{fragment}" if fragment else f"#{other_prefix}"

    body = ID.sub(lambda m: f'id="{prefix}--{m.group(1)}"', body)
    body = HREF.sub(lambda m: f'href="{html.escape(local(html.unescape(m.group(1))))}"', body)
    # Images and other files: the print document sits one folder down, as chapters do.
    if here != html_root:
        pass
    else:
        body = SRC.sub(lambda m: f'src="{_down(m.group(1))}"', body)
    return Part(key=key, title=title, body=body)


def _down(src: str) -> str:
    """A path relative to the site's root, seen from a page one folder down."""
    return src if re.match(r"^([a-z]+:|/|#)", src) else "../" + src


# What the book's own pages say, in English; the Chinese edition's are in the build's
# table (book/locale/zh_CN/LC_MESSAGES/build.po), each referencing this file.
COVER = {
    "title": "Building a Transformer, step by step",
    "subtitle": "An encoder-decoder Transformer built one idea per chapter, in PyTorch",
    "printed": "Package {package} version {version}; printed on {date} from the book's notebooks.",
    "full": "Each exercise is followed by its solution.",
    "student": "Student edition: the exercises without their solutions.",
    "source": "Source: {source}.",
    "no repository": "the <code>{distribution}</code> repository (no public address has been "
                     "published yet)",
    "contents": "Contents",
}


def cover_text(language: str = "en") -> dict[str, str]:
    """COVER in the book's language: English as written, Chinese from the build's table
    (a KeyError names a string it lacks)."""
    if language == "en":
        return dict(COVER)
    from tools.i18n_catalogues import build_table

    table = build_table()
    return {key: table[english] for key, english in COVER.items()}


def front_matter(parts: list[Part], edition: str, language: str = "en") -> str:
    text = cover_text(language)
    built = datetime.now(UTC).strftime("%Y-%m-%d")
    repository = repository_url()
    source = (f'<a href="{html.escape(repository)}">{html.escape(repository)}</a>' if repository
              else text["no repository"].format(distribution="transformer-book"))
    solutions = text[edition]
    printed = text["printed"].format(package="<code>transformer</code>",
                                     version=html.escape(package_version()), date=built)
    rows = "\n".join(
        f'<li class="book-toc-{"chapter" if p.key.startswith("chapters/") else "part"}">'
        f'<a href="#{p.anchor}"><span class="book-toc-title">{html.escape(p.title)}</span>'
        f'<span class="book-toc-dots"></span>'
        f'<span class="book-toc-page" data-part="{p.anchor}">{PLACEHOLDER}</span></a></li>'
        for p in parts)
    return f"""
<section class="book-cover">
  <p class="book-cover-title">{text["title"]}</p>
  <p class="book-cover-subtitle">{text["subtitle"]}</p>
  <p>{printed}<br/>{solutions}</p>
  <p>{text["source"].format(source=source)}</p>
</section>
<section class="book-toc" id="book-toc">
  <h1 class="book-toc-heading">{text["contents"]}</h1>
  <ol>{rows}</ol>
</section>
"""


PRINT_CSS = """
@page { size: %(paper)s; margin: 16mm 14mm 18mm 14mm; }
html, body { background: white !important; }
.bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .prev-next-area,
footer, .bd-footer, .bd-footer-article, .bd-footer-content, #jb-print-docs-body,
.search-button__wrapper, .pst-scrollable-table-container::-webkit-scrollbar,
button.copybtn, .theme-switch-button, .book-skip { display: none !important; }
.bd-container, .bd-container__inner, .bd-main, .bd-content, .bd-article-container,
.bd-page-width, .bd-article {
  max-width: none !important; min-width: 0 !important; width: auto !important;
  margin: 0 !important; padding: 0 !important; flex-grow: 1 !important; }
.bd-main .bd-content .bd-article h1:first-of-type { display: block !important; }
.bd-main .bd-content { margin-left: 0 !important; }
.book-part { break-before: page; }
.book-cover { break-after: page; padding-top: 30vh; text-align: center; }
.book-cover-title { font-size: 2.4rem; font-weight: 600; }
.book-cover-subtitle { font-size: 1.2rem; }
.book-toc ol { list-style: none; padding: 0; }
.book-toc li a { display: flex; text-decoration: none; color: inherit; }
.book-toc li.book-toc-chapter { padding-left: 1.5em; }
.book-toc-dots { flex: 1; border-bottom: 1px dotted #888; margin: 0 0.4em 0.3em; }
.book-toc-page { font-variant-numeric: tabular-nums; }
table.chapter-map td:first-child { white-space: nowrap; }
details > summary { list-style: none; font-weight: 600; }
details > summary::marker, details > summary::-webkit-details-marker { display: none; }
"""


def print_document(parts: list[Part], base_page: Path, edition: str, paper: str,
                   language: str = "en") -> str:
    """One HTML document: the head of a chapter page (styles, MathJax), every part in turn."""
    text = base_page.read_text(encoding="utf-8")
    found = ARTICLE.search(text)
    assert found, base_page
    joined = front_matter(parts, edition, language) + "".join(
        f'<section class="book-part" id="{p.anchor}">{p.body}</section>' for p in parts)
    text = text[:found.start(1)] + joined + text[found.end(1):]
    style = f"<style>{PRINT_CSS % {'paper': paper}}</style>"
    return text.replace("</head>", style + "</head>", 1)
