"""The Chinese edition's catalogues: which units of a chapter are translated, and the
gettext catalogue that keeps each unit's Chinese beside its English (book/locale/zh_CN/).

The edition (EDITION, the one list of its chapters) and its files are defined here;
tools/i18n_check.py checks the catalogues, tools/i18n.py builds the Chinese notebooks
and is the command line (its docstring says how a unit is made and kept).
"""

from __future__ import annotations

import copy
import difflib
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import polib
from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin

from tools.figures import figure_options
from tools.notebooks import CHAPTERS, ROOT

# The chapters in the Chinese edition, in the book's order: the check covers exactly these,
# and the build writes exactly these. A chapter joins once its catalogue is translated.
EDITION = ("01_embedding", "02_positional_encoding", "03_attention", "04_causal_mask",
           "05_multihead_attention", "06_feedforward", "07_blocks", "08_model",
           "09_training", "10_generation", "11_language_model", "12_distributed", "13_refinements", "14_benchmarks",
           "15_package")
# The book's own pages in the edition, as "book/NAME" (book/NAME.md), translated unit by
# unit as the chapters are; the Chinese site has each as NAME.html, beside the English one.
PAGES = ("book/package", "book/making", "book/performance", "book/sources", "book/teachers", "book/glossary")
LANGUAGE = "zh_CN"  # gettext's name for it; the site's lang attribute is zh-CN
LOCALE = ROOT / "book" / "locale" / LANGUAGE / "LC_MESSAGES"
BUILD = ROOT / "_build" / "zh"
BUILD_TABLE = "build.po"  # the strings the build writes, under LOCALE
# Shown under every Chinese chapter's title; its Chinese is in the build table.
EDITION_NOTE = ("This edition translates the prose; code, outputs, comments and docstrings "
                "stay in English, as the package has them.")
NOTE_CELL = "book-zh-note"  # the id of the cell that shows it
CAPTION, ALT = "figure caption", "figure alt text"  # msgctxt of a figure's two units
OPTION = {"fig-cap": CAPTION, "fig-alt": ALT}
HEADER = {
    "Project-Id-Version": "transformer-book",
    "Language": LANGUAGE,
    "MIME-Version": "1.0",
    "Content-Type": "text/plain; charset=UTF-8",
    "Content-Transfer-Encoding": "8bit",
    "Plural-Forms": "nplurals=1; plural=0;",
}


# --- units: what is translated ----------------------------------------------------

@dataclass(frozen=True)
class Unit:
    """One translatable piece of a chapter: its key in the catalogue and where it is."""

    msgid: str
    context: str | None  # None for prose, CAPTION or ALT for a figure's texts
    cell: str  # the cell's id
    kind: str  # heading, paragraph, list item, quote, table cell, figure caption, ...

    @property
    def key(self) -> tuple[str | None, str]:
        return self.context, self.msgid


@dataclass
class _Piece:
    """Where units sit in a markdown cell: the lines [start, end) hold them."""

    start: int
    end: int
    kind: str
    texts: list[str]  # its one text, or a table row's, cell by cell


MARKDOWN = MarkdownIt("commonmark").enable("table").use(dollarmath_plugin, double_inline=True)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
ROLE = re.compile(r"\{[\w:.-]+\}(`+)(.+?)\1", re.S)  # MyST's {doc}`text <target>`
MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$(?!\s)[^$]+?(?<![\s\\])\$", re.S)
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
TOKEN = re.compile(r"</?[A-Za-z_][\w-]*>")  # <bos>, <pad>, <br>: kept as written
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?: \d{3}(?![\d.,]))*")
PLACEHOLDER = re.compile(r"\{[a-z_]+\}")  # {chapter} in the build table's strings
LETTERS = re.compile(r"[A-Za-z]")


def _without_code(text: str) -> str:
    return MATH.sub(" ", CODE_SPAN.sub(" ", ROLE.sub(" ", text)))


def markdown_pieces(source: str) -> list[_Piece]:
    """The translatable blocks of a markdown cell, in order, with their line ranges."""
    pieces: list[_Piece] = []
    containers: list[str] = []
    tokens = MARKDOWN.parse(source)
    row: _Piece | None = None
    for i, token in enumerate(tokens):
        if token.type in ("bullet_list_open", "ordered_list_open", "list_item_open",
                          "blockquote_open"):
            containers.append(token.type)
        elif token.type in ("bullet_list_close", "ordered_list_close", "list_item_close",
                            "blockquote_close"):
            containers.pop()
        elif token.type == "tr_open":
            assert token.map is not None
            row = _Piece(token.map[0], token.map[1], "table cell", [])
        elif token.type == "tr_close" and row is not None:
            pieces.append(row)
            row = None
        elif token.type == "inline":
            text = token.content
            if row is not None:
                row.texts.append(text)
                continue
            opener = tokens[i - 1]
            assert opener.map is not None
            kind = ("heading" if opener.type == "heading_open"
                    else "list item" if "list_item_open" in containers
                    else "quote" if "blockquote_open" in containers else "paragraph")
            pieces.append(_Piece(opener.map[0], opener.map[1], kind, [text]))
    return pieces


def unit_text(markdown: str) -> str:
    """A unit's key: its Markdown with line breaks read as spaces (as Markdown renders them)."""
    return " ".join(line.strip() for line in markdown.split("\n")).strip()


def translatable(text: str) -> bool:
    """Whether a unit has words to translate (a table cell `2` or `$d$` has none)."""
    return bool(LETTERS.search(_without_code(text)))


def is_page(name: str) -> bool:
    """Whether name is a book page ("book/NAME") rather than a chapter ("NN_name")."""
    return name.startswith("book/")


def source_label(name: str) -> str:
    """Where the English of a chapter or a page is, for messages and references."""
    return f"{name}.md" if is_page(name) else f"chapters/{name}.ipynb"


def source_notebook(name: str, chapters: Path = CHAPTERS) -> nbformat.NotebookNode:
    """A chapter's notebook; a page as a notebook of one markdown cell (id "page"), so that
    a page's units, catalogue and check are a chapter's."""
    if is_page(name):
        text = (ROOT / f"{name}.md").read_text(encoding="utf-8")
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text, id="page")])
    return nbformat.read(chapters / f"{name}.ipynb", as_version=4)


def chapter_units(notebook: nbformat.NotebookNode) -> list[Unit]:
    """Every translatable unit of a chapter, in reading order (repeats included)."""
    units = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for piece in markdown_pieces(cell.source):
                units += [Unit(unit_text(t), None, cell.id, piece.kind)
                          for t in piece.texts if translatable(t)]
        elif cell.cell_type == "code":
            options, _ = figure_options(cell.source)
            units += [Unit(options[name], OPTION[name], cell.id, OPTION[name])
                      for name in ("fig-cap", "fig-alt") if options.get(name)]
    return units


def translate_markdown(source: str, translate) -> str:
    """A markdown cell with every unit replaced by translate(msgid); the rest (blank lines,
    display math, code blocks, HTML comments, list markers, `> `) as it was."""
    lines = source.split("\n")
    for piece in reversed(markdown_pieces(source)):
        if piece.kind == "table cell":
            cells = re.split(r"(?<!\\)\|", lines[piece.start])
            inner = [k for k in range(len(cells)) if k not in (0, len(cells) - 1)
                     or cells[k].strip()]
            for k, text in zip(inner, piece.texts, strict=False):
                if translatable(text):
                    cells[k] = f" {translate(unit_text(text))} "
            lines[piece.start] = "|".join(cells)
            continue
        first = piece.texts[0].split("\n")[0]
        where = lines[piece.start].find(first)
        if where < 0:
            raise ValueError(f"cannot place the unit {first[:60]!r} in its cell")
        if translatable(piece.texts[0]):
            end = piece.end
            if piece.kind == "heading" and end - piece.start > 1:
                end -= 1  # a setext heading keeps its underline (=== or ---)
            lines[piece.start:end] = [lines[piece.start][:where]
                                      + translate(unit_text(piece.texts[0]))]
    return "\n".join(lines)


# --- catalogues ------------------------------------------------------------------

def catalogue_path(name: str, locale: Path = LOCALE) -> Path:
    """LC_MESSAGES/chapters/NN_name.po for a chapter, LC_MESSAGES/NAME.po for a page (the
    layout Sphinx and .po editors know: DOCNAME.po)."""
    if is_page(name):
        return locale / f"{name.removeprefix('book/')}.po"
    return locale / "chapters" / f"{name}.po"


def _reference(name: str, cell: str) -> tuple[str, str]:
    return f"{source_label(name)}:{cell}", ""  # polib's (file, line); the line is the cell


def cells_of(entry: polib.POEntry) -> set[str]:
    """The cell ids of an entry's references (`#: chapters/NN.ipynb:CELL`). polib reads an
    all-digit cell id as a line number, the second item of the occurrence."""
    return {line or where.rsplit(":", 1)[-1] for where, line in entry.occurrences}


def short(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def load(path: Path) -> polib.POFile:
    return polib.pofile(str(path), wrapwidth=78) if path.exists() else polib.POFile(wrapwidth=78)


def refreshed(units: list[Unit], old: polib.POFile, name: str) -> polib.POFile:
    """The catalogue for `units`, carrying over what `old` has (see the module's doc)."""
    po = polib.POFile(wrapwidth=78)
    po.header = old.header or (
        f"The Chinese of {source_label(name)}, unit by unit (tools/i18n.py): d2l-zh's\n"
        "conventions and book/glossary.md's terms. Inline code, math, numbers and tokens\n"
        "stay as the English has them; code cells are not translated.")
    po.metadata = {**HEADER, **{k: v for k, v in old.metadata.items() if k not in HEADER}}
    current = {(e.msgctxt, e.msgid): e for e in old if not e.obsolete}
    gone = {(e.msgctxt, e.msgid): e for e in old if e.obsolete}
    keys = {u.key for u in units}
    vanished = [e for k, e in current.items() if k not in keys and e.msgstr]
    vanished += [e for k, e in gone.items() if k not in keys and k not in current]
    entries: dict[tuple[str | None, str], polib.POEntry] = {}
    new: list[tuple[Unit, polib.POEntry]] = []
    for unit in units:
        if unit.key in entries:  # the same English twice: one entry, both references
            entries[unit.key].occurrences.append(_reference(name, unit.cell))
            continue
        entry = polib.POEntry(msgctxt=unit.context, msgid=unit.msgid, comment=unit.kind,
                              occurrences=[_reference(name, unit.cell)])
        before = current.get(unit.key) or gone.get(unit.key)
        if before is not None:
            entry.msgstr, entry.tcomment = before.msgstr, before.tcomment
            entry.flags = list(before.flags)
            entry.previous_msgid = before.previous_msgid if "fuzzy" in before.flags else None
        else:
            new.append((unit, entry))
        entries[unit.key] = entry
    # A new unit that resembles a vanished one is that one, changed: its old Chinese and
    # old English come along, marked fuzzy. Best pairs first; the same cell counts extra.
    pairs = []
    for k, (unit, _) in enumerate(new):
        for j, old_entry in enumerate(vanished):
            if old_entry.msgctxt != unit.context:
                continue
            same_cell = unit.cell in cells_of(old_entry)
            score = difflib.SequenceMatcher(None, unit.msgid, old_entry.msgid).ratio()
            if score >= (0.4 if same_cell else 0.7):
                pairs.append((score + 0.2 * same_cell, k, j))
    taken_new, taken_old = set(), set()
    for _, k, j in sorted(pairs, reverse=True):
        if k in taken_new or j in taken_old:
            continue
        taken_new.add(k)
        taken_old.add(j)
        entry, old_entry = new[k][1], vanished[j]
        entry.msgstr, entry.tcomment = old_entry.msgstr, old_entry.tcomment
        entry.flags = ["fuzzy"]
        # Fuzzy already: its Chinese still translates the English it was written for.
        entry.previous_msgid = (old_entry.previous_msgid if "fuzzy" in old_entry.flags
                                and old_entry.previous_msgid else old_entry.msgid)
    po.extend(entries.values())
    for j, old_entry in enumerate(vanished):
        if j not in taken_old:
            kept = copy.copy(old_entry)
            kept.obsolete, kept.occurrences, kept.previous_msgid = True, [], None
            po.append(kept)
    return po


def extract(name: str, chapters: Path = CHAPTERS, locale: Path = LOCALE) -> Path:
    """Write or refresh one chapter's (or page's) catalogue from its English."""
    notebook = source_notebook(name, chapters)
    path = catalogue_path(name, locale)
    po = refreshed(chapter_units(notebook), load(path), name)
    path.parent.mkdir(parents=True, exist_ok=True)
    po.save(str(path))
    return path


def translations(path: Path) -> dict[tuple[str | None, str], str]:
    return {(e.msgctxt, e.msgid): e.msgstr for e in load(path)
            if not e.obsolete and e.msgstr and "fuzzy" not in e.flags}


def build_table(locale: Path = LOCALE) -> dict[str, str]:
    """English -> Chinese for the strings the build writes (build.po)."""
    return {msgid: text for (_, msgid), text in translations(locale / BUILD_TABLE).items()}


