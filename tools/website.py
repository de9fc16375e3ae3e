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

Two languages: English (default) and the Chinese edition (`make zh`, `--language zh`,
_build/zh/html/, lang="zh-CN"): the chapters listed in tools/i18n.py's EDITION, their
notebooks made Chinese there from the catalogues of book/locale/zh_CN/ (code and outputs
untouched), the landing page of book/locale/zh_CN/pages/, and the strings this file
writes through `_()` in the Chinese of the edition's table. A page that exists in both
sites (a translated chapter, the landing page) gets a button to its twin, a relative
link that works from disk, once both are built side by side (`link_languages`).

The Sphinx source tree is assembled in _build/site-src/ from:
- book/: the hand-written pages (landing page, sources, glossary, teachers, package,
  making, performance), the templates, the styles and scripts, and conf.py, the
  site's configuration;
- each chapter, prepared for reading (`reading_copy`): directive and test-tool lines
  removed (each marked quietly where it means something to a reader), figures
  numbered and captioned from their cells' `#| fig-cap:` / `#| fig-alt:` lines, the
  exercises as the edition shows them, and a box linking the chapter to its API pages
  and saying how to run its notebook;
- generated pages: the chapter map of the landing page, one API page per module
  and the API index, all derived from chapters/ and the package, so that a new
  chapter appears on the site without editing any configuration; the README's
  paragraph of measured durations, which the landing page shows.

Files are rewritten only when their content changes, so that Sphinx rebuilds only
what changed. The download button of a chapter offers the notebook as executed (with
its directives; in the student edition, the student copy), with a note on installing
the package under its title. tools/pdf.py prints the site as one PDF.
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from tools.exercise_cells import strip_solutions
from tools.exercises import student_copy
from tools.export import TOP_LEVEL, public_names
from tools.notebooks import (
    BEGIN_HIDDEN,
    BEGIN_SOLUTION,
    CHAPTERS,
    END_HIDDEN,
    END_SOLUTION,
    PACKAGE,
    ROOT,
    Chapter,
    check_directive,
    directive,
    figure_options,
    read_book,
    solution_regions,
)
from tools.project_info import python_versions

BOOK = ROOT / "book"
ZH_PAGES = BOOK / "locale" / "zh_CN" / "pages"  # the Chinese site's own pages (its landing page)
BUILD = ROOT / "_build"  # the reader's site: _build/html/
GENERATED = "_generated"  # inside the source tree: included by pages, not pages themselves


EDITIONS = ("full", "student")  # with solutions (folded) / as `make student` hands out
# The English site, and the Chinese edition's (`make zh`: the chapters in tools/i18n.py's
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


HTML = Site().html

SOLUTION_PROMPTS = {"code_prompt_show": "Show a solution", "code_prompt_hide": "Hide the solution"}


def _(english: str, language: str = "en") -> str:
    """A string the build writes, in the site's language: the Chinese is in the edition's
    table, book/locale/zh_CN/LC_MESSAGES/build.po, which `python -m tools.i18n check` keeps complete."""
    if language == "en":
        return english
    from tools.i18n import build_table

    table = build_table()
    if english not in table:
        raise SystemExit(f"book/locale/zh_CN/LC_MESSAGES/build.po has no Chinese for {english!r}")
    return table[english]


# --- what each chapter exports ---------------------------------------------------

@dataclass
class Export:
    module: str
    kinds: dict[str, str]  # public name -> "function", "class" or "data", in definition order
    summaries: dict[str, str]  # public name -> first line of its docstring ("" for a constant)
    computed: set[str] = field(default_factory=set)  # constants not written as a literal

    @property
    def names(self) -> list[str]:
        return list(self.kinds)


def _kind(node: ast.AST) -> str:
    if isinstance(node, ast.ClassDef):
        return "class"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return "function"
    return "data"


def chapter_exports(chapter: Chapter) -> list[Export]:
    """The modules a chapter writes and the public names it defines in each, in order."""
    exports = {m: Export(m, {}, {}) for m in chapter.modules}
    for module, _, source in chapter.exports:
        for name, node in public_names(ast.parse(source)):
            if name not in exports[module].kinds:
                exports[module].kinds[name] = _kind(node)
                doc = "" if _kind(node) == "data" else (ast.get_docstring(node) or "")
                exports[module].summaries[name] = doc.strip().split("\n")[0]
                if _kind(node) == "data" and not _is_literal(node):
                    exports[module].computed.add(name)
    return list(exports.values())


def _is_literal(node: ast.AST) -> bool:
    """Whether a constant is written as a literal (`MAX_LEN = 512`), not computed."""
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, AttributeError):
        return False
    return True


def markdown_text(text: str) -> str:
    """Plain text -> MyST inline text that shows it as written; `code` stays code."""
    parts = re.split(r"(`[^`]+`)", text)
    return "".join(part if part.startswith("`") and part.endswith("`") and len(part) > 1
                   else re.sub(r"([\\`*_{}\[\]<>()#+\-.!|$~])", r"\\\1", part)
                   for part in parts)


def package_names() -> list[str]:
    """transformer.__all__, read from the generated __init__.py without importing torch."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise SystemExit("transformer/__init__.py has no __all__; run `make export`")


def symbol_chapters(chapters: list[Chapter]) -> dict[str, tuple[int, str, str]]:
    """name -> (chapter number, chapter title, chapter file stem) for every exported name."""
    return {name: (c.number, c.title, c.name)
            for c in chapters for e in chapter_exports(c) for name in e.names}


# --- the reading copy of a chapter -----------------------------------------------

# Lines that steer the test tools, not the reader: nbval's directives (`# NBVAL_IGNORE_OUTPUT`
# and the others) and nbgrader's hidden-tests markers. The reading copy drops them and says
# in a quiet label what the first one meant.
TEST_DIRECTIVE = re.compile(r"^\s*#\s*NBVAL_[A-Z_]+\s*$")
HIDDEN_MARKER = re.compile(rf"^\s*({re.escape(BEGIN_HIDDEN)}|{re.escape(END_HIDDEN)})\s*$")


def _tag(cell: nbformat.NotebookNode, *tags: str) -> None:
    existing = cell.metadata.setdefault("tags", [])
    existing.extend(t for t in tags if t not in existing)


def _without_markers(source: str) -> str:
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in (BEGIN_SOLUTION, END_SOLUTION))


def has_figure(cell: nbformat.NotebookNode) -> bool:
    return any(o.get("data", {}).keys() & {"image/png", "image/svg+xml", "image/jpeg"}
               for o in cell.get("outputs", []))


def imports_from_package(chapter: Chapter) -> dict[str, list[str]]:
    """module -> names a chapter imports from earlier chapters' modules, in order of use."""
    own = set(chapter.modules)
    used: dict[str, list[str]] = {}
    for cell in chapter.notebook.cells:
        tree = _parse_cell(cell.source) if cell.cell_type == "code" else None
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformer."):
                module = node.module.split(".", 1)[1]
                if module not in own:
                    names = used.setdefault(module, [])
                    names.extend(a.name for a in node.names
                                 if a.name != "*" and a.name not in names)
    return used


def package_note(chapter: Chapter, chapters: list[Chapter], language: str = "en") -> str:
    """The box under a chapter's title: what it writes into the package and what it uses
    from earlier chapters (linked to the API), and how to run the notebook on its own."""
    writes = []
    for export in chapter_exports(chapter):
        writes.append(f"`transformer.{export.module}` ({{doc}}`API </api/{export.module}>`)"
                      + (f": {_names(export)}" if export.names else ""))
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


def student_view(notebook: nbformat.NotebookNode, chapter: str) -> nbformat.NotebookNode:
    """The student copy (tools/exercises.py: solutions stubbed, hidden tests removed), with
    the outputs of the chapter's own cells put back, so that the student edition of the site
    reads like the book; exercise and check cells keep no output, as in the student copy."""
    student = student_copy(notebook, chapter)
    for original, cell in zip(notebook.cells, student.cells, strict=True):
        if cell.cell_type != "code" or solution_regions(original.source) \
                or check_directive(original.source):
            continue
        cell.outputs = copy.deepcopy(original.get("outputs", []))
        cell.execution_count = original.get("execution_count")
    return student


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
        options, source = figure_options(cell.source)
        lines = source.splitlines()
        if any(TEST_DIRECTIVE.match(line) and "IGNORE_OUTPUT" in line for line in lines):
            _tag(cell, "output-varies")
        kept = [line for line in lines
                if not ((found := directive(line)) and found[0] == "default_exp")
                and not TEST_DIRECTIVE.match(line) and not HIDDEN_MARKER.match(line)]
        first = directive(kept[0]) if kept else None
        if first and first[0] == "export":
            kept = kept[1:]
            _tag(cell, "export-" + (first[1] or chapter.default_module or "package"))
        elif first and first[0] == "check":
            kept = kept[1:]
            _tag(cell, "check")
        cell.source = "\n".join(kept).strip("\n")
        if has_figure(cell):
            figures += 1
            if language != "en":  # the Chinese notebook's (python -m tools.i18n build)
                options.update({k: v for k, v in cell.metadata.get("i18n", {}).items()
                                if k in ("fig-cap", "fig-alt")})
            caption = options.get("fig-cap", "")
            label = _("Figure {chapter}.{figure}", language).format(chapter=chapter.number,
                                                                    figure=figures)
            cell.metadata["mystnb"] = {
                "figure": {"caption": _("**{label}.** {caption}", language).format(
                               label=label, caption=caption).strip(),
                           "name": f"fig-{chapter.number:02d}-{figures}"},
                "image": {"alt": options.get("fig-alt") or caption or label},
            }
        if not cell.source.strip():
            if cell.get("outputs"):
                _tag(cell, "remove-input")
            else:
                continue
        if edition == "full" and solution_regions(cell.source):
            stub = nbformat.v4.new_code_cell(strip_solutions(cell.source))
            _tag(stub, "exercise")
            cells.append(stub)
            cell.source = _without_markers(cell.source)
            _tag(cell, "hide-input", "solution")
            cell.metadata.setdefault("mystnb", {}).update(
                {key: _(text, language) for key, text in SOLUTION_PROMPTS.items()})
        elif edition == "student" and solution_regions(original.source):
            _tag(cell, "exercise")
        cells.append(cell)
    first_markdown = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"), -1)
    cells.insert(first_markdown + 1,
                 nbformat.v4.new_markdown_cell(package_note(chapter, chapters, language)))
    for cell in cells:
        cell.pop("id", None)
    notebook.cells = cells
    notebook.nbformat, notebook.nbformat_minor = 4, 4  # cells without ids, as in 4.4
    return notebook


# --- generated pages -------------------------------------------------------------

def _names(export: Export) -> str:
    """The names a module exports, each linked to its API entry."""
    return ", ".join(f"{{py:obj}}`~transformer.{export.module}.{n}`" for n in export.names)


def module_label(module: str) -> str:
    return "python -m transformer" if module == "__main__" else f"transformer.{module}"


def chapter_map(chapters: list[Chapter], language: str = "en") -> str:
    """The landing page's table: every chapter and what it adds to the package."""
    rows = [":::{table}", ":class: chapter-map", "",
            f"| # | {_('Chapter', language)} | {_('What it adds to the package', language)} |",
            "|---|---|---|"]
    for chapter in chapters:
        adds = "<br>".join(
            f"{{doc}}`{module_label(e.module)} </api/{e.module}>`"
            + (": " + _names(e) if e.names else "")
            for e in chapter_exports(chapter))
        rows.append(f"| {chapter.number:02d} | {{doc}}`{chapter.title} </chapters/{chapter.name}>` "
                    f"| {adds or '–'} |")
    return "\n".join(rows + [":::", ""])


def api_module_page(export: Export, chapter: Chapter, public: list[str]) -> str:
    """One module's page: its chapter, then each public name documented by autodoc."""
    names = export.names
    shared = [n for n in names if n in public]
    lines = [
        f"# {module_label(export.module)}", "",
        f"Built in chapter {chapter.number:02d}, "
        f"{{doc}}`{chapter.title} </chapters/{chapter.name}>`, which explains and tests "
        "every name below.", "",
    ]
    if shared:
        lines += [f"Import them from the package itself, as in "
                  f"`from transformer import {shared[0]}`"
                  + ("." if len(shared) == len(names) else
                     f", or from `transformer.{export.module}` for those it does not re-export."),
                  ""]
    else:
        lines += [f"Import from `transformer.{export.module}`.", ""]
    lines += ["```{eval-rst}", f".. module:: transformer.{export.module}", ""]
    for name in names:
        kind = export.kinds[name]
        lines.append(f".. auto{kind}:: transformer.{export.module}.{name}")
        if kind == "class":
            lines += ["   :members:", "   :show-inheritance:"]
        elif name in export.computed:  # its value is the build machine's (a path, a device)
            lines.append("   :no-value:")
        lines.append("")
    lines += ["```", ""]
    return "\n".join(lines)


def api_pages(chapters: list[Chapter]) -> dict[str, str]:
    """api/index.md (every name of transformer.__all__) and one page per module."""
    public = package_names()
    pages: dict[str, str] = {}
    index = [
        "# API reference", "",
        "Every public name of the package, in the order in which the book builds it, "
        "module by module. Each name links to its documentation; each module page links "
        "back to the chapter that explains it. All names are importable from `transformer` "
        "itself unless marked *module only*.", "",
        "```{toctree}", ":hidden:", "",
    ]
    home = {n: export.module for chapter in chapters for export in chapter_exports(chapter) for n in export.names}
    groups = ["## The top level, by use", "",
              "What `import transformer` holds, grouped by what a user of the models does with it:", ""]
    for group, names in TOP_LEVEL.items():
        links = ", ".join(f"{{py:obj}}`~transformer.{home[n]}.{n}`" for n in names if n in home)
        groups += [f"- **{group}**: {links}"]
    groups.append("")
    tables = []
    for chapter in chapters:
        for export in chapter_exports(chapter):
            index.append(export.module)
            pages[f"api/{export.module}.md"] = api_module_page(export, chapter, public)
            tables += [
                f"## {module_label(export.module)}", "",
                f"Module page: {{doc}}`{module_label(export.module)} </api/{export.module}>`; "
                f"built in chapter {chapter.number:02d}, "
                f"{{doc}}`{chapter.title} </chapters/{chapter.name}>`.", "",
                "| Name | What it is |", "|---|---|",
            ]
            for n in export.names:
                summary = markdown_text(export.summaries[n]) or "a constant"
                if n not in public:
                    summary += " (*module only*)"
                tables.append(f"| {{py:obj}}`~transformer.{export.module}.{n}` | {summary} |")
            tables.append("")
    index += ["```", ""] + groups + tables
    pages["api/index.md"] = "\n".join(index)
    return pages


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
        for tag, english in (("check", "check"),
                             ("output-varies", "output varies from run to run (timings, losses)")):
            rules.append(f'div.cell.tag_{tag} > .cell_input::before '
                         f'{{ content: "{_(english, language)}"; }}')
    return "\n".join(rules) + "\n"


# --- assembling the source tree and building -------------------------------------

def write_if_changed(path: Path, data: bytes | str) -> bool:
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


def assemble(chapters: list[Chapter], site: Site = Site()) -> tuple[int, str]:
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
        from tools.i18n import EDITION_NOTE

        wanted[src / GENERATED / "edition_note.md"] = "> " + _(EDITION_NOTE, site.language) + "\n"
    before = {p for p in src.rglob("*") if p.is_file()} if src.exists() else set()
    changed = sum(write_if_changed(path, data) for path, data in wanted.items())
    for path in sorted(before - set(wanted)):
        path.unlink()
        changed += 1
    for path in sorted((p for p in src.rglob("*") if p.is_dir()), reverse=True):
        if not any(path.iterdir()):
            path.rmdir()
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


def _parse_cell(source: str) -> ast.Module | None:
    source = "\n".join(line for line in source.splitlines()
                       if not line.lstrip().startswith(("%", "!")))
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def bound_names(tree: ast.AST, keep: set[str] = frozenset()) -> set[str]:
    """Every name a cell binds, in any scope: variables, parameters, loop targets,
    functions and classes (but those in `keep`, the cell's exported definitions)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformer")):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names - keep


def cell_shadows(notebook: nbformat.NotebookNode) -> tuple[set[str], list[set[str]]]:
    """For linking a chapter's code to the package: the names that any cell binds at
    module level (they shadow the package's for the cells after), and, per code cell,
    every name it binds (a local `train` is not the package's `train`). A cell's own
    exported public definitions are the package's, so they do not count."""
    chapter_wide: set[str] = set()
    per_cell: list[set[str]] = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        tree = _parse_cell(cell.source)
        if tree is None:
            per_cell.append(set())
            continue
        exported = {name for name, _ in public_names(tree)} if any(
            t.startswith("export-") for t in cell.metadata.get("tags", [])) else set()
        per_cell.append(bound_names(tree, keep=exported))
        top = ast.Module(body=[n for n in tree.body if not isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))], type_ignores=[])
        chapter_wide |= {n.id for n in ast.walk(top)
                         if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} - exported
        chapter_wide |= {n.name for n in tree.body if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))} - exported
    return chapter_wide, per_cell


LINKED = "<!-- package names linked -->"
NAME_SPAN = re.compile(r'(?<!<span class="o">\.</span>)<span class="n">(\w+)</span>')


CELL_START = re.compile(r'<div class="cell[ "]')
HIGHLIGHT = re.compile(r'<div class="highlight"><pre>.*?</pre></div>', re.S)


def link_package_names(chapters: list[Chapter], site: Site) -> int:
    """In the code of every chapter page, link each name of the package to its API entry.

    Pygments marks a plain name as <span class="n">; one that follows a dot (an
    attribute, `model.train`) is left alone, and so is a name that the cell binds
    itself or that the chapter rebinds (`train, valid, test = ...`): see
    cell_shadows. A page is done once (marked); Sphinx writes it anew when its
    source changes. This is the part of sphinx-codeautolink that the book needs, at
    a fraction of its cost (it doubled the build time).
    """
    targets = {name: f"../api/{e.module}.html#transformer.{e.module}.{name}"
               for c in chapters for e in chapter_exports(c) for name in e.names}
    linked = 0

    def linker(skip: set[str]):
        def link(match: re.Match) -> str:
            nonlocal linked
            name = match.group(1)
            if name not in targets or name in skip:
                return match.group(0)
            linked += 1
            return (f'<a class="api-link" href="{targets[name]}" title="transformer.{name}">'
                    f'{match.group(0)}</a>')
        return lambda block: NAME_SPAN.sub(link, block.group(0))

    for chapter in chapters:
        page = site.html / "chapters" / f"{chapter.name}.html"
        source = site.src / "chapters" / f"{chapter.name}.ipynb"
        if not page.exists() or not source.exists():
            continue
        text = page.read_text(encoding="utf-8")
        if LINKED in text:
            continue
        chapter_wide, per_cell = cell_shadows(nbformat.read(source, as_version=4))
        starts = [m.start() for m in CELL_START.finditer(text)]
        pieces = [text[: starts[0] if starts else len(text)]]
        pieces[0] = HIGHLIGHT.sub(linker(chapter_wide), pieces[0])  # code in the prose
        for k, start in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else len(text)
            own = per_cell[k] if k < len(per_cell) else set()
            pieces.append(HIGHLIGHT.sub(linker(chapter_wide | own), text[start:end]))
        page.write_text("".join(pieces).replace("</body>", LINKED + "\n</body>", 1),
                        encoding="utf-8")
    return linked


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
        if (relative.parts[0] == "chapters" or relative == Path("index.html")) and twin.exists():
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


def build(notebooks: Path = CHAPTERS, site: Site = Site(), clean: bool = False,
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
