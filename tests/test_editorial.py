"""Editorial invariants of the book, read from the committed files (nothing is executed).

1. The README's figures come from the notebooks: every percentage, BLEU score, file
   size, parameter count, comma-grouped number and Chinese sentence that the README
   quotes must appear in what a committed notebook printed. When a rerun changes a
   notebook's output, this test names the README figure that went stale.
2. The book never names its source articles by their working code names ("seed"
   followed by a three-digit number starting with 0): readers do not have them. Refer
   to an idea by its content; the site's Sources page credits the articles by title.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CHAPTERS = ROOT / "chapters"


# --- 1. README figures against notebook outputs ----------------------------------

def notebook_output(path: Path) -> str:
    """Everything a committed notebook printed: streams and text/plain results, joined."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    parts = []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                text = output.get("text", "")
            else:
                text = output.get("data", {}).get("text/plain", "")
            parts.append(text if isinstance(text, str) else "".join(text))
    return "\n".join(parts)


def all_outputs() -> str:
    return "\n".join(notebook_output(p) for p in sorted(CHAPTERS.glob("*.ipynb")))


def without_spaces(text: str) -> str:
    return re.sub(r"\s+", "", text)


CJK = r"[\u4e00-\u9fff\uff1f]"  # Chinese characters and the full-width question mark


def readme_claims(readme: str) -> list[tuple[str, str]]:
    """(claim as written in the README, what a notebook must have printed for it)."""
    claims = []
    for match in re.finditer(r"\b\d+(?:\.\d+)?%", readme):  # 99.87%
        claims.append((match.group(0), match.group(0)))
    for match in re.finditer(r"BLEU (\d+(?:\.\d+)?)", readme):  # BLEU 99.94
        claims.append((match.group(0), f"BLEU {match.group(1)}"))
    for match in re.finditer(r"\b\d+(?:\.\d+)? ?(?:[kKMG]i?B)\b", readme):  # 0.77 MB
        claims.append((match.group(0), match.group(0)))
    for match in re.finditer(r"\b\d{1,3}(?:,\d{3})+\b", readme):  # 1,500
        claims.append((match.group(0), match.group(0)))
    for match in re.finditer(r"\b(\d+)k-parameter", readme):  # 183k-parameter
        claims.append((match.group(0), match.group(1) + "k-parameter"))
    for match in re.finditer(rf"{CJK}(?:[ {CJK[1:-1]}]*{CJK})?", readme):  # 我 喜欢 苹果
        claims.append((match.group(0), match.group(0)))
    return claims


def stale_claims(readme: str, outputs: str) -> list[str]:
    """README figures that no committed notebook printed, each with what to fix."""
    parameter_counts = {round(int(n.replace(",", "")) / 1000)
                        for n in re.findall(r"\b(\d{1,3}(?:,\d{3})+) parameters", outputs)}
    flat_outputs = without_spaces(outputs)
    problems = []
    for written, printed in readme_claims(readme):
        if printed.endswith("k-parameter"):
            found = int(printed[: -len("k-parameter")]) in parameter_counts
        elif re.fullmatch(rf"[ {CJK[1:-1]}]+", printed):
            found = without_spaces(printed) in flat_outputs  # the notebooks space words alike
        else:  # the same number, not the start or the end of a longer one
            found = re.search(rf"(?<![\d.,]){re.escape(printed)}(?![\d]|[.,]\d)", outputs) is not None
        if not found:
            problems.append(f"README says {written!r}, but no committed notebook printed "
                            f"{printed!r}: rerun the chapter or correct the README")
    return problems


def test_readme_quotes_only_what_the_notebooks_printed():
    readme = README.read_text(encoding="utf-8")
    assert readme_claims(readme), "the README quotes no figure at all: is the pattern list stale?"
    problems = stale_claims(readme, all_outputs())
    assert not problems, "\n".join(problems)


def test_readme_states_the_shipped_translators_scores():
    """The shipped translator's exact match and BLEU are in the README (as chapter 10 prints them)."""
    readme = README.read_text(encoding="utf-8")
    chapter_10 = notebook_output(CHAPTERS / "10_generation.ipynb")
    measured = re.search(r"measured now: exact match (\d+\.\d+%) \(([\d,]+) of ([\d,]+) test sentences\), "
                         r"BLEU (\d+\.\d+)", chapter_10)
    assert measured, "chapter 10 no longer prints the shipped translator's 'measured now' line"
    exact, right, total, bleu = measured.groups()
    for figure in (exact, f"BLEU {bleu}", right, total):
        assert figure in readme, (f"chapter 10 measures the shipped translator at {exact} exact match "
                                  f"({right} of {total}), BLEU {bleu}; the README does not say {figure!r}")


@pytest.mark.parametrize("stale, printed", [
    ("99.9% exact match", "exact match 99.87%"),
    ("BLEU 99.9", "BLEU 99.94"),
    ("a 180k-parameter model", "183,177 parameters"),
    ("752 KB", "768,181 bytes (0.77 MB)"),
    ("1,497 of 1,500", "1,498 of 1,500"),
    ("translate('I love apples')  # 我 爱 苹果", "我 喜欢 苹果"),
])
def test_a_stale_readme_figure_is_caught(stale, printed):
    """The checker itself can fail: each stale figure is reported against the printed one."""
    assert stale_claims(stale, printed), f"{stale!r} was not reported against the output {printed!r}"


@pytest.mark.parametrize("current, printed", [
    ("99.87% exact match", "exact match 99.87%"),
    ("a 183k-parameter model in a 0.77 MB file", "183,177 parameters, 768,181 bytes (0.77 MB)"),
    ("`我 喜欢 苹果`", "I love apples -> 我 喜欢 苹果"),
    ("'我 明天 会 在 学校 借 杂志'", "['我 明天 会 在 学校 借 杂志', '你 看见 了 狗 吗 ？']"),
])
def test_a_current_readme_figure_passes(current, printed):
    assert not stale_claims(current, printed)


# --- 2. No working code names of the source articles -----------------------------

CODE_NAME = re.compile(r"seed\s*0\d\d", re.IGNORECASE)
TEXT_SUFFIXES = {".py", ".ipynb", ".md", ".cfg", ".toml", ".txt", ".yml", ".yaml", ".rst",
                 ".html", ".css", ".js", ".json", ".bib"}


def book_files() -> list[Path]:
    """The chapters (both files of each pair), the README, the package, tools/ and book/."""
    files = [*CHAPTERS.glob("*.py"), *CHAPTERS.glob("*.ipynb"), README,
             *(ROOT / "transformer").rglob("*.py")]
    for folder in (ROOT / "tools", ROOT / "book"):
        if folder.is_dir():
            files += [p for p in folder.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES]
    return sorted(set(files))


def code_name_mentions(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each mention of an article's code name."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if CODE_NAME.search(line)]


@pytest.mark.parametrize("path", book_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_source_article_code_names(path):
    mentions = code_name_mentions(path.read_text(encoding="utf-8", errors="replace"))
    assert not mentions, (
        f"{path.relative_to(ROOT)} names a source article by its code name, which readers "
        f"cannot look up; say what the idea is instead:\n"
        + "\n".join(f"  line {n}: {line[:120]}" for n, line in mentions))


@pytest.mark.parametrize("text", ["Seed 003's greedy loop", "as seed 000 does", "SEED004",
                                  "(seed  001)", '"Both forms (seed 004)"'])
def test_code_names_are_caught(text):
    assert code_name_mentions(text), f"{text!r} should be reported"


@pytest.mark.parametrize("text", ["torch.manual_seed(0)", "seed 0: 我 喜欢 苹果", "seed=0",
                                  "Generator().manual_seed(1)", "seeded with 0", "seed 10"])
def test_ordinary_seeds_pass(text):
    assert not code_name_mentions(text), f"{text!r} is an ordinary random seed"
