"""The website's API reference, generated from the chapters and the package: one page per
module (each public name documented by autodoc, linked back to the chapter that builds
it) and api/index.md (every name of `transformer.__all__`, grouped by use, then module by
module with the first line of its docstring).

Used by tools/website.py, which writes these pages into the site's source tree, and
whose chapter map and package notes link names as these pages do (`linked_names`).
"""

from __future__ import annotations

import re

from tools.chapter_exports import (
    Export,
    chapter_exports,
    package_aliases,
    package_groups,
    package_names,
)
from tools.notebooks import Chapter


def markdown_text(text: str) -> str:
    """Plain text -> MyST inline text that shows it as written; `code` stays code."""
    parts = re.split(r"(`[^`]+`)", text)
    return "".join(part if part.startswith("`") and part.endswith("`") and len(part) > 1
                   else re.sub(r"([\\`*_{}\[\]<>()#+\-.!|$~])", r"\\\1", part)
                   for part in parts)


def linked_names(export: Export) -> str:
    """The names a module exports, each linked to its API entry."""
    return ", ".join(f"{{py:obj}}`~transformer.{export.module}.{n}`" for n in export.names)


def api_module_page(export: Export, chapter: Chapter, public: list[str]) -> str:
    """One module's page: its chapter, then each public name documented by autodoc."""
    names = export.names
    shared = [n for n in names if n in public]
    lines = [
        f"# transformer.{export.module}", "",
        f"Built in chapter {chapter.number:02d}, "
        f"{{doc}}`{chapter.title} </chapters/{chapter.name}>`, which explains and tests "
        "every name below.", "",
    ]
    if shared:
        lines += [f"Import them from the package itself, as in "
                  f"`from transformer import {shared[0]}`"
                  + ("." if len(shared) == len(names) else
                     f", or from `transformer.{export.module}` for those it does not re-export."),
                  ""]
    else:
        lines += [f"Import from `transformer.{export.module}`.", ""]
    lines += ["```{eval-rst}", f".. module:: transformer.{export.module}", ""]
    for name in names:
        kind = export.kinds[name]
        lines.append(f".. auto{kind}:: transformer.{export.module}.{name}")
        if kind == "class":
            lines += ["   :members:", "   :show-inheritance:"]
        elif name in export.computed:  # its value is the build machine's (a path, a device)
            lines.append("   :no-value:")
        lines.append("")
    lines += ["```", ""]
    return "\n".join(lines)


def api_pages(chapters: list[Chapter]) -> dict[str, str]:
    """api/index.md (every name of transformer.__all__) and one page per module."""
    aliases = package_aliases()  # top-level name -> its module's name for it
    as_named = [name for name in package_names() if name not in aliases]  # `from transformer import name`
    public = as_named + list(aliases.values())  # the objects the top level holds
    pages: dict[str, str] = {}
    index = [
        "# API reference", "",
        "Every public name of the package, in the order in which the book builds it, "
        "module by module. Each name links to its documentation; each module page links "
        "back to the chapter that explains it. All names are importable from `transformer` "
        "itself unless marked *module only*.", "",
        "```{toctree}", ":hidden:", "",
    ]
    home = {n: export.module for chapter in chapters for export in chapter_exports(chapter) for n in export.names}
    groups = ["## The top level, by use", "",
              "What `import transformer` holds, grouped by what a user of the models does with it:", ""]
    for group, names in package_groups().items():
        links = ", ".join(f"{{py:obj}}`{n} <transformer.{home[aliases.get(n, n)]}.{aliases.get(n, n)}>`"
                          for n in names if aliases.get(n, n) in home)
        groups += [f"- **{group}**: {links}"]
    groups.append("")
    tables = []
    for chapter in chapters:
        for export in chapter_exports(chapter):
            index.append(export.module)
            pages[f"api/{export.module}.md"] = api_module_page(export, chapter, as_named)
            tables += [
                f"## transformer.{export.module}", "",
                f"Module page: {{doc}}`transformer.{export.module} </api/{export.module}>`; "
                f"built in chapter {chapter.number:02d}, "
                f"{{doc}}`{chapter.title} </chapters/{chapter.name}>`.", "",
                "| Name | What it is |", "|---|---|",
            ]
            for n in export.names:
                summary = markdown_text(export.summaries[n]) or "a constant"
                if n not in public:
                    summary += " (*module only*)"
                elif n not in as_named:  # the top level holds it under another name
                    summary += f" (*as `transformer.{next(a for a, real in aliases.items() if real == n)}`*)"
                tables.append(f"| {{py:obj}}`~transformer.{export.module}.{n}` | {summary} |")
            tables.append("")
    index += ["```", ""] + groups + tables
    pages["api/index.md"] = "\n".join(index)
    return pages
