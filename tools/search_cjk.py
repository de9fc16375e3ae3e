"""Sphinx extension: the site's search finds any run of Chinese characters, with snippets.

Sphinx's English search splits text into words at non-word characters, so a line of
Chinese, which has no spaces, is one "word": 明月 finds nothing although 床前明月光
is in the book. Here every run of Han characters is indexed as its single characters
and its overlapping pairs (bigrams), the usual way to index Chinese without a
dictionary; a query is split the same way in the browser (the `splitQuery` below), so
明月 looks up the pair 明月 and 床前明月光 looks up 床前, 前明, 明月 and 月光, all of
which a page must contain. English words are stemmed as before.

The result list shows a snippet under each hit. Sphinx fetches each result's page to
cut it, which a browser refuses on file://, so the text of every page is written to
_static/page_texts.js, which only the search page loads (book/_static/search.js serves
it to Sphinx's code). Search terms are highlighted on the page a result opens.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from docutils import nodes
from sphinx.search.en import SearchEnglish

# Han characters: CJK radicals, 々 〇 and Hangzhou numerals, the unified ideographs
# with extension A, compatibility ideographs and the supplementary planes' extensions.
HAN_RANGES = [(0x2E80, 0x2FDF), (0x3005, 0x3007), (0x3021, 0x3029), (0x3038, 0x303B),
              (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3134F)]
HAN = "[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in HAN_RANGES) + "]"
HAN_RUN = re.compile(HAN + "+")
WORD = re.compile(r"\w+")
TEXTS_FILE = "page_texts.js"


def han_terms(run: str) -> list[str]:
    """'床前明' -> ['床', '前', '明', '床前', '前明']: what a run of Han characters is indexed as."""
    return list(run) + [run[i:i + 2] for i in range(len(run) - 1)]


def query_terms(run: str) -> list[str]:
    """What a query's run of Han characters looks up: itself if one character, else its pairs."""
    return [run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)]


def split_words(text: str) -> list[str]:
    """Words as Sphinx's English search splits them, each Han run as its characters and pairs."""
    words: list[str] = []
    for word in WORD.findall(text):
        position = 0
        for run in HAN_RUN.finditer(word):
            if run.start() > position:
                words.append(word[position:run.start()])
            words.extend(han_terms(run.group()))
            position = run.end()
        if position < len(word):
            words.append(word[position:])
    return words


def _js_class(ranges: list[tuple[int, int]]) -> str:
    return "[" + "".join(f"\\u{{{lo:x}}}-\\u{{{hi:x}}}" for lo, hi in ranges) + "]"


# The same split in the browser: Sphinx's default (\W+ in Unicode), then Han runs into pairs.
JS_SPLITTER = """
/* Book: a query's runs of Han characters are looked up as overlapping pairs, as they
   are indexed (tools/search_cjk.py). */
var HAN_RUN = /@HAN@+/gu;
var splitQuery = (query) => {
  const terms = [];
  for (const word of query.split(/[^\\p{Letter}\\p{Number}_\\p{Emoji_Presentation}]+/gu)) {
    if (!word) continue;
    let position = 0;
    for (const run of word.matchAll(HAN_RUN)) {
      if (run.index > position) terms.push(word.slice(position, run.index));
      const chars = [...run[0]];
      if (chars.length === 1) terms.push(chars[0]);
      for (let i = 0; i + 1 < chars.length; i++) terms.push(chars[i] + chars[i + 1]);
      position = run.index + run[0].length;
    }
    if (position < word.length) terms.push(word.slice(position));
  }
  return terms;
};
""".replace("@HAN@", _js_class(HAN_RANGES))


class SearchEnglishAndChinese(SearchEnglish):
    """English search (stemmed words) that also indexes Chinese by characters and pairs."""

    js_splitter_code = JS_SPLITTER

    def split(self, input: str) -> list[str]:  # noqa: A002 (Sphinx's name)
        return split_words(input)


# --- the text of each page, for the snippets under search results -----------------

def page_text(doctree: nodes.document) -> str:
    """What a reader sees of a page as one line of text (no scripts, raw HTML or comments)."""
    parts = []
    for node in doctree.findall(nodes.Text):
        if not any(isinstance(p, (nodes.raw, nodes.comment, nodes.system_message))
                   for p in _ancestors(node)):
            parts.append(node.astext())
    return re.sub(r"\s+", " ", " ".join(parts)).strip()


def _ancestors(node: nodes.Node):
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def record_text(app, doctree: nodes.document) -> None:
    if not hasattr(app.env, "book_page_texts"):
        app.env.book_page_texts = {}
    app.env.book_page_texts[app.env.docname] = page_text(doctree)


def purge_text(app, env, docname: str) -> None:
    getattr(env, "book_page_texts", {}).pop(docname, None)


def merge_texts(app, env, docnames, other) -> None:
    texts = getattr(env, "book_page_texts", {})
    texts.update({d: t for d, t in getattr(other, "book_page_texts", {}).items() if d in docnames})
    env.book_page_texts = texts


def add_search_scripts(app, pagename, templatename, context, doctree) -> None:
    if pagename == "search":  # deferred: after searchtools.js, before the search runs
        app.add_js_file(TEXTS_FILE, loading_method="defer")
        app.add_js_file("search.js", loading_method="defer")


def write_texts(app, exception) -> None:
    """_static/page_texts.js: {docname: text} for the pages that exist now."""
    if exception is not None or app.builder.format != "html":
        return
    texts = {d: t for d, t in sorted(getattr(app.env, "book_page_texts", {}).items())
             if d in app.env.found_docs}
    target = Path(app.outdir) / "_static" / TEXTS_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("window.BOOK_PAGE_TEXTS = " + json.dumps(texts, ensure_ascii=False)
                      + ";\n", encoding="utf-8")


def setup(app):
    app.add_search_language(SearchEnglishAndChinese)
    app.connect("doctree-read", record_text)
    app.connect("env-purge-doc", purge_text)
    app.connect("env-merge-info", merge_texts)
    app.connect("html-page-context", add_search_scripts)
    app.connect("build-finished", write_texts)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
