"""Build the book's website from executed chapter notebooks (Sphinx + MyST-NB).

    python -m tools.website [--notebooks DIR] [--edition full|student] [--language en|zh]
                            [--out DIR] [--clean]

DIR holds executed NN_name.ipynb files (default: the committed chapters/, whose
outputs are stored; `make book` passes the copies it has just executed). Nothing
is executed here and no notebook in DIR is changed.

Two editions: `full` (default, _build/html/) shows each exercise as the student's
stub with the solution folded under it; `student` (`make site EDITION=student`,
_build/student/html/) shows the chapters as `make student` hands them out, without
solutions or hidden tests, for a teacher to publish to a class.

Two languages: English (default) and the Chinese edition (`make site LANGUAGE=zh`, `--language zh`,
_build/zh/html/, lang="zh-CN"): the chapters listed in tools/i18n_catalogues.py's EDITION, their
notebooks made Chinese there from the catalogues of book/locale/zh_CN/ (code and outputs
untouched), the landing page of book/locale/zh_CN/pages/, and the strings this file
writes through `_()` in the Chinese of the edition's table (every string the build
writes in the reader's language is written here: tools/i18n.py checks this file's). A
page that exists in both sites (a translated chapter, the landing page) gets a button to
its twin, a relative link that works from disk, once both are built side by side
(tools/site_files.py: `link_languages`).

The Sphinx source tree is assembled in _build/site-src/ from:
- book/: the hand-written pages (landing page, sources, glossary, teachers, package,
  making, performance), the templates, the styles and scripts, and conf.py, the
  site's configuration;
- each chapter, prepared for reading (`reading_copy`; tools/reading_cells.py, cell by
  cell): directive and test-tool lines removed (each marked quietly where it means
  something to a reader), figures numbered and captioned from their cells' `#| fig-cap:`
  / `#| fig-alt:` lines, the exercises as the edition shows them, and a box linking the
  chapter to its API pages and saying how to run its notebook;
- generated pages: the chapter map of the landing page, one API page per module
  and the API index (tools/api_pages.py), all derived from chapters/ and the package
  (tools/chapter_exports.py), so that a new chapter appears on the site without editing
  any configuration; the README's paragraph of measured durations, which the landing
  page shows.

Files are rewritten only when their content changes, so that Sphinx rebuilds only
what changed (tools/site_files.py; where each build lives: tools/site_layout.py). After
Sphinx, the package's names in the chapters' code are linked to the API
(tools/code_links.py). The download button of a chapter offers the notebook as executed
(with its directives; in the student edition, the student copy), with a note on
installing the package under its title. tools/pdf.py prints the site as one PDF.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat

from tools.api_pages import api_pages, linked_names
from tools.chapter_exports import chapter_exports, imports_from_package, symbol_chapters
from tools.code_links import link_package_names
from tools.exercise_cells import strip_solutions
from tools.notebooks import CHAPTERS, ROOT, Chapter, read_book, solution_regions
from tools.project_info import python_versions
from tools.reading_cells import for_reading, has_figure, student_view, tag, without_markers
from tools.site_files import (
    GENERATED,
    chinese_pages,
    link_languages,
    navigation_signature,
    remove_stale_pages,
    write_if_changed,
    write_tree,
)
from tools.site_layout import BUILD, EDITIONS, LANGUAGES, READER, Site
from tools.student_copies import student_copy

BOOK = ROOT / "book"
ZH_PAGES = BOOK / "locale" / "zh_CN" / "pages"  # the Chinese site's own pages (its landing page)

SOLUTION_PROMPTS = {"code_prompt_show": "Show a solution", "code_prompt_hide": "Hide the solution"}


def _(english: str, language: str = "en") -> str:
    """A string the build writes, in the site's language: the Chinese is in the edition's
    table, book/locale/zh_CN/LC_MESSAGES/build.po, which `python -m tools.i18n check` keeps complete."""
    if language == "en":
        return english
    from tools.i18n_catalogues import build_table

    table = build_table()
    if english not in table:
        raise SystemExit(f"book/locale/zh_CN/LC_MESSAGES/build.po has no Chinese for {english!r}")
    return table[english]


# --- the reading copy of a chapter -----------------------------------------------

TOP_LEVEL_LINK = "`transformer` ({doc}`API </api/index>`)"  # a chapter's `#| export __init__`: the top level


def package_note(chapter: Chapter, chapters: list[Chapter], language: str = "en") -> str:
    """The box under a chapter's title: what it writes into the package and what it uses
    from earlier chapters (linked to the API), and how to run the notebook on its own."""
    writes = [TOP_LEVEL_LINK] if "__init__" in chapter.modules else []
    for export in chapter_exports(chapter):
        writes.append(f"`transformer.{export.module}` ({{doc}}`API </api/{export.module}>`): {linked_names(export)}")
    documented = {e.module: set(e.names) for c in chapters for e in chapter_exports(c)}
    uses = []
    for module, names in imports_from_package(chapter).items():
        if module not in documented:
            continue
        links = ", ".join(f"{{py:obj}}`~transformer.{module}.{n}`" for n in names
                          if n in documented[module])
        uses.append(f"{{doc}}`transformer.{module} </api/{module}>`" + (f" ({links})" if links else ""))
    lines = ["```{admonition} " + _("In the package", language), ":class: tip package-note"]
    if writes:
        lines.append(_("This chapter writes {modules}. Cells marked *exported* go into the "
                       "package; the others explain, trace and check.", language).format(
                           modules=_("; and ", language).join(writes)))
    else:
        lines.append(_("This chapter adds no module to the package: it builds on what the "
                       "earlier chapters wrote.", language))
    if uses:
        lines += ["", _("It uses, from earlier chapters: {uses}.", language).format(
            uses="; ".join(uses))]
    lines += ["", download_note(on_page=True, language=language), "```"]
    return "\n".join(lines)


def download_note(on_page: bool, language: str = "en") -> str:
    """How to run a downloaded chapter: in the box on its page, and in the notebook itself."""
    lead = ("**Running this notebook yourself.** The download button (top right) gives this "
            "chapter's notebook. It" if on_page else "> **Running this notebook on its own.** It")
    return _(lead, language) + _(
        " imports the package `transformer`, which the book's chapters build. In a "
        "clone of the book's repository, `make lab` opens it with everything installed. "
        "Anywhere else, install the package from the clone first, `pip install -e "
        "path/to/clone` (Python {versions}), then run the cells top to bottom.",
        language).format(versions=python_versions())


def reading_copy(chapter: Chapter, chapters: list[Chapter], edition: str = "full",
                 language: str = "en") -> nbformat.NotebookNode:
    """The notebook as the site shows it; the chapter's own notebook is not changed.

    - `#| default_exp` lines are dropped (a cell left empty is removed); the first
      line `#| export [MODULE]` is dropped and the cell tagged `export-MODULE`, which
      the site's stylesheet labels quietly; `#| check NAME` likewise, tag `check`;
    - test directives are dropped: `# NBVAL_IGNORE_OUTPUT` (the cell is labelled as one
      whose output varies between runs) and nbgrader's hidden-tests markers;
    - a figure gets its number, caption and alt text from its cell's `#| fig-cap:` and
      `#| fig-alt:` lines (dropped from the code shown);
    - full edition: an exercise cell is shown as the student sees it (the solution
      replaced by `raise NotImplementedError`), followed by the full solution, folded
      (`hide-input`), so that a reader tries first;
    - student edition: the chapter as `make student` hands it out (student_view): stubs
      without solutions, checks without hidden tests;
    - a box under the title links the chapter to the API pages of its modules and of
      those it uses, and says how to run the downloaded notebook.
    """
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {EDITIONS}, not {edition!r}")
    notebook = (student_view(chapter.notebook, chapter.name) if edition == "student"
                else copy.deepcopy(chapter.notebook))
    cells = []
    figures = 0
    for original, cell in zip(chapter.notebook.cells, notebook.cells, strict=True):
        if cell.cell_type != "code":
            cells.append(cell)
            continue
        options = for_reading(cell, chapter)  # directive lines dropped, the cell tagged
        if has_figure(cell):
            figures += 1
            caption_figure(cell, options, chapter, figures, language)
        if not cell.source.strip():
            if cell.get("outputs"):
                tag(cell, "remove-input")
            else:
                continue
        cells += exercise_view(cell, original, edition, language)
    first_markdown = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"), -1)
    cells.insert(first_markdown + 1,
                 nbformat.v4.new_markdown_cell(package_note(chapter, chapters, language)))
    for cell in cells:
        cell.pop("id", None)
    notebook.cells = cells
    notebook.nbformat, notebook.nbformat_minor = 4, 4  # cells without ids, as in 4.4
    return notebook


def caption_figure(cell: nbformat.NotebookNode, options: dict[str, str], chapter: Chapter,
                   figure: int, language: str = "en") -> None:
    """Give a figure's cell its number, caption and alt text (MyST-NB's options), from its
    `#| fig-cap:` and `#| fig-alt:` lines (in Chinese, from the translated notebook's)."""
    if language != "en":  # the Chinese notebook's (python -m tools.i18n build)
        options.update({k: v for k, v in cell.metadata.get("i18n", {}).items()
                        if k in ("fig-cap", "fig-alt")})
    caption = options.get("fig-cap", "")
    label = _("Figure {chapter}.{figure}", language).format(chapter=chapter.number,
                                                            figure=figure)
    cell.metadata["mystnb"] = {
        "figure": {"caption": _("**{label}.** {caption}", language).format(
                       label=label, caption=caption).strip(),
                   "name": f"fig-{chapter.number:02d}-{figure}"},
        "image": {"alt": options.get("fig-alt") or caption or label},
    }


def exercise_view(cell: nbformat.NotebookNode, original: nbformat.NotebookNode, edition: str,
                  language: str = "en") -> list[nbformat.NotebookNode]:
    """The cells that show a code cell (`original`: the chapter's): in the full edition,
    an exercise as the student's stub followed by its solution, folded; else the cell."""
    if edition == "full" and solution_regions(cell.source):
        stub = nbformat.v4.new_code_cell(strip_solutions(cell.source))
        tag(stub, "exercise")
        cell.source = without_markers(cell.source)
        tag(cell, "hide-input", "solution")
        cell.metadata.setdefault("mystnb", {}).update(
            {key: _(text, language) for key, text in SOLUTION_PROMPTS.items()})
        return [stub, cell]
    if edition == "student" and solution_regions(original.source):
        tag(cell, "exercise")
    return [cell]


# --- generated pages -------------------------------------------------------------

def chapter_map(chapters: list[Chapter], language: str = "en") -> str:
    """The landing page's table: every chapter and what it adds to the package."""
    rows = [":::{table}", ":class: chapter-map", "",
            f"| # | {_('Chapter', language)} | {_('What it adds to the package', language)} |",
            "|---|---|---|"]
    for chapter in chapters:
        adds = "<br>".join(
            ([TOP_LEVEL_LINK] if "__init__" in chapter.modules else [])
            + [f"{{doc}}`transformer.{e.module} </api/{e.module}>`: {linked_names(e)}" for e in chapter_exports(chapter)])
        rows.append(f"| {chapter.number:02d} | {{doc}}`{chapter.title} </chapters/{chapter.name}>` "
                    f"| {adds or '–'} |")
    return "\n".join(rows + [":::", ""])


README_DURATIONS = re.compile(r"<!-- durations\b[^>]*-->\n(.*?)\n<!-- /durations -->", re.S)


def readme_durations() -> str:
    """The README's paragraph on how long the book and the site take to build, which the
    landing page shows, so that the two never disagree."""
    found = README_DURATIONS.search((ROOT / "README.md").read_text(encoding="utf-8"))
    if not found:
        raise SystemExit("README.md lost its `<!-- durations -->` ... `<!-- /durations -->` "
                         "paragraph, which the website's landing page shows")
    return found.group(1).strip() + "\n"


def export_styles(chapters: list[Chapter], language: str = "en") -> str:
    """CSS that labels each exported cell with the module it goes to (and, in Chinese,
    the labels that book.css gives check cells and cells whose output varies)."""
    rules = []
    for chapter in chapters:
        for module in chapter.modules:
            label = _("exported to transformer/{module}.py", language).format(module=module)
            rules.append(f'div.cell.tag_export-{module} > .cell_input::before '
                         f'{{ content: "{label}"; }}')
    if language != "en":
        for cell_tag, english in (("check", "check"), ("output-varies",
                                  "output varies from run to run (timings, losses)")):
            rules.append(f'div.cell.tag_{cell_tag} > .cell_input::before '
                         f'{{ content: "{_(english, language)}"; }}')
    return "\n".join(rules) + "\n"


# --- assembling the source tree and building -------------------------------------

def assemble(chapters: list[Chapter], site: Site = READER) -> tuple[int, str]:
    """Write the Sphinx source tree; return (files changed, navigation signature)."""
    src = site.src
    wanted: dict[Path, bytes | str] = {}
    # book/locale/: the Chinese edition's catalogues (tools/i18n.py) and its own pages,
    # which replace the English ones in the Chinese site.
    pages = BOOK if site.language == "en" else ZH_PAGES
    for path in pages.rglob("*"):
        relative = path.relative_to(pages)
        if path.is_file() and path.name != "conf.py" \
                and relative.parts[0] not in ("_static", "_templates", "locale") \
                and "__pycache__" not in relative.parts:
            wanted[src / relative] = path.read_bytes()
    for chapter in chapters:
        wanted[src / "chapters" / f"{chapter.name}.ipynb"] = nbformat.writes(
            reading_copy(chapter, chapters, site.edition, site.language))
    for name, text in api_pages(chapters).items():
        wanted[src / name] = text
    wanted[src / GENERATED / "chapter_map.md"] = chapter_map(chapters, site.language)
    wanted[src / GENERATED / "durations.md"] = readme_durations()
    wanted[src / GENERATED / "symbols.json"] = json.dumps(symbol_chapters(chapters), indent=1)
    wanted[src / GENERATED / "static" / "exports.css"] = export_styles(chapters, site.language)
    if site.language != "en":
        from tools.i18n_catalogues import EDITION_NOTE

        wanted.update(chinese_pages(site, wanted))  # the edition's book pages, in Chinese
        wanted[src / GENERATED / "edition_note.md"] = "> " + _(EDITION_NOTE, site.language) + "\n"
    changed = write_tree(src, wanted)
    return changed, navigation_signature(wanted, src)


def sphinx_build(site: Site, quiet: bool = True, write_all: bool = False) -> int:
    """Sphinx, warnings as errors (all reported, then the build fails)."""
    from sphinx.cmd.build import build_main

    args = ["-b", "html", "-W", "--keep-going", "-c", str(BOOK), "-d", str(site.doctrees),
            "-t", site.edition, *(["-t", "zh"] if site.language == "zh" else []),
            str(site.src), str(site.html)]
    return build_main((["-q"] if quiet else []) + (["-a"] if write_all else []) + args)


def offered_notebook(chapter: Chapter, edition: str, language: str = "en") -> nbformat.NotebookNode:
    """What a chapter's download button gives: the chapter as executed (directives
    included) or, in the student edition, the student copy that `make student` writes;
    under its title, a note on installing the package it imports."""
    notebook = copy.deepcopy(chapter.notebook)
    title = next((i for i, c in enumerate(notebook.cells) if c.cell_type == "markdown"), -1)
    note = nbformat.v4.new_markdown_cell(download_note(on_page=False, language=language))
    note.id = "book-download-note"
    notebook.cells.insert(title + 1, note)
    return student_copy(notebook, chapter.name) if edition == "student" else notebook


def offer_notebooks(chapters: list[Chapter], site: Site) -> None:
    """Put each chapter's download (offered_notebook) where the download button points."""
    for chapter in chapters:
        target = site.html / "_sources" / "chapters" / f"{chapter.name}.ipynb"
        if target.parent.exists():
            write_if_changed(target, nbformat.writes(
                offered_notebook(chapter, site.edition, site.language)))


def build(notebooks: Path = CHAPTERS, site: Site = READER, clean: bool = False,
          quiet: bool = True) -> int:
    """Assemble and build the site from the notebooks in `notebooks`; return Sphinx's status."""
    start = time.perf_counter()
    if clean:
        for path in (site.src, site.html, site.doctrees):
            shutil.rmtree(path, ignore_errors=True)
    chapters = read_book(notebooks)
    if not chapters:
        raise SystemExit(f"no chapter notebooks in {notebooks}")
    changed, navigation = assemble(chapters, site)
    # Sphinx re-renders only the pages whose source changed; when a page comes or goes
    # or a title changes, every page's sidebar and prev/next links change, so all are
    # written again. The signature of the last good build is kept beside the HTML.
    stamp = site.html / ".navigation"
    fresh = stamp.exists() and stamp.read_text() == navigation
    status = sphinx_build(site, quiet=quiet, write_all=not fresh)
    if status == 0:
        stamp.write_text(navigation)
        remove_stale_pages(site)
        link_package_names(chapters, site)
        offer_notebooks(chapters, site)
        link_languages(site)
        pages = sum(1 for _ in site.html.rglob("*.html"))
        index = site.html / "index.html"
        print(f"site: {len(chapters)} chapters, {pages} pages, {changed} source files changed, "
              f"{time.perf_counter() - start:.1f} s; open "
              f"{index.relative_to(ROOT) if index.is_relative_to(ROOT) else index}")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", type=Path, default=CHAPTERS,
                        help="folder of executed NN_name.ipynb files (default: chapters/)")
    parser.add_argument("--clean", action="store_true", help="rebuild everything")
    parser.add_argument("--out", type=Path, default=None,
                        help="build folder: html/, site-src/, doctrees/ (default: _build/, "
                             "or _build/student/ for the student edition)")
    parser.add_argument("--edition", choices=EDITIONS, default="full",
                        help="full: solutions folded under each exercise (default); student: "
                             "the chapters as `make student` hands them out, no solutions")
    parser.add_argument("--language", choices=LANGUAGES, default="en",
                        help="zh: the Chinese edition's chapters (tools/i18n.py), translated "
                             "from the notebooks, into _build/zh/html/ (full edition only)")
    parser.add_argument("--verbose", action="store_true", help="show Sphinx's progress")
    args = parser.parse_args(argv)
    if args.language == "zh":
        if args.edition != "full":
            raise SystemExit("the Chinese site has the full edition only, for now")
        from tools import i18n

        out = (args.out or BUILD / "zh").resolve()
        i18n.build(out=out, chapters=args.notebooks.resolve())  # out/chapters/NN_name.ipynb
        return build(out / "chapters", Site(out, "full", "zh"), clean=args.clean,
                     quiet=not args.verbose)
    out = args.out or (BUILD if args.edition == "full" else BUILD / "student")
    return build(args.notebooks.resolve(), Site(out.resolve(), args.edition), clean=args.clean,
                 quiet=not args.verbose)


if __name__ == "__main__":
    sys.exit(main())
