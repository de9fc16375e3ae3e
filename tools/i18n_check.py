"""The check of the Chinese edition (`python -m tools.i18n check`, a second or two): every
unit translated and current; code, math, links, tokens and numbers the same on both
sides; the typography of the edition; the terms of STYLE.md's table used, their English
given at first use (tools/i18n_terms.py); the build's own strings (build.po) complete.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import Counter
from pathlib import Path

import polib

from tools.i18n_catalogues import (
    BUILD_TABLE,
    CODE_SPAN,
    EDITION,
    LINK,
    LOCALE,
    MARKDOWN,
    MATH,
    NUMBER,
    PAGES,
    PLACEHOLDER,
    ROLE,
    TOKEN,
    catalogue_path,
    cells_of,
    chapter_units,
    load,
    markdown_pieces,
    refreshed,
    short,
    source_label,
    source_notebook,
    unit_text,
)
from tools.i18n_terms import term_problems
from tools.notebooks import CHAPTERS, ROOT

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
    html = RENDERED_CODE.sub(" ", MARKDOWN.renderInline(text))
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
    """One line per unit of a chapter (or page) that lacks a current, sound translation."""
    notebook = source_notebook(name, chapters)
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
        where = f"{source_label(name)} cell {unit.cell} ({unit.kind})"
        entry = entries.get(unit.key)
        if entry is None:
            guess = fresh[unit.key]
            if guess.previous_msgid:
                found.append(f"{where}: stale: its English changed since it was translated "
                             f"({changes(guess.previous_msgid, unit.msgid, context=4)}); run "
                             f"`python -m tools.i18n extract {name}`, then `diff`: "
                             f"{short(unit.msgid)!r}")
            else:
                found.append(f"{where}: missing from {shown}; run `python -m tools.i18n "
                             f"extract {name}`: {short(unit.msgid)!r}")
            continue
        for problem in entry_problems(entry):
            if "fuzzy" in problem and entry.previous_msgid:
                problem += f": {changes(entry.previous_msgid, entry.msgid, context=4)}"
            found.append(f"{where}, {shown}:{entry.linenum}: {problem}: {short(unit.msgid)!r}")
    keys = set(fresh)
    for key, entry in entries.items():
        if key not in keys and not any(
                e.previous_msgid == entry.msgid for e in fresh.values()):
            found.append(f"{shown}:{entry.linenum}: no longer in the chapter; run `python -m "
                         f"tools.i18n extract {name}` to mark it obsolete: "
                         f"{short(entry.msgid)!r}")
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
        found += [f"{where}: {p}: {short(entry.msgid)!r}" for p in entry_problems(entry)]
        for source, _ in entry.occurrences:
            strings = _source_strings(ROOT / source)
            missing = [piece for piece in PLACEHOLDER.split(entry.msgid)
                       if piece.strip() and piece not in strings]
            if missing:
                found.append(f"{where}: stale: {source} no longer writes {short(missing[0])!r} "
                             "(update the entry's msgid and its Chinese)")
    return found


def page_problems(pages: Path) -> list[str]:
    """The Chinese site's own pages (its landing page), written in Chinese: their typography."""
    found = []
    for page in sorted(pages.rglob("*.md")):
        for piece in markdown_pieces(page.read_text(encoding="utf-8")):
            found += [f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:"
                      f"{piece.start + 1}: {problem}"
                      for text in piece.texts for problem in typography(unit_text(text))]
    return found


def problems(names: tuple[str, ...] = EDITION + PAGES, chapters: Path = CHAPTERS,
             locale: Path = LOCALE) -> list[str]:
    """Everything the check reports, for the chapters and pages `names` (their units, then
    their terms), the build's table and the Chinese site's own pages
    (book/locale/zh_CN/pages/, beside the catalogues)."""
    found = []
    for name in names:
        found += chapter_problems(name, chapters, locale)
    found += term_problems(names, locale)
    return found + table_problems(locale) + page_problems(locale.parent / "pages")


def diff(name: str, chapters: Path = CHAPTERS, locale: Path = LOCALE) -> list[str]:
    """For each stale unit of a chapter: the new English, the old English, what changed
    ([-old-]{+new+}) and the old Chinese. Works before extract and after it."""
    notebook = source_notebook(name, chapters)
    po = refreshed(chapter_units(notebook), load(catalogue_path(name, locale)), name)
    out = []
    for entry in po:
        if entry.obsolete or "fuzzy" not in entry.flags or not entry.previous_msgid:
            continue
        cells = ", ".join(sorted(cells_of(entry)))
        out += [f"{source_label(name)} cell {cells}"
                + (f" ({entry.msgctxt})" if entry.msgctxt else ""),
                f"  new English: {entry.msgid}",
                f"  old English: {entry.previous_msgid}",
                f"  changes:     {changes(entry.previous_msgid, entry.msgid)}",
                f"  old Chinese: {entry.msgstr}", ""]
    return out


