"""The Chinese edition: the chapters' prose translated unit by unit, kept beside the English.

    python -m tools.i18n extract [NAME ...]   write or refresh the catalogues from the English
    python -m tools.i18n check                exit 1 naming each unit without a current translation
    python -m tools.i18n diff [NAME ...]      each stale unit: new English, old English, old Chinese
    python -m tools.i18n build [--out DIR]    the Chinese notebooks, _build/zh/chapters/NN_name.ipynb

NAME is a chapter's file stem (01_embedding); without one, every chapter in the edition
(EDITION in tools/i18n_catalogues.py, the one list of them). The English chapters are the source. Each chapter
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
  breaks the typography of the Chinese edition (`typography`); a term of STYLE.md's
  table is not rendered as it says, or not given in English at its first use
  (tools/i18n_terms.py).
- build: the Chinese notebook of each chapter: markdown translated unit by unit (refused
  while check fails), code cells and outputs untouched, each figure's Chinese caption
  and alt text in its cell's metadata (`i18n`), which the site uses. The Chinese site is
  `make site LANGUAGE=zh` (python -m tools.website --language zh), from these notebooks, the build's table
  and the site's own Chinese pages (book/locale/zh_CN/pages/, whose typography the check
  lints too).

To translate a chapter: add it to EDITION (tools/i18n_catalogues.py), `extract` it, fill in its catalogue (any .po
editor, or by hand), run `check` until it passes.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import nbformat

from tools.figures import figure_options
from tools.i18n_catalogues import (
    BUILD,
    EDITION,
    EDITION_NOTE,
    LOCALE,
    NOTE_CELL,
    OPTION,
    PAGES,
    build_table,
    catalogue_path,
    chapter_units,
    extract,
    is_page,
    short,
    source_notebook,
    translate_markdown,
    translations,
)
from tools.i18n_check import diff, problems
from tools.notebooks import CHAPTERS, ROOT

# --- the Chinese notebooks -------------------------------------------------------

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
            raise SystemExit(f"no current translation of {short(msgid)!r}: run "
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


def build(names: tuple[str, ...] = EDITION + PAGES, out: Path = BUILD, chapters: Path = CHAPTERS,
          locale: Path = LOCALE) -> list[Path]:
    """Write out/chapters/NN_name.ipynb for each chapter and out/pages/NAME.md for each
    page ("book/NAME"); refused while the check fails."""
    found = problems(names, chapters, locale)
    if found:
        raise SystemExit("\n".join(found) + f"\n{len(found)} problem(s): the Chinese edition "
                         "is not current; nothing built")
    table = build_table(locale)
    pages = {f"{name.removeprefix('book/')}.md" for name in names if is_page(name)}
    for stale in (out / "pages").glob("*.md"):  # a page that left the edition leaves the site
        if stale.name not in pages:
            stale.unlink()
    written = []
    for name in names:
        catalogue = translations(catalogue_path(name, locale))
        if is_page(name):
            target = out / "pages" / f"{name.removeprefix('book/')}.md"
            target.parent.mkdir(parents=True, exist_ok=True)
            english = source_notebook(name).cells[0].source
            target.write_text(translate_markdown(english, lambda msgid, units=catalogue: units[None, msgid]),
                              encoding="utf-8")
        else:
            zh = chinese_notebook(source_notebook(name, chapters), catalogue, table)
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
        for name in args.names or EDITION + PAGES:
            print(f"wrote {extract(name).relative_to(ROOT)}")
    elif args.command == "diff":
        lines = [line for name in args.names or EDITION + PAGES for line in diff(name)]
        print("\n".join(lines) if lines else "no stale unit")
    elif args.command == "check":
        found = problems()
        for line in found:
            print(line, file=sys.stderr)
        if found:
            print(f"Chinese edition: {len(found)} problem(s)", file=sys.stderr)
            return 1
        units = sum(len({u.key for u in chapter_units(source_notebook(n))}) for n in EDITION + PAGES)
        print(f"Chinese edition: {len(EDITION)} chapter(s) and {len(PAGES)} page(s), {units} units current "
              f"({time.perf_counter() - start:.1f} s)")
    elif args.command == "build":
        for path in build(out=args.out.resolve()):
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
