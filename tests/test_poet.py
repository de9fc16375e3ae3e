"""Appendix 15's poet: write_poem and `python -m transformer poem` with the shipped language model."""

from __future__ import annotations

from transformer.commands import main
from transformer.poems import verse_form
from transformer.poet import write_poem

FIRST = "白日依山尽，黄河入海流。"


def test_a_seed_repeats_the_poem_and_the_lines_keep_the_form():
    poem = write_poem(FIRST, seed=0)
    lines = poem.split("\n")
    assert lines[0] == FIRST and len(lines) >= 2, poem
    assert all(line and "\n" not in line for line in lines)
    assert write_poem(FIRST, seed=0) == poem
    assert write_poem(FIRST, seed=1) != poem  # another draw
    # At chapter 11's temperature most lines keep the first line's form (5 + 5 characters).
    assert sum(verse_form(line) == verse_form(FIRST) for line in lines[1:]) >= len(lines[1:]) / 2, poem


def test_the_poem_command_prints_what_write_poem_writes(capsys):
    assert main(["poem", FIRST, "--seed", "0", "--temperature", "0.6"]) == 0
    captured = capsys.readouterr()
    assert captured.out == write_poem(FIRST, seed=0) + "\n" and captured.err == ""


def test_the_poem_command_names_an_unknown_character(capsys):
    assert main(["poem", "白日依山尽，黄河入海流。ok"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: first_line holds characters") and "'o', 'k'" in err and "\n" not in err
