"""Tests for transformer.data (chapter 09): the toy corpus, its split, vocabularies, batching."""

import random

import pytest
import torch

from transformer.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    Vocab,
    collate,
    make_batches,
    pad_sequences,
    tokenize,
)
from transformer.grammar import (
    LONG_MAX_WORDS,
    MAX_WORDS,
    generate_corpus,
    generate_long_pairs,
    is_held_out,
    sample_clause,
    sample_pair,
    split_corpus,
)


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(size=30_000, seed=0)


@pytest.fixture(scope="module")
def split(corpus):
    return split_corpus(corpus)


def test_corpus_is_deterministic_distinct_and_holds_the_running_example(corpus):
    assert corpus[0] == ("I love apples", "我 喜欢 苹果")
    assert len(corpus) == 30_000
    assert len({en for en, _ in corpus}) == len(corpus), "English sentences must be distinct"
    assert generate_corpus(size=500, seed=0) == corpus[:500]
    assert generate_corpus(size=500, seed=1) != corpus[:500]
    assert all(len(en.split()) <= MAX_WORDS and len(zh.split()) <= MAX_WORDS for en, zh in corpus)


def test_grammar_covers_reordering_negation_questions_aspect_and_measure_words(corpus):
    zh_words = [zh.split() for _, zh in corpus]
    for marker in ("了", "过", "不", "没有", "吗", "会", "个", "只", "条", "本", "杯", "根", "匹"):
        assert any(marker in words for words in zh_words), marker
    # Time and place come before the verb in Chinese, after the object in English.
    rng = random.Random(0)
    for _ in range(2000):
        en, zh = sample_clause(rng)
        if en.endswith("yesterday") and "at home" in en and not en.endswith("?"):
            words = zh.split()
            assert words.index("昨天") < words.index("在") < words.index("家")
            assert words[1] == "昨天"
    # A known translation of each kind.
    pairs = dict(corpus)
    for en, zh in pairs.items():
        if en.startswith("did ") and en.endswith("?"):
            assert zh.endswith("吗 ？") and "了" in zh.split()
        if " did not " in en and " and " not in en and " but " not in en:  # one clause
            assert "没有" in zh.split() and "了" not in zh.split()


def test_a_compound_sentence_is_two_statements_and_a_conjunction():
    """sample_pair joins about three draws in ten; each clause translates as it does alone
    (sample_clause), "and" becomes a comma, "but" a comma and 但是, and no question is joined."""
    draws = random.Random(11)
    clauses = dict(sample_clause(draws) for _ in range(20_000))  # English -> Chinese
    rng, compounds, checked = random.Random(3), 0, 0
    for _ in range(3000):
        en, zh = sample_pair(rng)
        if " and " not in en and " but " not in en:
            continue
        compounds += 1
        conj, zh_conj = (" but ", " ， 但是 ") if " but " in en else (" and ", " ， ")
        (first, second), (zh_first, zh_second) = en.split(conj), zh.split(zh_conj)
        assert not first.endswith("?") and not second.endswith("?"), en
        for clause, translation in ((first, zh_first), (second, zh_second)):
            if clause in clauses:
                checked += 1
                assert clauses[clause] == translation, (en, zh)
    assert 0.25 * 3000 < compounds < 0.35 * 3000, compounds
    assert checked > 100  # enough clauses were drawn alone too


def test_long_pairs_are_longer_than_the_corpus_and_new(corpus):
    long = generate_long_pairs(200, seed=1)
    assert len({en for en, _ in long}) == 200 and generate_long_pairs(200, seed=1) == long
    assert all(MAX_WORDS < max(len(en.split()), len(zh.split())) <= LONG_MAX_WORDS for en, zh in long)
    assert all("，" in zh.split() and not is_held_out(en) for en, zh in long)
    assert not {en for en, _ in long} & {en for en, _ in corpus}
    with pytest.raises(ValueError, match="size"):
        generate_long_pairs(0)


def test_translation_is_a_function_of_the_english(corpus):
    rng = random.Random(7)
    table = dict(corpus)
    for _ in range(5000):
        en, zh = sample_pair(rng)
        if en in table:
            assert table[en] == zh


def test_split_is_deterministic_and_keeps_test_sentences_out_of_training(corpus, split):
    train, valid, test = split
    assert len(valid) == 1000 and len(test) == 1500
    assert len(train) + len(valid) + len(test) <= len(corpus)
    train_en = {en for en, _ in train}
    assert not train_en & {en for en, _ in test}
    assert not train_en & {en for en, _ in valid}
    assert not {en for en, _ in valid} & {en for en, _ in test}
    assert split_corpus(corpus) == split
    assert ("I love apples", "我 喜欢 苹果") in train


def test_held_out_combinations_never_appear_in_training(split):
    train, valid, test = split
    assert not any(is_held_out(en) for en, _ in train + valid)
    held = [en for en, _ in test if is_held_out(en)]
    assert len(held) == 500
    assert any("green apple" in en for en in held) and any("white dog" in en for en in held)
    # ... while each word of a held-out pair is seen in training on its own.
    train_words = {w for en, _ in train for w in en.split()}
    assert {"green", "apples", "white", "dogs", "hot", "milk", "school", "tomorrow"} <= train_words


def test_split_refuses_bad_arguments(corpus):
    with pytest.raises(ValueError, match="valid_size"):
        split_corpus(corpus, valid_size=-1)
    with pytest.raises(ValueError, match="distinct"):
        split_corpus(corpus[:10] + corpus[:1])


def test_tokenize_normalises_case_and_question_marks():
    assert tokenize("Do you eat apples?") == ["do", "you", "eat", "apples", "?"]
    assert tokenize("i love apples") == ["I", "love", "apples"]
    assert tokenize("你 吃 苹果 吗？") == ["你", "吃", "苹果", "吗", "？"]


@pytest.mark.parametrize("text, words", [
    ("I love apples.", ["I", "love", "apples"]),  # the corpus writes statements without a full stop
    ("I love apples !", ["I", "love", "apples"]),
    ("I love apples...", ["I", "love", "apples"]),
    ("我 喜欢 苹果。", ["我", "喜欢", "苹果"]),
    ("Do you love apples?", ["do", "you", "love", "apples", "?"]),  # questions keep their mark
    ("apples, pears", ["apples", ",", "pears"]),  # other marks are words of their own
    ("I love apples. I love pears", ["I", "love", "apples", ".", "I", "love", "pears"]),
    ("  .  ", []),
])
def test_tokenize_handles_punctuation_like_the_corpus(text, words):
    assert tokenize(text) == words


def test_corpus_sentences_tokenize_to_their_own_words(corpus):
    """The punctuation rule changes nothing in the corpus: its words are split at spaces."""
    for en, zh in corpus[:3000]:
        assert tokenize(en) == [("I" if w.lower() == "i" else w.lower()) for w in en.split()]
        assert tokenize(zh) == zh.split()


@pytest.mark.parametrize("text", [123, None, ["I love apples"], b"I love apples"])
def test_tokenize_refuses_what_is_not_text(text):
    with pytest.raises(TypeError, match="text must be a str"):
        tokenize(text)


def test_vocab_specials_round_trip_and_unknown_words(split):
    train = split.train
    src = Vocab.build(en for en, _ in train)
    tgt = Vocab.build(zh for _, zh in train)
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert tuple(src.itos[:4]) == SPECIAL_TOKENS == tuple(tgt.itos[:4])
    for en, zh in train[:300]:
        ids = src.encode(en)
        assert ids[0] == BOS_ID and ids[-1] == EOS_ID and UNK_ID not in ids
        assert src.decode(ids) == en and tgt.decode(tgt.encode(zh)) == zh
    assert src.encode("I love apples", add_special=False) == [src.stoi[w] for w in ("I", "love", "apples")]
    assert src.unknown_words("I love durians with kiwis") == ["durians", "with", "kiwis"]
    assert src.encode("I love durians")[3] == UNK_ID
    # decode stops at <eos>, skips <pad>/<bos>, and takes tensors
    ids = torch.tensor([BOS_ID, tgt.stoi["我"], EOS_ID, tgt.stoi["猫"], PAD_ID])
    assert tgt.decode(ids) == "我"
    assert tgt.decode(ids, strip_special=False) == "<bos> 我 <eos> 猫 <pad>"
    # tokens is the one loop behind decode (chapter 11's CharVocab joins them without spaces)
    assert tgt.tokens(ids) == ["我"]
    assert tgt.tokens(ids.tolist(), strip_special=False) == ["<bos>", "我", "<eos>", "猫", "<pad>"]
    with pytest.raises(ValueError, match="1-D"):
        tgt.tokens(ids[None])
    with pytest.raises(IndexError, match="outside the vocabulary"):
        tgt.decode([len(tgt)])
    restored = Vocab.from_dict(src.to_dict())
    assert restored == src and restored.stoi == src.stoi
    assert Vocab.build(["b a a", "c"]).itos[4:] == ["a", "b", "c"]  # by frequency, then alphabetical


def test_empty_and_over_long_input_get_clear_errors():
    vocab = Vocab(["apples"])
    for text in ("", "   "):
        with pytest.raises(ValueError, match="at least one word"):
            vocab.encode(text)
    with pytest.raises(ValueError, match="too long"):
        vocab.encode(" ".join(["apples"] * 13), max_len=MAX_WORDS + 2)
    with pytest.raises(ValueError, match="empty batch"):
        collate([])
    with pytest.raises(ValueError, match="empty"):
        pad_sequences([[1, 2], []])
    with pytest.raises(ValueError, match="too long"):
        make_batches([("apples " * 20, "x")], vocab, vocab, max_len=MAX_WORDS + 2)
    with pytest.raises(ValueError, match="must start with"):
        Vocab.from_dict({"itos": ["a", "b"]})
    with pytest.raises(ValueError, match="pairs"):
        make_batches([], vocab, vocab)


def test_make_batches_has_no_hidden_length_cap_and_pads_with_pad_id():
    vocab = Vocab(["apples"])
    long = " ".join(["apples"] * 20)  # longer than MAX_WORDS: the toy grammar's limit, not a rule
    (src, tgt), = make_batches([(long, "apples"), ("apples", long)], vocab, vocab, pad_id=3)
    assert src.shape == tgt.shape == (2, 22)
    assert src[1, 3:].tolist() == [3] * 19 and tgt[0, 3:].tolist() == [3] * 19


@pytest.mark.parametrize("text", ["<eos>", "I love <pad> apples", "<UNK>", "<bos> apples"])
def test_special_token_strings_are_not_words(text):
    vocab = Vocab(["I", "love", "apples"])
    with pytest.raises(ValueError, match="special token"):
        vocab.encode(text)


@pytest.mark.parametrize("state", [[1, 2], {"itos": "abc"}, {"itos": ["<pad>", "<bos>", "<eos>", "<unk>", 5]},
                                   {"itos": ["<pad>", "<bos>", "<eos>", "<unk>", "a", "a"]}, {}, None])
def test_vocab_from_dict_refuses_malformed_tables(state):
    with pytest.raises(ValueError, match="vocabulary"):
        Vocab.from_dict(state)


@pytest.mark.parametrize("words", [["a b"], [""], [3], ["ok", None]])
def test_vocab_refuses_words_it_could_never_encode(words):
    with pytest.raises(ValueError, match="words must be"):
        Vocab(words)


@pytest.mark.parametrize("call, name", [
    (lambda v: make_batches([("a", "a")], v, v, batch_size=0), "batch_size"),
    (lambda v: make_batches([("a", "a")], v, v, batch_size=True), "batch_size"),
    (lambda v: make_batches([("a", "a")], v, v, shuffle=1), "shuffle"),
    (lambda v: make_batches([("a", "a")], v, v, pad_id=-1), "pad_id"),
    (lambda v: make_batches([("a", "a")], v, v, seed=-1), "seed"),
    (lambda v: pad_sequences([[1, 2]], pad_id=True), "pad_id"),
    (lambda v: v.encode("a", max_len=0), "max_len"),
    (lambda v: v.encode("a", add_special=1), "add_special"),
    (lambda v: generate_corpus(size=0), "size"),
    (lambda v: generate_corpus(size=True), "size"),
    (lambda v: split_corpus([("a", "b")] * 1, valid_size=True), "valid_size"),
])
def test_bad_arguments_name_themselves(call, name):
    with pytest.raises(ValueError, match=name):
        call(Vocab(["a"]))


def test_batches_pad_on_the_right_and_cover_every_pair_once(split):
    train = split.train[:203]
    src_vocab = Vocab.build(en for en, _ in train)
    tgt_vocab = Vocab.build(zh for _, zh in train)
    batches = make_batches(train, src_vocab, tgt_vocab, batch_size=64, shuffle=True, seed=3)
    assert [b[0].size(0) for b in batches] == [64, 64, 64, 11]
    seen = []
    for src, tgt in batches:
        assert src.dtype == tgt.dtype == torch.long
        assert (src[:, 0] == BOS_ID).all() and (tgt[:, 0] == BOS_ID).all()
        for row in src:
            n = int((row != PAD_ID).sum())
            assert (row[n:] == PAD_ID).all() and row[n - 1] == EOS_ID  # padding only at the end
        seen += [src_vocab.decode(row) for row in src]
    assert sorted(seen) == sorted(en for en, _ in train)
    again = make_batches(train, src_vocab, tgt_vocab, batch_size=64, shuffle=True, seed=3)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again, strict=True))
    other = make_batches(train, src_vocab, tgt_vocab, batch_size=64, shuffle=True, seed=4)
    assert not torch.equal(batches[0][0][:, :3], other[0][0][:, :3]) or not torch.equal(batches[0][0], other[0][0])
