"""The README's programmer section runs as written, and says what it prints.

Its ```python blocks run in order in one namespace (a block uses the names of the blocks
before it, as a reader of the section does), and every value a comment claims is
compared with the value: `x = f()  # [2, 4, 1000]` is x's shape, `f()  # 'text'` and a
comment-only line `# [...]` under an expression are the expression's value. Its ```bash
commands that call the package run too. (`make lint` type-checks the same blocks. The
libraries that run Markdown's code blocks, mktestdocs and pytest-markdown-docs, run them
but do not compare the values that the comments claim, which is what a reader checks.)
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tools.readme_code import SECTION, programmer_blocks

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def leading_literal(comment: str) -> object | None:
    """The Python literal a comment starts with ('text', [2, 4], ...), or None."""
    text = comment.strip()
    if not text or text[0] not in "'\"[(0123456789-":
        return None
    for end in range(len(text), 0, -1):
        if text[:end].rstrip().endswith(","):
            continue  # "[2, 4, 1000], never softmax" claims a list, not a tuple of one
        try:
            return ast.literal_eval(text[:end])
        except (SyntaxError, ValueError):
            continue
    return None


def claims(block: str) -> list[tuple[int, str, str, object]]:
    """(line, 'shape' or 'value', the code, the claimed literal) for each claim in a block."""
    found, previous = [], None
    for number, line in enumerate(block.splitlines(), 1):
        code, _, comment = line.partition("#")
        code = code.strip()
        literal = leading_literal(comment) if comment else None
        if code:
            previous = code
            if literal is not None:
                statement = ast.parse(code).body[0]
                kind = "shape" if isinstance(statement, ast.Assign) else "value"
                found.append((number, kind, code, literal))
        elif literal is not None and previous is not None:
            found.append((number, "value", previous, literal))
            previous = None
    return found


def checked(blocks: list[str]) -> list[str]:
    """Run the blocks in one namespace; what each claim says and what the code gave, where
    they differ."""
    namespace: dict = {}
    wrong = []
    for index, block in enumerate(blocks, 1):
        exec(compile(block, f"README.md, block {index}", "exec"), namespace)
        for line, kind, code, literal in claims(block):
            if kind == "shape":
                target = ast.parse(code).body[0].targets[0].id
                got = list(namespace[target].shape)
            else:
                got = eval(code, namespace)
            if got != literal:
                wrong.append(f"block {index}, line {line}: `{code}` says {literal!r}, gives {got!r}")
    return wrong


def test_the_programmer_section_runs_and_its_comments_hold():
    blocks = programmer_blocks(README)
    assert len(blocks) >= 2
    assert sum(len(claims(b)) for b in blocks) >= 3  # the shape and the two translations
    assert checked(blocks) == []


def test_generate_gives_what_the_comment_says():
    """`out = model.generate(src, ...)  # greedy: [2, 1 + n], <bos> first`: not a literal,
    so said here: batch 2, at most 1 + 20 positions, each row starting with <bos>."""
    namespace: dict = {}
    exec(compile(programmer_blocks(README)[0], "README.md", "exec"), namespace)
    out, model = namespace["out"], namespace["model"]
    assert "# greedy: [2, 1 + n], <bos> first" in README
    assert out.shape[0] == 2 and 2 <= out.shape[1] <= 21
    assert (out[:, 0] == model.bos_id).all()


def bash_commands() -> list[tuple[str, str]]:
    """(command, what its comment says) for each `python -m transformer` line of the section."""
    start = README.index(SECTION)
    section = README[start:README.find("\n## ", start + len(SECTION))]
    return [(m.group(1).strip(), m.group(2).strip()) for m in
            re.finditer(r"^python -m transformer (.*?)\s+#\s*(.*)$", section, flags=re.M)]


@pytest.mark.parametrize("command, says", bash_commands())
def test_the_command_lines_print_what_they_say(command, says):
    args = [sys.executable, "-m", "transformer", *__import__("shlex").split(command.split(">")[0])]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    if command.startswith("translate"):
        assert done.stdout.strip() == says
    else:  # train --example book > book.toml: a config to train from
        assert "config" in says and tomllib.loads(done.stdout)


def test_the_checks_catch_a_wrong_claim():
    """A shape, a value and a value on the line below that the code does not give."""
    blocks = ["import torch\nx = torch.zeros(2, 3)   # [2, 4]\n",
              "len('ab')   # 3\n",
              "sorted('ba')\n# ['b', 'a']   (a comment after the literal)\n"]
    assert [claim[1:] for claim in claims(blocks[0])] == [("shape", "x = torch.zeros(2, 3)", [2, 4])]
    assert checked(blocks) == [
        "block 1, line 2: `x = torch.zeros(2, 3)` says [2, 4], gives [2, 3]",
        "block 2, line 1: `len('ab')` says 3, gives 2",
        "block 3, line 2: `sorted('ba')` says ['b', 'a'], gives ['a', 'b']"]
