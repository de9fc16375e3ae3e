"""The glossary's terms in the Chinese edition, a part of `python -m tools.i18n check`.

The term pairs come from one place: the term table of the edition's style page,
book/locale/zh_CN/STYLE.md (section 1: English | 中文 | 说明), which the translators follow.
book/glossary.md pairs the same terms with the source articles' Chinese; where the two
differ, STYLE.md says which one the edition writes, so STYLE.md is the rule. A row pairs
its English terms (split at commas) with its Chinese ones (split at 、), in order; a row
whose counts differ stops the check. The 说明 column is for people and is not read.

- English: words in parentheses are a note on the sense or optional words (`block (a
  score)`, `(non-persistent) buffer`); the term is the rest. A prefix `name:` (`nbgrader:
  release`) is a note on the whole row. A term matches as a word in any case, its last word
  also plural (-s, -es, -ies), -ise also -ize. A term in **bold** is one the book introduces:
  its English is given at its first use (rule 2).
- 中文: Han in full-width parentheses is optional (（词）嵌入: 嵌入 is enough); Latin letters
  in them are a form the text may use instead (层归一化（LayerNorm）: 层归一化 or
  LayerNorm; 评估（eval）模式: 评估模式 or eval 模式).

Neither rule reads book/glossary, the table of the terms, whose English column stays
English in the Chinese edition.

Rule 1, the term is used: a unit whose English has the term has one of the term's Chinese
forms in its Chinese. The English is read without inline code, math, link targets and any
English the Chinese keeps as it stands (the term with a neighbouring word found verbatim in
the Chinese: a paper's title, a quoted message); the Chinese also without what its
parentheses add (评估（eval）模式 reads 评估模式). Where terms overlap, the longest counts
(`causal mask`, not `mask`). Not checked: an English term that the table pairs with two
Chinese ones (block, kernel, release: it names two things), and UNCHECKED, each with its
reason. A unit that uses a term in another sense says so in a translator's comment in the
catalogue, one line per term, with the reason: `# term 'stack': a software stack`; a note
for a term that the unit's English does not use is reported.

Rule 2, the English at first use (STYLE.md section 2: the first time a chapter introduces
a term, its English follows the Chinese in full-width parentheses; a term that an earlier
chapter introduced and this one only mentions needs none): for each bold term, the first
unit of the book whose Chinese uses it has the term's English somewhere in its Chinese
(因果掩码（causal mask）). Later chapters are not asked again: a check cannot tell a chapter
that introduces a term again from one that mentions it (bold, STYLE.md's mark of an
introduction, is also this book's emphasis: chapter 05's **查询** stresses a word). A unit
uses a term where its Chinese has a Han form of it outside full-width parentheses (a term
inside parentheses gets no note of its own: no parentheses inside parentheses), in a unit
that is not a heading or alt text (d2l-zh gives the English in the prose, not in titles).
The chapters are read in the book's order (EDITION); each page on its own, after them: a
page gives the English of a term that it uses and no chapter does. Not checked by rule 2:
a term whose Chinese is one character (头, 键, 值), also part of other words (开头, 关键,
数值), whose English has everyday senses (the ids' values): the check cannot find its
first use (chapter 03 introduces them: **查询**（query）、**键**（key）、**值**（value）).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import polib

from tools.i18n_catalogues import (
    CODE_SPAN,
    EDITION,
    LINK,
    LOCALE,
    MATH,
    PAGES,
    ROLE,
    catalogue_path,
    is_page,
    load,
    short,
    source_label,
)
from tools.notebooks import ROOT

STYLE = ROOT / "book" / "locale" / "zh_CN" / "STYLE.md"
# English words of the table that the chapters also use in an everyday sense, which the
# Chinese rightly renders in other words: rule 1 would be wrong about them too often.
UNCHECKED = {
    "check": "also the verb (验证、核对、检验) and the book's checks in general",
    "hide": "an everyday verb (bugs hide, a mask hides nothing: 藏身、遮不住)",
    "hook": "two renderings in STYLE.md: 钩子 (PyTorch's), 预留的接口 (kept for a later chapter)",
    "memory": "also the computer's memory (内存), not only the encoder's output (记忆)",
    "pair": "also a sentence pair, a pair of dimensions, any two things (一对)",
    "cell": "also a cell of a figure's grid or heat map (格子)",
    "tied": "also 'tied to' (局限于)",
    "run": "also the verb in all its senses (a recurrence runs, a loop runs: 跑、读、走)",
}
NOT_FIRST_USES = ("heading", "figure alt text")  # units where rule 2 does not look
HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
URL = re.compile(r"https?://\S+")
NOTE = re.compile(r"""^term (['"])(.+?)\1:\s*(\S.*)$""")  # # term 'stack': a software stack


@dataclass(frozen=True)
class Term:
    """One pair of the table: the English as matched, its Chinese forms, its rules."""

    english: str
    chinese: tuple[str, ...]  # the forms that count as its Chinese, the table's first
    introduced: bool  # bold in the table: rule 2 applies

    @property
    def han(self) -> tuple[str, ...]:
        """The forms rule 2 looks for: in Han, of two characters or more."""
        return tuple(form for form in self.chinese if len(HAN.findall(form)) >= 2)


def _pattern(english: str) -> str:
    """The term as a word: any case, the last word also plural, -ise also -ize."""
    words = [re.escape(w).replace("'", "['’]") for w in english.split()]
    last = words[-1]
    last = last[:-1] + "(?:y|ies)" if re.search(r"[^aeiou]y$", last) else last + "(?:s|es)?"
    body = re.sub(r"is(?=ation|er\b|e\b)", "i[sz]", r"\s+".join(words[:-1] + [last]))
    return rf"(?<![\w-]){body}(?![\w-])"


def _chinese_forms(text: str) -> tuple[str, ...]:
    """The forms of one 中文 term (see the module's doc)."""
    text = text.strip()
    forms = [re.sub(r"（[^）]*）", "", text).strip()]
    for match in re.finditer(r"（([^）]*)）", text):
        if not HAN.search(match.group(1)):  # a Latin form instead of the Han before it
            kept = re.sub(r"[\u3400-\u4dbf\u4e00-\u9fff]+$", "", text[:match.start()])
            rest = re.sub(r"（[^）]*）", "", text[match.end():])
            forms.append((kept + match.group(1) + (" " + rest if rest else "")).strip())
    return tuple(dict.fromkeys(form for form in forms if form))


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_terms(text: str) -> tuple[Term, ...]:
    """The term pairs of STYLE.md's first table whose header is `English | 中文 | …`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if _cells(line)[:2] == ["English", "中文"]), None)
    if start is None:
        raise ValueError("STYLE.md has no term table (a header `| English | 中文 | 说明 |`)")
    terms = []
    for number, line in enumerate(lines[start + 2:], start + 3):
        if not line.startswith("|"):
            break
        cells = _cells(line) + [""]
        english = re.sub(r"^[\w ]+:\s*", "", cells[0]).split(",")
        chinese = cells[1].split("、")
        if len(english) != len(chinese) or not all(e.strip() for e in english + chinese):
            raise ValueError(f"STYLE.md line {number}: {len(english)} English term(s), "
                             f"{len(chinese)} Chinese (split at `,` and `、`): {line!r}")
        for en, zh in zip(english, chinese, strict=True):
            bold = en.strip().startswith("**")
            en = re.sub(r"\s*\([^)]*\)\s*", " ", en.replace("**", "")).strip()
            terms.append(Term(en, _chinese_forms(zh), bold))
    return tuple(terms)


Checked = tuple[tuple[str, re.Pattern[str], Term], ...]


@functools.cache
def _table(text: str) -> tuple[tuple[Term, ...], Checked]:
    """(every term, the terms rule 1 checks: (a prefix of its first word, its pattern, the
    term), longest first)."""
    terms = parse_terms(text)
    senses: dict[str, set[tuple[str, ...]]] = {}
    for term in terms:
        senses.setdefault(term.english.lower(), set()).add(term.chinese)
    checked = sorted((t for t in terms if len(senses[t.english.lower()]) == 1
                      and t.english.lower() not in UNCHECKED), key=lambda t: -len(t.english))
    keys = [re.sub(r"y$", "", t.english.split()[0].lower())[:5] for t in checked]
    return terms, tuple((key, re.compile(_pattern(t.english), re.I), t)
                        for key, t in zip(keys, checked, strict=True))


def _prose(text: str) -> str:
    """What a reader reads as words: no inline code, math, link targets or addresses; a
    role's text kept ({doc}`the sources <sources>` reads "the sources")."""
    text = ROLE.sub(lambda m: " " + re.sub(r"\s*<[^>]*>\s*$", "", m.group(2)) + " ", text)
    text = MATH.sub(" ", CODE_SPAN.sub(" ", text))
    return URL.sub(" ", LINK.sub("] ", text))


def _outside_parentheses(text: str, instead: str = " ") -> str:
    """The Chinese without what full-width parentheses hold (nested ones too)."""
    previous = None
    while previous != text:
        previous, text = text, re.sub(r"（[^（）]*）", instead, text)
    return text


def _quoted(english: str, start: int, end: int, chinese: str) -> bool:
    """Whether the words english[start:end] come with a neighbouring word that the Chinese
    keeps as it stands (a paper's title, an English example, a message)."""
    before = re.search(r"\w+\W+$", english[:start])
    after = re.match(r"\W+\w+", english[end:])
    return bool(before and english[before.start():end] in chinese
                or after and english[start:end + after.end()] in chinese)


def english_terms(english: str, chinese: str, checked: Checked) -> list[Term]:
    """The terms of `checked` (see _table) that a unit's English uses, once each, in order;
    of overlapping ones the longest."""
    text, kept = _prose(english), _prose(chinese)
    lowered = text.lower()
    taken: list[tuple[int, int, Term]] = []
    for key, pattern, term in checked:
        if key not in lowered:  # most terms are not in a unit: skip their pattern
            continue
        for match in pattern.finditer(text):
            if not any(match.start() < b and a < match.end() for a, b, _ in taken) \
                    and not _quoted(text, match.start(), match.end(), kept):
                taken.append((match.start(), match.end(), term))
    found: list[Term] = []
    for _, _, term in sorted(taken, key=lambda t: t[0]):
        if term not in found:
            found.append(term)
    return found


def has_chinese(term: Term, chinese: str) -> bool:
    """Whether a unit's Chinese has one of the term's forms (a gloss inside it aside)."""
    texts = (chinese.lower(), _outside_parentheses(chinese, "").lower())
    return any(form.lower() in text for form in term.chinese for text in texts)


def own_words(chinese: str) -> str:
    """A unit's Chinese where rule 2 looks for a term: its prose outside parentheses."""
    return _outside_parentheses(_prose(chinese))


def gives_english(term: Term, chinese: str) -> bool:
    """Whether a unit's Chinese has the term's English (编码器-解码器（encoder-decoder）
    gives encoder and decoder)."""
    english = _pattern(term.english).replace(r"(?<![\w-])", r"(?<!\w)")
    return bool(re.search(english.replace(r"(?![\w-])", r"(?!\w)"), _prose(chinese), re.I))


def _notes(entry: polib.POEntry) -> dict[str, str]:
    """A translator's notes on terms that a unit renders otherwise: {English: reason}. A
    note starts a line of the comment; polib wraps a long one onto the next lines."""
    notes: dict[str, str] = {}
    last = None
    for line in (entry.tcomment or "").splitlines():
        if match := NOTE.match(line.strip()):
            last = match.group(2)
            notes[last] = match.group(3)
        elif last is not None and line.strip():
            notes[last] += " " + line.strip()
    return notes


def _where(name: str, entry: polib.POEntry, locale: Path) -> str:
    path = catalogue_path(name, locale)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    # polib reads `file:cell` as (file, cell) when the cell id is all digits
    cells = ", ".join(sorted({":".join(filter(None, o)).rsplit(":", 1)[-1]
                              for o in entry.occurrences}))
    return f"{source_label(name)} cell {cells} ({entry.comment}), {shown}:{entry.linenum}"


def unit_problems(entry: polib.POEntry, checked: Checked) -> list[str]:
    """Rule 1 on one unit, and its translator's notes on terms."""
    found = []
    used = english_terms(entry.msgid, entry.msgstr, checked)
    notes = _notes(entry)
    for english, reason in notes.items():
        if not any(term.english == english for term in used):
            found.append(f"term {english!r}: a note says the unit renders it otherwise "
                         f"({reason}), but rule 1 finds no such term in its English: remove "
                         "the note")
    for term in used:
        if term.english not in notes and not has_chinese(term, entry.msgstr):
            found.append(f"term {term.english!r}: the English has it, the Chinese lacks "
                         f"{' or '.join(term.chinese)} (STYLE.md section 1; if the unit "
                         f"means something else, a note `# term {term.english!r}: why`)")
    return found


GLOSSARY = "book/glossary"


def document_problems(name: str, earlier: set[str], locale: Path = LOCALE,
                      style: Path = STYLE) -> list[str]:
    """Rules 1 and 2 on one chapter or page; `earlier` holds the English of the terms that
    the chapters before it use, and gains this chapter's."""
    terms, checked = _table(style.read_text(encoding="utf-8"))
    introduced = [t for t in terms if t.introduced and t.han]
    found, seen = [], set(earlier)
    for entry in load(catalogue_path(name, locale)):
        if entry.obsolete or not entry.msgstr or "fuzzy" in entry.flags:
            continue  # the check's other rules name these
        where = _where(name, entry, locale)
        found += [f"{where}: {p}: {short(entry.msgstr)!r}"
                  for p in unit_problems(entry, checked)]
        if entry.comment in NOT_FIRST_USES:
            continue
        words = own_words(entry.msgstr)
        for term in introduced:
            if term.english in seen or not any(form in words for form in term.han):
                continue
            seen.add(term.english)
            if not gives_english(term, entry.msgstr):
                what = ("first use on the page (no chapter uses it)" if is_page(name)
                        else "first use in the book")
                found.append(f"{where}: term {term.english!r}: {what}: give its English "
                             f"after it, as in {term.han[0]}（{term.english}） (STYLE.md "
                             f"section 2): {short(entry.msgstr)!r}")
    if not is_page(name):
        earlier |= seen
    return found


def term_problems(names: tuple[str, ...] = EDITION + PAGES, locale: Path = LOCALE,
                  style: Path = STYLE) -> list[str]:
    """Rules 1 and 2 for the chapters and pages `names`. The terms that earlier chapters
    use are read from their catalogues, whether they are in `names` or not."""
    found: list[str] = []
    earlier: set[str] = set()
    last = max((EDITION.index(name) for name in names if name in EDITION), default=-1)
    if any(name in PAGES for name in names):
        last = len(EDITION) - 1
    for name in EDITION[:last + 1] + tuple(name for name in PAGES if name in names):
        if name == GLOSSARY:
            continue  # the table of the terms itself: its English column stays English
        if catalogue_path(name, locale).exists():  # else the check names it missing
            problems = document_problems(name, earlier, locale, style)
            found += problems if name in names else []
    return found
