"""Tests for transformer.text (chapter 11): the shipped corpus, its split, characters, streams, form."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer.corpus import CORPUS_FILE, Document, line_groups, read_corpus, split_documents
from transformer.data import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID
from transformer.losses import IGNORE_INDEX
from transformer.poems import longest_shared_run, verse_form, verse_form_share
from transformer.text import (
    CharVocab,
    encode_stream,
    next_token_labels,
    random_windows,
    sequential_windows,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def documents():
    return read_corpus()


@pytest.fixture(scope="module")
def split(documents):
    return split_documents(documents)


@pytest.fixture(scope="module")
def vocab(split):
    return CharVocab.build(d.text for d in split.train)


# --- the shipped corpus ------------------------------------------------------------

def test_shipped_corpus_is_small_documented_and_licensed(documents):
    assert CORPUS_FILE.stat().st_size <= 4_000_000, "the shipped corpus must stay under 4 MB"
    readme = (CORPUS_FILE.parent / "README.md").read_text(encoding="utf-8")
    for fact in ("chinese-poetry", "2.0.1", "MIT", "tools/extract_corpus.py", "OpenCC",
                 f"{CORPUS_FILE.stat().st_size:,} bytes"):
        assert fact in readme, f"corpora/README.md must state {fact!r}"
    licence = (CORPUS_FILE.parent / "LICENSE").read_text(encoding="utf-8")
    assert "MIT License" in licence and "JackeyGao" in licence, "the source's licence ships beside it"
    assert f"{len(documents):,} poems" in readme
    assert f"{sum(len(d.text) for d in documents):,} characters" in readme


def test_corpus_text_is_clean_and_simplified(documents):
    assert len(documents) > 45_000
    text = "".join(d.text for d in documents)
    assert not re.search(r"[A-Za-z0-9%□○(){}\[\]（）〖〗]", text), "no notes, lacunae, letters or digits"
    assert all(d.text and d.text == d.text.strip() and "\n\n" not in d.text for d in documents)
    assert all("\t" not in d.author + d.title and "\n" not in d.author + d.title for d in documents)
    assert not set("壯綺離餘東來書") & set(text), "traditional characters must be converted"
    li_bai = next(d for d in documents if d.author == "李白" and d.title == "静夜思")
    assert li_bai.text == "床前看月光，疑是地上霜。\n举头望山月，低头思故乡。"  # the 1705 wording


def test_no_poem_is_mostly_a_copy_of_an_earlier_one(documents):
    """The extraction's deduplication: no poem shares half of its clauses with the poems before it."""
    seen: set[str] = set()
    for i, d in enumerate(documents):
        own = {c for c in re.split(r"[，。？！；：、「」『』《》\n]", d.text) if len(c) >= 5} or {d.text}
        assert len(own & seen) < max(1, len(own) / 2), f"poem {i} ({d.title}) copies earlier ones"
        seen |= own


def test_shipped_corpus_is_what_the_extraction_writes(tmp_path):
    """Needs npm (or the tarball in $CHINESE_POETRY_TGZ) and OpenCC: the extraction-time tools.

    OpenCC is in requirements-dev.txt, so a missing one fails here (a skip would hide it);
    npm is the machine's, and only its absence skips.
    """
    import opencc  # noqa: F401 - make install installs it; the extraction imports it
    tarball = os.environ.get("CHINESE_POETRY_TGZ")
    if tarball is None and shutil.which("npm") is None:
        pytest.skip("neither npm nor $CHINESE_POETRY_TGZ")
    # in an empty folder, the repository root on the tool's path only (it writes nothing there)
    run = subprocess.run([sys.executable, "-m", "tools.extract_corpus", "--check",
                          *(["--tarball", tarball] if tarball else [])], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stdout + run.stderr


def test_read_corpus_reads_plain_text_and_names_the_file_and_line_of_a_bad_header(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("% 李白\t静夜思\n床前看月光\n% 王维\t鹿柴\n空山不见人\n", encoding="utf-8")
    assert read_corpus(good) == [Document("李白", "静夜思", "床前看月光"), Document("王维", "鹿柴", "空山不见人")]
    bad = tmp_path / "bad.txt"
    bad.write_text("% 李白\t静夜思\n床前看月光\n% 王维\n空山不见人\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.txt, line 3"):
        read_corpus(bad)
    with pytest.raises(FileNotFoundError, match="no corpus file"):
        read_corpus(tmp_path / "missing.txt")


# --- the split -------------------------------------------------------------------

def test_line_groups_join_poems_that_share_a_clause_transitively():
    texts = ["白日依山尽，黄河入海流。", "黄河入海流，春风不度关。", "春风不度关，明月照我还。",
             "空山不见人，但闻人语响。", "黄河远上白云间。"]
    assert line_groups(texts) == [0, 0, 0, 1, 2]  # 0-1 share a clause, 1-2 another: one group
    assert line_groups(["一二三四，甲乙。", "一二三四，丙丁。"]) == [0, 0]  # four characters are a clause
    assert line_groups(["一二三，甲乙。", "一二三，丙丁。"]) == [0, 1]  # three are not
    assert line_groups(["一二三四，甲乙。", "一二三四，丙丁。"], min_clause=5) == [0, 1]


def test_split_is_by_group_disjoint_complete_and_deterministic(documents, split):
    parts = [set(map(id, part)) for part in split]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    assert sum(map(len, split)) == len(documents)
    for part in (split.valid, split.test):
        assert round(0.05 * len(documents)) <= len(part) < round(0.05 * len(documents)) + 50
    again = split_documents(documents)
    assert again == split
    assert split_documents(documents, seed=1) != split
    # Each part keeps the corpus order.
    position = {id(d): i for i, d in enumerate(documents)}
    for part in split:
        assert [position[id(d)] for d in part] == sorted(position[id(d)] for d in part)


def test_no_clause_is_in_two_parts_of_the_split(split):
    """The leak that a split by document alone allows: a held-out poem that shares a line with training."""
    owner = {}
    for name, part in split._asdict().items():
        for d in part:
            for clause in re.split(r"[，。？！；：、「」『』《》\n]", d.text):
                if len(clause) >= 4:
                    assert owner.setdefault(clause, name) == name, f"{clause!r} is in {owner[clause]} and {name}"


@pytest.mark.parametrize("kwargs, message", [
    (dict(valid_fraction=1.0), "valid_fraction"),
    (dict(test_fraction=-0.1), "test_fraction"),
    (dict(valid_fraction=True), "valid_fraction"),
    (dict(valid_fraction=float("nan")), "valid_fraction"),
    (dict(valid_fraction=0.6, test_fraction=0.5), "no training document"),
])
def test_split_refuses_bad_fractions(documents, kwargs, message):
    with pytest.raises(ValueError, match=message):
        split_documents(documents, **kwargs)


# --- characters ------------------------------------------------------------------

def test_char_vocab_keeps_the_special_ids_and_round_trips(vocab):
    assert tuple(vocab.itos[:4]) == SPECIAL_TOKENS
    assert vocab.itos[4] == "，", "most frequent first"
    text = "床前明月光，\n疑是地上霜。"
    ids = vocab.encode(text)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID and len(ids) == len(text) + 2
    assert vocab.decode(ids) == text
    assert vocab.decode(torch.tensor(ids + [PAD_ID, PAD_ID])) == text
    assert vocab.decode(ids, strip_special=False) == "<bos>" + text + "<eos>"
    assert vocab.encode("甲乙", add_special=False) == [vocab.stoi["甲"], vocab.stoi["乙"]]
    assert CharVocab.from_dict(vocab.to_dict()) == vocab
    assert isinstance(CharVocab.from_dict(vocab.to_dict()), CharVocab)


def test_char_vocab_takes_single_characters_the_line_break_included():
    assert CharVocab(["明", "\n", "明"]).itos[4:] == ["明", "\n"]
    for bad in (["明月"], [""], [3]):
        with pytest.raises(ValueError, match="single characters"):
            CharVocab(bad)


def test_char_vocab_unknown_characters(vocab):
    assert vocab.encode("☃", add_special=False) == [UNK_ID]
    assert vocab.unknown_words("床☃前") == ["☃"]
    with pytest.raises(ValueError, match="non-empty"):
        vocab.encode("")
    with pytest.raises(ValueError, match="max_len"):
        vocab.encode("床前明月光", max_len=6)
    with pytest.raises(IndexError, match="outside the vocabulary"):
        vocab.decode([len(vocab)])


def test_min_count_leaves_rare_characters_to_unk():
    vocab = CharVocab.build(["明月明", "月光"], min_count=2)  # 明 x2, 月 x2, 光 x1
    assert vocab.itos[4:] == ["明", "月"]
    assert vocab.encode("光", add_special=False) == [UNK_ID]
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="min_count"):
            CharVocab.build(["明"], min_count=bad)


def test_vocabulary_comes_from_training_documents_only(split, vocab):
    train_chars = {c for d in split.train for c in d.text}
    assert set(vocab.itos[4:]) == train_chars


# --- streams and windows -----------------------------------------------------------

def test_stream_is_bos_text_eos_per_document(vocab):
    stream = encode_stream(["床前", "明月光"], vocab)
    assert stream.tolist() == vocab.encode("床前") + vocab.encode("明月光")
    assert stream.dtype == torch.long
    with pytest.raises(ValueError, match="at least one text"):
        encode_stream([], vocab)


def test_labels_ignore_only_bos_and_pad():
    targets = torch.tensor([[5, BOS_ID, 6, EOS_ID, PAD_ID]])
    assert next_token_labels(targets).tolist() == [[5, IGNORE_INDEX, 6, EOS_ID, IGNORE_INDEX]]


def test_random_windows_are_shifted_slices_of_the_stream(vocab):
    stream = encode_stream(["床前明月光", "疑是地上霜", "举头望明月"], vocab)
    inputs, labels = random_windows(stream, 16, 6, generator=torch.Generator().manual_seed(0))
    assert inputs.shape == labels.shape == (16, 6)
    text = stream.tolist()
    for row_in, row_lab in zip(inputs.tolist(), labels.tolist(), strict=True):
        start = next(s for s in range(len(text) - 6) if text[s:s + 6] == row_in
                     and next_token_labels(torch.tensor(text[s + 1:s + 7])).tolist() == row_lab)
        assert start >= 0
    assert (labels != BOS_ID).all() and (labels == IGNORE_INDEX).any()
    again = random_windows(stream, 16, 6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again[0], inputs) and torch.equal(again[1], labels)


def test_sequential_windows_label_every_id_but_the_first_once(vocab):
    stream = encode_stream(["床前明月光，疑是地上霜。", "举头望明月"], vocab)  # 21 ids
    inputs, labels = sequential_windows(stream, 8)
    assert inputs.shape == labels.shape == (3, 8)  # ceil(20 / 8)
    real = labels[labels != IGNORE_INDEX].tolist()
    expected = [i for i in stream[1:].tolist() if i != BOS_ID]
    assert real == expected
    assert inputs.flatten()[:20].tolist() == stream[:20].tolist()


@pytest.mark.parametrize("call, message", [
    (lambda s: random_windows(s, 0, 4), "batch_size"),
    (lambda s: random_windows(s, True, 4), "batch_size"),
    (lambda s: random_windows(s, 2, 0), "seq_len"),
    (lambda s: random_windows(s, 2, 50), "needs 51"),
    (lambda s: random_windows(s.float(), 2, 4), "1-D LongTensor"),
    (lambda s: sequential_windows(s[None], 4), "1-D LongTensor"),
    (lambda s: sequential_windows(s[:1], 4), "needs 2"),
    (lambda s: sequential_windows(s, 2.0), "seq_len"),
])
def test_windows_refuse_bad_arguments(vocab, call, message):
    stream = encode_stream(["床前明月光"], vocab)
    with pytest.raises(ValueError, match=message):
        call(stream)


# --- form --------------------------------------------------------------------------

@pytest.mark.parametrize("line, form", [
    ("床前明月光，疑是地上霜。", 5),
    ("两个黄鹂鸣翠柳，一行白鹭上青天。", 7),
    ("谁言寸草心，报得三春晖？", 5),
    ("床前明月光，疑是地上霜", None),  # no end mark
    ("床前明月光，疑是地上霜。。", None),
    ("床前明月光疑是地上霜。", None),  # no comma
    ("床前明月，疑是地上霜。", None),  # 4 + 5
    ("床前明月光光，疑是地上霜霜。", None),  # 6 + 6
    ("床前明月光，疑是地上霜霜霜。", None),  # 5 + 7: the halves differ
    ("床前明月光，疑是地上霜。举头望明月，低头思故乡。", None),  # two couplets on a line
    ("", None),
])
def test_verse_form(line, form):
    assert verse_form(line) == form


def test_verse_form_share_of_the_tang_poems(documents):
    lines = [line for d in documents for line in d.text.split("\n")]
    assert 0.9 < verse_form_share(lines) < 0.95
    with pytest.raises(ValueError, match="at least one line"):
        verse_form_share([])


# --- copies ------------------------------------------------------------------------

@pytest.mark.parametrize("text, corpus, run", [
    ("床前看月光", "疑是地上霜。床前看月", "床前看月"),  # a prefix of text
    ("举头望山月", "低头望山月光", "头望山月"),  # the end
    ("春眠不觉晓", "夜来风雨声", ""),  # nothing shared
    ("月月月", "月", "月"),
    ("明月光明月", "明月光，明月", "明月光"),  # the first of two equally long runs
    ("", "abc", ""),
])
def test_longest_shared_run(text, corpus, run):
    assert longest_shared_run(text, corpus) == run


def test_longest_shared_run_finds_a_run_after_a_failed_window():
    # The window must slide, not restart: "ab" fails at "abx", then "bxyz" is in the corpus.
    assert longest_shared_run("abxyz", "ab bxyz") == "bxyz"
