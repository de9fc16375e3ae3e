"""What each chapter exports into the package and what it imports from it, read from its
cells with ast (nothing is imported or run).

Used by the website: tools/website.py (the chapter map, the box under each chapter's
title), tools/api_pages.py (the API reference) and tools/code_links.py (the package's
names linked in the chapters' code).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from tools.export import public_names
from tools.notebooks import PACKAGE, Chapter


@dataclass
class Export:
    module: str
    kinds: dict[str, str]  # public name -> "function", "class" or "data", in definition order
    summaries: dict[str, str]  # public name -> first line of its docstring ("" for a constant)
    computed: set[str] = field(default_factory=set)  # constants not written as a literal

    @property
    def names(self) -> list[str]:
        return list(self.kinds)


def _kind(node: ast.AST) -> str:
    if isinstance(node, ast.ClassDef):
        return "class"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return "function"
    return "data"


def chapter_exports(chapter: Chapter) -> list[Export]:
    """The modules a chapter writes and the public names it defines in each, in order."""
    exports = {m: Export(m, {}, {}) for m in chapter.modules}
    for module, _, source in chapter.exports:
        for name, node in public_names(ast.parse(source)):
            if name not in exports[module].kinds:
                exports[module].kinds[name] = _kind(node)
                doc = "" if _kind(node) == "data" else (ast.get_docstring(node) or "")
                exports[module].summaries[name] = doc.strip().split("\n")[0]
                if _kind(node) == "data" and not _is_literal(node):
                    exports[module].computed.add(name)
    return list(exports.values())


def _is_literal(node: ast.AST) -> bool:
    """Whether a constant is written as a literal (`MAX_LEN = 512`), not computed."""
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, AttributeError):
        return False
    return True


def package_names() -> list[str]:
    """transformer.__all__, read from the generated __init__.py without importing torch."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise SystemExit("transformer/__init__.py has no __all__; run `make export`")


def symbol_chapters(chapters: list[Chapter]) -> dict[str, tuple[int, str, str]]:
    """name -> (chapter number, chapter title, chapter file stem) for every exported name."""
    return {name: (c.number, c.title, c.name)
            for c in chapters for e in chapter_exports(c) for name in e.names}


def parse_cell(source: str) -> ast.Module | None:
    """A code cell's syntax tree, its magics (`%`) and shell lines (`!`) left out; None
    where it does not parse."""
    source = "\n".join(line for line in source.splitlines()
                       if not line.lstrip().startswith(("%", "!")))
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def imports_from_package(chapter: Chapter) -> dict[str, list[str]]:
    """module -> names a chapter imports from earlier chapters' modules, in order of use."""
    own = set(chapter.modules)
    used: dict[str, list[str]] = {}
    for cell in chapter.notebook.cells:
        tree = parse_cell(cell.source) if cell.cell_type == "code" else None
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformer."):
                module = node.module.split(".", 1)[1]
                if module not in own:
                    names = used.setdefault(module, [])
                    names.extend(a.name for a in node.names
                                 if a.name != "*" and a.name not in names)
    return used
