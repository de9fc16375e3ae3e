"""Plain-text docstrings as safe reStructuredText, for the site's API reference.

The package's docstrings are written to be read with help(): plain text in which
`|y|`, `<pad>`, `init_std**2`, `word_`, `[B, T]` or a URL mean themselves. Sphinx
reads docstrings as reST, where the same characters are markup (a substitution,
emphasis, a hyperlink reference, a link). `plain_text_to_rest` turns a plain
docstring into reST that renders as the author wrote it:

- `code` (single backticks) becomes an inline literal;
- every other markup character is escaped, URLs and addresses are not linked;
- a one-line paragraph stays a paragraph; a paragraph of several lines keeps its
  line breaks (a line block), since docstrings put one item per line;
- an indented block (an example, a table) becomes a literal block.

Future docstrings need no care for reST: whatever plain text they hold builds.
"""

from __future__ import annotations

import re

CODE_SPAN = re.compile(r"`([^`\n]+)`")
# Characters that reST may read as inline markup, outside code spans.
MARKUP = re.compile(r"([\\*`|_\[\]<>])")


def _escape(text: str) -> str:
    text = MARKUP.sub(r"\\\1", text)
    # Standalone URLs and e-mail addresses would become links; keep them text.
    return text.replace("://", r"\://").replace("@", r"\@")


def _literal(code: str) -> str:
    if "``" in code or code != code.strip():
        return _escape(code)
    return f"``{code}``"


def inline(line: str) -> str:
    """One line of plain text -> reST inline text that renders the same."""
    out, pos = [], 0
    for match in CODE_SPAN.finditer(line):
        out.append(_escape(line[pos:match.start()]))
        before = line[match.start() - 1] if match.start() else " "
        after = line[match.end()] if match.end() < len(line) else " "
        # Inline markup must stand between spaces or punctuation; an escaped
        # space ("\ ") joins it to a neighbouring letter and renders as nothing.
        out.append(("" if before.isspace() or before in "([{'\"" else "\\ ")
                   + _literal(match.group(1))
                   + ("" if after.isspace() or after in ")]}.,;:!?'\"" else "\\ "))
        pos = match.end()
    out.append(_escape(line[pos:]))
    text = "".join(out)
    # A line must not start a list, a comment, a doctest or a section underline.
    if re.match(r"^(\d+[.)]\s|[-+•=~^#:.>]|\w\.\s)", text):
        text = "\\" + text
    return text


def _blocks(lines: list[str]) -> list[list[str]]:
    blocks: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            blocks[-1].append(line.rstrip())
        elif blocks[-1]:
            blocks.append([])
    return [b for b in blocks if b]


def plain_text_to_rest(text: str) -> str:
    """A plain-text docstring (already dedented) -> reST that renders as written."""
    out: list[str] = []
    for block in _blocks(text.expandtabs().splitlines()):
        indent = min(len(line) - len(line.lstrip()) for line in block)
        if indent > 0 or block[0].lstrip().startswith(">>>"):
            out += ["::", ""] + ["    " + line for line in block] + [""]
        elif len(block) == 1:
            out += [inline(block[0]), ""]
        else:
            for line in block:
                stripped = line.lstrip()
                lead = len(line) - len(stripped)
                # Keep an indented continuation line indented (no-break spaces).
                out.append("| " + "\u00a0" * lead + inline(stripped))
            out.append("")
    return "\n".join(out).rstrip() + "\n"
