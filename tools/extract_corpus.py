"""Write the classical Chinese corpus that chapter 11 trains on, from Debian's fortunes-zh.

    apt-get install fortunes-zh                # version 2.98 (Debian 12): the three files below
    python tools/extract_corpus.py             # writes transformer/corpora/classical_chinese.txt
    python tools/extract_corpus.py --check     # exit 1 if the shipped file differs from a fresh extraction

The book never downloads anything: the shipped file is the output of this script, and
transformer/corpora/README.md states its source and licence. Run it again only to
reproduce or to audit that file. What it does, in order:

1. Reads the three fortune files of the package (`tang300`: the Three Hundred Tang
   Poems; `song100`: a hundred Song poems; `chinese`: quotes, each attributed on its
   last line `-- author《work》`), entries separated by `%` lines, and removes the
   terminal colour escapes that wrap titles and authors.
2. Keeps every poem of `tang300` and `song100` (body lines only; the title and author go
   into their own fields, song100's `其一`/`其二` section headers are dropped).
3. Keeps from `chinese` only pre-modern text: the classics (《谚语》 proverbs, the
   Analects 《论语》, 《道德经》, 《菜根谭》, 《增广贤文》) and works attributed as
   `author《title》`. It drops entries without an attribution (the Debian manuals),
   entries with Latin letters or digits (technical and modern quotes), and the modern
   authors and works listed in MODERN below (20th-century writers, still in copyright in
   many countries, and quotes from films, anime and the web).
4. Normalises each text: lines stripped, empty lines dropped, ASCII `,` `:` `;` `!` `?`
   turned into their full-width forms.
5. Removes duplicates, so that a split by document cannot leak text from the training
   set into the held-out sets: a document is dropped when one of its clauses (a run of
   at least 4 characters between punctuation marks) already occurs in a document kept
   before it (tang300 first, then song100, then chinese, each in file order). The
   `chinese` file often quotes lines of the Tang poems.

The output is UTF-8 text, one document after another, each a header line
`% SOURCE<TAB>AUTHOR<TAB>TITLE` (the author is empty for the classics and proverbs)
followed by its text lines. Chapter 11 reads it with `transformer.text.read_corpus`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORTUNES = Path("/usr/share/games/fortunes")
OUTPUT = ROOT / "transformer" / "corpora" / "classical_chinese.txt"

ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
CLASSICS = ("谚语", "论语", "道德经", "菜根谭", "增广贤文")
# Attributions in `chinese` that name modern writers or works (checked against every
# attribution of fortunes-zh 2.98); entries with Latin letters or digits are dropped anyway.
MODERN = ("钱钟书", "鲁迅", "毛泽东", "老舍", "巴金", "冰心", "朱自清", "余光中", "吴军", "陈毅",
          "胡志明", "赫拉利", "李彦宏", "王健林", "显卡吧", "网吧", "央视", "言峰绮礼", "卫宫切嗣",
          "钢之炼金术师")
LATIN_OR_DIGIT = re.compile(r"[A-Za-z0-9Ａ-Ｚａ-ｚ０-９]")
# Marks of text that did not survive transcription: a stray percent sign, private-use and
# placeholder characters, ［囗＋化］ or (革享) for a character spelled out by its parts, a
# space or a full-width full stop where a character went missing.
OTHER_ODD = re.compile(r"[%\ue000-\uf8ff□○［］()（）＋ ．]")
SECTION_HEADER = re.compile(r"其[一二三四五六七八九十]+")
HALF_TO_FULL = str.maketrans({",": "，", ":": "：", ";": "；", "!": "！", "?": "？"})
CLAUSE = re.compile(r"[，。？！；：、“”‘’「」《》\n]")


def entries(name: str) -> list[str]:
    """The `%`-separated entries of one fortune file, colour escapes removed."""
    text = ESCAPE.sub("", (FORTUNES / name).read_text(encoding="utf-8"))
    return [e.strip("\n") for e in re.split(r"^%[ \t]*\n", text, flags=re.M) if e.strip()]


def clean(lines: list[str]) -> str:
    """Lines stripped, empty ones dropped, ASCII punctuation made full-width, joined by newlines."""
    kept = [line.strip().translate(HALF_TO_FULL) for line in lines]
    return "\n".join(line for line in kept if line)


def tang300() -> list[dict]:
    documents = []
    for entry in entries("tang300"):
        title, author, *body = entry.split("\n")
        documents.append({"source": "tang300", "author": author.strip().removeprefix("作者："),
                          "title": title.strip().strip("《》"), "text": clean(body)})
    return documents


def song100() -> list[dict]:
    documents = []
    for entry in entries("song100"):
        title, author, *body = entry.split("\n")
        body = [line for line in body if not SECTION_HEADER.fullmatch(line.strip())]
        author = re.sub(r"（.*", "", author.strip().removeprefix("作者:"))
        title = re.sub(r"^题目:", "", title.strip())
        documents.append({"source": "song100", "author": author, "title": title, "text": clean(body)})
    return documents


def chinese() -> tuple[list[dict], Counter]:
    """Pre-modern entries of the `chinese` file, and a count of why the others were dropped."""
    documents, dropped = [], Counter()
    for entry in entries("chinese"):
        lines = [line for line in entry.split("\n") if line.strip()]
        attribution = re.fullmatch(r"\s*--\s*(.+?)\s*", lines[-1])
        if attribution is None:
            dropped["no attribution (manuals, unattributed texts)"] += 1
            continue
        source = attribution.group(1)
        body = clean([line for line in lines[:-1] if not line.strip().startswith("--")])
        if LATIN_OR_DIGIT.search(source + body) or OTHER_ODD.search(body):
            dropped["Latin letters, digits or odd marks (technical, modern)"] += 1
            continue
        if any(name in source for name in MODERN):
            dropped["modern author or work"] += 1
            continue
        classic = next((c for c in CLASSICS if source.startswith((f"《{c}》", c))), None)
        work = re.fullmatch(r"([^《》，,\s]{1,6})《(.+)》.*", source)
        if classic is not None:
            author, title = "", source.strip("《》")
        elif work is not None:
            author, title = work.group(1), work.group(2)
        else:
            dropped["other attribution (modern or unclear)"] += 1
            continue
        if not body:
            dropped["empty"] += 1
            continue
        documents.append({"source": "chinese", "author": author, "title": title, "text": body})
    return documents, dropped


def clauses(text: str) -> set[str]:
    return {c for c in CLAUSE.split(text) if len(c) >= 4}


def deduplicate(documents: list[dict]) -> tuple[list[dict], Counter]:
    """Drop each document that shares a clause with one kept before it; count drops per source."""
    seen: set[str] = set()
    kept, dropped = [], Counter()
    for document in documents:
        own = clauses(document["text"])
        if own & seen:
            dropped[document["source"]] += 1
            continue
        kept.append(document)
        seen |= own
    return kept, dropped


def extract() -> tuple[str, list[str]]:
    """The corpus file's text, and a report of what was kept and dropped."""
    quotes, filtered = chinese()
    documents, duplicates = deduplicate(tang300() + song100() + quotes)
    report = [f"dropped from chinese: {n} ({why})" for why, n in filtered.most_common()]
    report += [f"dropped as duplicates: {n} from {source}" for source, n in duplicates.most_common()]
    for source, n in Counter(d["source"] for d in documents).items():
        chars = sum(len(d["text"]) for d in documents if d["source"] == source)
        report.append(f"kept from {source}: {n} documents, {chars:,} characters")
    text = "".join(f"% {d['source']}\t{d['author']}\t{d['title']}\n{d['text']}\n" for d in documents)
    return text, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped file, write nothing")
    args = parser.parse_args()
    if not (FORTUNES / "tang300").is_file():
        print(f"error: {FORTUNES}/tang300 not found: apt-get install fortunes-zh", file=sys.stderr)
        return 2
    text, report = extract()
    print("\n".join(report))
    if args.check:
        same = OUTPUT.is_file() and OUTPUT.read_text(encoding="utf-8") == text
        print(f"{OUTPUT.relative_to(ROOT)}: {'identical' if same else 'DIFFERS from a fresh extraction'}")
        return 0 if same else 1
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}: {len(text.encode('utf-8')):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
