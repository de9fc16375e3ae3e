"""The book's website, as a reader gets it: built with warnings as errors, no link broken,
nothing fetched from outside, and, in a real headless Chromium opened on file://, every
chapter's formulas typeset, figures loaded, captioned and enlargeable, prev/next links
working, both sidebar buttons working on a phone and a laptop, no page wider than a
phone's screen, Chinese drawn with a Simplified Chinese face, copy buttons on code, search
finding any run of Chinese characters with snippets and highlights, and the API reference
listing the whole package. The student edition holds no solution and no hidden test.

The site is built from the committed notebooks into _build/test-site/ (and the student
edition into _build/test-site-student/), incremental after the first run, so that
`make test` leaves the reader's _build/html/ alone.
The browser part needs Chromium at /usr/bin/chromium (or $BOOK_CHROMIUM); without it
those tests are skipped with the command that installs it, never passed silently (and
fail instead when BOOK_REQUIRE_BROWSER is set, as .ci/run does).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest

from tools.chapter_exports import chapter_exports
from tools.notebooks import hidden_test_regions, read_book, solution_regions
from tools.project_info import package_version, python_versions, repository_url

ROOT = Path(__file__).resolve().parent.parent

CHAPTERS = read_book()
SITE_ROOT = ROOT / "_build" / "test-site"
HTML = SITE_ROOT / "html"
STUDENT_ROOT = ROOT / "_build" / "test-site-student"
PHONE, LAPTOP = 390, 1280  # CSS pixels: a common phone's width, a common laptop's
ENABLE = ("apt-get install -y chromium fonts-noto-cjk   (Debian/Ubuntu; or set "
          "BOOK_CHROMIUM=/path/to/chromium)")
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
EXTERNAL = re.compile(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", re.I)


def chromium() -> str | None:
    for candidate in (os.environ.get("BOOK_CHROMIUM"), "/usr/bin/chromium",
                      shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


# --- the build ---------------------------------------------------------------------

def build_site(out: Path, edition: str = "full") -> Path:
    """Build the site from the committed notebooks, Sphinx warnings as errors."""
    run = subprocess.run(
        [sys.executable, "-m", "tools.website", "--out", str(out),
         "--edition", edition],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, f"the site does not build:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    assert "WARNING" not in run.stderr, run.stderr[-5000:]
    return out / "html"


@pytest.fixture(scope="module")
def site() -> Path:
    return build_site(SITE_ROOT)


@pytest.fixture(scope="module")
def student_site() -> Path:
    return build_site(STUDENT_ROOT, "student")


def pages(html: Path) -> list[Path]:
    """The pages of the site (not the theme's template files that it copies into _static/)."""
    return sorted(p for p in html.rglob("*.html") if not {"_sources", "_static"} & set(p.parts))


class Links(HTMLParser):
    """Every href/src of a page, and every id it defines."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append(value)
            if name == "id" and value:
                self.ids.add(value)


def parse(page: Path) -> Links:
    parser = Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def test_every_chapter_and_page_is_built(site):
    built = {p.relative_to(site).as_posix() for p in pages(site)}
    for chapter in CHAPTERS:
        assert f"chapters/{chapter.name}.html" in built
    for page in ("index.html", "search.html", "api/index.html", "glossary.html", "sources.html",
                 "teachers.html"):
        assert page in built


def test_no_page_names_an_external_url(site):
    """Nothing points off the site: no link, script, stylesheet or font from a server (but
    the repository's address in the footer, once pyproject.toml publishes one)."""
    found = {}
    repository = repository_url()
    for page in pages(site):
        text = page.read_text(encoding="utf-8")
        hits = EXTERNAL.findall(text.replace(repository, "") if repository else text)
        if hits:
            found[page.relative_to(site).as_posix()] = sorted(set(hits))[:5]
    assert not found, f"external URLs in generated pages: {found}"


def test_no_internal_link_is_broken(site):
    """Every relative href/src names a file of the site, and every #fragment an id in it."""
    ids: dict[Path, set[str]] = {}
    broken = []
    for page in pages(site):
        for link in parse(page).links:
            parts = urlsplit(link)
            if parts.scheme in ("data", "mailto", "javascript") or link.startswith("//"):
                continue
            if parts.scheme:
                broken.append(f"{page.relative_to(site)} -> {link} (absolute)")
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)} -> {link}")
                continue
            if parts.fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = parse(target).ids
                if unquote(parts.fragment) not in ids[target]:
                    broken.append(f"{page.relative_to(site)} -> {link} (no such anchor)")
    assert not broken, f"{len(broken)} broken links: {broken[:20]}"


def test_chapters_link_to_their_api_pages_and_back(site):
    for chapter in CHAPTERS:
        text = (site / "chapters" / f"{chapter.name}.html").read_text(encoding="utf-8")
        if "__init__" in chapter.modules:  # the top level: the API reference's index lists it
            assert "../api/index.html" in text, f"{chapter.name} writes the top level, but does not link to it"
        # A module without public names (validation's private checks, __main__) has no page.
        for module in (export.module for export in chapter_exports(chapter)):
            assert f"../api/{module}.html" in text, f"{chapter.name} does not link to api/{module}"
            api = (site / "api" / f"{module}.html").read_text(encoding="utf-8")
            assert f"../chapters/{chapter.name}.html" in api, f"api/{module} does not link back"


def test_every_public_name_is_documented_with_its_chapter(site):
    """Each name of a module has an entry on the module's page, and each entry says, with a
    link, which chapter defines it (constants included, which have no docstring)."""
    from tools.chapter_exports import chapter_exports

    for chapter in CHAPTERS:
        for export in chapter_exports(chapter):
            page = (site / "api" / f"{export.module}.html").read_text(encoding="utf-8")
            for name in export.names:
                assert f'id="transformer.{export.module}.{name}"' in page, f"{name} undocumented"
            links = page.count(f'Defined in chapter {chapter.number:02d}, <a class="reference internal" '
                               f'href="../chapters/{chapter.name}.html"')
            assert links >= len(export.names), f"api/{export.module}: {links} chapter links"


def test_glossary_names_only_symbols_of_the_package():
    """Each package symbol in the glossary's table exists, and is public (in its module's __all__)."""
    import importlib

    text = (ROOT / "book" / "glossary.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "{py:obj}" in line]
    assert len(rows) >= 20
    for row in rows:
        for target in re.findall(r"\{py:obj\}`~?([\w.]+)`", row):
            package, module, name = target.split(".")
            assert package == "transformer", row
            assert hasattr(importlib.import_module(f"transformer.{module}"), name), row
            assert name in importlib.import_module(f"transformer.{module}").__all__, f"{name} is not public: {row}"
    for chinese in ("注意力", "掩码", "位置编码", "标签平滑"):
        assert chinese in text


def page_text(page: Path) -> str:
    """The text of a page as a reader sees it: no tags, scripts or styles; entities decoded,
    typographic quotes (Sphinx's smartquotes) back to straight ones."""
    import html

    text = re.sub(r"<(script|style)\b.*?</\1>", " ", page.read_text(encoding="utf-8"), flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", "", text)).translate(str.maketrans("‘’“”", "''\"\""))
    return re.sub(r"\s+", " ", text)


def test_every_page_names_version_build_date_and_source(site):
    """The footer of every page: the package's version, the day it was built, and where its
    source lives (the configured address, or the project's name and a plain statement)."""
    repository = repository_url()
    for page in pages(site):
        footer = re.search(r'<p class="build-info">(.*?)</p>', page.read_text(encoding="utf-8"), re.S)
        assert footer, f"{page.relative_to(site)}: no build-info footer"
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", footer.group(1)))
        assert f"version {package_version()}" in text, text
        assert re.search(r"built on \d{4}-\d\d-\d\d", text), text
        if repository:
            assert f'href="{repository}"' in footer.group(1), text
        else:
            assert "transformer-book repository (no public address has been published yet)" in text


def test_every_chapter_has_its_package_box_and_download_note(site):
    """Under each chapter's title, a box: the modules it writes or (chapter 13) uses, linked
    to their API pages, and how to run the downloaded notebook (installing the package)."""
    from tools.chapter_exports import chapter_exports, imports_from_package

    documented = {e.module for c in CHAPTERS for e in chapter_exports(c)}  # the modules with an API page
    for chapter in CHAPTERS:
        page = (site / "chapters" / f"{chapter.name}.html").read_text(encoding="utf-8")
        box = re.search(r'<div class="[^"]*\bpackage-note\b[^"]*">(.*?)</div>', page, re.S)
        assert box, f"{chapter.name}: no 'In the package' box"
        modules = [e.module for e in chapter_exports(chapter)] + [
            m for m in imports_from_package(chapter) if m in documented]
        assert modules, f"{chapter.name}: writes nothing and uses nothing from the package?"
        for module in modules:
            assert f"../api/{module}.html" in box.group(1), f"{chapter.name}: box lacks {module}"
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", box.group(1)))
        assert "pip install -e path/to/clone" in text and "make lab" in text, text


@pytest.mark.parametrize("edition", ["full", "student"])
def test_download_is_the_chapter_with_an_install_note(site, student_site, edition):
    """The download button gives the chapter as executed (full edition) or the student copy
    (student edition), with a note on installing the package under its title."""
    import nbformat

    from tools.student_copies import student_copy

    html = site if edition == "full" else student_site
    for chapter in CHAPTERS:
        offered = nbformat.read(html / "_sources" / "chapters" / f"{chapter.name}.ipynb", as_version=4)
        nbformat.validate(offered)
        notes = [c for c in offered.cells if c.get("id") == "book-download-note"]
        assert len(notes) == 1 and "pip install -e" in notes[0].source, chapter.name
        rest = [c.source for c in offered.cells if c.get("id") != "book-download-note"]
        expected = chapter.notebook if edition == "full" else student_copy(chapter.notebook, chapter.name)
        assert rest == [c.source for c in expected.cells], f"{chapter.name}: the download differs"


def test_landing_page_states_what_the_readme_states(site):
    """Python versions from pyproject.toml's classifiers, as the README says them; the
    durations are the README's own paragraph."""
    from tools.website import readme_durations

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    landing = page_text(site / "index.html")
    versions = python_versions()
    assert f"Python {versions}" in readme, f"README does not say 'Python {versions}'"
    assert f"Python {versions}" in landing
    claimed = set(re.findall(r"Python (3\.\d+)\+?", landing))
    assert claimed <= set(re.findall(r"3\.\d+", versions)), f"unsupported Pythons named: {claimed}"
    paragraph = re.sub(r"\s+", " ", re.sub(r"`", "", readme_durations())).strip()
    assert paragraph[:120] in landing and paragraph[-80:] in landing, "durations differ from README"


def figure_cells(chapter):
    return [(i, c) for i, c in enumerate(chapter.notebook.cells) if c.cell_type == "code"
            and any(o.get("data", {}).keys() & {"image/png", "image/svg+xml"} for o in c.outputs)]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_every_figure_has_a_caption_and_alt_text(chapter):
    """Each figure's cell says what the figure shows, for the caption and for readers who
    cannot see it: `#| fig-cap: ...` and `#| fig-alt: ...` lines (tools/figures.py)."""
    from tools.figures import figure_options

    for index, cell in figure_cells(chapter):
        options, _ = figure_options(cell.source)
        for name in ("fig-cap", "fig-alt"):
            assert len(options.get(name, "").split()) >= 8, (
                f"{chapter.rel}, cell {index}: the figure needs a `#| {name}: ...` line saying "
                "what it shows (at least a sentence; continue it on `#|   ...` lines)")
        assert options["fig-cap"] != options["fig-alt"], f"{chapter.rel}, cell {index}"


def search_index(html: Path) -> dict:
    import json

    text = (html / "searchindex.js").read_text(encoding="utf-8")
    return json.loads(text[text.index("(") + 1:text.rindex(")")])


def han_runs(text: str) -> set[str]:
    from tools.search_cjk import HAN_RUN

    return set(HAN_RUN.findall(text))


def test_search_index_finds_every_run_of_chinese(site):
    """Every run of Han characters on a chapter's page is found by a query for it: the
    browser looks a run up as its pairs of characters (one character: itself), and each of
    those is indexed for that page."""
    from tools.search_cjk import query_terms

    index = search_index(site)
    docs = {name: i for i, name in enumerate(index["docnames"])}
    checked = 0
    for chapter in CHAPTERS:
        doc = docs[f"chapters/{chapter.name}"]
        for run in han_runs(page_text(site / "chapters" / f"{chapter.name}.html")):
            for term in query_terms(run):
                found = [index[kind].get(term, []) for kind in ("terms", "titleterms")]
                found = [d for f in found for d in (f if isinstance(f, list) else [f])]
                assert doc in found, f"{run!r} on {chapter.name}: {term!r} is not indexed there"
                checked += 1
    assert checked > 100, f"only {checked} Chinese terms on the chapters' pages?"


@pytest.fixture(scope="module")
def zh_site() -> Path:
    """The Chinese edition's site (make site LANGUAGE=zh), about ten seconds."""
    out = ROOT / "_build" / "test-site-zh"
    run = subprocess.run([sys.executable, "-m", "tools.website", "--language", "zh", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"the Chinese site does not build:\n{run.stderr[-5000:]}"
    assert "WARNING" not in run.stderr, run.stderr[-5000:]
    return out / "html"


def found_on(index: dict, query: str) -> set[str]:
    """The pages on which the browser's search finds every term of a query."""
    from tools.search_cjk import query_terms

    pages = None
    for term in query_terms(query):
        hits = [index[kind].get(term, []) for kind in ("terms", "titleterms")]
        docs = {index["docnames"][d] for h in hits for d in (h if isinstance(h, list) else [h])}
        pages = docs if pages is None else pages & docs
    return pages or set()


def test_the_chinese_edition_is_a_chinese_site_of_its_chapters(zh_site):
    """Every chapter of the edition is a page in Chinese (lang="zh-CN", its prose from the
    catalogue), and the site's search finds the edition's terms where the chapters teach
    them: 因果掩码 (causal mask) in chapter 04, the one character 键 (key) in chapter 03."""
    from tools.i18n_catalogues import EDITION, PAGES, catalogue_path, load

    for name in EDITION:
        page = (zh_site / "chapters" / f"{name}.html").read_text(encoding="utf-8")
        assert '<html lang="zh-CN"' in page, name
        title = load(catalogue_path(name))[0]  # the chapter's title, its first unit
        assert title.comment == "heading" and title.msgid.startswith(name[:2] + " · "), name
        text = page_text(zh_site / "chapters" / f"{name}.html")
        assert title.msgstr in text and title.msgid not in text, name
    for name in PAGES:  # the book's pages in the edition: in Chinese, linking out to English
        page = zh_site / f"{name.removeprefix('book/')}.html"
        title = load(catalogue_path(name))[0]
        assert title.msgstr in page_text(page) and title.msgid not in page_text(page), name
    performance = (zh_site / "performance.html").read_text(encoding="utf-8")
    # appendix 14 is in the edition, so the Chinese page links to the Chinese appendix
    assert 'href="chapters/14_benchmarks.html"' in performance
    assert "html/chapters/14_benchmarks.html" not in performance  # not the English appendix
    # the API reference: each name links to its chapter, titled
    api = (zh_site / "api" / "positional.html").read_text(encoding="utf-8")
    assert ('Defined in chapter 02, <a class="reference internal" href="../chapters/02_positional_encoding.html">'
            '<span class="doc">02 · 位置编码') in api
    index = search_index(zh_site)
    assert "chapters/04_causal_mask" in found_on(index, "因果掩码")
    assert "chapters/03_attention" in found_on(index, "键")
    assert found_on(index, "鼠标垫") == set()  # a word the book never uses is found nowhere


def solution_lines(chapter) -> set[str]:
    """Lines of the chapter's solutions and hidden tests that appear nowhere else in it
    (so that finding one on a page can only mean the solution is there)."""
    secret, public = set(), []
    for cell in chapter.notebook.cells:
        lines = cell.source.splitlines()
        regions = solution_regions(cell.source) + hidden_test_regions(cell.source) \
            if cell.cell_type == "code" else []
        inside = {i for begin, end in regions for i in range(begin + 1, end)}
        for i, line in enumerate(lines):
            (secret.add if i in inside else public.append)(line.strip())
    everything_else = re.sub(r"[$`]", "", "\n".join(public))  # prose quotes code as `x` and $x$
    return {line for line in secret if len(line) >= 24 and line not in everything_else
            and not line.startswith("#")}


def test_student_edition_has_no_solution_and_no_hidden_test(site, student_site):
    """No line of a solution or a hidden test is on any page of the student edition, in the
    text its search shows (the index is built from the same pages), or in its downloads;
    the full edition has them (folded)."""
    import json

    texts = (student_site / "_static" / "page_texts.js").read_text(encoding="utf-8")
    texts = json.loads(texts[texts.index("{"):texts.rindex("}") + 1])
    squash = lambda text: re.sub(r"\s+", " ", text)  # noqa: E731
    checked = 0
    for chapter in CHAPTERS:
        secrets = solution_lines(chapter)
        if chapter.checks:
            assert secrets, f"{chapter.name}: no distinctive solution line to look for"
        student_page = page_text(student_site / "chapters" / f"{chapter.name}.html")
        download = (student_site / "_sources" / "chapters" / f"{chapter.name}.ipynb").read_text(
            encoding="utf-8")
        full_page = page_text(site / "chapters" / f"{chapter.name}.html")
        for line in secrets:
            assert squash(line) in full_page, f"{chapter.name}: the full edition lacks {line!r}"
            snippets = texts[f"chapters/{chapter.name}"]
            for where, text in (("page", student_page), ("snippets", snippets), ("download", download)):
                assert squash(line) not in squash(text), f"{chapter.name}: {line!r} in the student {where}"
            checked += 1
    assert checked >= 3 * sum(1 for c in CHAPTERS if c.checks), checked


# --- in a real browser ----------------------------------------------------------------

@pytest.fixture(scope="module")
def browser(site):
    executable = chromium()
    if executable is None:
        message = f"no Chromium for the browser test of the site; enable it with: {ENABLE}"
        if os.environ.get("BOOK_REQUIRE_BROWSER"):  # CI sets it: a skip there would hide a hole
            pytest.fail(message + " (BOOK_REQUIRE_BROWSER is set)")
        pytest.skip(message)
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (make install)")
    profile = tempfile.mkdtemp(prefix="book-chromium-")
    with playwright.sync_playwright() as p:
        # 1280 px: a common laptop width, with both sidebars shown.
        context = p.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": LAPTOP, "height": 900},
        )
        context.grant_permissions(["clipboard-read", "clipboard-write"])
        yield context
        context.close()
    shutil.rmtree(profile, ignore_errors=True)


def url(site: Path, page: str) -> str:
    return (site / page).as_uri()


class Page:
    """A page opened from file://, with its JavaScript errors and every request it made."""

    def __init__(self, context, address: str, width: int = LAPTOP) -> None:
        self.page = context.new_page()
        self.page.set_viewport_size({"width": width, "height": 900})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.goto(address)
        self.page.wait_for_load_state("load")

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc) -> None:
        self.page.close()

    def typeset(self) -> None:
        """Wait until MathJax has typeset the page (on a page with formulas)."""
        self.page.wait_for_function("window.MathJax?.startup?.promise !== undefined",
                                    timeout=20_000)
        self.page.evaluate("MathJax.startup.promise")

    def check_offline_and_clean(self) -> None:
        outside = sorted({r for r in self.requests if not r.startswith(("file:", "data:", "blob:"))})
        assert not outside, f"requests that left file://: {outside[:10]}"
        assert not self.errors, f"JavaScript errors: {self.errors}"


CHAPTER_STATE = r"""() => {
  const article = document.querySelector('article');
  const text = el => { const c = el.cloneNode(true);
    c.querySelectorAll('pre, code, mjx-container, script').forEach(e => e.remove());
    return c.textContent; };
  const scrolls = e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
  const wider = e => e.scrollWidth > e.clientWidth + 1;
  const articleRight = article.getBoundingClientRect().right + 1;
  return {
    math: document.querySelectorAll('article .math').length,
    typeset: document.querySelectorAll('article .math mjx-container').length,
    mathErrors: document.querySelectorAll('mjx-merror').length,
    rawTeX: /\$\$|\\\(|\\\[|\\frac|\\sqrt/.test(text(article)),
    images: [...article.querySelectorAll('img')].map(i => ({src: i.getAttribute('src'),
      loaded: i.complete && i.naturalWidth > 0, alt: i.getAttribute('alt') || '',
      caption: i.closest('figure')?.querySelector('figcaption')?.innerText.trim() ?? ''})),
    prev: document.querySelector('a.left-prev')?.href ?? null,
    next: document.querySelector('a.right-next')?.href ?? null,
    solutions: [...document.querySelectorAll('div.cell.tag_solution > details')].map(d => d.open),
    apiLinks: article.querySelectorAll('div.highlight a.api-link').length,
    visibleMarkers: [...article.querySelectorAll('div.cell')].map(c => c.innerText).filter(t =>
      /BEGIN SOLUTION|END SOLUTION|BEGIN HIDDEN TESTS|END HIDDEN TESTS|NBVAL_|^\s*#\|/m.test(t)).length,
    outputVaries: article.querySelectorAll('div.cell.tag_output-varies').length,
    // code and outputs keep their lines (no wrapping) and scroll inside their own box
    wrappedCode: [...article.querySelectorAll('div.cell pre')].filter(p =>
      getComputedStyle(p).whiteSpace !== 'pre').length,
    unscrollableCode: [...article.querySelectorAll('div.cell pre')].filter(p =>
      wider(p) && !scrolls(p) && !scrolls(p.parentElement)).length,
    boxesPastColumn: [...article.querySelectorAll('div.cell pre, div.math, table, img')].filter(e =>
      e.getBoundingClientRect().right > articleRight).length,
    clippedMath: [...article.querySelectorAll('div.math mjx-container')].filter(m =>
      wider(m) && !scrolls(m) && !scrolls(m.parentElement)).length,
    copyButtons: article.querySelectorAll('div.cell_input button.copybtn').length,
    codeCells: article.querySelectorAll('div.cell_input div.highlight').length,
    outputCopyButtons: article.querySelectorAll('div.cell_output button.copybtn').length,
  };
}"""


@pytest.mark.parametrize("index", range(len(CHAPTERS)), ids=[c.name for c in CHAPTERS])
def test_chapter_page_in_the_browser(browser, site, index):
    chapter = CHAPTERS[index]
    with Page(browser, url(site, f"chapters/{chapter.name}.html")) as page:
        page.typeset()
        state = page.page.evaluate(CHAPTER_STATE)
        page.check_offline_and_clean()
    assert state["math"] > 0, "no formula on the page"
    assert state["typeset"] == state["math"], f"{state['math'] - state['typeset']} formulas not typeset"
    assert state["mathErrors"] == 0, f"{state['mathErrors']} TeX errors"
    assert not state["rawTeX"], "raw TeX ($$, \\(, \\frac, ...) left in the text"
    assert state["images"], "no figure on the page"
    for number, image in enumerate(state["images"], 1):
        assert image["loaded"], f"image not loaded: {image}"
        assert image["caption"].startswith(f"Figure {chapter.number}.{number}. "), image
        assert len(image["caption"].split()) >= 10 and len(image["alt"].split()) >= 8, image
        assert not re.search(r"[0-9a-f]{12}|\.png", image["alt"]), f"a file name as alt text: {image}"
    previous = "index.html" if index == 0 else f"chapters/{CHAPTERS[index - 1].name}.html"
    assert state["prev"] == url(site, previous)
    if index + 1 < len(CHAPTERS):
        assert state["next"] == url(site, f"chapters/{CHAPTERS[index + 1].name}.html")
    assert state["next"] and Path(unquote(urlsplit(state["next"]).path)).exists()
    if chapter.is_appendix:  # an appendix has no exercises, hence nothing to fold
        assert not state["solutions"], f"an appendix with exercise solutions: {state['solutions']}"
    else:
        assert len(state["solutions"]) >= 3 and not any(state["solutions"]), (
            f"exercise solutions must be folded: {state['solutions']}")
    assert not state["visibleMarkers"], (
        f"{state['visibleMarkers']} cells show solution or hidden-test markers, # NBVAL_ or #| lines")
    ignored = sum("NBVAL_IGNORE_OUTPUT" in c.source for c in chapter.notebook.cells)
    assert state["outputVaries"] == ignored, "cells whose output varies are not all labelled"
    assert state["apiLinks"] > 0, "no name in the code links to the API reference"
    assert state["wrappedCode"] == 0, f"{state['wrappedCode']} code or output blocks wrap their lines"
    assert state["unscrollableCode"] == 0, f"{state['unscrollableCode']} wide blocks cut off (no scrolling)"
    assert state["boxesPastColumn"] == 0, f"{state['boxesPastColumn']} boxes wider than the text column"
    assert state["clippedMath"] == 0, f"{state['clippedMath']} display formulas cut off (no scrolling)"
    assert state["copyButtons"] == state["codeCells"] > 0, "a code cell without its copy button"
    assert state["outputCopyButtons"] == 0, "copy buttons on outputs"


def phone_overflow(browser, html: Path, offline: bool = False) -> tuple[dict, dict]:
    """({page: its width} for each page wider than a phone, {page: display formulas cut
    off}); with offline, each page is also checked for requests off file:// and errors."""
    too_wide, cut = {}, {}
    for page_path in pages(html):
        name = page_path.relative_to(html).as_posix()
        with Page(browser, page_path.as_uri(), width=PHONE) as page:
            if page.page.evaluate("document.querySelector('.math') !== null"):
                page.typeset()
            width, clipped = page.page.evaluate("""[document.documentElement.scrollWidth,
                [...document.querySelectorAll('article div.math mjx-container')].filter(m =>
                  m.scrollWidth > m.clientWidth + 1 && ![m, m.parentElement].some(e =>
                    ['auto', 'scroll'].includes(getComputedStyle(e).overflowX))).length]""")
            if offline:
                page.check_offline_and_clean()
        if width > PHONE:
            too_wide[name] = width
        if clipped:
            cut[name] = clipped
    return too_wide, cut


def test_no_page_is_wider_than_a_phone(browser, site):
    """At 390 px, no page of the site scrolls sideways: wide code, outputs, formulas and
    tables scroll inside their own boxes (no display formula is cut), long inline code and
    signatures wrap."""
    too_wide, cut = phone_overflow(browser, site)
    assert not too_wide, f"pages wider than {PHONE} px: {too_wide}"
    assert not cut, f"display formulas cut off (no scrolling) at {PHONE} px: {cut}"


def test_the_chinese_site_reads_on_a_phone_offline(browser, zh_site):
    """The Chinese edition, opened from disk at 390 px: no page scrolls sideways or cuts a
    formula, none asks the network for anything, none has a JavaScript error."""
    too_wide, cut = phone_overflow(browser, zh_site, offline=True)
    assert not too_wide, f"Chinese pages wider than {PHONE} px: {too_wide}"
    assert not cut, f"display formulas cut off (no scrolling) at {PHONE} px: {cut}"


VISIBLE = """selector => { const e = document.querySelector(selector); if (!e) return false;
  const r = e.getBoundingClientRect(); const style = getComputedStyle(e);
  return r.width > 50 && r.height > 50 && r.left >= -1 && r.right <= innerWidth + 1
    && style.visibility !== 'hidden' && style.display !== 'none'; }"""
CHAPTER_LIST = "nav.bd-docs-nav"
PAGE_CONTENTS = "nav.page-toc"


@pytest.mark.parametrize("width", [PHONE, 1024, LAPTOP])
def test_sidebar_buttons_work(browser, site, width):
    """The visible buttons of the article header open the chapter list and the page's
    contents (on a phone, in a dialog; on a wider screen the chapter list collapses and
    comes back); where a sidebar is shown without its button, it is on screen."""
    chapter = CHAPTERS[2].name
    with Page(browser, url(site, f"chapters/{chapter}.html"), width=width) as page:
        p = page.page
        primary = p.locator(".primary-toggle >> visible=true")
        assert primary.count() == 1, "no visible button for the chapter list"
        if p.evaluate(VISIBLE, CHAPTER_LIST):  # shown beside the page: the button hides it
            primary.click()
            p.wait_for_timeout(300)
            assert not p.evaluate(VISIBLE, CHAPTER_LIST), "the button does not hide the chapter list"
            primary.click()
            p.wait_for_timeout(300)
        else:
            primary.click()
            p.wait_for_timeout(300)
        assert p.evaluate(VISIBLE, CHAPTER_LIST), "the chapter list is not on screen"
        listed = p.evaluate(f"[...document.querySelectorAll('{CHAPTER_LIST} a')].map(a => a.href)")
        others = [url(site, f"chapters/{c.name}.html") for c in CHAPTERS if c.name != chapter]
        assert all(link in listed for link in others), f"chapters missing from the list: {listed}"
        p.keyboard.press("Escape")
        p.wait_for_timeout(300)
        secondary = p.locator(".secondary-toggle >> visible=true")
        if secondary.count():
            assert not p.evaluate(VISIBLE, PAGE_CONTENTS)
            secondary.click()
            p.wait_for_timeout(300)
        assert p.evaluate(VISIBLE, PAGE_CONTENTS), "the page's contents are not on screen"
        page.check_offline_and_clean()


def test_figure_opens_full_size(browser, site):
    """A click on a figure shows it at its own size, in a dialog that Escape closes."""
    with Page(browser, url(site, f"chapters/{CHAPTERS[0].name}.html"), width=PHONE) as page:
        p = page.page
        figure = p.locator("article figure img").first
        shown, natural = figure.evaluate("i => [i.getBoundingClientRect().width, i.naturalWidth]")
        assert shown < natural, "the figure already shows at full size on a phone?"
        figure.click()
        big = p.locator("dialog.book-lightbox[open] img")
        big.wait_for()
        assert big.evaluate("i => [i.getBoundingClientRect().width, i.naturalWidth]") == [natural, natural]
        assert big.get_attribute("alt") == figure.get_attribute("alt")
        p.keyboard.press("Escape")
        assert p.locator("dialog.book-lightbox[open]").count() == 0
        page.check_offline_and_clean()


SIMPLIFIED = ("Noto Sans CJK SC", "Noto Sans Mono CJK SC", "Noto Serif CJK SC", "Source Han Sans SC",
              "Source Han Sans CN", "WenQuanYi Micro Hei", "WenQuanYi Micro Hei Mono",
              "PingFang SC", "Hiragino Sans GB", "Microsoft YaHei")


def test_chinese_is_drawn_with_a_simplified_chinese_face(browser, site):
    """Every Chinese glyph of a chapter (prose, code and outputs) is drawn with a Simplified
    Chinese face, never a Japanese or Korean one (今, 门, 化 differ), as Chromium reports;
    even where the browser's own fallback prefers a Japanese face, as it does for a page
    marked Japanese (the test marks it so: the site's font stack must still win)."""
    fonts = subprocess.run(["fc-list", ":lang=zh-cn", "family"], capture_output=True, text=True)
    if not any(face in fonts.stdout for face in SIMPLIFIED):
        message = ("no Simplified Chinese font; install one: apt-get install -y fonts-noto-cjk")
        if os.environ.get("BOOK_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    with Page(browser, url(site, "chapters/11_language_model.html")) as page:
        page.page.evaluate("document.documentElement.lang = 'ja'")
        # Each run of Han characters in its own <span data-han> (the styles it inherits, and
        # so its font, are unchanged), so that Chromium reports the faces of those glyphs only.
        count = page.page.evaluate(r"""() => { const texts = [];
          const walker = document.createTreeWalker(document.querySelector('article'), NodeFilter.SHOW_TEXT);
          while (walker.nextNode()) if (/\p{Script=Han}/u.test(walker.currentNode.nodeValue)) texts.push(walker.currentNode);
          let n = 0;
          for (const t of texts) {
            const parts = t.nodeValue.split(/(\p{Script=Han}+)/u);
            const spans = parts.map((part, i) => { if (i % 2 === 0) return document.createTextNode(part);
              const span = document.createElement('span'); span.dataset.han = n++; span.textContent = part; return span; });
            t.replaceWith(...spans);
          }
          return n; }""")
        assert count > 20, f"only {count} runs of Chinese found on chapter 11"
        cdp = browser.new_cdp_session(page.page)
        root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
        cdp.send("CSS.enable")
        used: dict[str, int] = {}
        for node in cdp.send("DOM.querySelectorAll", {"nodeId": root, "selector": "[data-han]"})["nodeIds"]:
            for font in cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]:
                used[font["familyName"]] = used.get(font["familyName"], 0) + font["glyphCount"]
    assert used and set(used) <= set(SIMPLIFIED), f"faces drawing Chinese: {used}"


def test_copy_button_copies_the_code_without_its_output(browser, site):
    with Page(browser, url(site, f"chapters/{CHAPTERS[2].name}.html")) as page:
        p = page.page
        cell = p.locator("div.cell:has(div.cell_output) div.cell_input").first
        cell.hover()
        cell.locator("button.copybtn").click()
        copied = p.evaluate("navigator.clipboard.readText()")
        shown = cell.locator("pre").inner_text()
        output = p.locator("div.cell:has(div.cell_output) div.cell_output").first.inner_text()
        page.check_offline_and_clean()
    assert copied.strip() == shown.strip() and copied.strip()
    assert output.strip() not in copied


RESULTS = """() => [...document.querySelectorAll('#search-results li')].map(li => ({
  href: li.querySelector('a').href, snippet: li.querySelector('p.context')?.innerText ?? '',
  marked: [...li.querySelectorAll('.highlighted')].map(h => h.textContent)}))"""


def search(page: Page) -> list[dict]:
    page.page.wait_for_function(
        "/finished/i.test(document.querySelector('#search-results')?.innerText ?? '')",
        timeout=30_000)
    page.page.wait_for_timeout(200)  # the snippets arrive one by one
    return page.page.evaluate(RESULTS)


@pytest.mark.parametrize("query, how", [("attention", "address"), ("苹果", "search box")])
def test_search_from_file_url(browser, site, query, how):
    """Search works where a reader opens the site: from file://, by the address
    search.html?q=... or by typing into the search box of a chapter page; each result
    has a snippet of its page with the words found marked."""
    first = CHAPTERS[0].name
    start = (url(site, "search.html") + "?q=" + quote(query) if how == "address"
             else url(site, f"chapters/{first}.html"))
    with Page(browser, start) as page:
        if how == "search box":
            page.page.click("button.search-button-field >> visible=true")
            box = page.page.locator("input[name=q] >> visible=true").first
            box.fill(query)
            box.press("Enter")
            page.page.wait_for_url("**/search.html?q=*")
        results = search(page)
        page.check_offline_and_clean()
    chapters = [r for r in results if "/chapters/" in r["href"]]
    assert chapters, f"no chapter among the results for {query!r}: {results}"
    for result in chapters:
        assert query.lower() in result["snippet"].lower(), result
        assert any(query.lower() == m.lower() for m in result["marked"]), result


def chinese_queries(site: Path, count: int = 6) -> list[tuple[str, str]]:
    """(query, chapter): pieces of runs of Chinese characters on chapter pages, chosen at
    random (seeded), two to five characters long."""
    import random

    rng = random.Random(0)
    pieces = []
    for chapter in CHAPTERS:
        runs = sorted(r for r in han_runs(page_text(site / "chapters" / f"{chapter.name}.html"))
                      if len(r) >= 2)
        for run in runs:
            length = rng.randint(2, min(5, len(run)))
            start = rng.randint(0, len(run) - length)
            pieces.append((run[start:start + length], chapter.name))
    return rng.sample(pieces, count)


def test_search_finds_chinese_with_snippets_and_highlights(browser, site):
    """Any run of Chinese characters on a chapter's page finds that chapter (not only whole
    space-separated words: 明月 inside 床前明月光), with a snippet; the page the result opens
    marks the run, and brings it into view."""
    for query, chapter in chinese_queries(site):
        with Page(browser, url(site, "search.html") + "?q=" + quote(query)) as page:
            results = search(page)
            mine = [r for r in results if r["href"].endswith(f"/chapters/{chapter}.html")]
            assert mine, f"{query!r} does not find {chapter}: {[r['href'] for r in results]}"
            assert any(query[-2:] in m or m in query for m in mine[0]["marked"]), mine[0]
            page.page.click(f"#search-results li a[href$='{chapter}.html']")
            page.page.wait_for_load_state("load")
            # Sphinx marks the terms after load, walking the whole page: on a long chapter
            # and a busy machine that takes more than a moment, so wait for the first mark
            # (up to 10 s) and then a moment for the scroll; the asserts below name a miss.
            with contextlib.suppress(Exception):
                page.page.wait_for_selector("article span.highlighted", timeout=10_000)
            page.page.wait_for_timeout(300)
            marked = page.page.evaluate("""[...document.querySelectorAll('article span.highlighted')]
                .map(h => [h.textContent, h.getBoundingClientRect().top >= 0
                           && h.getBoundingClientRect().bottom <= innerHeight])""")
            page.check_offline_and_clean()
        assert any(text == query for text, _ in marked), f"{query!r} not marked on {chapter}: {marked[:5]}"
        assert any(on_screen for _, on_screen in marked), f"{query!r}: no mark on screen"


def test_api_page_lists_every_public_name(browser, site):
    import transformer

    with Page(browser, url(site, "api/index.html")) as page:
        listed = page.page.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
            'article a.reference.internal code')].map(c => [c.innerText.trim(), c.closest('a').href]))""")
        page.check_offline_and_clean()
    missing = [name for name in transformer.__all__ if name not in listed]
    assert not missing, f"API page does not list: {missing}"
    for name in transformer.__all__:  # each links to its entry on its module's page
        target = urlsplit(listed[name])
        assert target.fragment.endswith("." + name), listed[name]
        assert f'id="{target.fragment}"' in Path(unquote(target.path)).read_text(encoding="utf-8")


# --- the whole book as a PDF (tools/pdf.py) ------------------------------------------

PDF_SAMPLE = [2, 11]


@pytest.fixture(scope="module")
def book_pdf(browser, site) -> Path:
    """The PDF of two chapters (the one with the widest formulas, and one with Chinese
    text) with the front and back matter, printed as `make pdf` prints the whole book
    (which takes minutes)."""
    from tools.pdf import build_pdf

    return build_pdf(out=SITE_ROOT / "book-sample.pdf", only=PDF_SAMPLE, site_root=SITE_ROOT,
                     context=browser)


@pytest.fixture(scope="module")
def pdf_pages(book_pdf) -> tuple:
    """The PDF's reader and the text of each page (extracted once: it takes seconds)."""
    from pypdf import PdfReader

    reader = PdfReader(book_pdf)
    return reader, [page.extract_text() for page in reader.pages]


def printed_titles() -> list[str]:
    """The first heading of each part the sample PDF prints, in order."""
    def first_heading(text: str) -> str:
        return next(line[2:].strip() for line in text.splitlines() if line.startswith("# "))

    pages = [(ROOT / "book" / "index.md").read_text(encoding="utf-8")]
    pages += [c.notebook.cells[0].source for c in CHAPTERS if c.number in PDF_SAMPLE]
    pages += [(ROOT / "book" / f"{name}.md").read_text(encoding="utf-8")
              for name in ("glossary", "sources", "teachers")]
    return [first_heading(text) for text in pages]


def test_pdf_has_contents_with_page_numbers_and_every_part(pdf_pages):
    """The contents page names each part with the page it starts on, and it does; the
    footers carry those page numbers; bookmarks lead to every part."""
    reader, texts = pdf_pages
    squash = lambda text: re.sub(r"\s+", "", text)  # noqa: E731
    assert texts[1].startswith("Contents"), texts[1][:200]
    for title in printed_titles():  # a title may wrap; its page number ends the line
        pattern = r"\s*".join(map(re.escape, squash(title))) + r"\s+(\d+)[ \t]*$"
        found = re.search(pattern, texts[1], re.M)
        assert found, f"{title!r} is not in the contents: {texts[1][:500]}"
        page = int(found.group(1))
        assert squash(title) in squash(texts[page - 1]), f"{title!r} is not on page {page}"
    for number in (2, len(texts) // 2, len(texts)):
        assert texts[number - 1].strip().endswith(str(number)), f"page {number}: no page number"
    marks = {squash(item.title) for item in reader.outline if not isinstance(item, list)}
    assert {squash(t) for t in printed_titles()} <= marks, f"bookmarks: {marks}"


def test_pdf_holds_formulas_figures_chinese_code_and_solutions(pdf_pages):
    reader, texts = pdf_pages
    # The embedded CJK face maps some characters to look-alike code points when text is
    # extracted (月 U+6708 comes back as the Kangxi radical ⽉ U+2F49): compare under NFKC.
    text = unicodedata.normalize("NFKC", "".join(texts))
    from tools.chapter_exports import chapter_exports

    chapters = [c for c in CHAPTERS if c.number in PDF_SAMPLE]
    figures = sum(len(figure_cells(c)) for c in chapters)
    images = sum(len(p.images) for p in reader.pages)
    assert images >= figures, f"{images} images for {figures} figures"
    faces = []  # per page, the embedded faces (Chromium embeds OpenType faces as Type3 fonts)
    for page in reader.pages:
        faces.append(set())
        for font in (page.get("/Resources", {}).get("/Font", {}) or {}).values():
            font = font.get_object()
            descriptor = font.get("/FontDescriptor")
            faces[-1].add(str(descriptor.get_object().get("/FontName")) if descriptor
                          else str(font.get("/BaseFont", "")))
    fonts = set().union(*faces)
    with_math = sum(any("MathJax_Math" in f for f in page) for page in faces)
    assert with_math >= 10, f"formulas typeset on {with_math} pages only: {fonts}"
    assert not re.search(r"\\\(.{1,80}?\\\)|\$\$", text), "TeX left untypeset in the PDF"
    assert any("CJKsc" in f for f in fonts), f"no Simplified Chinese face embedded: {fonts}"
    assert "床前明月光" in text.replace(" ", "") or han_runs(text), "no Chinese text"
    for chapter in chapters:
        functions = [n for e in chapter_exports(chapter) for n, k in e.kinds.items() if k == "function"]
        assert f"def {functions[0]}(" in text, f"the code of {chapter.name} is missing"
    for chapter in chapters:
        # Lines without Chinese: the CJK face's extracted text also gives radicals for some
        # characters (黄 as ⻩ U+2EE9) that no normalisation folds back; the Chinese text
        # itself is checked above.
        lines = [line for line in sorted(solution_lines(chapter)) if not re.search(r"[\u2e80-\u9fff]", line)]
        assert lines, f"{chapter.name}: no solution line to look for"
        for line in lines[:3]:
            assert re.sub(r"\s+", "", unicodedata.normalize("NFKC", line)) in re.sub(r"\s+", "", text), \
                f"solution missing: {line!r}"


# --- plain-text docstrings as reST (tools/docstrings.py) ------------------------------

TRICKY = """Softmax of |y| over <pad> tokens: weights ~ N(0, init_std**2), init_std = d_model**-0.5.

ids [batch, seq] -> vectors [batch, seq, d_model]; a `word_` and *args, **kwargs
- not a list, 1. not a list either, .. not a comment
https://example.org and someone@example.org stay text.
`code` at the start, and `self.weight`'s table; x`y`z glued.

    an indented example: x = f(a_b)
    >>> print(1)
"""


def rendered_text(rest: str) -> tuple[str, str]:
    """The text docutils renders from reST, and what it warned about."""
    import io

    from docutils.core import publish_doctree

    stream = io.StringIO()
    doctree = publish_doctree(rest, settings_overrides={"warning_stream": stream, "report_level": 1})
    return doctree.astext(), stream.getvalue()


def test_plain_docstrings_render_as_written_without_warnings():
    from tools.docstrings import plain_text_to_rest

    text, warnings = rendered_text(plain_text_to_rest(TRICKY))
    assert not warnings, warnings
    squash = lambda s: re.sub(r"\s+", " ", s.replace("\u00a0", " ")).strip()  # noqa: E731
    assert squash(text) == squash(TRICKY.replace("`", "")), text
    assert "http" not in rest_links(plain_text_to_rest(TRICKY))


GOOGLE_STYLE = """Attend from each query to the keys it may see.

Wrapped prose flows as one paragraph,
whatever the width of the page.

Args:
    query: [B, Tq, d_model].
    src_len, tgt_len: lengths of the
        source and the target (a wrapped line).
    *args: passed on, with `code`.

Returns:
    output [B, Tq, d_model], and weights
    or None.

Raises:
    ValueError: a shape does not fit: named.
"""


def test_google_style_sections_render_as_field_lists():
    from docutils.core import publish_doctree
    from docutils.nodes import bullet_list, field, field_name, list_item, strong

    from tools.docstrings import plain_text_to_rest

    rest = plain_text_to_rest(GOOGLE_STYLE)
    _, warnings = rendered_text(rest)
    assert not warnings, warnings
    doctree = publish_doctree(rest)
    assert [p.astext() for p in doctree.children[:2]] == [
        "Attend from each query to the keys it may see.",
        "Wrapped prose flows as one paragraph, whatever the width of the page."], rest
    fields = {f.next_node(field_name).astext(): f for f in doctree.findall(field)}
    assert list(fields) == ["Args", "Returns", "Raises"], rest
    items = lambda name: [(i.next_node(strong).astext(), i.astext()) for i in  # noqa: E731
                          fields[name].next_node(bullet_list).findall(list_item)]
    assert items("Args") == [
        ("query", "query \u2013 [B, Tq, d_model]."),
        ("src_len, tgt_len", "src_len, tgt_len \u2013 lengths of the source and the target (a wrapped line)."),
        ("*args", "*args \u2013 passed on, with code.")], rest
    assert items("Raises") == [("ValueError", "ValueError \u2013 a shape does not fit: named.")], rest
    returns = fields["Returns"].astext()
    assert "output [B, Tq, d_model], and weights" in returns and "or None." in returns, rest


def rest_links(rest: str) -> str:
    """The targets of every reference docutils finds in reST (none expected)."""
    from docutils.core import publish_doctree
    from docutils.nodes import reference

    return " ".join(node.get("refuri", "") for node in publish_doctree(rest).findall(reference))


def test_plain_docstring_conversion_is_needed():
    """The same text read as reST directly does warn: the conversion is what makes it safe."""
    _, warnings = rendered_text(TRICKY)
    assert warnings


def test_napoleon_alone_leaves_plain_text_as_markup():
    """Why tools/docstrings.py and not sphinx.ext.napoleon: napoleon's Google-style reader
    leaves `|y|` a substitution and `**kwargs` emphasis, so the same text still warns."""
    from sphinx.ext.napoleon import Config
    from sphinx.ext.napoleon.docstring import GoogleDocstring

    _, warnings = rendered_text(str(GoogleDocstring(TRICKY, Config())))
    assert "Undefined substitution" in warnings and "emphasis" in warnings


def test_the_chinese_pdf_is_the_chinese_edition(browser, zh_site):
    """make pdf LANGUAGE=zh: the cover, the contents and the bookmarks in Chinese, chapter
    04's prose as the catalogue has it (not the English), its formulas typeset, and the
    back matter the edition has translated (the glossary, the sources, the teacher's guide),
    in order."""
    from pypdf import PdfReader

    from tools.i18n_catalogues import catalogue_path, load
    from tools.pdf import build_pdf

    out = build_pdf(out=zh_site.parent / "book-zh-sample.pdf", only=[4],
                    site_root=zh_site.parent, context=browser, language="zh")
    reader = PdfReader(out)
    texts = [unicodedata.normalize("NFKC", page.extract_text()) for page in reader.pages]
    squash = lambda text: re.sub(r"\s+", "", text)  # noqa: E731
    assert reader.metadata["/Title"] == "从零构建 Transformer"
    assert "每个练习之后附有解答" in squash(texts[0]) and squash(texts[1]).startswith("目录")
    bookmarks = [item.title for item in reader.outline if not isinstance(item, list)]
    title = load(catalogue_path("04_causal_mask"))[0].msgstr
    assert bookmarks == ["目录", "从零构建 Transformer", title, "术语表", "资料来源", "写给教师"], bookmarks
    body = squash("".join(texts))
    units = [e for e in load(catalogue_path("04_causal_mask")) if e.comment == "paragraph"
             and not re.search(r"[*`$\[<]", e.msgstr + e.msgid)][:5]  # no markup: printed as written
    assert len(units) == 5
    nfkc = lambda text: squash(unicodedata.normalize("NFKC", text))  # noqa: E731 (as the PDF's text is)
    assert all(nfkc(e.msgstr)[:20] in body for e in units)  # the Chinese prose is printed
    assert not any(squash(e.msgid)[:40] in body for e in units)  # and not the English
