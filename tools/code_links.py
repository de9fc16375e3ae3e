"""Links from the code of the website's chapter pages to the API reference.

After Sphinx has written a chapter's page, each name of the package in its code (in the
cells and in the prose's code blocks) becomes a link to the name's API entry, unless
the cell binds that name itself or the chapter rebinds it (`cell_shadows`). This is the
part of sphinx-codeautolink that the book needs, at a fraction of its cost.

Used by tools/website.py (`build`, after Sphinx).
"""

from __future__ import annotations

import ast
import re

import nbformat

from tools.chapter_exports import chapter_exports, parse_cell
from tools.export import public_names
from tools.notebooks import Chapter
from tools.site_layout import Site

LINKED = "<!-- package names linked -->"
NAME_SPAN = re.compile(r'(?<!<span class="o">\.</span>)<span class="n">(\w+)</span>')
CELL_START = re.compile(r'<div class="cell[ "]')
HIGHLIGHT = re.compile(r'<div class="highlight"><pre>.*?</pre></div>', re.S)


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
        tree = parse_cell(cell.source)
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
