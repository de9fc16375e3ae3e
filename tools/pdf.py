"""The whole book as one PDF, printed by Chromium from the website: `make pdf`.

    python -m tools.pdf [--edition full|student] [--language en|zh] [--out FILE] [--paper A4|Letter]
                        [--chapters NN ...]

What it holds: a title page, a table of contents with page numbers, the landing page,
every chapter in order (formulas typeset by MathJax, figures, Chinese text, code and
outputs), then the glossary, the sources and the teacher's guide. The API reference
stays on the website (it is generated from the docstrings that `help()` shows too).
In the full edition each exercise's solution is printed unfolded after the exercise,
labelled "Solution"; the student edition (`--edition student`) has none.
The Chinese edition (`--language zh`, _build/book-zh.pdf) prints the chapters and pages it
has translated (tools/i18n_catalogues.py), its cover and contents from the build's table.

How: the website is built first (tools/website.py, incremental). The <article> of each
page is joined into one print document inside the site (_build/.../html/_print/), with
ids made unique and links between printed pages turned into links within the PDF
(tools/pdf_document.py). The
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
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tools import website
from tools.notebooks import CHAPTERS, ROOT, read_book
from tools.pdf_document import Part, cover_text, part_keys, print_document, read_part
from tools.project_info import package_version
from tools.site_layout import BUILD, EDITIONS, LANGUAGES, Site

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]


def default_output(edition: str, language: str = "en") -> Path:
    """_build/book.pdf, book-student.pdf; the Chinese edition's _build/book-zh.pdf."""
    if language != "en":
        return BUILD / f"book-{language}.pdf"
    return BUILD / ("book.pdf" if edition == "full" else "book-student.pdf")


def chromium() -> str:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file():
            return candidate
    raise SystemExit("make pdf prints with the system's Chromium: apt-get install -y chromium")


# --- what the browser runs in the document ------------------------------------------

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
SIDE_MARGINS_MM = 14 + 14  # as in PRINT_CSS's @page (tools/pdf_document.py)

# The text of every heading, by that text without spaces: Chromium's outline drops the
# space where a heading wraps ("step bystep"); the bookmarks take the heading's own text.
HEADINGS = """() => Object.fromEntries([...document.querySelectorAll('h1, h2, h3')].map(h =>
    [h.textContent.replace(/\\s+/g, ''), h.textContent.replace(/\\s+/g, ' ').trim()]))"""


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


def part_pages(outline: list[tuple[int, str, int]], parts: list[Part],
               contents: str = "Contents") -> dict[str, int]:
    """The page on which each part starts: the first outline entry with its title, after
    the table of contents (its heading: `contents`)."""
    pages: dict[str, int] = {}
    entries = [(t, p) for _, t, p in outline]
    position = next(i + 1 for i, (t, _) in enumerate(entries) if t == contents)
    for part in parts:
        for i in range(position, len(entries)):
            if same_title(entries[i][0], part.title):
                pages[part.anchor] = entries[i][1]
                position = i + 1
                break
        else:
            raise SystemExit(f"make pdf: {part.key} ({part.title!r}) is not in the PDF's outline")
    return pages


def print_twice(context, document: Path, parts: list[Part], paper: str, contents: str = "Contents"):
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
    pages = part_pages(outline, parts, contents)
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


# --- the book -------------------------------------------------------------------------

def build_pdf(edition: str = "full", out: Path | None = None, paper: str = "A4",
              only: list[int] | None = None, site_root: Path | None = None,
              context=None, language: str = "en") -> Path:
    """Print the book (or, with `only`, those chapters between the front and back matter)
    from the site built in `site_root` (default: the reader's, _build/ or _build/student/;
    the Chinese edition's _build/zh/), in the playwright browser `context` given or in a
    headless Chromium of its own."""
    # Both are needed: without them, stop here, before the site is built.
    import playwright.sync_api  # noqa: F401
    import pypdf  # noqa: F401

    start = time.perf_counter()
    out = out or default_output(edition, language)
    if language != "en" and edition != "full":
        raise SystemExit("the Chinese PDF has the full edition only, for now")
    default_root = BUILD / language if language != "en" else BUILD if edition == "full" else BUILD / "student"
    site = Site(site_root or default_root, edition, language)
    notebooks = CHAPTERS
    if language != "en":  # the edition's Chinese notebooks first (tools/i18n.py build)
        from tools import i18n

        i18n.build(out=site.root)
        notebooks = site.root / "chapters"
    if website.build(notebooks, site) != 0:
        raise SystemExit("make pdf: the website did not build")
    parts, document = write_document(site, edition, paper, only)
    contents = cover_text(language)["contents"]
    try:
        printed = print_book(context, document, parts, paper, contents)
    finally:
        shutil.rmtree(document.parent, ignore_errors=True)
    writer = bind(*printed, edition, cover_text(language))
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as handle:
        writer.write(handle)
    size = out.stat().st_size / 2**20
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print(f"pdf: {len(writer.pages)} pages, {size:.1f} MB, {len(parts)} parts, "
          f"{time.perf_counter() - start:.0f} s; {shown}")
    return out


def write_document(site: Site, edition: str, paper: str, only: list[int] | None
                   ) -> tuple[list[Part], Path]:
    """The parts to print (every chapter, or those in `only`), and the print document
    written inside the site's HTML (_print/book.html), where its links and images work."""
    book = read_book(CHAPTERS if site.language == "en" else site.root / "chapters")
    chapters = [c for c in book if not only or c.number in only]
    if only and len(chapters) != len(set(only)):
        raise SystemExit(f"--chapters {only}: no such chapter among {[c.number for c in book]}")
    keys = part_keys(chapters)
    if site.language != "en":  # the back matter the edition has translated
        keys = [key for key in keys if (site.html / f"{key}.html").exists()]
    parts = [read_part(site.html, key, set(keys)) for key in keys]
    folder = site.html / "_print"
    folder.mkdir(exist_ok=True)
    document = folder / "book.html"
    document.write_text(print_document(parts, site.html / f"{keys[1]}.html", edition, paper,
                                       site.language), encoding="utf-8")
    return parts, document


def print_book(context, document: Path, parts: list[Part], paper: str, contents: str = "Contents"):
    """print_twice in the playwright browser `context`, or, when it is None, in a headless
    Chromium of its own (a fresh profile, removed afterwards)."""
    from playwright.sync_api import sync_playwright

    if context is not None:
        return print_twice(context, document, parts, paper, contents)
    profile = tempfile.mkdtemp(prefix="book-pdf-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                profile, executable_path=chromium(), headless=True, args=CHROMIUM_FLAGS)
            printed = print_twice(context, document, parts, paper, contents)
            context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return printed


def bind(first: bytes, contents: bytes, outline: list[tuple[int, str, int]],
         pages: dict[str, int], headings: dict[str, str], edition: str, text: dict[str, str]):
    """The book as a pypdf writer: the contents' second printing in front of the rest of
    the first, with bookmarks for every part and section, and the document's metadata."""
    import io

    from pypdf import PdfReader, PdfWriter

    front = min(pages.values()) - 1  # the title page and the table of contents
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
    writer.add_outline_item(title=text["contents"], page_number=1)
    for depth, title, number in outline:
        if number <= front or depth > 1:
            continue
        parent = parents.get(depth - 1) if depth else None
        title = headings.get(re.sub(r"\s+", "", title), normalise(title))
        parents[depth] = writer.add_outline_item(title=title, page_number=number - 1,
                                                  parent=parent)
    writer.add_metadata({"/Title": text["title"],
                         "/Subject": f"package transformer {package_version()}, {edition} edition",
                         "/Creator": "tools/pdf.py (Chromium, pypdf)"})
    return writer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edition", choices=EDITIONS, default="full",
                        help="full: solutions after each exercise (default); student: none")
    parser.add_argument("--out", type=Path, default=None,
                        help="the PDF (default: _build/book.pdf, _build/book-student.pdf)")
    parser.add_argument("--language", choices=LANGUAGES, default="en",
                        help="zh: the Chinese edition's chapters and pages (tools/i18n.py)")
    parser.add_argument("--paper", choices=["A4", "Letter"], default="A4")
    parser.add_argument("--chapters", type=int, nargs="+", metavar="NN",
                        help="print only these chapters (with the front and back matter)")
    args = parser.parse_args(argv)
    build_pdf(args.edition, args.out, args.paper, args.chapters, language=args.language)
    return 0


if __name__ == "__main__":
    sys.exit(main())
