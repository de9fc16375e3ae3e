"""Sphinx configuration of the book's website.

Do not run Sphinx on this folder directly: `make site` (or `make book`) runs
tools/website.py, which assembles the source tree in _build/site-src/ (the
hand-written pages of book/, the chapter notebooks prepared for reading, the
generated chapter map and API pages) and builds it with this configuration
into _build/html/.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the package, for autodoc, and the book's tools

from tools.docstrings import plain_text_to_rest  # noqa: E402
from tools.project_info import (  # noqa: E402
    distribution_name,
    package_version,
    python_versions,
    repository_url,
)

# Sphinx rebuilds pages when their sources or the config values change, not when the
# code that renders them does: this fingerprint of that code is a config value, so
# editing this file or the site's tools rebuilds every page.
# The templates count too: Sphinx notices a changed template, not a removed one.
book_code = hashlib.sha256(b"".join(
    path.read_bytes() for path in [Path(__file__), *sorted((ROOT / "book" / "_templates").rglob("*.html")),
                                   *sorted((ROOT / "tools").glob("*.py"))])).hexdigest()

# The version, supported Pythons and repository address, each from the one place it is
# set (tools/project_info.py). The repository's address is `Repository` under
# [project.urls] in pyproject.toml; until one is published, pages say so.
REPOSITORY = repository_url()

project = "Building a Transformer, step by step"
author = "the authors of the book"
copyright = "the authors of the book, MIT licence"  # noqa: A001
version = release = package_version()
# `make site EDITION=student` builds with the tag `student`: no solutions, no hidden tests.
EDITION = "student" if tags.has("student") else "full"  # noqa: F821 (Sphinx's tags)
# `make site LANGUAGE=zh` builds the Chinese edition's site with the tag `zh` (tools/website.py
# --language zh): <html lang="zh-CN">, the theme's own words in Chinese, and the strings
# of the book's templates from the edition's table (book/locale/zh_CN/LC_MESSAGES/build.po).
LANGUAGE = "zh" if tags.has("zh") else "en"  # noqa: F821 (Sphinx's tags)
language = "zh_CN" if LANGUAGE == "zh" else "en"
if LANGUAGE == "zh":
    from tools.i18n_catalogues import BUILD_TABLE, LOCALE, build_table
    from tools.i18n_catalogues import EDITION as EDITION_CHAPTERS

    book_code = hashlib.sha256(book_code.encode() + (LOCALE / BUILD_TABLE).read_bytes()).hexdigest()
    BOOK_TEXT = build_table()

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx_copybutton",
    "tools.search_cjk",  # Chinese in the search index, snippets from file://
]

# --- sources -------------------------------------------------------------------
exclude_patterns = ["_generated/**", "**.ipynb_checkpoints"]
# Notebooks are rendered from their stored outputs: `make book` executes them in
# fresh kernels before Sphinx runs, `make site` uses the committed outputs.
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist", "substitution"]
myst_substitutions = {"python_versions": python_versions(), "version": version}
myst_dmath_double_inline = True  # $$...$$ inside a paragraph (chapters 07, 08)
myst_heading_anchors = 3
suppress_warnings = ["mystnb.unknown_mime_type"]

# --- HTML ----------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "从零构建 Transformer" if LANGUAGE == "zh" else "Building a Transformer"
templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_js_files = ["book.js"]
html_sourcelink_suffix = ""  # the download button offers NN_name.ipynb itself
html_last_updated_fmt = "%Y-%m-%d"  # the footer's build date (book/_templates/build-info.html)
html_last_updated_use_utc = True
html_permalinks_icon = "#"
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "use_issues_button": False,
    "use_edit_page_button": False,
    "show_prev_next": True,
    "navigation_with_keys": False,
    # No icon links, no analytics, no version switcher: nothing that points off the site.
    "icon_links": [],
    "footer_content_items": ["copyright.html",
                             "build-info-zh.html" if LANGUAGE == "zh" else "build-info.html"],
}
html_context = {
    "default_mode": "auto",  # light or dark from the reader's system; a toggle
    "book_repository": REPOSITORY,
    "book_distribution": distribution_name(),
    "book_edition": EDITION,
    "book_language": LANGUAGE,
}
if LANGUAGE == "zh":
    html_context["book_text"] = BOOK_TEXT.__getitem__  # a KeyError names a missing string
    # The search of search_cjk (English words and Chinese characters), not Sphinx's
    # Chinese one, which wants jieba.
    html_search_language = "en"
html_copy_source = True
# Search works from file:// (searchindex.js is a script). The snippet under each result,
# which Sphinx fetches from the result's page (refused on file://), comes from the pages'
# text in _static/page_texts.js instead (tools/search_cjk.py, book/_static/search.js).
html_show_search_summary = True
html_show_sourcelink = False

# --- copy buttons on code (sphinx-copybutton): the code of cells and of code blocks,
# never outputs; a shell prompt ($) or Python's (>>>, ...) is not copied.
copybutton_selector = "article div.highlight:not(.cell_output *) > pre"
copybutton_exclude = ".linenos, .gp, .go"
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = False

# --- math: MathJax 3 from _static/mathjax, never a CDN ---------------------------
# The files come from the pinned package sphinx-mathjax-offline (MathJax 3.2.2); its
# own extension would copy all 24 MB, including loaders that point at a CDN, so
# copy_mathjax below copies what this site can use (~10 MB).
mathjax_path = "mathjax/tex-chtml.js"
MATHJAX_PARTS = ["tex-chtml.js", "input", "output", "ui", "a11y", "sre", "adaptors"]
mathjax3_config = {
    "tex": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]]},
    "options": {"processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"},
}

# --- API reference -------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_inherit_docstrings = False  # torch's own docstrings (forward, extra_repr) stay out
autodoc_typehints = "signature"
# Defaults as the source writes them (`path=CORPUS_PATH`), not their value on the machine
# that built the site (a PosixPath('/home/...') in every signature that takes a path).
autodoc_preserve_defaults = True
autodoc_class_signature = "mixed"
add_module_names = False
python_display_short_literal_types = True



DEFINED_IN = re.compile(r"^Defined in chapter (\d+) \(`chapters/([0-9a-z_]+)\.ipynb`\)\.[ \t]*$", re.M)


def _chapter_line(number: int, stem: str) -> str:
    if LANGUAGE == "zh" and stem not in EDITION_CHAPTERS:  # not translated yet: the English
        # page, from the API pages (api/NAME.html, two folders below _build/zh/html/'s parent)
        return f"Defined in `chapter {number:02d} <../../../html/chapters/{stem}.html>`__ (in English)."
    return f"Defined in chapter {number:02d}, :doc:`/chapters/{stem}`."  # the link text: its title


def _is_type_docstring(obj, text: str) -> bool:
    doc = type(obj).__doc__
    return bool(doc) and " ".join(inspect.cleandoc(doc).split()) == " ".join(text.split())


def process_docstring(app, what, name, obj, options, lines):
    """Render the package's plain-text docstrings safely, and link each to its chapter.

    The docstrings are plain text (`|y|`, `<pad>`, `**2`, `[B, T]`), written to be
    read with help(); reST would read some of that as markup. plain_text_to_rest
    (tools/docstrings.py) escapes it, turns `code` into inline literals and keeps
    the author's line breaks. The line "Defined in chapter NN, Title
    (`chapters/NN_name.ipynb`)." that the exporter stamps on each symbol becomes a
    link to the chapter's page; a constant, which has no docstring of its own, gets
    that line from the chapter map.
    """
    if not name.startswith("transformer."):
        return
    text = "\n".join(lines)
    if what == "data" and _is_type_docstring(obj, text):
        text = ""  # a constant has no docstring; autodoc shows its type's (int, dict, Path)
    home = None
    found = DEFINED_IN.search(text)
    if found:
        home = (int(found.group(1)), found.group(2))
        text = DEFINED_IN.sub("", text)
    elif what == "data" and name.count(".") == 2:  # transformer.MODULE.NAME
        known = app.config.book_symbol_chapters.get(name.rsplit(".", 1)[-1])  # [number, title, stem]
        home = None if known is None else (known[0], known[2])
    rest = plain_text_to_rest(text) if text.strip() else ""
    if home:
        rest += ("\n" if rest else "") + _chapter_line(*home) + "\n"
    lines[:] = rest.splitlines()


def read_generated(app, config):
    """What tools/website.py derived from the chapters: symbol -> chapter, and the CSS
    that labels exported cells with their module."""
    generated = Path(app.srcdir) / "_generated"
    symbols = generated / "symbols.json"
    if symbols.exists():
        config.book_symbol_chapters = json.loads(symbols.read_text(encoding="utf-8"))
    config.html_static_path.append(str(generated / "static"))
    config.html_css_files.append("exports.css")


def copy_mathjax(app, exception):
    """Copy MathJax's tex-chtml bundle and the components it loads into _static/mathjax."""
    if exception is not None or app.builder.format != "html":
        return
    import importlib.util
    import shutil

    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("MathJax not found: pip install sphinx-mathjax-offline (make install)")
    source = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    target = Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        if (source / part).is_dir():
            shutil.copytree(source / part, target / part, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / part, target / part)


def setup(app):
    app.add_config_value("book_symbol_chapters", {}, "env")
    app.add_config_value("book_code", "", "env")
    app.connect("build-finished", copy_mathjax)
    app.connect("config-inited", read_generated)
    app.connect("autodoc-process-docstring", process_docstring)
