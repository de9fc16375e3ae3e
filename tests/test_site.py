"""The book's website, as a reader gets it: built with warnings as errors, no link broken,
nothing fetched from outside, and, in a real headless Chromium opened on file://, every
chapter's formulas typeset, figures loaded, prev/next links working, search answering in
English and Chinese, and the API reference listing the whole package.

The site is built from the committed notebooks into _build/test-site/ (incremental
after the first run), so that `make test` leaves the reader's _build/html/ alone.
The browser part needs Chromium at /usr/bin/chromium (or $BOOK_CHROMIUM); without it
those tests are skipped with the command that installs it, never passed silently (and
fail instead when BOOK_REQUIRE_BROWSER is set, as .ci/run does).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from notebooks import read_book  # noqa: E402

CHAPTERS = read_book()
SITE_ROOT = ROOT / "_build" / "test-site"
HTML = SITE_ROOT / "html"
ENABLE = "apt-get install -y chromium   (Debian/Ubuntu; or set BOOK_CHROMIUM=/path/to/chromium)"
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

@pytest.fixture(scope="module")
def site() -> Path:
    """Build the site from the committed notebooks, Sphinx warnings as errors."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "website.py"), "--out", str(SITE_ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, f"the site does not build:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    assert "WARNING" not in run.stderr, run.stderr[-5000:]
    return HTML


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
    """Nothing points off the site: no link, script, stylesheet or font from a server."""
    found = {}
    for page in pages(site):
        hits = EXTERNAL.findall(page.read_text(encoding="utf-8"))
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
        for module in chapter.modules:
            assert f"../api/{module}.html" in text, f"{chapter.name} does not link to api/{module}"
            api = (site / "api" / f"{module}.html").read_text(encoding="utf-8")
            assert f"../chapters/{chapter.name}.html" in api, f"api/{module} does not link back"


def test_every_public_name_is_documented_with_its_chapter(site):
    """Each name of a module has an entry on the module's page, and each entry says, with a
    link, which chapter defines it (constants included, which have no docstring)."""
    from website import chapter_exports

    for chapter in CHAPTERS:
        for export in chapter_exports(chapter):
            page = (site / "api" / f"{export.module}.html").read_text(encoding="utf-8")
            for name in export.names:
                assert f'id="transformer.{export.module}.{name}"' in page, f"{name} undocumented"
            links = page.count(f'Defined in chapter {chapter.number:02d}, <a class="reference internal" '
                               f'href="../chapters/{chapter.name}.html"')
            assert links >= len(export.names), f"api/{export.module}: {links} chapter links"


def test_glossary_names_only_symbols_of_the_package():
    """Each package symbol in the glossary's table exists, and is public."""
    import importlib

    import transformer

    text = (ROOT / "book" / "glossary.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "{py:obj}" in line]
    assert len(rows) >= 20
    for row in rows:
        for target in re.findall(r"\{py:obj\}`~?([\w.]+)`", row):
            package, module, name = target.split(".")
            assert package == "transformer", row
            assert hasattr(importlib.import_module(f"transformer.{module}"), name), row
            assert name in transformer.__all__, f"{name} is not public: {row}"
    for chinese in ("注意力", "掩码", "位置编码", "标签平滑"):
        assert chinese in text


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
            viewport={"width": 1280, "height": 900},
        )
        yield context
        context.close()
    shutil.rmtree(profile, ignore_errors=True)


def url(site: Path, page: str) -> str:
    return (site / page).as_uri()


class Page:
    """A page opened from file://, with its JavaScript errors and every request it made."""

    def __init__(self, context, address: str) -> None:
        self.page = context.new_page()
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

    def check_offline_and_clean(self) -> None:
        outside = sorted({r for r in self.requests if not r.startswith(("file:", "data:", "blob:"))})
        assert not outside, f"requests that left file://: {outside[:10]}"
        assert not self.errors, f"JavaScript errors: {self.errors}"


CHAPTER_STATE = r"""() => {
  const article = document.querySelector('article');
  const text = el => { const c = el.cloneNode(true);
    c.querySelectorAll('pre, code, mjx-container, script').forEach(e => e.remove());
    return c.textContent; };
  return {
    math: document.querySelectorAll('article .math').length,
    typeset: document.querySelectorAll('article .math mjx-container').length,
    mathErrors: document.querySelectorAll('mjx-merror').length,
    rawTeX: /\$\$|\\\(|\\\[|\\frac|\\sqrt/.test(text(article)),
    images: [...article.querySelectorAll('img')].map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0]),
    prev: document.querySelector('a.left-prev')?.href ?? null,
    next: document.querySelector('a.right-next')?.href ?? null,
    solutions: [...document.querySelectorAll('div.cell.tag_solution > details')].map(d => d.open),
    apiLinks: article.querySelectorAll('div.highlight a.api-link').length,
    visibleMarkers: [...article.querySelectorAll('div.cell')].some(
      c => /BEGIN SOLUTION|END SOLUTION|^#\| ?(export|default_exp|check)/m.test(c.innerText)),
    wideCode: [...article.querySelectorAll('div.cell_input pre')].filter(p => p.scrollWidth > p.clientWidth + 1).length,
    clippedMath: [...article.querySelectorAll('div.math mjx-container')].filter(m =>
      m.scrollWidth > m.clientWidth + 1 && !['auto', 'scroll'].includes(getComputedStyle(m).overflowX)).length,
  };
}"""


@pytest.mark.parametrize("index", range(len(CHAPTERS)), ids=[c.name for c in CHAPTERS])
def test_chapter_page_in_the_browser(browser, site, index):
    chapter = CHAPTERS[index]
    with Page(browser, url(site, f"chapters/{chapter.name}.html")) as page:
        page.page.wait_for_function("window.MathJax?.startup?.promise !== undefined",
                                    timeout=20_000)
        page.page.evaluate("MathJax.startup.promise")  # resolves once the page is typeset
        state = page.page.evaluate(CHAPTER_STATE)
        page.check_offline_and_clean()
    assert state["math"] > 0, "no formula on the page"
    assert state["typeset"] == state["math"], f"{state['math'] - state['typeset']} formulas not typeset"
    assert state["mathErrors"] == 0, f"{state['mathErrors']} TeX errors"
    assert not state["rawTeX"], "raw TeX ($$, \\(, \\frac, ...) left in the text"
    assert state["images"], "no figure on the page"
    assert all(ok for _, ok in state["images"]), f"images not loaded: {state['images']}"
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
    assert not state["visibleMarkers"], "solution markers or #| directives shown as text"
    assert state["apiLinks"] > 0, "no name in the code links to the API reference"
    assert state["wideCode"] == 0, f"{state['wideCode']} code cells wider than the text column"
    assert state["clippedMath"] == 0, f"{state['clippedMath']} display formulas cut off (no scrolling)"


@pytest.mark.parametrize("query, how", [("attention", "address"), ("苹果", "search box")])
def test_search_from_file_url(browser, site, query, how):
    """Search works where a reader opens the site: from file://, by the address
    search.html?q=... or by typing into the search box of a chapter page."""
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
        page.page.wait_for_function(
            "document.querySelectorAll('#search-results li').length > 0 || "
            "/finished/i.test(document.querySelector('#search-results')?.innerText ?? '')",
            timeout=30_000)
        results = page.page.evaluate(
            "[...document.querySelectorAll('#search-results li a')].map(a => a.href)")
        page.check_offline_and_clean()
    assert results, f"no search results for {query!r}"
    assert any("/chapters/" in r for r in results), results


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
    from docstrings import plain_text_to_rest

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
    from docstrings import plain_text_to_rest
    from docutils.core import publish_doctree
    from docutils.nodes import bullet_list, field, field_name, list_item, strong

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
