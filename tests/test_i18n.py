"""The Chinese edition's catalogues (tools/i18n.py, i18n_catalogues.py, i18n_check.py,
i18n_terms.py): the check passes on the repository and fails, naming the unit, when the
English changes under a translation, when a translation is missing, when the Chinese
changes a number, inline code, math or a token, when its typography is wrong, when it
drops a term of STYLE.md's table or the English at a term's first use; the Chinese
notebook keeps every code cell and output byte for byte. Everything here reads notebooks
and catalogues; nothing is executed (a few seconds)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import polib
import pytest

from tools import i18n, i18n_catalogues, i18n_check, i18n_terms

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"

NAME = "01_embedding"
SENTENCE = "The trouble is that arithmetic on ids means nothing."  # in cell 5339f800


@pytest.fixture
def copy(tmp_path: Path) -> tuple[Path, Path]:
    """(chapters, locale): a copy of chapter 01 and of the Chinese catalogues."""
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    shutil.copy(CHAPTERS / f"{NAME}.ipynb", chapters)
    locale = tmp_path / "locale"
    shutil.copytree(i18n_catalogues.LOCALE, locale)
    return chapters, locale


def edit_chapter(chapters: Path, cell_id: str, old: str, new: str) -> None:
    path = chapters / f"{NAME}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    cell = next(c for c in notebook.cells if c.id == cell_id)
    assert old in cell.source
    cell.source = cell.source.replace(old, new)
    nbformat.write(notebook, path)


def edit_entry(locale: Path, cell_id: str, change) -> polib.POEntry:
    """Apply change(entry) to the first entry of the cell; return the entry."""
    path = i18n_catalogues.catalogue_path(NAME, locale)
    po = i18n_catalogues.load(path)
    entry = next(e for e in po if not e.obsolete and cell_id in i18n_catalogues.cells_of(e))
    change(entry)
    po.save(str(path))
    return entry


def check(chapters: Path, locale: Path) -> list[str]:
    return i18n_check.problems((NAME,), chapters, locale)


# --- on the repository -------------------------------------------------------------

def test_the_repository_passes_in_seconds():
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "tools.i18n", "check"], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "units current" in run.stdout
    assert time.perf_counter() - start < 20


def test_the_edition_is_one_list_and_every_chapter_in_it_has_a_catalogue():
    chapters = sorted(path.stem for path in CHAPTERS.glob("[0-9][0-9]_*.ipynb"))
    catalogues = {path.stem for path in (i18n_catalogues.LOCALE / "chapters").glob("*.po")}
    assert list(i18n_catalogues.EDITION) == [name for name in chapters if name in i18n_catalogues.EDITION]  # the book's order
    assert set(i18n_catalogues.EDITION) == catalogues  # no catalogue left out of the edition, none missing
    pages = {path.stem for path in i18n_catalogues.LOCALE.glob("*.po")} - {"build"}
    assert {name.removeprefix("book/") for name in i18n_catalogues.PAGES} == pages
    for name in i18n_catalogues.PAGES:  # a page is checked as a chapter is
        assert (ROOT / f"{name}.md").exists() and i18n_check.chapter_problems(name) == []
    for name in i18n_catalogues.EDITION:
        assert i18n_catalogues.catalogue_path(name).exists()
        assert i18n_check.chapter_problems(name) == []
    assert i18n_check.table_problems() == []


def test_the_committed_catalogue_is_what_extract_writes(copy):
    chapters, locale = copy
    before = i18n_catalogues.catalogue_path(NAME, locale).read_text(encoding="utf-8")
    i18n_catalogues.extract(NAME, chapters, locale)
    assert i18n_catalogues.catalogue_path(NAME, locale).read_text(encoding="utf-8") == before


def test_units_are_headings_paragraphs_list_items_and_figure_texts():
    notebook = nbformat.read(CHAPTERS / f"{NAME}.ipynb", as_version=4)
    units = i18n_catalogues.chapter_units(notebook)
    kinds = {u.kind for u in units}
    assert {"heading", "paragraph", "list item", "quote", i18n_catalogues.CAPTION, i18n_catalogues.ALT} <= kinds
    texts = [u.msgid for u in units]
    assert "01 · Embedding: from token ids to vectors" in texts
    assert not any("\n" in t for t in texts)
    # Display math, code and the answer cell's marker are not units.
    assert not any(t.startswith(("$$", "<!--")) for t in texts)


# --- what the check catches ----------------------------------------------------------

def test_a_changed_english_sentence_is_named_stale_then_fuzzy_then_fixed(copy):
    chapters, locale = copy
    edit_chapter(chapters, "5339f800", SENTENCE, "The trouble is that arithmetic on ids is meaningless.")
    found = check(chapters, locale)
    assert len(found) == 1, found
    assert "cell 5339f800" in found[0] and "stale" in found[0]
    assert "[-means nothing.-] {+is meaningless.+}" in found[0]

    shown = i18n_check.diff(NAME, chapters, locale)  # before extract
    i18n_catalogues.extract(NAME, chapters, locale)
    assert i18n_check.diff(NAME, chapters, locale) == shown  # and after
    text = "\n".join(shown)
    assert "new English: These ids" in text and "is meaningless." in text
    assert "old English: These ids" in text and "means nothing." in text
    assert "old Chinese: 这些 id 就是模型接收的输入" in text

    found = check(chapters, locale)
    assert len(found) == 1 and "cell 5339f800" in found[0] and "fuzzy" in found[0], found
    entry = edit_entry(locale, "5339f800", lambda e: (e.flags.remove("fuzzy"),
                                                      setattr(e, "previous_msgid", None)))
    assert "is meaningless." in entry.msgid
    assert check(chapters, locale) == []


def test_a_new_unit_is_missing_and_a_removed_one_must_be_marked_obsolete(copy):
    chapters, locale = copy
    edit_chapter(chapters, "3d423de8", "Answer in a\nfew sentences.",
                 "Answer in a\nfew sentences.\n\nA paragraph that nobody translated.")
    found = check(chapters, locale)
    assert len(found) == 1 and "cell 3d423de8" in found[0] and "missing" in found[0], found

    chapters2, locale2 = copy[0].parent / "c2", copy[1]
    chapters2.mkdir()
    shutil.copy(CHAPTERS / f"{NAME}.ipynb", chapters2)
    notebook = nbformat.read(chapters2 / f"{NAME}.ipynb", as_version=4)
    cell = next(c for c in notebook.cells if c.id == "1ada21b3")
    cell.source = cell.source.split("\n\n")[0]  # the heading stays, the paragraph goes
    assert cell.source == "## 6 · Figures"
    nbformat.write(notebook, chapters2 / f"{NAME}.ipynb")
    found = check(chapters2, locale2)
    assert len(found) == 1 and "no longer in the chapter" in found[0], found
    assert "Left: the table" in found[0]  # the start of the unit that went
    def obsolete() -> set[str]:
        return {e.msgid for e in i18n_catalogues.load(i18n_catalogues.catalogue_path(NAME, locale2)) if e.obsolete}

    before = obsolete()  # units that earlier versions of the chapter had
    i18n_catalogues.extract(NAME, chapters2, locale2)
    assert check(chapters2, locale2) == []
    assert [m.endswith("the empty stripe at the top.") for m in obsolete() - before] == [True]


def test_an_empty_or_deleted_translation_is_named(copy):
    chapters, locale = copy
    edit_entry(locale, "087b27d5", lambda e: setattr(e, "msgstr", ""))
    found = check(chapters, locale)
    assert len(found) == 1 and "cell 087b27d5" in found[0] and "untranslated" in found[0], found

    path = i18n_catalogues.catalogue_path(NAME, locale)
    po = i18n_catalogues.load(path)
    po.remove(next(e for e in po if "087b27d5" in i18n_catalogues.cells_of(e)))
    po.save(str(path))
    found = check(chapters, locale)
    assert len(found) == 1 and "cell 087b27d5" in found[0] and "missing" in found[0], found


def test_a_changed_number_is_named(copy):
    chapters, locale = copy
    edit_entry(locale, "c27166f7", lambda e: setattr(e, "msgstr", e.msgstr.replace("37 000", "37000")))
    found = check(chapters, locale)
    assert len(found) == 1, found
    assert "cell c27166f7" in found[0] and "numbers differ" in found[0]
    assert "'37 000'" in found[0] and "'37000'" in found[0]


def test_changed_inline_code_is_named(copy):
    chapters, locale = copy
    edit_entry(locale, "cda80ac4", lambda e: setattr(  # the heading is the cell's first unit
        e, "msgstr", e.msgstr + " `TokenEmbedding`"))
    found = check(chapters, locale)
    assert len(found) == 1 and "cell cda80ac4" in found[0] and "inline code differ" in found[0], found


def test_math_tokens_links_and_placeholders_must_match():
    assert i18n_check.mismatches("a `<bos>` b", "甲 `<bos>` 乙") == []
    assert "inline code" in i18n_check.mismatches("a `<bos>` b", "甲 `<BOS>` 乙")[0]
    assert "math" in i18n_check.mismatches("norm $\\sqrt 2$", "范数 $\\sqrt 3$")[0]
    assert "special tokens" in i18n_check.mismatches("from <pad> to pears", "从 pad 到 pears")[0]
    assert "link targets" in i18n_check.mismatches("see [the paper](a.md)", "见[论文](b.md)")[0]
    assert "link targets" in i18n_check.mismatches("{doc}`API </api/embedding>`", "{doc}`API </api/x>`")[0]
    assert "placeholders" in i18n_check.mismatches("Figure {chapter}", "图 {number}")[0]
    # The order may change; a number written in words stays in words.
    assert i18n_check.mismatches("$a$ then $b$, thirty-two times 16", "先 $b$ 后 $a$，16 的三十二倍") == []
    assert "numbers" in i18n_check.mismatches("thirty-two times", "32 倍")[0]


def test_typography_is_linted(copy):
    chapters, locale = copy
    edit_entry(locale, "0f7484e6", lambda e: setattr(e, "msgstr", "4 · 贯穿示例的形状追踪Trace"))
    found = check(chapters, locale)
    assert len(found) == 1 and "cell 0f7484e6" in found[0] and "typography" in found[0], found

    assert i18n_check.typography("我们用 PyTorch 构建 Transformer，很好。") == []
    for bad in ("我们用PyTorch构建", "很好,对", "标签(label)不是数值", "函数`encode`把句子",
                "对$V$个", '所有的"距离"都会改变'):
        assert i18n_check.typography(bad), bad
    assert i18n_check.typography("编码器-解码器（encoder-decoder）") == []  # d2l-zh's dash


def test_the_chinese_sites_own_pages_are_linted(tmp_path):
    (tmp_path / "index.md").write_text("# 标题\n\n```text\nx,y\n```\n\n每章一个思路,每一章。\n",
                                       encoding="utf-8")
    [found] = {line.split(": ", 1)[0] for line in i18n_check.page_problems(tmp_path)}
    assert found.endswith("index.md:7")
    assert i18n_check.page_problems(i18n_catalogues.LOCALE.parent / "pages") == []


def test_emphasis_that_would_show_its_asterisks_is_named(copy):
    chapters, locale = copy
    path = i18n_catalogues.catalogue_path(NAME, locale)
    po = i18n_catalogues.load(path)
    quote = next(e for e in po if e.msgid.startswith("**How to read this book.**"))
    quote.msgstr = quote.msgstr.replace("**怎样读这本书。** ", "**怎样读这本书。**")
    po.save(str(path))
    found = check(chapters, locale)
    assert len(found) == 1 and "cell 39fe71d4" in found[0] and "emphasis" in found[0], found


def test_a_stale_or_untranslated_build_string_is_named(copy):
    _, locale = copy
    path = locale / i18n_catalogues.BUILD_TABLE
    po = i18n_catalogues.load(path)
    next(e for e in po if e.msgid == "Show a solution").msgid = "Show the solution"
    next(e for e in po if e.msgid == "Close").msgstr = ""
    po.save(str(path))
    found = i18n_check.table_problems(locale)
    assert len(found) == 2, found
    assert any("stale" in f and "tools/website.py" in f and "Show the solution" in f for f in found)
    assert any("untranslated" in f and "'Close'" in f for f in found)


# --- the terms of STYLE.md's table (tools/i18n_terms.py) ------------------------------

def edit_unit(locale: Path, containing: str, change, name: str = NAME) -> polib.POEntry:
    """Apply change(entry) to the one entry whose Chinese contains `containing`."""
    path = i18n_catalogues.catalogue_path(name, locale)
    po = i18n_catalogues.load(path)
    [entry] = [e for e in po if not e.obsolete and containing in e.msgstr]
    change(entry)
    po.save(str(path))
    return entry


def test_the_term_pairs_come_from_the_style_page():
    terms = {t.english: t for t in i18n_terms.parse_terms(i18n_terms.STYLE.read_text(encoding="utf-8"))}
    assert terms["causal mask"].chinese == ("因果掩码",) and terms["causal mask"].introduced
    assert terms["embedding"].chinese == ("嵌入",)  # （词）嵌入: 词 is optional
    assert terms["layer normalisation"].chinese == ("层归一化", "LayerNorm")
    assert terms["eval mode"].chinese == ("评估模式", "eval 模式") and not terms["eval mode"].introduced
    assert terms["memory"].chinese == ("记忆",)  # the note (the encoder's output) is not the term
    assert terms["buffer"].chinese == ("缓冲区",)  # (non-persistent) buffer | （非持久）缓冲区
    assert terms["value"].han == ()  # one character: rule 2 cannot find its first use
    checked = {t.english for _, _, t in i18n_terms._table(i18n_terms.STYLE.read_text(encoding="utf-8"))[1]}
    assert {"causal mask", "mask", "vocabulary"} <= checked
    assert not {"block", "kernel", "release"} & checked  # two Chinese terms: two things
    assert not set(i18n_terms.UNCHECKED) & checked
    with pytest.raises(ValueError, match="line 5"):  # a row whose terms do not pair up
        i18n_terms.parse_terms("# x\n\n| English | 中文 | 说明 |\n|---|---|---|\n| query, key | 查询 | |\n")


def test_which_terms_a_unit_uses():
    terms, checked = i18n_terms._table(i18n_terms.STYLE.read_text(encoding="utf-8"))

    def used(english: str, chinese: str = "") -> list[str]:
        return [t.english for t in i18n_terms.english_terms(english, chinese, checked)]

    assert used("The causal masks hide the future.") == ["causal mask"]  # the longest, plural
    assert used("Two queries and a vocabulary") == ["query", "vocabulary"]
    assert used("the `mask` argument, $mask$ and [a link](mask.md)") == []  # code, math, targets
    assert used("see *Attention Is All You Need*", "见 *Attention Is All You Need*") == []  # kept as is
    assert used("initialization and the optimizer") == ["initialisation", "optimiser"]


def test_the_terms_pass_on_the_repository():
    assert i18n_terms.term_problems() == []


def test_a_term_replaced_by_another_word_is_named(copy):
    chapters, locale = copy
    assert check(chapters, locale) == []
    edit_unit(locale, "它们和词表一样长", lambda e: setattr(e, "msgstr", e.msgstr.replace("词表", "字典")))
    found = check(chapters, locale)
    assert len(found) == 1, found
    assert "cell c27166f7 (paragraph)" in found[0] and "term 'vocabulary'" in found[0]
    assert "lacks 词表" in found[0]
    # A note says why the unit renders the term otherwise; a note for a term the unit's
    # English does not use is named.
    edit_unit(locale, "它们和字典一样长", lambda e: setattr(e, "tcomment", "term 'vocabulary': a test"))
    assert check(chapters, locale) == []
    edit_unit(locale, "全书的贯穿示例是一个句对", lambda e: setattr(e, "tcomment", "term 'vocabulary': stale"))
    [found] = check(chapters, locale)
    assert "cell 39fe71d4" in found and "term 'vocabulary'" in found and "remove the note" in found


def test_the_english_at_first_use_is_required(copy):
    chapters, locale = copy
    edit_unit(locale, "**独热**（one-hot）向量", lambda e: setattr(
        e, "msgstr", e.msgstr.replace("**独热**（one-hot）向量", "**独热**向量")))
    found = check(chapters, locale)
    assert len(found) == 1, found
    assert "cell 060d09b7 (paragraph)" in found[0] and "term 'one-hot'" in found[0]
    assert "first use in the book" in found[0] and "独热（one-hot）" in found[0]
    # The English anywhere in the unit counts.
    edit_unit(locale, "**独热**向量", lambda e: setattr(e, "msgstr", e.msgstr + "（one-hot）"))
    assert check(chapters, locale) == []


def test_a_term_an_earlier_chapter_introduced_needs_no_english(copy, monkeypatch):
    _, locale = copy
    later = ("02_positional_encoding",)
    assert i18n_terms.term_problems(later, locale) == []
    monkeypatch.setattr(i18n_terms, "EDITION", i18n_catalogues.EDITION[1:])  # no chapter 01
    found = i18n_terms.term_problems(later, locale)
    assert any("cell 128b890a" in f and "term 'embedding': first use in the book" in f
               for f in found), found


def test_the_terms_follow_the_style_page(copy, tmp_path):
    _, locale = copy
    style = tmp_path / "STYLE.md"
    text = i18n_terms.STYLE.read_text(encoding="utf-8")
    style.write_text(text.replace("| 因果掩码、填充掩码", "| 因果遮罩、填充掩码"), encoding="utf-8")
    found = i18n_terms.term_problems(("04_causal_mask",), locale, style)
    assert found and all("term 'causal mask'" in f and "lacks 因果遮罩" in f for f in found), found


# --- the Chinese notebook ------------------------------------------------------------

def test_build_translates_the_prose_and_keeps_code_and_outputs(copy, tmp_path):
    chapters, locale = copy
    [path] = i18n.build((NAME,), tmp_path / "zh", chapters, locale)
    english = nbformat.read(chapters / f"{NAME}.ipynb", as_version=4)
    chinese = nbformat.read(path, as_version=4)
    note = [c for c in chinese.cells if c.get("id") == i18n_catalogues.NOTE_CELL]
    assert len(note) == 1 and "代码、输出、注释" in note[0].source
    cells = [c for c in chinese.cells if c.get("id") != i18n_catalogues.NOTE_CELL]
    assert len(cells) == len(english.cells)
    units = {u.msgid for u in i18n_catalogues.chapter_units(english)}
    for en, zh in zip(english.cells, cells, strict=True):
        assert en.cell_type == zh.cell_type and en.get("id") == zh.get("id")
        if en.cell_type == "code":
            for key in ("source", "outputs", "execution_count"):
                assert json.dumps(en.get(key)) == json.dumps(zh.get(key)), (en.id, key)
            assert {k: v for k, v in zh.metadata.items() if k != "i18n"} == en.metadata
            continue
        assert zh.metadata == en.metadata
        # The same blocks, in the same order (headings, lists, math, the answer's marker).
        assert block_types(zh.source) == block_types(en.source), en.id
        assert not any(unit in i18n_catalogues.unit_text(zh.source) for unit in units), en.id
    figures = [c.metadata["i18n"] for c in cells if "i18n" in c.metadata]
    assert len(figures) == 2 and all("fig-cap" in f and "fig-alt" in f for f in figures)
    assert figures[0]["fig-cap"].startswith("嵌入表与一次查找")


def block_types(markdown: str) -> list[str]:
    return [t.type for t in i18n_catalogues.MARKDOWN.parse(markdown) if t.type != "inline"]


def test_build_is_refused_while_the_check_fails(copy, tmp_path):
    chapters, locale = copy
    edit_chapter(chapters, "5339f800", SENTENCE, "Arithmetic on ids is meaningless.")
    with pytest.raises(SystemExit, match="cell 5339f800"):
        i18n.build((NAME,), tmp_path / "zh", chapters, locale)
    assert not (tmp_path / "zh").exists()


def test_tables_lists_and_quotes_are_translated_in_place():
    source = "\n".join([
        "## A heading", "", "> A quote that", "> runs on.", "",
        "| axis | padding `[B,1]` |", "|---|---|", "| batch | 2 |", "",
        "1. **One.** Text", "   wrapped.", "", "   More text.", "2. Two", "",
        "```", "code stays", "```", "", "$$x = 1$$", "<!-- a comment -->", "A paragraph.", "",
        "Setext", "heading", "======"])
    words = {"A heading": "标题", "A quote that runs on.": "引文。", "axis": "轴",
             "padding `[B,1]`": "填充 `[B,1]`", "batch": "批量", "**One.** Text wrapped.":
             "**一。** 正文。", "More text.": "更多正文。", "Two": "二", "A paragraph.": "段落。",
             "Setext heading": "二级标题"}
    result = i18n_catalogues.translate_markdown(source, lambda text: words[text])
    assert result.split("\n") == [
        "## 标题", "", "> 引文。", "", "| 轴 | 填充 `[B,1]` |", "|---|---|", "| 批量 | 2 |", "",
        "1. **一。** 正文。", "", "   更多正文。", "2. 二", "",
        "```", "code stays", "```", "", "$$x = 1$$", "<!-- a comment -->", "段落。", "",
        "二级标题", "======"]
    assert block_types(result) == block_types(source)


# --- the Chinese site ----------------------------------------------------------------

def test_the_chinese_reading_copy_uses_the_table_and_the_captions(tmp_path):
    from tools import website
    from tools.notebooks import read_book

    i18n.build((NAME,), tmp_path / "zh")  # from the repository's chapter and catalogues
    [chapter] = read_book(tmp_path / "zh" / "chapters")
    page = website.reading_copy(chapter, [chapter], "full", "zh")
    text = "\n".join(c.source for c in page.cells if c.cell_type == "markdown")
    assert "本章与包" in text and "In the package" not in text
    assert "右上角的下载按钮" in text and "Running this notebook" not in text
    figures = [c.metadata["mystnb"] for c in page.cells if "figure" in c.metadata.get("mystnb", {})]
    assert figures[0]["figure"]["caption"].startswith("**图 1.1** 嵌入表与一次查找")
    assert figures[1]["image"]["alt"].startswith("对数坐标的柱状图")
    prompts = [c.metadata["mystnb"]["code_prompt_show"] for c in page.cells
               if "code_prompt_show" in c.metadata.get("mystnb", {})]
    assert prompts and set(prompts) == {"显示参考答案"}
    assert "导出到 transformer/embedding.py" in website.export_styles([chapter], "zh")


def test_pages_in_both_languages_link_to_each_other_from_disk(tmp_path):
    from tools.site_files import link_languages
    from tools.site_layout import Site

    page = ('<html><body><div class="article-header-buttons"><a>download</a></div>'
            '</body></html>')
    for root in (tmp_path / "html", tmp_path / "zh" / "html"):
        for relative in ("index.html", f"chapters/{NAME}.html", "chapters/02_other.html"):
            if root.parent.name == "zh" and relative.startswith("chapters/02"):
                continue  # a chapter not in the Chinese edition
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(page, encoding="utf-8")
    english = Site(tmp_path)
    assert link_languages(english) == 4  # two pages, both ways
    assert link_languages(Site(tmp_path / "zh", language="zh")) == 0  # once
    for here, lang in ((tmp_path / "html" / "chapters" / f"{NAME}.html", "zh-CN"),
                       (tmp_path / "zh" / "html" / "chapters" / f"{NAME}.html", "en"),
                       (tmp_path / "zh" / "html" / "index.html", "en")):
        text = here.read_text(encoding="utf-8")
        [href] = re.findall(rf'class="btn btn-sm language-switch" href="([^"]+)" hreflang="{lang}"',
                            text)
        assert not href.startswith("/") and (here.parent / href).resolve().exists(), href
    assert "language-switch" not in (tmp_path / "html" / "chapters" / "02_other.html").read_text()


def test_a_link_to_a_document_the_chinese_site_lacks_goes_to_the_english_one(tmp_path):
    """A translated page's {doc} link to a chapter not yet in the edition becomes a link to
    the English site's page, relative, so that it works from disk; a link to a document the
    Chinese site has is left to Sphinx."""
    from tools.site_files import link_to_english
    from tools.site_layout import Site

    site = Site(tmp_path / "zh", "full", "zh")
    text = ("See {doc}`chapters/14_benchmarks`, {doc}`the guide <teachers>` and "
            "{doc}`04 </chapters/04_causal_mask>`.")
    out = link_to_english(text, Path("performance.md"), {"chapters/04_causal_mask"}, site)
    assert '<a href="../../html/chapters/14_benchmarks.html" hreflang="en">14 · Appendix: Making it fast</a>' in out
    assert '<a href="../../html/teachers.html" hreflang="en">the guide</a>' in out
    assert "{doc}`04 </chapters/04_causal_mask>`" in out
    nested = link_to_english("{doc}`the package <../package>`", Path("chapters/x.md"), set(), site)
    assert '<a href="../../../html/package.html" hreflang="en">the package</a>' in nested
