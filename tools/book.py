"""Build the book: run every chapter in a fresh kernel and write HTML pages to _build/.

    python tools/book.py [CHAPTER ...]     (default: every chapter)

Each chapter is executed top to bottom from its committed source (the stored
outputs are not reused), then rendered to `_build/NN_name.html`; `_build/index.html`
links them with each chapter's run time. The committed notebooks are not touched.
"""

from __future__ import annotations

import argparse
import html
import sys
import time
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from execute import execute_notebook  # noqa: E402
from notebooks import ROOT, read_book, read_chapter  # noqa: E402

BUILD = ROOT / "_build"

INDEX = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Building a Transformer, step by step</title>
<style>
 body {{ font-family: system-ui, sans-serif; max-width: 46rem; margin: 3rem auto; padding: 0 1rem;
        line-height: 1.5; color: #222; }}
 table {{ border-collapse: collapse; width: 100%; }}
 td, th {{ padding: .35rem .6rem; border-bottom: 1px solid #ddd; text-align: left; }}
 td.num, th.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
 code {{ background: #f4f4f4; padding: 0 .2rem; }}
</style></head><body>
<h1>Building a Transformer, step by step</h1>
<p>An encoder-decoder Transformer in PyTorch, one idea per chapter, ending with a model that
translates <code>I love apples</code> into <code>我 喜欢 苹果</code>. Each chapter below was
executed top to bottom in a fresh kernel by <code>make book</code>.</p>
<table>
<tr><th>#</th><th>Chapter</th><th>Builds</th><th class="num">Run time</th></tr>
{rows}
</table>
<p>Total run time: {total:.1f} s.</p>
</body></html>
"""


def build_chapter(path: Path, exporter: HTMLExporter) -> tuple[str, str, float]:
    """Execute one chapter and write its page; return (page name, title, seconds)."""
    chapter = read_chapter(path)
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    execute_notebook(notebook)
    seconds = time.perf_counter() - start
    nbformat.write(notebook, BUILD / path.name)
    body, _ = exporter.from_notebook_node(notebook, resources={"metadata": {"name": chapter.title}})
    page = f"{path.stem}.html"
    (BUILD / page).write_text(body, encoding="utf-8")
    return page, chapter.title, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", type=Path)
    args = parser.parse_args()
    chapters = ([read_chapter(p.resolve().with_suffix(".ipynb")) for p in args.chapters]
                or read_book())
    BUILD.mkdir(exist_ok=True)
    exporter = HTMLExporter(template_name="lab")
    rows, total = [], 0.0
    for chapter in chapters:
        page, title, seconds = build_chapter(chapter.path, exporter)
        total += seconds
        print(f"{chapter.number:02d}  {title:<40} {seconds:6.1f} s  -> _build/{page}", flush=True)
        modules = ", ".join(f"<code>transformer/{m}.py</code>" for m in chapter.modules)
        rows.append(f'<tr><td>{chapter.number:02d}</td><td><a href="{page}">{html.escape(title)}'
                    f'</a></td><td>{modules}</td><td class="num">{seconds:.1f} s</td></tr>')
    (BUILD / "index.html").write_text(INDEX.format(rows="\n".join(rows), total=total),
                                      encoding="utf-8")
    print(f"book: {len(chapters)} chapters in {total:.1f} s; open _build/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
