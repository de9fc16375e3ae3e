"""tools/ is a package: its modules import each other as `tools.NAME` (run as
`python -m tools.NAME` from the repository root), edit no sys.path, import no sibling's
private (underscore) name, and import each other without a circle.

Read from the source with ast, not by importing: every import counts, at the top of a
module and inside its functions (an import inside a function still ties the two modules
together; it only hides the circle until the function runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"


def modules(folder: Path = TOOLS) -> dict[str, ast.Module]:
    """{module name: its syntax tree} for every tools/*.py (the package's __init__ too)."""
    return {path.stem: ast.parse(path.read_text(encoding="utf-8"), str(path))
            for path in sorted(folder.glob("*.py"))}


def sibling_imports(tree: ast.Module, siblings: set[str]) -> list[tuple[int, str, str, list[str]]]:
    """(line, how, sibling, names taken from it) for each import of a sibling module.

    how: "package" for `import tools.X` / `from tools import X` / `from tools.X import a`;
    "bare" for `import X` / `from X import a` (the sys.path way); "relative" for
    `from . import X` / `from .X import a`.
    """
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "tools" and len(parts) > 1 and parts[1] in siblings:
                    found.append((node.lineno, "package", parts[1], []))
                elif parts[0] in siblings:
                    found.append((node.lineno, "bare", parts[0], []))
        elif isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".") if node.module else []
            names = [alias.name for alias in node.names]
            how = "relative" if node.level else None
            if node.level and not parts or (not node.level and parts == ["tools"]):
                for name in names:  # from tools import X / from . import X
                    if name in siblings:
                        found.append((node.lineno, how or "package", name, []))
            elif not node.level and parts[0] == "tools" and parts[1] in siblings:
                found.append((node.lineno, "package", parts[1], names))
            elif parts and parts[0] in siblings:
                found.append((node.lineno, how or "bare", parts[0], names))
    return found


def module_aliases(tree: ast.Module, siblings: set[str]) -> dict[str, str]:
    """{local name: sibling} for each sibling bound as a module (`from tools import X as Y`)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module == "tools" or
                                                 (node.level and not node.module)):
            for alias in node.names:
                if alias.name in siblings:
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in siblings and alias.asname:
                    aliases[alias.asname] = parts[0]
                elif parts[0] in siblings:
                    aliases[parts[0]] = parts[0]
                elif parts[0] == "tools" and len(parts) > 1 and parts[1] in siblings \
                        and alias.asname:
                    aliases[alias.asname] = parts[1]
    return aliases


def graph(folder: Path = TOOLS) -> dict[str, set[str]]:
    """{module: the sibling modules it imports, in any form, anywhere in it}."""
    trees = modules(folder)
    siblings = set(trees) - {"__init__"}
    return {name: {target for _, _, target, _ in sibling_imports(tree, siblings)} - {name}
            for name, tree in trees.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted;
    a module in one imports itself through the others."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def a_cycle(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """One circle through a component, for the message: a -> b -> ... -> a."""
    start, members = component[0], set(component)
    path, seen = [start], {start}
    while True:
        nxt = sorted(edges[path[-1]] & members)
        if start in nxt and len(path) > 1:
            return [*path, start]
        unseen = [n for n in nxt if n not in seen]
        if not unseen:
            return [*path, nxt[0]]
        path.append(unseen[0])
        seen.add(unseen[0])


def private_imports(folder: Path = TOOLS) -> list[str]:
    """Each use of a sibling's underscore name: `from tools.X import _y`, or `X._y`."""
    trees = modules(folder)
    siblings = set(trees) - {"__init__"}
    found = []
    for name, tree in trees.items():
        for line, _, target, names in sibling_imports(tree, siblings):
            found += [f"tools/{name}.py:{line}: imports {target}.{n}" for n in names
                      if n.startswith("_") and target != name]
        aliases = module_aliases(tree, siblings)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and aliases[node.value.id] != name
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"tools/{name}.py:{node.lineno}: uses "
                             f"{aliases[node.value.id]}.{node.attr}")
    return found


def defined_names(tree: ast.Module) -> set[str]:
    """Names a module defines itself at its top level (def, class, assignment), not
    those it imports."""
    found: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            body += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                     *(n for h in getattr(node, "handlers", []) for n in h.body)]
    return found


def re_exports(folder: Path = TOOLS) -> list[str]:
    """Each `from tools.X import name` where X does not define `name` (it imports it)."""
    trees = modules(folder)
    siblings = set(trees) - {"__init__"}
    defined = {name: defined_names(tree) for name, tree in trees.items()}
    return [f"tools/{name}.py:{line}: takes {n} from {target}, which only imports it"
            for name, tree in trees.items()
            for line, _, target, names in sibling_imports(tree, siblings)
            for n in names if n != "*" and n not in defined[target]]


def path_edits(folder: Path = TOOLS) -> list[str]:
    """Each mention of `sys.path` in a tools module."""
    found = []
    for name, tree in modules(folder).items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == "path"
                    and isinstance(node.value, ast.Name) and node.value.id == "sys"):
                found.append(f"tools/{name}.py:{node.lineno}")
    return found


# --- the tests ------------------------------------------------------------------------

def test_tools_is_a_package():
    assert (TOOLS / "__init__.py").is_file()


def test_siblings_are_imported_by_their_package_name():
    trees = modules()
    siblings = set(trees) - {"__init__"}
    wrong = [f"tools/{name}.py:{line}: {how} import of {target}"
             for name, tree in trees.items()
             for line, how, target, _ in sibling_imports(tree, siblings) if how != "package"]
    assert not wrong, ("import siblings as `from tools import X` or `from tools.X import "
                       "name`:\n" + "\n".join(wrong))


def test_no_tool_edits_sys_path():
    assert not path_edits(), ("tools are run as `python -m tools.NAME` from the repository "
                              "root and need no sys.path edits: " + ", ".join(path_edits()))


def test_the_tools_import_each_other_without_a_circle():
    edges = graph()
    found = cycles(edges)
    assert not found, "import circles among tools/: " + "; ".join(
        " -> ".join(a_cycle(edges, component)) for component in found)


def test_no_tool_imports_a_siblings_private_name():
    found = private_imports()
    assert not found, ("a name another module uses is not private: make it public (no "
                       "leading underscore) or move it:\n" + "\n".join(found))


def test_each_name_comes_from_the_module_that_defines_it():
    found = re_exports()
    assert not found, ("import a name from the module that defines it (no re-exports):\n"
                       + "\n".join(found))


def test_the_checks_find_what_they_look_for(tmp_path):
    """The helpers see a bare import, a circle through function-level imports, a
    sibling's private name and a re-export (what tools/ held before it became a package)."""
    (tmp_path / "a.py").write_text("import sys\nsys.path.insert(0, '.')\nimport b\n")
    (tmp_path / "b.py").write_text("def f():\n    from c import _g\n    return _g\n")
    (tmp_path / "c.py").write_text("def _g():\n    from tools import a\n    return a._h\n")
    edges = graph(tmp_path)
    assert edges == {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert a_cycle(edges, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert private_imports(tmp_path) == ["tools/b.py:2: imports c._g", "tools/c.py:3: uses a._h"]
    assert path_edits(tmp_path) == ["tools/a.py:2"]
    (tmp_path / "d.py").write_text("from tools.b import f\nfrom tools.a import sys\n")
    assert re_exports(tmp_path) == ["tools/d.py:2: takes sys from a, which only imports it"]
