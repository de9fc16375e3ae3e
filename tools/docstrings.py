"""Plain-text docstrings as safe reStructuredText, for the site's API reference.

The package's docstrings are written to be read with help(): plain text in which
`|y|`, `<pad>`, `init_std**2`, `word_`, `[B, T]` or a URL mean themselves. Sphinx
reads docstrings as reST, where the same characters are markup (a substitution,
emphasis, a hyperlink reference, a link). `plain_text_to_rest` turns a plain
docstring into reST that renders as the author wrote it:

- `code` (single backticks) becomes an inline literal;
- every other markup character is escaped, URLs and addresses are not linked;
- a Google-style section (`Args:`, `Returns:`, `Raises:`, `Yields:`, `Attributes:`
  followed by indented lines) becomes a field of a field list, as Sphinx shows
  parameters: under `Args`, `Raises` and `Attributes` one bullet per item, its name
  in bold before a dash, its wrapped lines joined;
- any other paragraph is wrapped prose and flows as one paragraph, unless some of its
  lines are indented further (then it keeps its line breaks, as a line block);
- an indented block (an example, a table) becomes a literal block.

Future docstrings need no care for reST: whatever plain text they hold builds.

Not sphinx.ext.napoleon: it turns the Google sections into fields but passes the rest on
as reST, where `|y|` is still a substitution and `**kwargs` still emphasis (shown by
tests/test_site.py, test_napoleon_alone_leaves_plain_text_as_markup).
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


SECTION = re.compile(r"^(Args|Returns|Yields|Raises|Attributes):$")
ITEMISED = {"Args", "Raises", "Attributes"}  # one "name: description" per item
ITEM = re.compile(r"^([\w*][\w*, ]*?):\s+(.*)$")  # "d_model: ...", "src_len, tgt_len: ..."


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _line_block(lines: list[str], margin: str = "") -> list[str]:
    """Lines -> a reST line block that keeps each line and its extra indentation."""
    base = min(_indent(line) for line in lines)
    # Keep an indented continuation line indented (no-break spaces).
    return [margin + "| " + "\u00a0" * (_indent(line) - base) + inline(line.strip()) for line in lines]


def _items(lines: list[str]) -> list[str]:
    """A section's lines -> its items: a line at the section's indent starts one, a line
    indented further continues it (a wrapped description)."""
    base = min(_indent(line) for line in lines)
    items: list[str] = []
    for line in lines:
        if _indent(line) == base or not items:
            items.append(line.strip())
        else:
            items[-1] += " " + line.strip()
    return items


def _section(header: str, lines: list[str]) -> list[str]:
    """A Google-style section -> one field of a reST field list."""
    out = [f":{header}:"]
    if header not in ITEMISED:
        return out + _line_block(lines, margin="    ") + [""]
    for item in _items(lines):
        match = ITEM.match(item)
        if match:
            name, description = match.groups()
            out.append(f"    * **{_escape(name)}** \u2013 {inline(description)}")
        else:
            out.append(f"    * {inline(item)}")
    return out + [""]


def plain_text_to_rest(text: str) -> str:
    """A plain-text docstring (already dedented) -> reST that renders as written."""
    out: list[str] = []
    for block in _blocks(text.expandtabs().splitlines()):
        indent = min(_indent(line) for line in block)
        header = SECTION.match(block[0])
        if header and len(block) > 1 and all(_indent(line) > 0 for line in block[1:]):
            out += _section(header.group(1), block[1:])
        elif indent > 0 or block[0].lstrip().startswith(">>>"):
            out += ["::", ""] + ["    " + line for line in block] + [""]
        elif all(_indent(line) == 0 for line in block):
            out += [inline(" ".join(line.strip() for line in block)), ""]
        else:
            out += _line_block(block) + [""]
    return "\n".join(out).rstrip() + "\n"
