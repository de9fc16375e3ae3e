"""The Chinese edition: the chapters' prose translated unit by unit, kept beside the English.

    python -m tools.i18n extract [NAME ...]   write or refresh the catalogues from the English
    python -m tools.i18n check                exit 1 naming each unit without a current translation
    python -m tools.i18n diff [NAME ...]      each stale unit: new English, old English, old Chinese
    python -m tools.i18n build [--out DIR]    the Chinese notebooks, _build/zh/chapters/NN_name.ipynb

NAME is a chapter's file stem (01_embedding); without one, every chapter in the edition
(EDITION below, the one list of them). The English chapters are the source. Each chapter
has a gettext catalogue, book/locale/zh_CN/LC_MESSAGES/chapters/NN_name.po (the layout
Sphinx and every .po editor know: locale/LANG/LC_MESSAGES/DOCNAME.po), with one entry
per translatable unit of its markdown cells (a heading, a paragraph, a list item, a
table cell) and of its figures (the caption and alt text of `#| fig-cap:` / `#| fig-alt:`).
An entry's msgid is the unit's Markdown source, its line breaks read as the spaces
Markdown renders them as (rewrapping a paragraph changes nothing), and its reference
(`#:`) names the chapter and the cell id. Code cells, outputs, docstrings and comments
are not translated: the Chinese notebook keeps them byte for byte (EDITION_NOTE says so
on every page). book/locale/zh_CN/LC_MESSAGES/build.po holds the strings that the build
itself writes (figure labels, the box under each title, the site's buttons), each
referencing the file that writes it.

- extract: new units are added untranslated; a unit whose English changed keeps its old
  Chinese, marked fuzzy, with the old English (`#| msgid`, gettext's previous msgid), so
  that `diff` can show what changed; units no longer in the chapter become obsolete
  (`#~`), their Chinese kept in case the English comes back.
- check (a second or two): a unit is missing, untranslated, fuzzy or stale (its English
  changed and extract has not been run); an entry's inline code, math, link targets,
  special tokens (`<bos>`) or numbers differ between English and Chinese; the Chinese
  breaks the typography of the Chinese edition (`typography`).
- build: the Chinese notebook of each chapter: markdown translated unit by unit (refused
  while check fails), code cells and outputs untouched, each figure's Chinese caption
  and alt text in its cell's metadata (`i18n`), which the site uses. The Chinese site is
  `make site LANGUAGE=zh` (python -m tools.website --language zh), from these notebooks, the build's table
  and the site's own Chinese pages (book/locale/zh_CN/pages/, whose typography the check
  lints too).

To translate a chapter: add it to EDITION, `extract` it, fill in its catalogue (any .po
editor, or by hand), run `check` until it passes.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import functools
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import nbformat
import polib
from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin

from tools.notebooks import CHAPTERS, ROOT, figure_options

# The chapters in the Chinese edition, in the book's order: the check covers exactly these,
# and the build writes exactly these. A chapter joins once its catalogue is translated.
EDITION = ("01_embedding", "02_positional_encoding", "03_attention", "04_causal_mask",
           "05_multihead_attention", "06_feedforward")
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


_MARKDOWN = MarkdownIt("commonmark").enable("table").use(dollarmath_plugin, double_inline=True)
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


def _pieces(source: str) -> list[_Piece]:
    """The translatable blocks of a markdown cell, in order, with their line ranges."""
    pieces: list[_Piece] = []
    containers: list[str] = []
    tokens = _MARKDOWN.parse(source)
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


def chapter_units(notebook: nbformat.NotebookNode) -> list[Unit]:
    """Every translatable unit of a chapter, in reading order (repeats included)."""
    units = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for piece in _pieces(cell.source):
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
    for piece in reversed(_pieces(source)):
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
    return locale / "chapters" / f"{name}.po"


def _reference(name: str, cell: str) -> tuple[str, str]:
    return f"chapters/{name}.ipynb:{cell}", ""  # polib's (file, line); the line is the cell


def _cells(entry: polib.POEntry) -> set[str]:
    return {where.rsplit(":", 1)[-1] for where, _ in entry.occurrences}


def _short(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def load(path: Path) -> polib.POFile:
    return polib.pofile(str(path), wrapwidth=78) if path.exists() else polib.POFile(wrapwidth=78)


def refreshed(units: list[Unit], old: polib.POFile, name: str) -> polib.POFile:
    """The catalogue for `units`, carrying over what `old` has (see the module's doc)."""
    po = polib.POFile(wrapwidth=78)
    po.header = old.header or (
        f"The Chinese of chapters/{name}.ipynb, unit by unit (tools/i18n.py): d2l-zh's\n"
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
            same_cell = unit.cell in _cells(old_entry)
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
    """Write or refresh one chapter's catalogue from its English notebook."""
    notebook = nbformat.read(chapters / f"{name}.ipynb", as_version=4)
    path = catalogue_path(name, locale)
    po = refreshed(chapter_units(notebook), load(path), name)
    path.parent.mkdir(parents=True, exist_ok=True)
    po.save(str(path))
    return path


# --- the check -------------------------------------------------------------------

def _spans(text: str) -> dict[str, Counter]:
    """What must be the same in the English and the Chinese of a unit."""
    roles = [m.group(0) for m in ROLE.finditer(text)]
    targets = [m.group(2).rsplit("<", 1)[-1].rstrip(">").strip() for m in ROLE.finditer(text)]
    rest = ROLE.sub(" ", text)
    code = [m.group(0) for m in CODE_SPAN.finditer(rest)]
    rest = CODE_SPAN.sub(" ", rest)
    math = [m.group(0) for m in MATH.finditer(rest)]
    rest = MATH.sub(" ", rest)
    links = [m.group(1) for m in LINK.finditer(rest)]
    prose = LINK.sub(" ", rest)
    return {
        "inline code": Counter(code),
        "math": Counter(math),
        "link targets": Counter(links + targets),
        "roles": Counter(r.split("`", 1)[0] for r in roles),
        "special tokens": Counter(TOKEN.findall(prose)),
        "numbers": Counter(NUMBER.findall(prose)),
        "placeholders": Counter(PLACEHOLDER.findall(prose)),
    }


def mismatches(english: str, chinese: str) -> list[str]:
    """What the translation changed that it must keep: inline code, math, link targets,
    special tokens, numbers (each as a multiset: the order may change)."""
    found = []
    ours, theirs = _spans(english), _spans(chinese)
    for what in ours:
        if ours[what] != theirs[what]:
            lost = sorted((ours[what] - theirs[what]).elements())
            added = sorted((theirs[what] - ours[what]).elements())
            found.append(f"{what} differ: " + "; ".join(
                part for part in (f"English only {lost}" if lost else "",
                                  f"Chinese only {added}" if added else "") if part))
    return found


HAN = r"\u3400-\u4dbf\u4e00-\u9fff"
# What autocorrect does not flag: d2l-zh also spaces inline code and math from Han, and
# writes parentheses and quotes in Chinese prose full-width.
EXTRA_RULES = [
    (re.compile(rf"[{HAN}](?=`|\$)|(?<=`|\$)[{HAN}]"),
     "a space between Han and inline code or math"),
    (re.compile(rf"[{HAN}][(),.;:!?]|[(][{HAN}]"),
     "full-width punctuation next to Han (（），。；：！？)"),
    (re.compile(rf'"[^"]*[{HAN}][^"]*"'), "Chinese quotation marks “…” around Chinese"),
]


@functools.cache
def _autocorrect():
    import autocorrect_py

    # d2l-zh writes 编码器-解码器, with no spaces around the dash, which autocorrect adds.
    autocorrect_py.load_config('{"rules": {"space-dash": 0}}')
    return autocorrect_py


def typography(chinese: str) -> list[str]:
    """The typography of the Chinese edition (d2l-zh's): a space between Han and Latin
    letters or digits, full-width punctuation in Chinese prose. autocorrect (the Rust
    linter's Python binding, offline) judges the prose; EXTRA_RULES add what it leaves."""
    found = []
    corrected = _autocorrect().format_for(chinese, "unit.md")
    if corrected != chinese:
        at = next(i for i, (a, b) in enumerate(zip(chinese, corrected + "\0", strict=False))
                  if a != b)
        found.append(f"typography (autocorrect): {chinese[max(0, at - 12):at + 12]!r} should "
                     f"read {corrected[max(0, at - 12):at + 14]!r}")
    prose = CODE_SPAN.sub(lambda m: "`" + "x" * len(m.group(2)) + "`", chinese)
    prose = MATH.sub(lambda m: "$" + "x" * (len(m.group(0)) - 2) + "$", prose)
    for rule, message in EXTRA_RULES:
        if match := rule.search(prose):
            at = match.start()
            found.append(f"typography: {message}: {chinese[max(0, at - 12):at + 14]!r}")
    return found


RENDERED_CODE = re.compile(r'<code>.*?</code>|<span class="math[^"]*">.*?</span>', re.S)


def stray_markers(text: str) -> bool:
    """Whether `*` or `_` emphasis is left as written, not rendered. CommonMark reads a
    closing `**` after punctuation only before a space or punctuation: "**一句。**然后"
    shows its asterisks, "**一句。** 然后" is bold."""
    html = RENDERED_CODE.sub(" ", _MARKDOWN.renderInline(text))
    return bool(re.search(r"\*|(?<![\w\\])_\S|\S_(?!\w)", html))


def entry_problems(entry: polib.POEntry) -> list[str]:
    """What is wrong with one entry's translation ([] if it is current and sound)."""
    if not entry.msgstr.strip():
        return ["untranslated (empty msgstr)"]
    if "fuzzy" in entry.flags:
        return ["fuzzy: the English changed since it was translated "
                "(`python -m tools.i18n diff` shows how; fix the Chinese, remove `#, fuzzy`)"]
    found = mismatches(entry.msgid, entry.msgstr) + typography(entry.msgstr)
    if "\n" in entry.msgstr:
        found.append("a line break: a unit's Chinese is one line (Markdown would show a space)")
    if stray_markers(entry.msgstr) and not stray_markers(entry.msgid):
        found.append("emphasis shown as written (`*`): CommonMark needs a space or punctuation "
                     "after a closing `**` that follows punctuation")
    return found


def changes(old: str, new: str, context: int | None = None) -> str:
    """What changed between two versions of a unit, word by word: [-old-]{+new+}; with
    `context`, only the changed places, each with that many words around it."""
    before, after = old.split(" "), new.split(" ")
    parts: list[str] = []
    for op, a, b, c, d in difflib.SequenceMatcher(None, before, after).get_opcodes():
        if op == "equal":
            words = before[a:b]
            if context is not None and len(words) > 2 * context:
                head = words[:context] if a > 0 else []  # after a change
                tail = words[-context:] if b < len(before) else []  # before one
                words = head + ["…"] + tail
            parts += words
        else:
            parts += ([f"[-{' '.join(before[a:b])}-]"] if b > a else []) \
                     + ([f"{{+{' '.join(after[c:d])}+}}"] if d > c else [])
    return " ".join(parts)


def chapter_problems(name: str, chapters: Path = CHAPTERS, locale: Path = LOCALE) -> list[str]:
    """One line per unit of a chapter that lacks a current, sound translation."""
    notebook = nbformat.read(chapters / f"{name}.ipynb", as_version=4)
    path = catalogue_path(name, locale)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    if not path.exists():
        return [f"{shown}: no catalogue; run `python -m tools.i18n extract {name}`"]
    po = load(path)
    units = chapter_units(notebook)
    entries = {(e.msgctxt, e.msgid): e for e in po if not e.obsolete}
    # What extract would make of the catalogue: it tells a changed unit from a new one.
    fresh = {(e.msgctxt, e.msgid): e for e in refreshed(units, po, name) if not e.obsolete}
    found, seen = [], set()
    for unit in units:
        if unit.key in seen:
            continue
        seen.add(unit.key)
        where = f"chapters/{name}.ipynb cell {unit.cell} ({unit.kind})"
        entry = entries.get(unit.key)
        if entry is None:
            guess = fresh[unit.key]
            if guess.previous_msgid:
                found.append(f"{where}: stale: its English changed since it was translated "
                             f"({changes(guess.previous_msgid, unit.msgid, context=4)}); run "
                             f"`python -m tools.i18n extract {name}`, then `diff`: "
                             f"{_short(unit.msgid)!r}")
            else:
                found.append(f"{where}: missing from {shown}; run `python -m tools.i18n "
                             f"extract {name}`: {_short(unit.msgid)!r}")
            continue
        for problem in entry_problems(entry):
            if "fuzzy" in problem and entry.previous_msgid:
                problem += f": {changes(entry.previous_msgid, entry.msgid, context=4)}"
            found.append(f"{where}, {shown}:{entry.linenum}: {problem}: {_short(unit.msgid)!r}")
    keys = set(fresh)
    for key, entry in entries.items():
        if key not in keys and not any(
                e.previous_msgid == entry.msgid for e in fresh.values()):
            found.append(f"{shown}:{entry.linenum}: no longer in the chapter; run `python -m "
                         f"tools.i18n extract {name}` to mark it obsolete: "
                         f"{_short(entry.msgid)!r}")
    return found


@functools.cache
def _source_strings(path: Path) -> str:
    """The text of the strings a file writes: a Python file's string literals (adjacent
    literals joined, as Python joins them), any other file as it is."""
    import ast

    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return text
    return "\n".join(node.value for node in ast.walk(ast.parse(text))
                     if isinstance(node, ast.Constant) and isinstance(node.value, str))


def _translated_literals(path: Path) -> list[str]:
    """The strings a Python file hands to `_()` as literals (website.py's generated text)."""
    import ast

    return [node.args[0].value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "_" and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)]


def table_problems(locale: Path = LOCALE) -> list[str]:
    """The build's own strings: each translated and sound, and each still written, word
    for word (its pieces between placeholders), by the file its reference names."""
    path = locale / BUILD_TABLE
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    if not path.exists():
        return [f"{shown}: missing (the strings the build writes)"]
    found = []
    table = load(path)
    known = {e.msgid for e in table if not e.obsolete}
    found += [f"{shown}: missing: tools/website.py writes {text!r} (`_()`), which the table lacks"
              for text in _translated_literals(ROOT / "tools" / "website.py") if text not in known]
    for entry in table:
        if entry.obsolete:
            continue
        where = f"{shown}:{entry.linenum}"
        found += [f"{where}: {p}: {_short(entry.msgid)!r}" for p in entry_problems(entry)]
        for source, _ in entry.occurrences:
            strings = _source_strings(ROOT / source)
            missing = [piece for piece in PLACEHOLDER.split(entry.msgid)
                       if piece.strip() and piece not in strings]
            if missing:
                found.append(f"{where}: stale: {source} no longer writes {_short(missing[0])!r} "
                             "(update the entry's msgid and its Chinese)")
    return found


def page_problems(pages: Path) -> list[str]:
    """The Chinese site's own pages (its landing page), written in Chinese: their typography."""
    found = []
    for page in sorted(pages.rglob("*.md")):
        for piece in _pieces(page.read_text(encoding="utf-8")):
            found += [f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:"
                      f"{piece.start + 1}: {problem}"
                      for text in piece.texts for problem in typography(unit_text(text))]
    return found


def problems(names: tuple[str, ...] = EDITION, chapters: Path = CHAPTERS,
             locale: Path = LOCALE) -> list[str]:
    """Everything the check reports, for the chapters `names`, the build's table and the
    Chinese site's own pages (book/locale/zh_CN/pages/, beside the catalogues)."""
    found = []
    for name in names:
        found += chapter_problems(name, chapters, locale)
    return found + table_problems(locale) + page_problems(locale.parent / "pages")


def diff(name: str, chapters: Path = CHAPTERS, locale: Path = LOCALE) -> list[str]:
    """For each stale unit of a chapter: the new English, the old English, what changed
    ([-old-]{+new+}) and the old Chinese. Works before extract and after it."""
    notebook = nbformat.read(chapters / f"{name}.ipynb", as_version=4)
    po = refreshed(chapter_units(notebook), load(catalogue_path(name, locale)), name)
    out = []
    for entry in po:
        if entry.obsolete or "fuzzy" not in entry.flags or not entry.previous_msgid:
            continue
        cells = ", ".join(sorted(_cells(entry)))
        out += [f"chapters/{name}.ipynb cell {cells}"
                + (f" ({entry.msgctxt})" if entry.msgctxt else ""),
                f"  new English: {entry.msgid}",
                f"  old English: {entry.previous_msgid}",
                f"  changes:     {changes(entry.previous_msgid, entry.msgid)}",
                f"  old Chinese: {entry.msgstr}", ""]
    return out


# --- the Chinese notebooks -------------------------------------------------------

def translations(path: Path) -> dict[tuple[str | None, str], str]:
    return {(e.msgctxt, e.msgid): e.msgstr for e in load(path)
            if not e.obsolete and e.msgstr and "fuzzy" not in e.flags}


def build_table(locale: Path = LOCALE) -> dict[str, str]:
    """English -> Chinese for the strings the build writes (build.po)."""
    return {msgid: text for (_, msgid), text in translations(locale / BUILD_TABLE).items()}


def chinese_notebook(notebook: nbformat.NotebookNode, catalogue: dict, table: dict[str, str]
                     ) -> nbformat.NotebookNode:
    """The Chinese notebook: every markdown unit translated; code cells, their outputs and
    execution counts untouched; a figure's Chinese caption and alt text in the metadata
    `i18n` of its cell; the edition's note under the title."""
    result = copy.deepcopy(notebook)

    def translate(msgid: str, context: str | None = None) -> str:
        try:
            return catalogue[context, msgid]
        except KeyError:
            raise SystemExit(f"no current translation of {_short(msgid)!r}: run "
                             "`python -m tools.i18n check`") from None

    for cell in result.cells:
        if cell.cell_type == "markdown":
            cell.source = translate_markdown(cell.source, translate)
        elif cell.cell_type == "code":
            options, _ = figure_options(cell.source)
            texts = {name: translate(options[name], OPTION[name])
                     for name in ("fig-cap", "fig-alt") if options.get(name)}
            if texts:
                cell.metadata["i18n"] = {"language": "zh-CN", **texts}
    title = next((i for i, c in enumerate(result.cells) if c.cell_type == "markdown"), -1)
    note = nbformat.v4.new_markdown_cell("> " + table[EDITION_NOTE])
    note.id = NOTE_CELL
    result.cells.insert(title + 1, note)
    result.metadata.pop("jupytext", None)  # a build product, not a paired notebook
    result.metadata["i18n"] = {"language": "zh-CN", "translated_from": "English"}
    return result


def build(names: tuple[str, ...] = EDITION, out: Path = BUILD, chapters: Path = CHAPTERS,
          locale: Path = LOCALE) -> list[Path]:
    """Write out/chapters/NN_name.ipynb for each chapter; refused while the check fails."""
    found = problems(names, chapters, locale)
    if found:
        raise SystemExit("\n".join(found) + f"\n{len(found)} problem(s): the Chinese edition "
                         "is not current; nothing built")
    table = build_table(locale)
    written = []
    for name in names:
        notebook = nbformat.read(chapters / f"{name}.ipynb", as_version=4)
        zh = chinese_notebook(notebook, translations(catalogue_path(name, locale)), table)
        target = out / "chapters" / f"{name}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(zh, target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for command, text in (("extract", "write or refresh the catalogues from the English"),
                          ("diff", "show each stale unit: new English, old English, old Chinese")):
        sub = commands.add_parser(command, help=text)
        sub.add_argument("names", nargs="*", help="chapter stems (default: the edition's)")
    commands.add_parser("check", help="exit 1 naming each unit without a current translation")
    sub = commands.add_parser("build", help="write the Chinese notebooks")
    sub.add_argument("--out", type=Path, default=BUILD, help="default: _build/zh/")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.command == "extract":
        for name in args.names or EDITION:
            print(f"wrote {extract(name).relative_to(ROOT)}")
    elif args.command == "diff":
        lines = [line for name in args.names or EDITION for line in diff(name)]
        print("\n".join(lines) if lines else "no stale unit")
    elif args.command == "check":
        found = problems()
        for line in found:
            print(line, file=sys.stderr)
        if found:
            print(f"Chinese edition: {len(found)} problem(s)", file=sys.stderr)
            return 1
        units = sum(len({u.key for u in chapter_units(nbformat.read(
            CHAPTERS / f"{n}.ipynb", as_version=4))}) for n in EDITION)
        print(f"Chinese edition: {len(EDITION)} chapter(s), {units} units current "
              f"({time.perf_counter() - start:.1f} s)")
    elif args.command == "build":
        for path in build(out=args.out.resolve()):
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
