"""The whole book as one PDF, printed by Chromium from the website: `make pdf`.

    python -m tools.pdf [--edition full|student] [--out FILE] [--paper A4|Letter] [--chapters NN ...]

What it holds: a title page, a table of contents with page numbers, the landing page,
every chapter in order (formulas typeset by MathJax, figures, Chinese text, code and
outputs), then the glossary, the sources and the teacher's guide. The API reference
stays on the website (it is generated from the docstrings that `help()` shows too).
In the full edition each exercise's solution is printed unfolded after the exercise,
labelled "Solution"; the student edition (`--edition student`) has none.

How: the website is built first (tools/website.py, incremental). The <article> of each
page is joined into one print document inside the site (_build/.../html/_print/), with
ids made unique and links between printed pages turned into links within the PDF. The
system's Chromium (the one the site's browser test drives, through playwright; nothing
is downloaded) typesets it; a display formula or a table wider than the paper's text
column is set smaller until it fits (MathJax 3 cannot break lines, and paper cannot
scroll), and the build stops if anything would still be cut at the paper's edge. Chromium prints the
document once with its outline, from which
pypdf reads the page on which each part starts; the numbers are written into the table
of contents, which is printed again (its pages only, so the rest keeps its page numbers)
and put in front of the rest with pypdf, with bookmarks for every part and section.
Chinese is drawn with the Simplified Chinese face of the site's font stack (Noto Sans
CJK SC from Debian's fonts-noto-cjk, which .ci/run installs).
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tools import website
from tools.notebooks import CHAPTERS, ROOT, read_book
from tools.project_info import package_version, repository_url

BACK_MATTER = ["glossary", "sources", "teachers"]  # after the chapters, in this order
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]
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


def default_output(edition: str) -> Path:
    return website.BUILD / ("book.pdf" if edition == "full" else "book-student.pdf")


def chromium() -> str:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file():
            return candidate
    raise SystemExit("make pdf prints with the system's Chromium: apt-get install -y chromium")


# --- the print document ------------------------------------------------------------

ARTICLE = re.compile(r'<article class="bd-article">(.*?)</article>', re.S)
HEADING = re.compile(r"<h1[^>]*>(.*?)</h1>", re.S)
ID = re.compile(r'\bid="([^"]+)"')
HREF = re.compile(r'\bhref="([^"]*)"')
SRC = re.compile(r'\bsrc="([^"]*)"')
HEADERLINK = re.compile(r'<a class="headerlink"[^>]*>.*?</a>', re.S)


def part_keys(chapters) -> list[str]:
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


def front_matter(parts: list[Part], edition: str) -> str:
    built = datetime.now(UTC).strftime("%Y-%m-%d")
    repository = repository_url()
    source = (f'<a href="{html.escape(repository)}">{html.escape(repository)}</a>' if repository
              else "the <code>transformer-book</code> repository (no public address has been "
                   "published yet)")
    solutions = ("Each exercise is followed by its solution." if edition == "full" else
                 "Student edition: the exercises without their solutions.")
    rows = "\n".join(
        f'<li class="book-toc-{"chapter" if p.key.startswith("chapters/") else "part"}">'
        f'<a href="#{p.anchor}"><span class="book-toc-title">{html.escape(p.title)}</span>'
        f'<span class="book-toc-dots"></span>'
        f'<span class="book-toc-page" data-part="{p.anchor}">{PLACEHOLDER}</span></a></li>'
        for p in parts)
    return f"""
<section class="book-cover">
  <p class="book-cover-title">Building a Transformer, step by step</p>
  <p class="book-cover-subtitle">An encoder-decoder Transformer built one idea per chapter,
  in PyTorch</p>
  <p>Package <code>transformer</code> version {html.escape(package_version())};
  printed on {built} from the book's notebooks.<br/>{solutions}</p>
  <p>Source: {source}.</p>
</section>
<section class="book-toc" id="book-toc">
  <h1 class="book-toc-heading">Contents</h1>
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

# Folded parts (solutions) printed unfolded, their "Hide the solution" button as a label.
OPEN_DETAILS = """() => { document.querySelectorAll('details').forEach(d => {
    d.open = true;
    const summary = d.querySelector(':scope > summary');
    if (summary && d.closest('.tag_solution')) summary.textContent = 'Solution';
  }); }"""
# Paper cannot scroll: a display formula or a table wider than the text column is set in a
# smaller size until it fits (MathJax 3 does not break lines). Measured at the width of the
# paper's text column, in print media; returns how many were made smaller.
FIT_WIDE = """() => {
  const wide = e => e.scrollWidth > e.parentElement.clientWidth + 1;
  const boxes = [...document.querySelectorAll('.book-part div.math mjx-container, .book-part table')];
  const fitted = boxes.filter(wide).length;
  for (let round = 0; round < 4; round++)
    for (const e of boxes.filter(wide)) {
      const scale = e.parentElement.clientWidth / e.scrollWidth;
      e.style.fontSize = `${parseFloat(getComputedStyle(e).fontSize) * scale * 0.98}px`;
    }
  return fitted;
}"""
# What would be cut at the paper's edge: any box of the book wider than the column it sits
# in, or reaching past the column's right edge (checked after FIT_WIDE; none expected).
TOO_WIDE = """column => [...document.querySelectorAll(
    '.book-part :is(div.math mjx-container, table, pre, img, figure, div.cell_output)')]
  .filter(e => e.scrollWidth > e.parentElement.clientWidth + 1
          || e.getBoundingClientRect().right > column + 1)
  .map(e => `${e.closest('.book-part').id}: ${e.tagName.toLowerCase()} "${e.textContent.trim().slice(0, 40)}"`)"""
MM = 96 / 25.4  # CSS pixels per millimetre
PAPER_WIDTH_MM = {"A4": 210, "Letter": 215.9}
SIDE_MARGINS_MM = 14 + 14  # as in PRINT_CSS's @page

# The text of every heading, by that text without spaces: Chromium's outline drops the
# space where a heading wraps ("step bystep"); the bookmarks take the heading's own text.
HEADINGS = """() => Object.fromEntries([...document.querySelectorAll('h1, h2, h3')].map(h =>
    [h.textContent.replace(/\\s+/g, ''), h.textContent.replace(/\\s+/g, ' ').trim()]))"""


def print_document(parts: list[Part], base_page: Path, edition: str, paper: str) -> str:
    """One HTML document: the head of a chapter page (styles, MathJax), every part in turn."""
    text = base_page.read_text(encoding="utf-8")
    found = ARTICLE.search(text)
    assert found, base_page
    joined = front_matter(parts, edition) + "".join(
        f'<section class="book-part" id="{p.anchor}">{p.body}</section>' for p in parts)
    text = text[:found.start(1)] + joined + text[found.end(1):]
    style = f"<style>{PRINT_CSS % {'paper': paper}}</style>"
    return text.replace("</head>", style + "</head>", 1)


# --- printing ----------------------------------------------------------------------

FOOTER = ('<div style="font-size:8px;width:100%;text-align:center;color:#555;">'
          '<span class="pageNumber"></span></div>')


def outline_pages(pdf: bytes) -> list[tuple[int, str, int]]:
    """(depth, title, 1-based page) of every entry of a PDF's outline, in order."""
    import io

    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(pdf))
    found: list[tuple[int, str, int]] = []

    def walk(items, depth):
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                found.append((depth, str(item.title), reader.get_destination_page_number(item) + 1))

    walk(reader.outline, 0)
    return found


def normalise(title: str) -> str:
    return re.sub(r"\s+", " ", title).strip()


def same_title(outline_title: str, title: str) -> bool:
    """Chromium's outline joins a heading's wrapped lines without a space: compare without."""
    return re.sub(r"\s+", "", outline_title) == re.sub(r"\s+", "", title)


def part_pages(outline: list[tuple[int, str, int]], parts: list[Part]) -> dict[str, int]:
    """The page on which each part starts: the first outline entry with its title."""
    pages: dict[str, int] = {}
    entries = [(t, p) for _, t, p in outline]
    position = next(i + 1 for i, (t, _) in enumerate(entries) if t == "Contents")
    for part in parts:
        for i in range(position, len(entries)):
            if same_title(entries[i][0], part.title):
                pages[part.anchor] = entries[i][1]
                position = i + 1
                break
        else:
            raise SystemExit(f"make pdf: {part.key} ({part.title!r}) is not in the PDF's outline")
    return pages


def print_twice(context, document: Path, parts: list[Part], paper: str):
    """Print the document once with its outline; write into the table of contents the page
    on which each part starts; print the contents' pages again. Returns (the whole PDF, the
    contents' pages, the outline, part -> page, heading texts)."""
    clock = time.perf_counter()
    page = context.new_page()
    page.goto(document.as_uri())
    page.wait_for_load_state("load")
    page.wait_for_function("window.MathJax?.startup?.promise !== undefined", timeout=60_000)
    page.evaluate("MathJax.startup.promise")
    typeset = time.perf_counter() - clock
    page.evaluate(OPEN_DETAILS)
    headings = page.evaluate(HEADINGS)
    page.emulate_media(media="print", color_scheme="light")
    column = round((PAPER_WIDTH_MM[paper] - SIDE_MARGINS_MM) * MM)
    page.set_viewport_size({"width": column, "height": 1000})
    page.evaluate(FIT_WIDE)
    too_wide = page.evaluate(TOO_WIDE, column)
    width = page.evaluate("document.documentElement.scrollWidth")
    if too_wide or width > column:
        raise SystemExit(f"make pdf: {width} px wide for a column of {column} px; these would "
                         f"be cut at the paper's edge: {too_wide[:10]}")
    options = dict(format=paper, print_background=True, display_header_footer=True,
                   header_template="<span></span>", footer_template=FOOTER,
                   prefer_css_page_size=True, outline=True, tagged=True)
    clock = time.perf_counter()
    first = page.pdf(**options)
    printed = time.perf_counter() - clock
    outline = outline_pages(first)
    pages = part_pages(outline, parts)
    page.evaluate("""pages => { for (const [part, number] of Object.entries(pages))
        document.querySelector(`.book-toc-page[data-part="${part}"]`).textContent = number; }""",
                  {k: str(v) for k, v in pages.items()})
    front = min(pages.values()) - 1  # the title page and the table of contents
    clock = time.perf_counter()
    contents = page.pdf(**{**options, "page_ranges": f"1-{front}"})
    print(f"pdf: typeset in {typeset:.0f} s, printed in {printed:.0f} s, contents printed "
          f"again in {time.perf_counter() - clock:.0f} s", flush=True)
    page.close()
    return first, contents, outline, pages, headings


def build_pdf(edition: str = "full", out: Path | None = None, paper: str = "A4",
              only: list[int] | None = None, site_root: Path | None = None,
              context=None) -> Path:
    """Print the book (or, with `only`, those chapters between the front and back matter)
    from the site built in `site_root` (default: the reader's, _build/ or _build/student/),
    in the playwright browser `context` given or in a headless Chromium of its own."""
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter

    start = time.perf_counter()
    out = out or default_output(edition)
    site = website.Site(site_root or (website.BUILD if edition == "full" else website.BUILD / "student"),
                        edition)
    if website.build(CHAPTERS, site) != 0:
        raise SystemExit("make pdf: the website did not build")
    chapters = [c for c in read_book(CHAPTERS) if not only or c.number in only]
    if only and len(chapters) != len(set(only)):
        raise SystemExit(f"--chapters {only}: no such chapter among {[c.number for c in read_book(CHAPTERS)]}")
    keys = part_keys(chapters)
    parts = [read_part(site.html, key, set(keys)) for key in keys]
    folder = site.html / "_print"
    folder.mkdir(exist_ok=True)
    document = folder / "book.html"
    document.write_text(print_document(parts, site.html / f"{keys[1]}.html", edition, paper),
                        encoding="utf-8")
    try:
        if context is not None:
            first, contents, outline, pages, headings = print_twice(context, document, parts, paper)
        else:
            profile = tempfile.mkdtemp(prefix="book-pdf-")
            try:
                with sync_playwright() as p:
                    context = p.chromium.launch_persistent_context(
                        profile, executable_path=chromium(), headless=True, args=CHROMIUM_FLAGS)
                    first, contents, outline, pages, headings = print_twice(
                        context, document, parts, paper)
                    context.close()
            finally:
                shutil.rmtree(profile, ignore_errors=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    front = min(pages.values()) - 1  # the title page and the table of contents

    import io

    body, toc = PdfReader(io.BytesIO(first)), PdfReader(io.BytesIO(contents))
    if len(toc.pages) != front:
        raise SystemExit(f"make pdf: the contents took {len(toc.pages)} pages, not {front}")
    writer = PdfWriter()
    for pdf_page in toc.pages:
        writer.add_page(pdf_page)
    for pdf_page in body.pages[front:]:
        writer.add_page(pdf_page)
    # Bookmarks: each part, and the sections of each (the outline Chromium wrote).
    parents: dict[int, object] = {}
    writer.add_outline_item(title="Contents", page_number=1)
    for depth, title, number in outline:
        if number <= front or depth > 1:
            continue
        parent = parents.get(depth - 1) if depth else None
        title = headings.get(re.sub(r"\s+", "", title), normalise(title))
        parents[depth] = writer.add_outline_item(title=title, page_number=number - 1,
                                                  parent=parent)
    writer.add_metadata({"/Title": "Building a Transformer, step by step",
                         "/Subject": f"package transformer {package_version()}, {edition} edition",
                         "/Creator": "tools/pdf.py (Chromium, pypdf)"})
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as handle:
        writer.write(handle)
    size = out.stat().st_size / 2**20
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print(f"pdf: {len(writer.pages)} pages, {size:.1f} MB, {len(parts)} parts, "
          f"{time.perf_counter() - start:.0f} s; {shown}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edition", choices=website.EDITIONS, default="full",
                        help="full: solutions after each exercise (default); student: none")
    parser.add_argument("--out", type=Path, default=None,
                        help="the PDF (default: _build/book.pdf, _build/book-student.pdf)")
    parser.add_argument("--paper", choices=["A4", "Letter"], default="A4")
    parser.add_argument("--chapters", type=int, nargs="+", metavar="NN",
                        help="print only these chapters (with the front and back matter)")
    args = parser.parse_args(argv)
    build_pdf(args.edition, args.out, args.paper, args.chapters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
