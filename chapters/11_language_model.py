# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jupytext
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 11 · A decoder-only language model
#
# Chapters 01-10 built the Transformer of 2017: an encoder reads an English sentence, a
# decoder writes its Chinese translation. Most of the models you will meet next are
# simpler: a **decoder-only language model** reads one stream of text and predicts its
# next token. This chapter builds one from the package's parts and trains it on the Tang
# poems, which ship with the repository:
#
# - the **corpus**, its licence, a split by document that keeps poems sharing a line on
#   one side, and a character vocabulary;
# - **batches** cut from one long stream, `[batch, seq]`;
# - two counted **baselines**, the unigram and the bigram model, and a measure of
#   **form** (does a generated line have the 5- or 7-character shape of a Tang poem?);
# - the **model**: chapter 07's decoder block without cross-attention, chapter 04's
#   causal mask, tied weights; trained here for a minute with chapter 09's loop, and
#   loaded as the package ships it, trained for 2,000 updates (section 8);
# - **generation** with chapter 10's samplers and KV cache: what the model writes,
#   whether it keeps the form, and whether it copies its training text.

# %%
#| default_exp lm

# %%
import matplotlib.pyplot as plt
import torch

_ = torch.manual_seed(0)
# One thread, as in chapters 09 and 10: the trained weights then depend on the seed
# alone, not on how a busy machine schedules two threads.
torch.set_num_threads(1)

# %% [markdown]
# ## 1 · The pressure: most text comes without a translation
#
# Chapter 09 trained on *pairs*: an English sentence and its Chinese translation. Pairs
# are rare; plain text is everywhere, and it has no second half. Can a Transformer learn
# from text alone?
#
# The decoder of chapter 08 scores the next target token given the source $x$ and the
# target prefix: $p(y_t \mid y_{<t}, x)$. Take the source away and what is left is a
# model of text by itself,
#
# $$p(x_1, \dots, x_n) = \prod_{t=1}^{n} p(x_t \mid x_1, \dots, x_{t-1}),$$
#
# the chain rule of probability, with no approximation. A **language model** learns each
# factor. Every position of every text is a training example, and the labels are the text
# itself, shifted by one. We train it as in chapter 09, by minimising the cross-entropy
# of the true next token,
#
# $$\mathcal{L} = -\frac{1}{N}\sum_{t=1}^{N} \ln p(x_t \mid x_{<t}),$$
#
# and report it as a **perplexity**, $\operatorname{PPL} = e^{\mathcal{L}}$. A model that
# spreads its bet evenly over $V$ tokens has perplexity $V$ (exercise 1 asks why), so a
# perplexity of 200 means the model is on average as unsure as a uniform choice among
# 200 tokens. Lower is better, and only perplexity on text the model never saw counts.

# %% [markdown]
# ## 2 · Real text: the Tang poems
#
# Chapter 09's toy grammar was enough to learn translation, not a *language*. The package
# ships real text, `transformer/corpora/tang_poems.txt.xz`: the *Quan Tangshi* (全唐诗,
# *Complete Tang Poems*, compiled in 1705), as the npm package `chinese-poetry` (version
# 2.0.1, MIT licence) transcribes it. `tools/extract_corpus.py` took it from that package
# once (nothing is downloaded when a chapter runs), and
#
# - dropped the poems whose text did not survive whole (a lacuna □, an editor's note in
#   brackets, a character that is not Chinese or punctuation);
# - converted the traditional characters to the simplified ones the rest of the book uses
#   (OpenCC: 壯 綺 離 餘 become 壮 绮 离 余);
# - dropped a poem when half of its lines are already in a poem kept before it (the
#   collection holds many poems twice, under two titles or two authors).
#
# The poems are in the public domain; the transcription is © 2016 JackeyGao under the MIT
# licence, which ships beside the file (`transformer/corpora/README.md`). Python's
# standard library reads the xz compression (`lzma`).

# %%
#| export corpus
import lzma
import re
from pathlib import Path
from typing import NamedTuple

import transformer as _package

CORPUS_FILE = Path(_package.__file__).resolve().parent / "corpora" / "tang_poems.txt.xz"
CORPUS_ENCODING = "utf-16-le"  # the shipped file's text: 2 bytes a Chinese character, not UTF-8's 3


class Document(NamedTuple):
    """One poem of the corpus: who wrote it, its title, and its text.

    Attributes:
        author: the poet.
        title: the poem's title.
        text: its lines, joined by newlines.
    """

    author: str
    title: str
    text: str


def read_corpus(path: str | Path = CORPUS_FILE) -> list[Document]:
    """Read a corpus file written by tools/extract_corpus.py, or one of your own in its format.

    Each document is a header line `% AUTHOR<TAB>TITLE` followed by its lines. A file
    ending in `.xz` is decompressed and decoded as UTF-16-LE (the shipped corpus); any
    other file is read as UTF-8 text.

    Args:
        path: the file (default: the shipped Tang poems).

    Returns:
        The documents, in file order.

    Raises:
        FileNotFoundError: there is no file at path.
        ValueError: a header line is malformed or a document has no text (the message
            names the file and the line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no corpus file at {path}")
    if path.suffix == ".xz":
        content = lzma.decompress(path.read_bytes()).decode(CORPUS_ENCODING)
    else:
        content = path.read_text(encoding="utf-8")
    documents, line_no = [], 1
    for block in re.split(r"^% ", content, flags=re.M)[1:]:
        header, _, text = block.partition("\n")
        fields, text = header.split("\t"), text.rstrip("\n")
        if len(fields) != 2 or not text:
            raise ValueError(f"{path}, line {line_no}: expected '% AUTHOR<TAB>TITLE' followed by "
                             f"text, got {header[:60]!r}")
        documents.append(Document(fields[0], fields[1], text))
        line_no += block.count("\n")
    return documents


# %%
documents = read_corpus()
characters = sum(len(d.text) for d in documents)
print(f"{len(documents):,} poems by {len({d.author for d in documents}):,} poets, "
      f"{characters:,} characters ({CORPUS_FILE.stat().st_size / 1e6:.1f} MB compressed)")
quiet_night = next(d for d in documents if d.author == "李白" and d.title == "静夜思")
print(f"\n《{quiet_night.title}》 {quiet_night.author}\n{quiet_night.text}")

# %% [markdown]
# Li Bai's "Quiet Night Thoughts", the first poem Chinese pupils learn, in the wording of
# the 1705 collection: 床前**看**月光 and 举头望**山**月, where school books write 明月光 and
# 望明月. It is our running example.
#
# ### A split by document, not by line, and not across shared lines
#
# We hold out 5% of the poems for validation (to choose settings) and 5% for the test.
# We split whole poems, not lines: the lines of one poem share its rhyme, images and
# phrases, so a split by line would test the model on the other half of poems it has
# read.
#
# Whole poems are not quite enough. Some poems still share a line with another: a poet
# quotes an older one, two poems of a set repeat a refrain, one poem survives in two
# versions. So `line_groups` joins every two poems that share a **clause** (a run of 4
# or more characters between punctuation marks), and joins groups that share a poem; the
# split moves whole groups. Most poems are a group of their own (printed below).

# %%
#| export corpus
import random
from collections.abc import Sequence

from transformer.validation import _check_float, _check_int

CLAUSE_END = re.compile(r"[，。？！；：、「」『』《》\n]")  # the punctuation between clauses, and line breaks
MIN_CLAUSE = 4  # the four-character verse of ritual songs; groups stay small (printed below)


def line_groups(texts: Sequence[str], min_clause: int = MIN_CLAUSE) -> list[int]:
    """Group the documents that share a clause, directly or through others.

    A clause is a run of at least min_clause characters between punctuation marks or
    line breaks. Two texts that share one are in the same group, and so are their
    groups' other members (union-find).

    Args:
        texts: the documents' texts.
        min_clause: the shortest run that counts as a shared clause (default 4).

    Returns:
        One group number per text, in [0, number of groups): the smallest index of its
        group, renumbered in order of first appearance.
    """
    _check_int("min_clause", min_clause)
    parent = list(range(len(texts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]  # halve the path as we climb
            i = parent[i]
        return i

    first_owner: dict[str, int] = {}
    for i, text in enumerate(texts):
        for clause in CLAUSE_END.split(text):
            if len(clause) >= min_clause:
                j = first_owner.setdefault(clause, i)
                parent[root(i)] = root(j)
    numbers: dict[int, int] = {}
    return [numbers.setdefault(root(i), len(numbers)) for i in range(len(texts))]


class TextSplit(NamedTuple):
    """Disjoint train / valid / test lists of documents.

    Attributes:
        train: the documents to learn from.
        valid: the documents that choose settings and when to stop training.
        test: the documents that measure the final model, once.
    """

    train: list[Document]
    valid: list[Document]
    test: list[Document]


def split_documents(documents: list[Document], valid_fraction: float = 0.05,
                    test_fraction: float = 0.05, seed: int = 0) -> TextSplit:
    """Split whole documents at random (a seeded shuffle) into train, valid and test,
    keeping each group of `line_groups` on one side.

    The groups are shuffled; the first ones go to validation until it holds at least
    round(valid_fraction * len(documents)) documents, the next ones to the test in the
    same way, the rest to training. Each part keeps the corpus order of its documents.

    Args:
        documents: the corpus.
        valid_fraction: the share of documents for validation (default 0.05).
        test_fraction: the share of documents for the test (default 0.05).
        seed: the shuffle's seed (default 0).

    Returns:
        A TextSplit; no clause of MIN_CLAUSE characters is in two of its parts.

    Raises:
        ValueError: a fraction is not a number in [0, 1), or together they leave no
            document for training.
    """
    _check_float("valid_fraction", valid_fraction, 0.0, 1.0)  # chapter 01's shared checks
    _check_float("test_fraction", test_fraction, 0.0, 1.0)
    n_valid, n_test = round(valid_fraction * len(documents)), round(test_fraction * len(documents))
    if n_valid + n_test >= len(documents):
        raise ValueError(f"valid_fraction={valid_fraction} and test_fraction={test_fraction} leave "
                         f"no training document out of {len(documents)}")
    groups = line_groups([d.text for d in documents])
    members: list[list[int]] = [[] for _ in range(max(groups, default=-1) + 1)]
    for i, group in enumerate(groups):
        members[group].append(i)
    random.Random(seed).shuffle(members)
    parts: list[list[int]] = [[], [], []]  # valid, test, train
    for member_ids in members:
        target = 0 if len(parts[0]) < n_valid else 1 if len(parts[1]) < n_test else 2
        parts[target] += member_ids
    if not parts[2]:
        raise ValueError(f"valid_fraction={valid_fraction} and test_fraction={test_fraction} leave "
                         f"no training document out of {len(documents)}")
    valid, test, train = ([documents[i] for i in sorted(part)] for part in parts)
    return TextSplit(train, valid, test)


# %%
from collections import Counter

groups = line_groups([d.text for d in documents])
sizes = sorted(Counter(groups).values(), reverse=True)
print(f"{len(sizes):,} groups: {sum(s == 1 for s in sizes):,} poems share no line with another; "
      f"the largest groups hold {sizes[:5]} poems")
split = split_documents(documents)
for name, part in split._asdict().items():
    print(f"{name:>5}: {len(part):6,} poems, {sum(len(d.text) for d in part):9,} characters")

# %% [markdown]
# ### Characters as tokens
#
# Chinese is written without spaces, and a word is usually one or two characters, so a
# character is a natural token. The vocabulary is built from the **training** documents
# only: a character that appears only in held-out text becomes `<unk>`. So does a
# character seen fewer than `MIN_COUNT` = 3 times in training (a quarter of the distinct
# characters, printed below): one or two examples teach a model next to nothing about a
# character, and dropping them shrinks the output layer, which has one row per token. The
# vocabulary keeps chapter 09's special tokens and their ids (`<pad>` 0, `<bos>` 1,
# `<eos>` 2, `<unk>` 3), so the masks, the loss and the decoders of earlier chapters work
# unchanged: `CharVocab` is chapter 09's `Vocab` with characters where it had words.

# %%
#| export text
import math
from collections import Counter
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from transformer.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab
from transformer.validation import _check_bool, _check_int


class CharVocab(Vocab):
    """Chapter 09's Vocab with characters as tokens: every character is one id.

    The special tokens keep their ids (`<pad>` 0, `<bos>` 1, `<eos>` 2, `<unk>` 3); a
    line break is a character like any other (chapter 09's words may not hold one).
    `CharVocab.build(texts)` counts the characters of texts.

    Args:
        chars: the characters, in id order from 4 (repeats are skipped); each a str of
            length 1.

    Raises:
        ValueError: an item of chars is not a single character.
    """

    def __init__(self, chars: Iterable[str]):
        super().__init__([])  # the special tokens alone
        for char in chars:
            if not isinstance(char, str) or len(char) != 1:
                raise ValueError(f"chars must be single characters, got {char!r}")
            if char not in self.stoi:
                self.stoi[char] = len(self.itos)
                self.itos.append(char)

    @classmethod
    def build(cls, texts: Iterable[str], min_count: int = 1) -> "CharVocab":
        """A vocabulary of the characters of texts, most frequent first (ties by code point).

        Args:
            texts: the training texts.
            min_count: keep the characters seen at least this often, > 0 (default 1:
                all); the others will encode as `<unk>`.

        Returns:
            The vocabulary: the 4 special tokens, then the characters.

        Raises:
            ValueError: min_count is not a positive integer.
        """
        _check_int("min_count", min_count)
        counts = Counter(char for text in texts for char in text)
        kept = [char for char, n in counts.items() if n >= min_count]
        return cls(sorted(kept, key=lambda char: (-counts[char], char)))

    def unknown_words(self, text: str) -> list[str]:
        """The characters of text that are not in the vocabulary, in order."""
        return [char for char in text if char not in self.stoi]

    def encode(self, text: str, add_special: bool = True, max_len: int | None = None) -> list[int]:
        """text -> ids, one per character: `[BOS_ID, ..., EOS_ID]` (without them if add_special=False).

        Args:
            text: a non-empty string; characters not in the table become UNK_ID.
            add_special: wrap the ids in `<bos>` ... `<eos>` (default True).
            max_len: refuse a text whose ids would be longer (None: no limit).

        Returns:
            The ids, a list of int.

        Raises:
            ValueError: text is empty, longer than max_len, or an argument is out of range.
        """
        _check_bool("add_special", add_special)
        if max_len is not None:
            _check_int("max_len", max_len)
        if not isinstance(text, str) or not text:
            raise ValueError(f"text must be a non-empty string, got {text!r}")
        ids = [self.stoi.get(char, UNK_ID) for char in text]
        if add_special:
            ids = [BOS_ID, *ids, EOS_ID]
        if max_len is not None and len(ids) > max_len:
            raise ValueError(f"text is too long: {len(ids)} ids > max_len={max_len}: {text[:20]!r}...")
        return ids

    def decode(self, ids: Sequence[int] | Tensor, strip_special: bool = True) -> str:
        """ids (a list or a 1-D tensor) -> text, characters joined without spaces.

        Args:
            ids: token ids.
            strip_special: stop at the first `<eos>` and drop `<pad>` and `<bos>` (the
                default); otherwise every token is written out, specials by name.

        Returns:
            The text.

        Raises:
            ValueError: ids is a tensor that is not 1-D.
            IndexError: an id is outside the vocabulary.
        """
        return "".join(self.tokens(ids, strip_special))  # chapter 09's tokens, no spaces


# %%
train_counts = Counter(char for d in split.train for char in d.text)
once = sum(n == 1 for n in train_counts.values())
print(f"{len(train_counts):,} distinct characters in the training documents; {once:,} of them "
      f"({once / len(train_counts):.0%}) occur only once")
MIN_COUNT = 3
rare = sum(n < MIN_COUNT for n in train_counts.values())
print(f"{rare:,} ({rare / len(train_counts):.0%}) occur fewer than {MIN_COUNT} times")
vocab = CharVocab.build((d.text for d in split.train), min_count=MIN_COUNT)
held_out = "".join(d.text for d in split.valid + split.test)
unknown = vocab.unknown_words(held_out)
print(f"{len(vocab):,} tokens: 4 special, then the characters seen at least {MIN_COUNT} times in training")
print("most frequent:", " ".join(repr(c)[1:-1] for c in vocab.itos[4:24]))
print(f"held-out characters missing from the vocabulary: {len(unknown):,} of {len(held_out):,} "
      f"({len(unknown) / len(held_out):.1%}), e.g. {''.join(unknown[:10])}")
print("encode 床前明月光:", vocab.encode("床前明月光"), "->", repr(vocab.decode(vocab.encode("床前明月光"))))

# %% [markdown]
# ## 3 · From documents to batches: one long stream
#
# A translator's batch was a set of sentence pairs, padded to the longest. A language
# model needs neither pairs nor padding: we write every document as `<bos> text <eos>`
# into **one long stream of ids**, and cut training windows out of it at random places.
# A window of $T + 1$ ids gives $T$ inputs and, shifted by one, their $T$ labels (chapter
# 09's teacher forcing, with the text as its own target).
#
# A window may run from one poem into the next; the model then sees `<eos> <bos>` and
# learns that a new poem starts there. The label `<bos>` after an `<eos>` is certain, says
# nothing about the text, and must never be generated, so we replace it by chapter 09's
# `IGNORE_INDEX` (-100), which the loss skips.

# %%
#| export text
from transformer.losses import IGNORE_INDEX


def encode_stream(texts: Iterable[str], vocab: CharVocab) -> Tensor:
    """Encode texts into one stream of ids: `<bos> text <eos> <bos> text <eos> ...`.

    Args:
        texts: the documents' texts, each non-empty.
        vocab: the character vocabulary.

    Returns:
        A LongTensor [N] of ids, N = sum of (len(text) + 2).

    Raises:
        TypeError: texts is one str (it would be read as one text per character).
        ValueError: there is no text, or one text is empty.
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a list of texts, got one str (read character by character, each "
                        "character would become a document): pass [text]")
    ids = [i for text in texts for i in vocab.encode(text)]
    if not ids:
        raise ValueError("texts must hold at least one text, got none")
    return torch.tensor(ids, dtype=torch.long)


def next_token_labels(targets: Tensor) -> Tensor:
    """The labels for next-token targets: `<bos>` and `<pad>` replaced by IGNORE_INDEX, which the loss skips.

    After an `<eos>` the next token is always `<bos>`: certain, not text, and never to
    be generated, so it is not learned.

    Args:
        targets: ids [...] (the inputs shifted by one).

    Returns:
        A copy of targets with IGNORE_INDEX (chapter 09) where it held BOS_ID or PAD_ID.
    """
    return targets.masked_fill((targets == BOS_ID) | (targets == PAD_ID), IGNORE_INDEX)


def _check_windows(stream: Tensor, seq_len: int, need: int) -> None:
    if not isinstance(stream, Tensor) or stream.dim() != 1 or stream.dtype != torch.long:
        got = f"{stream.dtype} {tuple(stream.shape)}" if isinstance(stream, Tensor) else type(stream).__name__
        raise ValueError(f"stream must be a 1-D LongTensor of ids [N], got {got}")
    _check_int("seq_len", seq_len)
    if len(stream) < need:
        raise ValueError(f"stream holds {len(stream)} ids; a window of seq_len={seq_len} needs {need}")


def random_windows(stream: Tensor, batch_size: int, seq_len: int,
                   generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """A training batch: batch_size windows of seq_len + 1 ids from random places of the stream.

    Args:
        stream: ids [N] from encode_stream.
        batch_size: the number of windows B.
        seq_len: the input length T; each window holds T + 1 ids.
        generator: a seeded torch.Generator for reproducible batches (None: the global one).

    Returns:
        (inputs [B, T], labels [B, T]): labels[b, t] is the id after inputs[b, t], with
        `<bos>` labels replaced by IGNORE_INDEX (see next_token_labels).

    Raises:
        ValueError: stream is not a 1-D LongTensor, batch_size or seq_len is not a
            positive integer, or the stream is shorter than one window.
    """
    _check_windows(stream, seq_len, seq_len + 1)
    _check_int("batch_size", batch_size)
    starts = torch.randint(0, len(stream) - seq_len, (batch_size,), generator=generator)  # [B]
    windows = stream[starts[:, None] + torch.arange(seq_len + 1)]  # [B, T + 1]
    return windows[:, :-1], next_token_labels(windows[:, 1:])


def sequential_windows(stream: Tensor, seq_len: int) -> tuple[Tensor, Tensor]:
    """Cut the whole stream into consecutive windows, for evaluation: every id but the first
    is a label exactly once.

    Window i covers ids i·T .. i·T + T (neighbours share one id); the last window is
    padded with `<pad>`, whose labels are IGNORE_INDEX.

    Args:
        stream: ids [N] from encode_stream.
        seq_len: the window length T.

    Returns:
        (inputs [W, T], labels [W, T]) with W = ceil((N - 1) / T).

    Raises:
        ValueError: stream is not a 1-D LongTensor of at least 2 ids, or seq_len is not a
            positive integer.
    """
    _check_windows(stream, seq_len, 2)
    count = math.ceil((len(stream) - 1) / seq_len)  # W
    padding = stream.new_full((count * seq_len + 1 - len(stream),), PAD_ID)
    ids = torch.cat([stream, padding])  # [W·T + 1]
    windows = ids[torch.arange(count)[:, None] * seq_len + torch.arange(seq_len + 1)]  # [W, T + 1]
    return windows[:, :-1], next_token_labels(windows[:, 1:])


# %%
streams = {name: encode_stream([d.text for d in part], vocab) for name, part in split._asdict().items()}
for name, stream in streams.items():
    print(f"{name:>5} stream: {len(stream):7,} ids, {int((stream == BOS_ID).sum()):,} <bos> and "
          f"{int((stream == EOS_ID).sum()):,} <eos>, {(stream == UNK_ID).float().mean().item():.2%} <unk>")

poem = encode_stream([quiet_night.text], vocab)  # <bos> 床前明月光，... <eos>
inputs, labels = sequential_windows(poem, 12)  # [W, 12] each, W = ceil((N - 1) / 12)
print(f"\n{quiet_night.title}: N = {len(poem)} ids -> W = {math.ceil((len(poem) - 1) / 12)} windows: "
      f"inputs {list(inputs.shape)}, labels {list(labels.shape)}, {int((labels == IGNORE_INDEX).sum())} labels "
      f"ignored (the padded tail)")
print("labels of the targets <eos> <bos> 床:", next_token_labels(torch.tensor([EOS_ID, BOS_ID, vocab.stoi["床"]])).tolist())
for row_in, row_lab in zip(inputs[:2], labels[:2], strict=True):
    print("  input:", vocab.decode(row_in, strip_special=False).replace("\n", "⏎"))
    print("  label:", vocab.decode(row_lab, strip_special=False).replace("\n", "⏎"))
batch_inputs, batch_labels = random_windows(streams["train"], batch_size=16, seq_len=128,
                                            generator=torch.Generator().manual_seed(0))
print(f"\na training batch: inputs {list(batch_inputs.shape)}, labels {list(batch_labels.shape)}")

# %% [markdown]
# ## 4 · Baselines: what counting alone achieves
#
# A perplexity means something only against a baseline. Two classic models, counted on
# the same split:
#
# - the **unigram** model ignores the context: $p(b) = \frac{c(b) + 1}{N + V'}$, the
#   count of $b$ among the $N$ training labels plus one (add-one smoothing, so that a
#   token never seen in training still gets some probability; $V'$ counts every token
#   but `<pad>` and `<bos>`, which are never labels);
# - the **bigram** model looks one token back:
#   $p(b \mid a) = \lambda \frac{c(a, b)}{c(a)} + (1 - \lambda)\, p(b)$, the share of
#   the times $a$ was followed by $b$ in training, mixed with the unigram for the pairs
#   never seen (*interpolation*, Jelinek and Mercer 1980). $\lambda = 0$ is the unigram
#   model; we choose $\lambda$ on the validation set.
#
# `BigramLanguageModel` has the interface of a language model,
# `ids [B, T] -> logits [B, T, V]` (its logits are log-probabilities), so that the
# perplexity below and chapter 10's samplers treat it as they treat the Transformer. Its
# "weights" are a $V \times V$ table of counts.

# %%
#| export
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.data import BOS_ID, EOS_ID, PAD_ID
from transformer.validation import _check_bool, _check_float, _check_int  # noqa: F811 (lm.py's own import)
from transformer.text import next_token_labels, sequential_windows
from transformer.losses import IGNORE_INDEX
from transformer.training import evaluate_loss


class BigramLanguageModel(nn.Module):
    """The interpolated bigram model, counted from a stream: a baseline with an LM's interface.

    p(b | a) = weight · c(a, b) / c(a) + (1 - weight) · p(b), where c counts the
    (token, next label) pairs of the training stream and p(b) is the add-one smoothed
    unigram over every token that may be a label (all but `<pad>` and `<bos>`).
    weight = 0 gives the unigram model. A token never seen as a context falls back on
    the unigram. weight = 1, the bigram alone, is refused: it gives every pair it never
    counted probability 0, and held-out text an infinite perplexity.

    Args:
        stream: the training ids [N] (from encode_stream).
        vocab_size: V.
        weight: the bigram's share lambda in [0, 1) (default 0.5).

    Raises:
        ValueError: stream is not a 1-D LongTensor of at least 2 ids inside the vocabulary,
            or weight is not a number in [0, 1).
    """

    unigram: Tensor  # [V], buffers (for type checkers: register_buffer is dynamic)
    log_probs: Tensor  # [V, V]

    def __init__(self, stream: Tensor, vocab_size: int, weight: float = 0.5):
        super().__init__()
        self.vocab_size = _check_int("vocab_size", vocab_size)
        self.weight = _check_float("weight", weight, 0.0, 1.0)
        self.pad_id, self.bos_id, self.eos_id = PAD_ID, BOS_ID, EOS_ID  # its stream's vocabulary's, for generate
        if not isinstance(stream, Tensor) or stream.dim() != 1 or stream.dtype != torch.long or len(stream) < 2:
            raise ValueError("stream must be a 1-D LongTensor of at least 2 ids")
        if int(stream.min()) < 0 or int(stream.max()) >= vocab_size:
            raise ValueError(f"stream holds ids outside [0, {vocab_size - 1}] (vocab_size={vocab_size})")
        previous, labels = stream[:-1], next_token_labels(stream[1:])  # [N - 1] each
        keep = labels != IGNORE_INDEX
        previous, labels = previous[keep], labels[keep]
        may_follow = torch.ones(vocab_size)
        may_follow[[PAD_ID, BOS_ID]] = 0.0  # never a label
        unigram = (torch.bincount(labels, minlength=vocab_size) + may_follow) * may_follow  # add one
        self.register_buffer("unigram", unigram / unigram.sum())  # [V]
        pairs = torch.zeros(vocab_size, vocab_size)  # [V, V]: c(a, b)
        pairs.index_put_((previous, labels), torch.ones(len(labels)), accumulate=True)
        seen = pairs.sum(dim=1, keepdim=True)  # [V, 1]: c(a)
        bigram = torch.where(seen > 0, pairs / seen.clamp(min=1), self.unigram)  # unseen a: unigram
        probs = self.weight * bigram + (1 - self.weight) * self.unigram  # [V, V], rows sum to 1
        self.register_buffer("log_probs", probs.log())  # [V, V]; -inf for <pad>, <bos>

    def forward(self, ids: Tensor) -> Tensor:
        """ids [B, T] -> logits [B, T, V]: log p(next | ids[b, t]), from the last token alone."""
        return self.log_probs[ids]

    def next_token_loss(self, ids: Tensor, labels: Tensor) -> Tensor:
        """The mean of -log p(label | id) over the labels that are not IGNORE_INDEX (0 if none).

        What lm_loss computes from forward's logits, read straight from the table: one
        number per position instead of a row of V (the table's rows are already
        normalised, so the log-softmax that cross_entropy takes changes nothing).
        """
        counts = labels != IGNORE_INDEX  # [B, T]
        picked = self.log_probs[ids[counts], labels[counts]]  # [N]: log p(b | a) of each counted pair
        return -picked.sum() / counts.sum().clamp(min=1)


def lm_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, int]:
    """The language-model loss of one batch, in the form chapter 09's train_step, fit and
    evaluate_loss take.

    Args:
        model: maps ids [B, T] to logits [B, T, V]. A model with a `next_token_loss(inputs,
            labels)` method (the bigram below; chapter 14's SlicedLossLanguageModel)
            computes the same loss itself, without building the logits.
        batch: (inputs [B, T], labels [B, T]) from random_windows or sequential_windows;
            labels equal to IGNORE_INDEX are skipped.

    Returns:
        (the mean cross-entropy over the counted labels, a scalar tensor; their number).

    Raises:
        ValueError: every label is IGNORE_INDEX (the mean of nothing would be NaN).
    """
    inputs, labels = batch
    counted = int((labels != IGNORE_INDEX).sum())
    if counted == 0:
        raise ValueError(f"every label is ignore_index={IGNORE_INDEX}: there is no position to average "
                         "the loss over")
    own_loss = getattr(model, "next_token_loss", None)
    if own_loss is not None:  # the same number, without the [B, T, V] logits
        return own_loss(inputs, labels), counted
    logits = model(inputs)  # [B, T, V]
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX)
    return loss, counted


def perplexity(model: nn.Module, stream: Tensor, seq_len: int, batch_size: int = 64) -> float:
    """exp(mean cross-entropy) of model's next-token predictions over a whole stream.

    The stream is cut by sequential_windows (each id but the first is a label once, with
    the context of its window; `<bos>` labels are skipped), and chapter 09's
    evaluate_loss averages lm_loss over them in eval mode.

    Args:
        model: maps ids [B, T] to logits [B, T, V] (a language model or a baseline).
        stream: ids [N] from encode_stream.
        seq_len: the window length T (at most the model's context length).
        batch_size: windows per forward pass (default 64).

    Returns:
        The perplexity, a float >= 1.
    """
    _check_int("batch_size", batch_size)
    inputs, labels = sequential_windows(stream, seq_len)  # [W, T] each
    batches = list(zip(inputs.split(batch_size), labels.split(batch_size), strict=True))
    return math.exp(evaluate_loss(model, batches, lm_loss))


# %%
SEQ_LEN = 128  # the context the model of section 6 sees; the baselines are scored on the same windows
# The training text is scored on its first 16,384 ids (the whole takes minutes); the held-out
# streams in full, and on a sample of the same size where a quick measure is enough.
scored = {"train": streams["train"][:16_384], "valid": streams["valid"], "test": streams["test"]}
valid_sample = streams["valid"][:16_384]
weights = [0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9]
valid_ppl = {w: perplexity(BigramLanguageModel(streams["train"], len(vocab), w), valid_sample, SEQ_LEN)
             for w in weights}
best_weight = min(valid_ppl, key=valid_ppl.get)
print("perplexity on the validation sample by bigram weight:", {w: round(p, 1) for w, p in valid_ppl.items()})
unigram = BigramLanguageModel(streams["train"], len(vocab), 0.0)
bigram = BigramLanguageModel(streams["train"], len(vocab), best_weight)
baseline = {name: {part: perplexity(m, scored[part], SEQ_LEN) for part in scored}
            for name, m in (("unigram", unigram), ("bigram", bigram))}
for name, ppl in baseline.items():
    print(f"{name:>8}: perplexity train {ppl['train']:6.1f}, valid {ppl['valid']:6.1f}, test {ppl['test']:6.1f}")
punctuation = sum(int((streams["train"] == vocab.stoi[c]).sum()) for c in "，。")
seen_pairs = len(torch.unique(streams["train"][:-1] * len(vocab) + streams["train"][1:]))  # distinct (a, b)
print(f"， and 。 are {punctuation / len(streams['train']):.0%} of the training ids; "
      f"{seen_pairs:,} of the {len(vocab) ** 2:,} pairs of tokens occur in training ({seen_pairs / len(vocab) ** 2:.2%})")


# %%
#| fig-cap: The counting baselines: the perplexity of a bigram model mixed with the unigram
#|   model on the validation sample, against the weight $\lambda$ of the bigram
#|   ($\lambda = 0$ is the unigram model), far below a uniform guess over the tokens that may
#|   be labels.
#| fig-alt: A curve of perplexity against the bigram weight from 0 to 0.9: about 650 at 0,
#|   falling steeply to a broad minimum near 228 between 0.7 and 0.8, about 239 at 0.9; a
#|   dotted line at 6,177 marks the uniform guess.
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(weights, [valid_ppl[w] for w in weights], marker="o")
ax.axhline(len(vocab) - 2, color="gray", linestyle=":",  # every token but <pad> and <bos>
           label=f"uniform guess over {len(vocab) - 2:,} tokens")
ax.set_xlabel(r"bigram weight $\lambda$ (0 = unigram)")
ax.set_ylabel("perplexity (validation sample)")
ax.set_title("Counting pairs of neighbours, mixed with counting single characters")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# The unigram model is already far below a uniform guess over 6,177 tokens, because
# characters are very unequal (， and 。 alone are 14% of the training ids). Looking one
# character back cuts the validation perplexity by another two thirds, from 641 to 220.
# The curve has its minimum near $\lambda = 0.7$: closer to 1, the model trusts pair
# counts that are mostly zero (1.64% of the possible pairs occur in training), and each
# held-out pair it never saw costs it dearly. The bigram's training perplexity (153) is
# far below its held-out one (220) because it has counted those very pairs; only
# held-out perplexity measures what generalises.

# %% [markdown]
# ## 5 · Writing text: a language model as a generator
#
# To *write*, a language model appends the token it chose and is asked again, as chapter
# 10's decoders did for the translator. Chapter 10's `generate` runs that loop for a
# model without an encoder: it starts from a **prompt** (`<bos>` and, if we like, the
# beginning of a text), chooses each next token greedily (the default) or, with
# `do_sample=True`, by sampling with temperature, top-k and top-p, never writes `<pad>`
# or `<bos>`, and stops a row at its `<eos>`. A model with a KV cache feeds only the new
# token at each step (section 9); the bigram model has none and reads the whole prefix.

# %%
from transformer.generation import generate

draw = torch.Generator().manual_seed(0)
samples = generate(bigram, torch.full((4, 1), BOS_ID), 60, do_sample=True, generator=draw)  # [4, <= 61]
print(f"bigram samples, ids {list(samples.shape)}:")
for row in samples:
    print("  ", vocab.decode(row).replace("\n", " / "))

# %% [markdown]
# ### A measure of form
#
# Perplexity says how well a model predicts held-out text; it does not say whether what
# the model *writes* looks like a poem. Most lines of the corpus are a couplet of two
# halves of 5 or of 7 characters each, a comma between them and a full stop (or a
# question or exclamation mark) at the end, as in 床前明月光，疑是地上霜。 We call such a
# line **in form**, and count the share of lines in form. The measure checks length and
# punctuation alone. **Regulated verse** (律诗, *lüshi*) has eight verses, four of these
# lines, and also fixes the tones of the characters, the rhyme and the parallelism of
# its middle couplets; the measure checks none of those.

# %%
#| export poems
import re
from collections.abc import Iterable

VERSE_LINE = re.compile(r"([\u4e00-\u9fff]+)，([\u4e00-\u9fff]+)[。？！]")


def verse_form(line: str) -> int | None:
    """5 or 7 if line is in form (two halves of 5, or of 7, characters), else None.

    The form: n Chinese characters, a full-width comma, n more, and a full stop,
    question mark or exclamation mark (。？！), nothing else; n is 5 or 7. Only length
    and punctuation are checked, not the tones, rhyme or parallelism of regulated verse.

    Args:
        line: one line of text, without its newline.

    Returns:
        n, or None if the line does not have the form.
    """
    match = VERSE_LINE.fullmatch(line)
    if match is None or len(match.group(1)) != len(match.group(2)) or len(match.group(1)) not in (5, 7):
        return None
    return len(match.group(1))


def verse_form_share(lines: Iterable[str]) -> float:
    """The share of lines that are in form (see verse_form).

    Args:
        lines: lines of text.

    Returns:
        A float in [0, 1].

    Raises:
        ValueError: there is no line.
    """
    forms = [verse_form(line) for line in lines]
    if not forms:
        raise ValueError("lines must hold at least one line, got none")
    return sum(form is not None for form in forms) / len(forms)


# %%
print("静夜思, form of each line:", [verse_form(line) for line in quiet_night.text.split("\n")])
print("its first line without punctuation:", verse_form("床前看月光疑是地上霜"))
lines = [line for d in split.train for line in d.text.split("\n")]
print(f"training poems: {verse_form_share(lines):.1%} of {len(lines):,} lines are 5- or 7-character couplets")

# %% [markdown]
# We test a model on held-out poems: we give it `<bos>`, the first line of a test poem
# and a line break, let it write up to three more lines, and count the share of its
# complete lines in form (a line cut off by the length limit is not counted), and the
# share in the first line's form (5 or 7). The same count on the poems' true
# continuations says what the poets did.

# %%
#| export poems
import torch
from torch import nn

from transformer.generation import generate
from transformer.text import CharVocab


def continue_poems(model: nn.Module, first_lines: list[str], vocab: CharVocab, max_new_tokens: int = 52,
                   **sampling) -> list[list[str]]:
    """Let model continue poems from their first lines; return the complete lines it wrote.

    Each prompt is `<bos>`, the first line and a line break; prompts of one length are
    generated as one batch. A line counts when a line break or `<eos>` ends it: the last
    line of an output cut off by max_new_tokens is dropped.

    Args:
        model: a language model (or baseline) that generate can drive.
        first_lines: one first line per poem, without its line break.
        vocab: the character vocabulary.
        max_new_tokens: the most tokens to write after each prompt (default 52: three
            7-character couplets and their line breaks).
        **sampling: passed to chapter 10's generate (do_sample, temperature, top_k, top_p,
            generator, use_cache, ...).

    Returns:
        For each poem, in order, the list of its generated complete lines.
    """
    prompts = [vocab.encode(line + "\n", add_special=True)[:-1] for line in first_lines]  # no <eos>
    written: list[list[str]] = [[] for _ in first_lines]
    for length in sorted({len(p) for p in prompts}):
        rows = [i for i, p in enumerate(prompts) if len(p) == length]
        out = generate(model, torch.tensor([prompts[i] for i in rows]), max_new_tokens, **sampling)
        for i, ids in zip(rows, out[:, length:].tolist(), strict=True):
            ended = model.eos_id in ids
            text = vocab.decode(ids)  # stops at <eos>
            lines = text.split("\n")
            written[i] = [line for line in (lines if ended else lines[:-1]) if line]
    return written


# %%
# 200 test poems of at least two lines that open with a line in form (so that "the first
# line's form" is defined), drawn with a seed: enough to count shares, quick to generate.
candidates = [d.text.split("\n") for d in split.test if "\n" in d.text and verse_form(d.text.split("\n")[0])]
test_poems = random.Random(0).sample(candidates, 200)
first_lines = [poem[0] for poem in test_poems]


def form_report(name: str, written: list[list[str]]) -> dict:
    lines = [line for poem in written for line in poem]
    same = sum(verse_form(line) is not None and verse_form(line) == verse_form(first)
               for first, poem in zip(first_lines, written, strict=True) for line in poem)
    report = {"lines": len(lines), "verse": verse_form_share(lines), "same": same / len(lines)}
    print(f"{name:>24}: {report['lines']:3} lines, {report['verse']:6.1%} in form, "
          f"{report['same']:6.1%} in the first line's form")
    return report


forms = {"the poets (true lines)": form_report("the poets (true lines)", [poem[1:4] for poem in test_poems])}
forms["bigram"] = form_report("bigram", continue_poems(bigram, first_lines, vocab, do_sample=True,
                                                       generator=torch.Generator().manual_seed(0)))

# %% [markdown]
# The poets kept the form in 99.2% of the lines that follow these first lines; the bigram
# model in none. It writes real characters in plausible pairs, but one character of
# context cannot tell it that five characters have passed since the line began.

# %% [markdown]
# ## 6 · The model: the decoder without its encoder
#
# Chapter 07's `DecoderBlock` has three sublayers: masked self-attention over the target
# prefix, cross-attention over the encoder's memory, and the feed-forward network. A
# language model has no source to attend to, so its block is the same block **without
# the cross-attention sublayer**: one constructor argument, `cross_attention=False`, not
# a copy of the code. Everything else is what we built and tested.

# %%
from transformer.blocks import DecoderBlock

block_2017 = DecoderBlock(d_model=16, num_heads=2, d_ff=32)
block_lm = DecoderBlock(d_model=16, num_heads=2, d_ff=32, cross_attention=False)
print("2017 block:      ", [name for name, _ in block_2017.named_children()])
print("language model's:", [name for name, _ in block_lm.named_children()])

# %% [markdown]
# The whole model (`LanguageModel` below) is then short:
#
# 1. `TokenEmbedding` (chapter 01) and `PositionalEncoding` (chapter 02) turn ids
#    `[B, T]` into vectors `[B, T, d_model]`;
# 2. a `Decoder` (chapter 07) of blocks without cross-attention, under chapter 04's
#    **causal mask**, so that position $t$ sees positions $0..t$ only;
# 3. a linear layer to `[B, T, V]` logits.
#
# Two choices differ from chapter 08's translator, both usual in language models since
# GPT-2 (Radford et al. 2019): **Pre-LN** blocks (`norm_first=True`, chapter 07), and
# **weight tying** (Press and Wolf 2017, Inan et al. 2017): the output layer's weight
# matrix *is* the embedding table, $W_{out} = E$, so the score of token $v$ is the dot
# product of the last hidden state with $v$'s embedding. That saves $V \cdot d_{model}$
# parameters (printed below), and each character's one vector is trained both where it
# is read and where it is predicted. The output layer keeps its own bias (section 8
# measures what it learns).
#
# Four more arguments choose parts by name: `positions`, `norm`, `activation` and
# `num_kv_heads`. Names, not modules, keep the config plain JSON, so that
# `from_pretrained` can build the same parts again; the class's tables `POSITIONS`,
# `NORMS`, `FEED_FORWARDS` and `ATTENTIONS` map each name to a part. This chapter's
# tables hold the parts of 2017; chapter 13's subclass `ModernLanguageModel` adds later
# ones.

# %%
#| export
from collections.abc import Callable
from functools import partial
from typing import ClassVar

from transformer.blocks import Decoder
from transformer.embedding import TokenEmbedding
from transformer.feedforward import FeedForward
from transformer.model import _check_special_ids
from transformer.pretrained import PretrainedModel
from transformer.multihead import MultiHeadAttention
from transformer.positional import PositionalEncoding
from transformer.validation import _caller_checked, _check_id_range, _check_token_ids, _inputs_checked

def _named(option: str, table: dict, name: str):
    """table[name], or a ValueError that names the option and the names it knows."""
    if not isinstance(name, str) or name not in table:
        raise ValueError(f"{option} must be one of {list(table)}, got {name!r}")
    return table[name]


class LanguageModel(PretrainedModel):
    """A decoder-only Transformer: ids [B, T] -> next-token logits [B, T, V], under a causal mask.

    Chapter 07's Decoder with its cross-attention sublayers absent, Pre-LN by default,
    the output layer's weight tied to the embedding table. It knows its config
    (chapter 08): `LanguageModel.from_pretrained(directory)` rebuilds what
    `save_pretrained(directory)` wrote. Its parts are chosen by name, in the class's
    tables POSITIONS, NORMS, FEED_FORWARDS and ATTENTIONS (chapter 13's subclass
    ModernLanguageModel adds the refinements to them).

    Args:
        vocab_size: V, the number of token ids, > 0.
        d_model: width of the residual stream, > 0 (default 128).
        num_heads: attention heads, dividing d_model (default 4).
        num_layers: decoder blocks, > 0 (default 2).
        d_ff: hidden width of the feed-forward networks (default 4 * d_model).
        dropout: dropout probability in [0, 1) (default 0.1).
        max_len: the most positions the model reads at once, > 0 (default 256).
        pad_id: the padding id (default 0, as chapter 09's vocabularies).
        activation: the feed-forward network, a name in FEED_FORWARDS (default "gelu").
        norm_first: Pre-LN (True, the default) or Post-LN blocks.
        tie_output: the output layer's weight is the embedding table (default True).
        positions: a name in POSITIONS (default "sinusoidal": chapter 02's encoding,
            added to the embeddings).
        norm: a name in NORMS (default "layer": nn.LayerNorm).
        bos_id: the id of `<bos>`, which generate never writes (default 1, chapter 09's).
        eos_id: the id that ends a row in generate (default 2, chapter 09's `<eos>`).
        num_kv_heads: key/value heads of the attention (default None: multi-head
            attention, as many as num_heads); a number needs ATTENTIONS["grouped-query"],
            which chapter 13's ModernLanguageModel has.

    Raises:
        ValueError: an argument is out of range, or a name is not in its table (the
            message names it).
    """

    # What each name of an option builds. positions: None for chapter 02's encoding added
    # to the embeddings, else a function (d_head, max_len) -> a module f(x, start) that
    # turns queries and keys inside attention.
    POSITIONS: ClassVar[dict[str, Callable | None]] = {"sinusoidal": None}
    NORMS: ClassVar[dict[str, Callable]] = {"layer": nn.LayerNorm}  # d_model -> a norm module
    FEED_FORWARDS: ClassVar[dict[str, Callable]] = {  # activation -> (d_model, d_ff, dropout) -> a module
        "relu": partial(FeedForward, activation="relu"), "gelu": partial(FeedForward, activation="gelu")}
    # "multi-head" unless num_kv_heads is given: (d_model, num_heads, dropout, **options) -> a module
    ATTENTIONS: ClassVar[dict[str, Callable]] = {"multi-head": MultiHeadAttention}

    def __init__(self, vocab_size: int, d_model: int = 128, num_heads: int = 4, num_layers: int = 2,
                 d_ff: int | None = None, dropout: float = 0.1, max_len: int = 256, pad_id: int = PAD_ID,
                 activation: str = "gelu", norm_first: bool = True, tie_output: bool = True,
                 positions: str = "sinusoidal", norm: str = "layer", num_kv_heads: int | None = None,
                 bos_id: int = BOS_ID, eos_id: int = EOS_ID):
        d_ff = 4 * d_model if d_ff is None else d_ff
        super().__init__(dict(
            vocab_size=vocab_size, d_model=d_model, num_heads=num_heads, num_layers=num_layers,
            d_ff=d_ff, dropout=dropout, max_len=max_len, pad_id=pad_id, activation=activation,
            norm_first=norm_first, tie_output=tie_output, positions=positions, norm=norm,
            num_kv_heads=num_kv_heads, bos_id=bos_id, eos_id=eos_id))
        self.vocab_size, self.max_len = _check_int("vocab_size", vocab_size), _check_int("max_len", max_len)
        self.pad_id = _check_int("pad_id", pad_id, 0)
        if pad_id >= vocab_size:
            raise ValueError(f"pad_id must be an id in [0, {vocab_size - 1}], got {pad_id}")
        _check_special_ids(pad_id, bos_id, eos_id)
        self.bos_id, self.eos_id = bos_id, eos_id  # what generate starts with and stops at
        _check_bool("tie_output", tie_output)
        _check_int("num_heads", num_heads)  # before d_model // num_heads
        in_attention = _named("positions", self.POSITIONS, positions)  # None: added to the embeddings
        self.embed = TokenEmbedding(vocab_size, d_model, padding_idx=pad_id)
        # Added positions: the encoding, then dropout. Positions inside attention: the
        # embeddings only get their dropout, and one module turns every layer's q and k.
        self.positional = PositionalEncoding(d_model, max_len, dropout) if in_attention is None else None
        self.embed_dropout = nn.Dropout(dropout) if in_attention is not None else None
        attention_options = {}
        if in_attention is not None:
            attention_options["positional"] = in_attention(d_model // num_heads, max_len)
        if num_kv_heads is not None:
            attention_options["num_kv_heads"] = num_kv_heads
        if num_kv_heads is not None and "grouped-query" not in self.ATTENTIONS:
            raise ValueError("num_kv_heads needs grouped-query attention, which chapter 13's "
                             "ModernLanguageModel has (transformer.refinements); leave it None")
        attention = self.ATTENTIONS["multi-head" if num_kv_heads is None else "grouped-query"]
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first=norm_first,
                               cross_attention=False, norm=_named("norm", self.NORMS, norm),
                               self_attention=partial(attention, **attention_options),
                               feed_forward=_named("activation", self.FEED_FORWARDS, activation))
        self.generator = nn.Linear(d_model, vocab_size)  # hidden state -> one score per token
        self.tie_weights()

    def tie_weights(self) -> None:
        """With tie_output, make the output layer's weight the embedding table (one Parameter)."""
        if self._config["tie_output"]:
            self.generator.weight = self.embed.embedding.weight

    def forward(self, ids: Tensor, caches: list[dict] | None = None, start: int = 0) -> Tensor:
        """Score every next token: ids [B, T] -> logits [B, T, V].

        Args:
            ids: token ids [B, T], 0 < T, start + T <= max_len.
            caches: for generation, one dict per layer (chapter 10's KV cache): ids then
                holds the tokens at positions start .. start + T - 1, and each attends to
                the cached positions as well as to the new ones before it.
            start: the position of ids[:, 0] (default 0; > 0 only with caches).

        Returns:
            Logits [B, T, V] (never softmax): row t scores the token after ids[:, t].

        Raises:
            TypeError: ids is not an integer tensor.
            ValueError: ids is not [B, T] with 0 < T, or the positions exceed max_len.
            IndexError: an id lies outside the vocabulary (eager mode).
        """
        return self.generator(self.hidden_states(ids, caches, start))  # [B, T, V]

    def hidden_states(self, ids: Tensor, caches: list[dict] | None = None, start: int = 0) -> Tensor:
        """The last layer's output, before the output layer: ids [B, T] -> [B, T, d_model].

        Arguments and errors as forward's.
        """
        self._check_ids(ids, start)
        t = ids.size(1)
        # Query i (at position start + i) may see keys 0 .. start + i: cached and new. From
        # position 0 that is chapter 04's causal mask, passed as the is_causal flag (which lets
        # appendix 14's fused kernel skip the blocks above the diagonal); one new position
        # sees every key.
        mask = None if start == 0 or t == 1 else (
            torch.ones(1, 1, t, start + t, dtype=torch.bool, device=ids.device).tril(start))
        with _inputs_checked():  # checked above, once: the layers need not check again (chapter 08)
            x = self.embed(ids)  # [B, T, d_model]
            if self.positional is not None:
                x = self.positional(x, start)  # [B, T, d_model]
            elif self.embed_dropout is not None:  # rotary: positions are turned inside attention
                x = self.embed_dropout(x)
            return self.decoder(x, None, mask, None, caches, tgt_is_causal=start == 0)  # [B, T, d_model]

    def _check_ids(self, ids: Tensor, start: int) -> None:
        """ids must be integer token ids [batch, seq], 0 < seq, start + seq <= max_len, in the
        vocabulary (inside `_inputs_checked()`, whose caller has checked them, nothing is)."""
        if _caller_checked():
            return
        _check_int("start", start, 0)
        _check_token_ids("ids", ids)
        if ids.dim() != 2 or ids.size(1) == 0:
            raise ValueError(f"ids must be token ids of shape [batch, seq] with seq > 0, got {tuple(ids.shape)}")
        if start + ids.size(1) > self.max_len:
            raise ValueError(f"ids is too long: positions {start}..{start + ids.size(1) - 1} exceed "
                             f"max_len={self.max_len}; build the LanguageModel with a larger max_len")
        _check_id_range("ids", ids, self.vocab_size)  # eager mode only



# %%
from transformer.model import count_parameters

# The size of the model that ships with the package (section 8); transformer/configs/lm.toml holds the same.
MODEL_CONFIG = dict(vocab_size=len(vocab), d_model=192, num_heads=4, num_layers=4, d_ff=768,
                    dropout=0.0, max_len=256)
torch.manual_seed(0)
model = LanguageModel(**MODEL_CONFIG)
untied = LanguageModel(**MODEL_CONFIG, tie_output=False)
saving = count_parameters(untied) - count_parameters(model)
print(f"{count_parameters(model):,} parameters with tied weights, {count_parameters(untied):,} without: "
      f"tying saves V x d_model = {len(vocab):,} x 192 = {saving:,}, {saving / count_parameters(untied):.0%} "
      f"of the untied model")
print("output weight is the embedding table:", model.generator.weight is model.embed.embedding.weight)
logits = model(batch_inputs)  # [16, 128, V]
print(f"ids {list(batch_inputs.shape)} -> logits {list(logits.shape)}")

# %% [markdown]
# The logits are the largest tensor a training step makes: 16 × 128 × 6,179 scores,
# 51 MB, more than the model's weights. The untrained model's loss on this batch, and its
# perplexity on the validation sample:

# %%
untrained_loss, _ = lm_loss(model, (batch_inputs, batch_labels))
untrained_ppl = perplexity(model, valid_sample, SEQ_LEN)
print(f"untrained: loss {untrained_loss.item():.2f} on the batch above; perplexity {untrained_ppl:,.0f} "
      f"on the validation sample (a uniform guess: {len(vocab) - 2:,})")
assert untrained_ppl > baseline["unigram"]["valid"]

# %% [markdown]
# Untrained, the model is worse than a uniform guess: perplexity 55,526 against 6,177,
# a cross-entropy of $\ln 55{,}526 \approx 10.9$ against $\ln 6{,}177 \approx 8.7$. A
# cross-entropy above $\ln V$ means the model is not unsure but confidently wrong.
# Training must bring it below the unigram (641) and the bigram (220).

# %% [markdown]
# ## 7 · Training with chapter 09's loop
#
# Chapter 09's `fit` trains any model with a loss function
# `(model, batch) -> (mean loss, token count)`; for a language model that is `lm_loss` of
# section 4. We give it batches of 16 random windows of 128 characters.
#
# The optimiser follows GPT-3's recipe (Brown et al. 2020): AdamW (Loshchilov and Hutter
# 2019) with $\beta_2 = 0.95$, weight decay 0.1 on the matrices only (not on biases and
# norms), gradient clipping at 1, a short linear warm-up and a cosine decay to a tenth of
# the peak rate. No dropout: a model that reads its training text about 1.4 times
# (section 8's run) is far from learning it by heart. Here we train for 50 updates:

# %%
from transformer.training import TrainState, fit

STEPS, BATCH_SIZE, WARMUP, PEAK_LR = 50, 16, 10, 2e-3


def warmup_cosine(step: int) -> float:
    """The learning rate's factor at update `step` (from 0): linear warm-up, cosine decay to a tenth."""
    return min(1.0, (step + 1) / WARMUP) * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * step / STEPS)))


torch.manual_seed(0)
model = LanguageModel(**MODEL_CONFIG)
matrices = [p for p in model.parameters() if p.dim() >= 2]  # embeddings and projections
others = [p for p in model.parameters() if p.dim() < 2]  # biases and norms
optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.1}, {"params": others, "weight_decay": 0.0}],
                              lr=PEAK_LR, betas=(0.9, 0.95))
state = TrainState(model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine))
draw = torch.Generator().manual_seed(1000)
train_batches = [random_windows(streams["train"], BATCH_SIZE, SEQ_LEN, draw) for _ in range(STEPS)]

# %%
# NBVAL_IGNORE_OUTPUT
run = fit(state, train_batches, loss_fn=lm_loss, seed=0, progress=False)
live_ppl = perplexity(model, valid_sample, SEQ_LEN)
bigram_sample = perplexity(bigram, valid_sample, SEQ_LEN)
print(f"{state.step} updates in {run['seconds'][0]:.0f} s on {torch.get_num_threads()} thread: training loss "
      f"{run['loss'][0]:.2f} -> {sum(run['loss'][-10:]) / 10:.2f} (mean of the last 10)")
print(f"validation sample: perplexity {live_ppl:.0f}, the bigram {bigram_sample:.0f} ({live_ppl / bigram_sample:.2f}x)")

# %%
assert live_ppl < 0.2 * untrained_ppl, "a minute of training takes the model far below its untrained guesses"
assert run["seconds"][0] < 300, f"training took {run['seconds'][0]:.0f} s; the chapter promises about a minute"

# %% [markdown]
# Fifty updates take the model from 55,526 to a perplexity of 528 on the validation
# sample: past the unigram, but more than twice the bigram's 228 on the same sample.

# %% [markdown]
# ## 8 · Saving and loading, and the model that trained longer
#
# `LanguageModel` is a chapter-08 `PretrainedModel`: `save_pretrained` writes its
# configuration as JSON next to the weights (safetensors, no pickle), and
# `LanguageModel.from_pretrained` rebuilds the same model, tied weights tied. A language
# model is of no use without its vocabulary, so `save_language_model` writes that too, as
# JSON, with the helpers that write the translator's vocabularies in chapter 09:
# `config.json`, `model.safetensors`, `vocab.json`. It may store the weights in half
# precision (`dtype=torch.float16`: half the file); `load_language_model` turns them back
# into float32.

# %%
#| export
import copy
from pathlib import Path
from typing import NamedTuple

import transformer as _package
from transformer.pretrained import _as_directory
from transformer.saving import _read_metrics, _read_vocab, _write_vocab  # chapter 09's files
from transformer.text import CharVocab

LM_CHECKPOINT = Path(_package.__file__).resolve().parent / "checkpoints" / "tang_poems"  # make checkpoint MODEL=lm
VOCAB_FILE = "vocab.json"


class LanguageModelCheckpoint(NamedTuple):
    """What `load_language_model` returns.

    Attributes:
        model: the LanguageModel, in float32 and eval mode.
        vocab: its CharVocab.
        metrics: what training stored with it (settings, curves, scores); {} if nothing.
    """

    model: "LanguageModel"
    vocab: CharVocab
    metrics: dict


def save_language_model(directory: str | Path, model: "LanguageModel", vocab: CharVocab,
                        metrics: dict | None = None, dtype: torch.dtype = torch.float32) -> Path:
    """Save a language model with its vocabulary and metrics into a directory; nothing is pickled.

    Args:
        directory: where to write (created if absent): config.json, model.safetensors, vocab.json.
        model: a LanguageModel.
        vocab: its vocabulary, len(vocab) == model's vocab_size.
        metrics: JSON-able facts about the model (settings, curves, scores), or None.
        dtype: the weights' dtype in the file (default float32; float16 or bfloat16
            halve the file). The model itself is not changed.

    Returns:
        The directory, as a Path.

    Raises:
        ValueError: the vocabulary's size is not the model's, or dtype is not a floating dtype.
    """
    if len(vocab) != model.vocab_size:
        raise ValueError(f"vocab has {len(vocab)} tokens but the model's vocab_size is {model.vocab_size}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    stored = model if next(model.parameters()).dtype == dtype else copy.deepcopy(model).to(dtype)
    directory = stored.save_pretrained(directory, metadata={"metrics": metrics or {}})
    _write_vocab(directory / VOCAB_FILE, vocab)
    return directory


def load_language_model(directory: str | Path = LM_CHECKPOINT, map_location: str = "cpu",
                        model_class: type[LanguageModel] = LanguageModel) -> LanguageModelCheckpoint:
    """Load a directory written by `save_language_model` (default: the model shipped with the package).

    Args:
        directory: the checkpoint directory.
        map_location: the device for the weights (default "cpu").
        model_class: the class the directory holds (default LanguageModel; chapter 13's
            ModernLanguageModel for a model with its refinements).

    Returns:
        A LanguageModelCheckpoint(model in float32 and eval mode, vocab, metrics).

    Raises:
        FileNotFoundError: the directory or one of its three files is missing.
        ValueError: a file is malformed, or the vocabulary's size is not the model's (the
            message names the file).
    """
    directory = _as_directory(directory)
    model = model_class.from_pretrained(directory, map_location=map_location).float().eval()
    vocab = _read_vocab(directory / VOCAB_FILE, model.vocab_size, CharVocab.from_dict)
    return LanguageModelCheckpoint(model, vocab, _read_metrics(directory))


# %%
import tempfile

from transformer.decoding import eval_mode
from transformer.kv_cache import KVCache

saved = save_language_model(Path(tempfile.mkdtemp()) / "poems-lm", model, vocab, metrics={"steps": state.step})
print(sorted(p.name for p in saved.iterdir()))
loaded, loaded_vocab, loaded_metrics = load_language_model(saved)
print("config:", loaded.config, "| metrics:", loaded_metrics)
assert loaded.generator.weight is loaded.embed.embedding.weight
assert loaded_vocab == vocab and isinstance(loaded_vocab, CharVocab)
with eval_mode(model):
    assert torch.equal(loaded(batch_inputs[:4]), model(batch_inputs[:4]))
print("reloaded: the same logits, bit for bit")

# %% [markdown]
# The package ships the same model trained longer. `make checkpoint MODEL=lm` runs chapter
# 12's train command on `transformer/configs/lm.toml`: this section's model, optimiser and
# batches, for 2,000 updates (printed below). 2,000 × 16 × 128 is 4.1 million ids, about
# 1.4 passes over the 2.9 million ids of the training stream. The result is in
# `transformer/checkpoints/tang_poems`: the settings and the training and validation
# curves in `config.json`, the weights in half precision, and this chapter's vocabulary,
# rebuilt from the same split.

# %%
shipped, shipped_vocab, shipped_metrics = load_language_model()
assert shipped_vocab == vocab, "the shipped model was trained on this chapter's split and vocabulary"
assert {k: shipped.config[k] for k in MODEL_CONFIG} == MODEL_CONFIG
train_cfg = shipped_metrics["config"]["train"]
print(f"shipped: {count_parameters(shipped):,} parameters, {shipped_metrics['step']:,} updates of "
      f"{train_cfg['batch_size']} x {shipped_metrics['config']['data']['seq_len']}, warm-up {train_cfg['warmup']}, "
      f"peak rate {train_cfg['lr']}, "
      f"{train_cfg['precision']}, {shipped_metrics['world_size']} process; validation curve "
      + ", ".join(f"{step}: {math.exp(loss):.0f}" for step, loss in shipped_metrics["valid_curve"]))

# %%
# NBVAL_IGNORE_OUTPUT
# The test set, used once, whole (two threads for this one measurement).
threads = torch.get_num_threads()
torch.set_num_threads(2)
shipped_ppl = {"train": perplexity(shipped, scored["train"], SEQ_LEN),
               "valid": math.exp(shipped_metrics["valid_loss"]),  # measured by the train command, whole set
               "test": perplexity(shipped, scored["test"], SEQ_LEN)}
torch.set_num_threads(threads)
for name, ppl in (("unigram", baseline["unigram"]), ("bigram", baseline["bigram"]), ("shipped model", shipped_ppl)):
    print(f"{name:>13}: perplexity train {ppl['train']:6.1f}, valid {ppl['valid']:6.1f}, test {ppl['test']:6.1f}")
ratio = {part: shipped_ppl[part] / baseline["bigram"][part] for part in ("valid", "test")}
print(f"against the bigram: valid {ratio['valid']:.2f}x, test {ratio['test']:.2f}x")

# %%
assert ratio["valid"] < 0.9 and ratio["test"] < 0.9, ratio  # clearly below the bigram (the prose gives the ratios)

# %%
#| fig-cap: The same model and optimiser trained for a minute in this chapter and for
#|   2,000 updates for the shipped model: training and validation perplexity against the
#|   update (both axes logarithmic), with the unigram and bigram baselines.
#| fig-alt: Log-log plot of perplexity against update. This chapter's training curve (orange)
#|   falls from about 54,000 to about 500 over 50 updates, its validation-sample point near
#|   530 at update 50. The shipped run's smoothed training curve (blue) falls more slowly at
#|   first, to about 1,200 at update 50 and 500 at update 100, crosses the dashed bigram line
#|   near 220 and ends near 95 at update 2,000; its validation points are 240 at update 400,
#|   167 at 800, 124 at 1,200, 107 at 1,600 and 101 at 2,000. The dotted unigram line lies
#|   near 640.
long_losses = shipped_metrics["losses"]  # one per update of the train command's last call
first = shipped_metrics["step"] - len(long_losses) + 1  # the update of long_losses[0] (1 unless it resumed)

# The mean of up to 50 losses ending at each update: fewer at the start, where the curve falls fast.
widths = [min(50, i // 2 + 1) for i in range(len(long_losses))]
smooth = [sum(long_losses[i + 1 - w:i + 1]) / w for i, w in enumerate(widths)]
fig, ax = plt.subplots(figsize=(7, 3.8))
ax.plot(range(first, first + len(long_losses)), [math.exp(x) for x in smooth], color="C0",
        label="shipped run: training (mean of up to 50)")
ax.plot([s for s, _ in shipped_metrics["valid_curve"]], [math.exp(v) for _, v in shipped_metrics["valid_curve"]],
        "o-", color="C0", markersize=4, label="shipped run: validation")
ax.plot(run["step"], [math.exp(x) for x in run["loss"]], color="C1", alpha=0.8, label="this chapter's minute: training")
ax.plot([STEPS], [live_ppl], "s", color="C1", label="this chapter's minute: validation sample")
for name, style in (("unigram", ":"), ("bigram", "--")):
    ax.axhline(baseline[name]["valid"], color="gray", linestyle=style, label=f"{name} (validation)")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("update")
ax.set_ylabel("perplexity")
ax.set_title(f"The same model: a minute here, {shipped_metrics['step']:,} updates for the shipped one")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# The shipped model's perplexity is 0.46 times the bigram's on the validation set (101
# against 220) and 0.45 times on the test set (99.5 against 221), used here for the first
# time. On the training sample it is 110, no lower than on held-out text: after 1.4
# passes the model has not learned its training text by heart. In the figure, the minute
# trained here covers the first 2.5% of the shipped run's updates. The shipped run starts
# slower (its warm-up is 200 updates, against 10 here); its validation perplexity is 240
# after 400 updates, above the bigram's 220, then 167 after 800, 107 after 1,600 and 101
# after 2,000.
#
# ### What the output layer's bias learned
#
# Chapter 08 kept the bias of the tied output layer: one number per token, added to its
# score whatever the context. Here it is beside the unigram model's $\log p(b)$ (section 4),
# how often each token is a label in the training text.

# %%
bias = shipped.generator.bias.detach()  # [V]
is_label = unigram.unigram > 0  # all but <pad> and <bos>
log_p, label_bias = unigram.unigram[is_label].log(), bias[is_label]  # [V'] each
r = torch.corrcoef(torch.stack([log_p, label_bias]))[0, 1].item()
slope = (((log_p - log_p.mean()) * (label_bias - label_bias.mean())).sum()
         / ((log_p - log_p.mean()) ** 2).sum()).item()
print(f"bias against log p(b) over {int(is_label.sum()):,} tokens: correlation {r:.2f}, slope {slope:.2f}; "
      f"bias from {label_bias.min():.2f} to {label_bias.max():.2f}")
ranked = [i for i in bias.argsort(descending=True).tolist() if is_label[i]]
print("highest:", " ".join(shipped_vocab.itos[i] for i in ranked[:10]))
print("lowest: ", " ".join(shipped_vocab.itos[i] for i in ranked[-10:]))
assert shipped_vocab.itos == vocab.itos  # the ids that unigram counted are the shipped model's

# %% [markdown]
# The correlation is 0.89: the more often a token is a label, the higher its bias; the
# comma, 不, 山, 人 and 风 score highest, characters met a handful of times in training
# lowest. The slope, 0.15, says that the bias holds
# only a part of the frequency (a bias equal to $\log p(b)$ would have a slope of 1); the
# rest reaches the scores through the dot products with the hidden state.

# %% [markdown]
# ## 9 · Generation: chapter 10's samplers and KV cache
#
# `model.generate` (section 5's `generate`, as the model's own method) drives the shipped
# model with chapter 10's cache: the prompt goes through the model once, and each later
# step feeds one new token, whose keys and values join a preallocated `KVCache` in every
# layer. First, what the model writes from `<bos>` alone, sampled at two temperatures:

# %%
# NBVAL_IGNORE_OUTPUT
for temperature in (0.6, 1.0):
    out = shipped.generate(torch.full((3, 1), BOS_ID), 80, do_sample=True, temperature=temperature,
                           generator=torch.Generator().manual_seed(0))
    print(f"temperature {temperature}:")
    for row in out:
        print("  ", vocab.decode(row).replace("\n", " / "))

# %% [markdown]
# At temperature 0.6, seven of the eight lines are in form: two with halves of seven
# characters, five with halves of five. The eighth, 我从无物，从此是时人。, has halves of 4
# and 5. The words are the corpus's (青山, 黄河, 旧国, 寒云, 故人); the sense is loose, and
# characters repeat (结叶叶叶). At temperature 1, eight of the nine complete lines are in
# form, all with halves of seven; 芸阁寒云卷，洪池晚朔风吹。 has halves of 5 and 6, and a
# tenth line is cut off by the limit of 80 tokens. Next, the test of form on section 5's
# held-out poems, continued by the minute-trained model and by the shipped one:

# %%
# NBVAL_IGNORE_OUTPUT
continued = {}
for name, m, temperature in (("minute-trained, T = 0.6", model, 0.6), ("shipped, T = 0.6", shipped, 0.6),
                             ("shipped, T = 1.0", shipped, 1.0)):
    continued[name] = continue_poems(m, first_lines, vocab, do_sample=True, temperature=temperature,
                                     generator=torch.Generator().manual_seed(0))
    forms[name] = form_report(name, continued[name])
for first, written in list(zip(first_lines, continued["shipped, T = 0.6"], strict=True))[:4]:
    print(f"\n{first}\n" + "\n".join(written))

# %%
assert forms["the poets (true lines)"]["verse"] > 0.9
assert all(forms[name]["lines"] > 0 for name in forms)
assert forms["shipped, T = 0.6"]["verse"] > forms["bigram"]["verse"] + 0.2

# %% [markdown]
# At temperature 0.6 the shipped model writes 98.9% of its 377 complete lines in form,
# each in its first line's form (the poets: 99.2%); at temperature 1, 95.9% in form and
# 94.9% in the first line's form. The minute-trained model writes none: 1,180 short
# fragments, as the bigram's are. Counting to five or seven is something attention can
# do (every position may look back at where its line began, and the positional encoding
# says how far that is), and 2,000 updates were enough to learn it. The continuations
# printed above keep the first line's form; their sense is loose, and characters repeat
# (官官, 节节, 书书, 子子).
#
# ### Not copies: the longest run shared with the training text
#
# A model that writes good lines might be quoting them. For each of 40 generated poems we
# find the longest run of characters it shares with the training text
# (`longest_shared_run`). As a yardstick, the same measure on the true continuations:
# poets reuse stock phrases of four or five characters too.

# %%
#| export poems
def longest_shared_run(text: str, corpus: str) -> str:
    """The longest run of characters of text that also occurs somewhere in corpus.

    A window [start, end) of text grows while it is found in corpus and slides forward
    when it is not, so the work is about 2 · len(text) substring searches of corpus.

    Args:
        text: the text to look up (a generated poem).
        corpus: the text it may have copied from (the training text).

    Returns:
        The longest run (possibly empty); the first one if several are as long.
    """
    best, start = "", 0
    for end in range(1, len(text) + 1):
        while start < end and text[start:end] not in corpus:
            start += 1  # this window is not in the corpus: drop its first character
        if end - start > len(best):
            best = text[start:end]
    return best


# %%
# NBVAL_IGNORE_OUTPUT
training_text = "\n".join(d.text for d in split.train)
runs = {}
for name, poems in (("the poets (true lines)", [poem[1:4] for poem in test_poems]),
                    ("shipped, T = 0.6", continued["shipped, T = 0.6"])):
    runs[name] = [longest_shared_run("\n".join(poem), training_text) for poem in poems[:40] if poem]
    lengths = sorted(len(r) for r in runs[name])
    print(f"{name:>24}: longest shared run per poem, median {lengths[len(lengths) // 2]}, "
          f"90th percentile {lengths[int(0.9 * len(lengths))]}, longest {lengths[-1]} ({max(runs[name], key=len)!r})")

# %%
model_longest = max(map(len, runs["shipped, T = 0.6"]))
assert model_longest < 24, "a generated poem copies more than a whole line from the training text"

# %% [markdown]
# The model's longest shared runs are as long as the poets': a median of 4 characters,
# at most 6 (punctuation included), where a copied line would share 12 or more. It writes
# new lines out of the phrases of its corpus.
#
# ### What the cache saves
#
# Without the cache each step reruns the model on the whole prefix; with it, on one
# token. Both write the same tokens (checked in section 11); the time differs:

# %%
# NBVAL_IGNORE_OUTPUT
import time

prompt = torch.full((8, 1), BOS_ID)
new_tokens = 100  # the uncached work grows about with the square of this, the cached work linearly
timings = {}
for use_cache in (False, True):
    start = time.process_time()
    out = shipped.generate(prompt, new_tokens, ignore_eos=True, use_cache=use_cache)
    timings[use_cache] = time.process_time() - start
print(f"{new_tokens} tokens for 8 prompts: {timings[False]:.2f} s of CPU without the cache, "
      f"{timings[True]:.2f} s with it ({timings[False] / timings[True]:.1f}x faster)")

# %%
assert timings[True] < timings[False]

# %% [markdown]
# ### Prompts of several lengths in one batch, and beam search
#
# As with Hugging Face models, prompts of different lengths go in one batch padded on the
# left, with an `attention_mask` that marks tokens (1) and padding (0); each row writes
# exactly what its prompt writes alone (the check below). Beam search (`num_beams`) works
# as for the translator:

# %%
# NBVAL_IGNORE_OUTPUT
texts = ["床前明月光，", "春眠不觉晓，处处闻啼鸟。\n", "白日"]
prompts = [vocab.encode(text, add_special=True)[:-1] for text in texts]  # <bos> + characters
width = max(len(p) for p in prompts)
input_ids = torch.tensor([[PAD_ID] * (width - len(p)) + p for p in prompts])  # [3, width], left-padded
attention_mask = (input_ids != PAD_ID).long()  # 1 = token, 0 = padding
batched = shipped.generate(input_ids, 16, attention_mask=attention_mask)  # [3, width + n]: greedy
alone = [shipped.generate(torch.tensor([p]), 16) for p in prompts]
beams = shipped.generate(input_ids, 16, attention_mask=attention_mask, num_beams=4)
for text, row, beam_row in zip(texts, batched, beams, strict=True):
    print(f"{text!r:>30} greedy: {vocab.decode(row[width:])!r}, beam 4: {vocab.decode(beam_row[width:])!r}")

# %%
for p, row, one in zip(prompts, batched, alone, strict=True):  # the batch changes no row
    assert torch.equal(row[width - len(p):][: one.size(1)], one[0]), (row, one)
    assert bool((row[width - len(p) + one.size(1):] == PAD_ID).all())

# %% [markdown]
# Greedy decoding and beam search both look for the most likely continuation, and on this
# model that often means repetition: 一夜夜, 声声, 何处处, 去去, and for the second prompt
# beam search writes one line twice (春风吹落花，春风吹落花。). To write verse this chapter
# samples with a temperature; search suits tasks with one right answer, such as
# translation.

# %% [markdown]
# ## 10 · Shape trace: one step of training and one of generation
#
# The running example is Li Bai's quiet-night poem, 静夜思.

# %%
from transformer.masks import causal_mask

trace_ids = poem[None, :-1]  # [1, 26]: <bos> 床 前 ... 乡
print("ids               ", list(trace_ids.shape))
with eval_mode(model):
    x = model.embed(trace_ids)
    print("embedding         ", list(x.shape))
    x = model.positional(x)
    print("+ positions       ", list(x.shape))
    mask = causal_mask(trace_ids.size(1))
    print("causal mask       ", list(mask.shape))
    for i, layer in enumerate(model.decoder.layers):
        x = layer(x, None, mask)
        print(f"block {i} (no cross)", list(x.shape))
    x = model.decoder.norm(x)
    print("final norm        ", list(x.shape))
    logits = model.generator(x)
    print("logits            ", list(logits.shape))
    caches = [{"self": KVCache(30)} for _ in model.decoder.layers]
    model(trace_ids[:, :12], caches)  # the prompt: <bos> and the first line
    print("cache after prompt", [list(c["self"]["k"].shape) for c in caches], "(k per layer)")
    step = model(trace_ids[:, 12:13], caches, start=12)
    print("one cached step   ", list(step.shape), "cache", list(caches[0]["self"]["k"].shape))

# %% [markdown]
# ## 11 · Checks

# %%
# The split is by document: no document is in two parts, and together they are the corpus.
ids = [set(map(id, part)) for part in split]
assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
assert sum(map(len, split)) == len(documents)
# No clause of 4 characters or more is in two parts (line_groups kept such poems together).
owner = {}
for name, part in split._asdict().items():
    for d in part:
        for clause in CLAUSE_END.split(d.text):
            if len(clause) >= MIN_CLAUSE:
                assert owner.setdefault(clause, name) == name, (clause, owner[clause], name)
# The vocabulary comes from the training documents alone.
assert set(vocab.itos[4:]) <= {char for d in split.train for char in d.text}
# Windows are the stream shifted by one, with the <bos> labels ignored.
inputs, labels = sequential_windows(streams["valid"], SEQ_LEN)
flat_inputs, flat_labels = inputs.flatten(), labels.flatten()
assert torch.equal(flat_inputs[: len(streams["valid"]) - 1], streams["valid"][:-1])
assert torch.equal(flat_labels[: len(streams["valid"]) - 1], next_token_labels(streams["valid"][1:]))
assert not (flat_labels == BOS_ID).any()
# Each row of the bigram table is a probability distribution that never predicts <pad> or <bos>.
probs = bigram.log_probs.exp()
assert torch.allclose(probs.sum(dim=1), torch.ones(len(vocab)), atol=1e-4)
assert (probs[:, [PAD_ID, BOS_ID]] == 0).all()
# A uniform guess over V tokens has perplexity V; our baselines are far below it.
uniform = BigramLanguageModel(streams["train"], len(vocab), 0.0)
uniform.log_probs.fill_(-math.log(len(vocab) - 2))
uniform.log_probs[:, [PAD_ID, BOS_ID]] = float("-inf")
assert abs(perplexity(uniform, valid_sample, SEQ_LEN) / (len(vocab) - 2) - 1) < 1e-4  # float32 sums
assert baseline["bigram"]["valid"] < baseline["unigram"]["valid"] < len(vocab)
# The language model is causal: changing token t changes no prediction before t.
probe = streams["valid"][:40].view(2, 20).clone()  # [2, 20]
with eval_mode(model):
    before = model(probe)
    probe[:, 12] = vocab.stoi["月"]
    after = model(probe)
assert torch.equal(before[:, :12], after[:, :12]) and not torch.equal(before[:, 12:], after[:, 12:])
# The KV cache changes the work, not the result: the same tokens with and without it.
prompt = torch.tensor([vocab.encode("床前明月光，", add_special=True)[:-1]] * 3)  # [3, 7]
for kwargs in (dict(), dict(do_sample=True, top_k=20, temperature=0.8)):
    draws = [torch.Generator().manual_seed(1) if kwargs else None for _ in range(2)]
    with_cache = generate(model, prompt, 30, use_cache=True, generator=draws[0], **kwargs)
    without = generate(model, prompt, 30, use_cache=False, generator=draws[1], **kwargs)
    assert torch.equal(with_cache, without), kwargs
# Generation never writes <pad> or <bos> after the prompt, except <pad> after <eos>.
for row in samples:
    written = row[1:].tolist()
    end = written.index(EOS_ID) if EOS_ID in written else len(written)
    assert BOS_ID not in written and PAD_ID not in written[:end]
print("all checks passed")

# %% [markdown]
# ## 12 · What we can do now, and what is still missing
#
# We can train a language model on any text: a decoder-only Transformer built from the
# package's blocks (no cross-attention, causal mask, tied weights), trained with chapter
# 09's `fit`, measured on held-out poems against counting baselines, run with chapter 10's
# samplers and KV cache, saved and reloaded with its vocabulary. Trained for 2,000
# updates, it predicts held-out poems with less than half the bigram's perplexity and, at
# temperature 0.6, writes 98.9% of its lines in form, without copying its training text.
#
# Its architecture is still that of 2017. Later models kept the shape and changed the
# parts: rotary position embeddings (positions as rotations of the queries and keys),
# RMSNorm, a gated feed-forward network (SwiGLU), and grouped-query attention for a
# smaller KV cache. Chapter 13 builds these four and compares them on this chapter's task;
# appendix 14 builds faster kernels for the same attention.
#
# Chapter 12 comes first. The shipped model's 2,000 updates already needed a command that
# runs without a notebook, and a real corpus needs many processes and a run that survives
# a crash. Chapter 12 runs chapter 09's training step, used here unchanged, on several
# processes at once, in mixed precision, with checkpoints it can resume from; its train
# command trained the shipped model.

# %% [markdown]
# ## Exercises
#
# When your notebook is graded, each check also tries cases you do not see (other shapes,
# window lengths, poems and streams): write what the text asks for, not what fits the
# messages.
#
# ### Exercise 1 · Perplexity from logits
# Write `perplexity_of(logits, labels)`: logits [B, T, V] are a model's raw scores,
# labels [B, T] the true next tokens, with `IGNORE_INDEX` marking a position to skip.
# Return $\exp$ of the mean negative log-probability of the counted labels, as a Python
# float. The check compares it with `F.cross_entropy` and with a uniform model.

# %%
def perplexity_of(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """logits [B, T, V], labels [B, T] (IGNORE_INDEX = skip) -> exp(mean NLL of the counted labels)."""
    ### BEGIN SOLUTION
    log_probs = logits.log_softmax(dim=-1)  # [B, T, V]
    keep = labels != IGNORE_INDEX  # [B, T]
    nll = -log_probs[keep].gather(-1, labels[keep][:, None]).squeeze(-1)  # [N]
    return math.exp(nll.mean().item())
    ### END SOLUTION


# %%
#| check ex1-perplexity
from transformer.losses import IGNORE_INDEX as _IGNORE


def _check_perplexity(logits, labels, what):
    counted = int((labels != _IGNORE).sum())
    want = math.exp(F.cross_entropy(logits.flatten(0, 1).double(), labels.flatten(),
                                    ignore_index=_IGNORE).item())
    got = perplexity_of(logits, labels)
    assert isinstance(got, float), f"return a Python float, got {type(got).__name__}"
    assert abs(got - want) < 1e-4 * want, (
        f"{what}: expected perplexity {want:.4f} (exp of the mean of -log softmax(logits)[label] "
        f"over the {counted} counted labels), got {got:.4f}")


_g = torch.Generator().manual_seed(0)
_labels = torch.randint(4, 11, (3, 5), generator=_g)
_labels[0, 3:] = _IGNORE  # a padded tail, and one skipped position inside a row
_labels[2, 1] = _IGNORE
_check_perplexity(torch.randn(3, 5, 11, generator=_g) * 2, _labels, "logits [3, 5, 11]")
_check_perplexity(torch.zeros(2, 4, 7), torch.full((2, 4), 5), "a uniform model over 7 tokens")
### BEGIN HIDDEN TESTS
_labels = torch.randint(0, 30, (1, 9), generator=_g)
_labels[0, ::2] = _IGNORE  # every other position skipped
_check_perplexity(torch.randn(1, 9, 30, generator=_g, dtype=torch.float64) * 4, _labels,
                  "float64 logits [1, 9, 30], half the labels skipped")
_check_perplexity(torch.randn(4, 1, 3, generator=_g), torch.tensor([[0], [1], [2], [_IGNORE]]),
                  "one position per row")
### END HIDDEN TESTS
print("ex1 passed")

# %% [markdown]
# Say in one or two sentences what a perplexity of $P$ means in terms of choices, and why
# a model that spreads its probability evenly over $V$ tokens has perplexity exactly $V$.

# %% [markdown]
# <!-- #| answer ex1-why points=1 -->
# Perplexity is $\exp$ of the mean negative log-probability of the right token: the model
# is on average as uncertain as a uniform choice among $P$ tokens at each position. A
# uniform model gives every token probability $1/V$, so every term is
# $-\log(1/V) = \log V$ and the perplexity is $\exp(\log V) = V$.

# %% [markdown]
# ### Exercise 2 · One training window by hand
# Write `window_at(stream, start, seq_len)`: the inputs and labels of the window of
# `stream` ([N] ids) that starts at `start`, as `random_windows` cuts it: `seq_len` inputs
# from `start`, each label the id after its input, every `<bos>` label replaced by
# `IGNORE_INDEX`. Return a pair of 1-D tensors. The check compares it with
# `sequential_windows` on a stream of short poems, where windows cross from one poem into
# the next.

# %%
def window_at(stream: torch.Tensor, start: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """stream [N] -> (inputs [seq_len], labels [seq_len]) of the window starting at start."""
    ### BEGIN SOLUTION
    window = stream[start:start + seq_len + 1]  # [seq_len + 1]
    labels = window[1:].masked_fill(window[1:] == BOS_ID, IGNORE_INDEX)
    return window[:-1], labels
    ### END SOLUTION


# %%
#| check ex2-window points=2
from transformer.text import CharVocab as _Vocab, encode_stream as _encode, sequential_windows as _windows
from transformer.losses import IGNORE_INDEX as _IGNORE


def _check_window(poems, seq_len, starts):
    vocab = _Vocab.build(poems)
    stream = _encode(poems, vocab)

    def show(t):
        return "".join("·" if i == _IGNORE else vocab.itos[i] for i in t.tolist())

    for start in starts:
        inputs, labels = _windows(stream[start:], seq_len)  # its first row starts at `start`
        out = window_at(stream, start, seq_len)
        assert isinstance(out, tuple) and len(out) == 2, "return a pair (inputs, labels)"
        mine_in, mine_lab = out
        assert mine_in.shape == (seq_len,) and mine_lab.shape == (seq_len,), (
            f"window of {seq_len} at {start}: expected inputs and labels of shape ({seq_len},), "
            f"got {tuple(mine_in.shape)} and {tuple(mine_lab.shape)}")
        assert torch.equal(mine_in, inputs[0]), (
            f"window of {seq_len} at {start}: inputs should be {show(inputs[0])}, got {show(mine_in)}")
        assert torch.equal(mine_lab, labels[0]), (
            f"window of {seq_len} at {start}: labels should be {show(labels[0])} (the inputs shifted "
            f"by one, <bos> replaced by IGNORE_INDEX, shown ·), got {show(mine_lab)}")


_check_window(["春眠不觉晓", "处处闻啼鸟", "夜来风雨声"], 5, [0, 5, 10, 15])  # 3 x 7 ids
### BEGIN HIDDEN TESTS
_check_window(["白日依山尽", "黄河入海流", "欲穷千里目", "更上一层楼"], 8, [3, 6, 13, 19])
_check_window(["床前明月光", "疑是地上霜"], 1, [0, 6, 12])  # windows of one token
### END HIDDEN TESTS
print("ex2 passed")

# %% [markdown]
# ### Exercise 3 · A whole poem in form
# `verse_form` judges one line. Write `regulated_poem(text)`: the half-line length $n$
# (5 or 7) if *every* line of the poem is in form with the same $n$ and the poem has 2
# lines (four verses, the length of a *jueju*, 绝句) or 4 (eight verses, the length of
# regulated verse, section 5), else None. Use `verse_form`. The function is named after
# regulated verse, but like `verse_form` it checks only the shape, not tones, rhyme or
# parallelism. The check tries it on poems of the corpus and on near misses.

# %%
def regulated_poem(text: str) -> int | None:
    """5 or 7 if the poem is 2 or 4 lines in form, all with halves of that length, else None."""
    ### BEGIN SOLUTION
    forms = [verse_form(line) for line in text.split("\n")]
    if len(forms) in (2, 4) and forms[0] is not None and all(f == forms[0] for f in forms):
        return forms[0]
    return None
    ### END SOLUTION


# %%
#| check ex3-regulated points=2
from transformer.poems import verse_form as _verse_form  # the exported function


def _reference(text):
    forms = [_verse_form(line) for line in text.split("\n")]
    return forms[0] if len(forms) in (2, 4) and forms[0] and len(set(forms)) == 1 else None


def _check_poems(cases):
    for text, want in cases.items():
        got = regulated_poem(text)
        assert got == want == _reference(text), (
            f"regulated_poem({text!r}) should be {want}, got {got}")


_check_poems({
    "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。": 5,  # 李白, 夜思: a five-character jueju
    "两个黄鹂鸣翠柳，一行白鹭上青天。\n窗含西岭千秋雪，门泊东吴万里船。": 7,
    "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n床前明月光，疑是地上霜。\n举头望明月，低头思故乡。": 5,
    "床前明月光，疑是地上霜。": None,  # one couplet is not a poem of this kind
    "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n床前明月光，疑是地上霜。": None,  # three
    "床前明月光，疑是地上霜。\n窗含西岭千秋雪，门泊东吴万里船。": None,  # 5 then 7
    "窗含西岭千秋雪，门泊东吴万里船。\n床前明月光，疑是地上霜。": None,  # 7 then 5
    "床前明月光，疑是地上霜。\n举头望明月，低头思故乡": None,  # the last mark is missing
})
### BEGIN HIDDEN TESTS
_check_poems({  # poems of the test split, and four near misses
    "移步出词林，停舆欣武宴。\n雕弓写明月，骏马疑流电。\n惊雁落虚弦，啼猿悲急箭。\n阅赏诚多美，于兹乃忘倦。": 5,
    "烟生遥岸隐，月落半崖阴。\n连山惊鸟乱，隔岫断猿吟。": 5,
    "神皐福地三秦邑，玉台金阙九仙家。\n寒光犹恋甘泉树，淑景偏临建始花。\n"
    "彩蝶黄鸎未歌舞，梅香柳色已矜夸。\n迎春正启流霞席，暂嘱曦轮勿遽斜。": 7,
    "澄潭皎镜石崔巍，万壑千岩暗绿苔。\n林亭自有幽贞趣，况复秋深爽气来。": 7,
    "昔闻有耆叟，河上独遗荣。\n迹与尘嚻隔，心将道德并。\n讵以天地累，宁为宠辱惊。\n"
    "矫然翔寥廓，如何屈坚贞。\n玄玄妙门启，肃肃祠宇清。\n冥漠无先后，那能纪姓名。": None,  # six couplets
    "言旋云洞兮蹑烟涂，永宁中宇兮安下都。\n包涵动植兮顺荣枯，长贻宝贶兮赞璇图。": None,  # 8 + 兮
    "春末冬暮，徂夏杪秋。\n土王四月，时季一周。\n黍稷已享，笾豆宜收。\n送神有乐，神其赐休。": None,  # fours
    "蓼花蘸水火不灭，水鸟惊鱼银梭投。\n满目荷花千万顷，红碧相杂敷清流。\n孙武已斩吴宫女，琉璃池上佳人头。": None,
    "春眠不觉晓处，处闻啼鸟。\n夜来风雨声，花落知多少。": None,  # the right length, halves 6 and 4
    "床前明月光，疑是地上霜；\n举头望明月，低头思故乡。": None,  # a semicolon ends the couplet
})
### END HIDDEN TESTS
print("ex3 passed")

# %% [markdown]
# ### Exercise 4 · Find the bug: the unigram's smoothing
# Section 4's unigram model adds one to the count of every token that **may be a label**;
# the function below adds one to every token of the vocabulary. Write
# `unigram_probs(stream, vocab_size)`, a corrected version: the probabilities `[V]` that
# `BigramLanguageModel(stream, V, weight=0.0)` holds, with the labels taken as section 3
# takes them (`next_token_labels` of the stream shifted by one, `IGNORE_INDEX` skipped).
# The check compares with that model on streams of its own.

# %%
def unigram_probs_with_a_bug(stream: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Add-one smoothed unigram over the labels of a stream: one added to every token."""
    labels = next_token_labels(stream[1:])
    labels = labels[labels != IGNORE_INDEX]
    counts = torch.bincount(labels, minlength=vocab_size).float() + 1
    return counts / counts.sum()


# %%
def unigram_probs(stream: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[V] add-one smoothed probabilities of the labels of `stream`; 0 for <pad> and <bos>."""
    ### BEGIN SOLUTION
    labels = next_token_labels(stream[1:])
    labels = labels[labels != IGNORE_INDEX]
    counts = torch.bincount(labels, minlength=vocab_size).float() + 1
    counts[[PAD_ID, BOS_ID]] = 0.0  # never a label: no probability, no smoothing
    return counts / counts.sum()
    ### END SOLUTION


# %%
#| check ex4-unigram points=2
from transformer.lm import BigramLanguageModel as _Bigram  # the exported class
from transformer.text import CharVocab as _Vocab, encode_stream as _encode


def _check_unigram(poems, extra_tokens):
    vocab = _Vocab.build(poems)
    stream = _encode(poems, vocab)
    size = len(vocab) + extra_tokens  # a vocabulary may hold tokens this stream never uses
    want = _Bigram(stream, size, weight=0.0).unigram
    got = unigram_probs(stream, size)
    assert isinstance(got, torch.Tensor) and got.shape == (size,), (
        f"expected probabilities of shape ({size},), got "
        f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
    gap = (got.double() - want.double()).abs().max().item()
    if gap > 1e-6:
        worst = int((got.double() - want.double()).abs().argmax())
        raise AssertionError(
            f"token {worst} ({vocab.itos[worst] if worst < len(vocab) else 'unused'}): expected "
            f"p = {want[worst].item():.5f}, got {got[worst].item():.5f}. Add one to the count of "
            "every token that may be a label, none to <pad> and <bos>, then normalise")


_check_unigram(["春眠不觉晓", "处处闻啼鸟", "夜来风雨声"], extra_tokens=0)
### BEGIN HIDDEN TESTS
_check_unigram(["白日依山尽", "黄河入海流"], extra_tokens=5)
_check_unigram(["人人人"], extra_tokens=1)
### END HIDDEN TESTS
print("ex4 passed")

# %% [markdown]
# Why must `<pad>` and `<bos>` get probability exactly 0 here, and why add one to the
# other counts at all? Answer in two or three sentences.

# %% [markdown]
# <!-- #| answer ex4-why points=1 -->
# `<pad>` and `<bos>` are never labels (the loss skips them), so probability given to
# them is wasted, and a sampler could draw them: `<pad>` in the middle of a poem, or a
# `<bos>` that starts a new poem mid-line. Adding one to the other counts gives tokens
# seen rarely or never in training (`<unk>`, held-out characters) a small probability
# instead of 0, so a test text that contains one does not get an infinite loss.

# %% [markdown]
# ## Summary
#
# - A **language model** learns $p(x_t \mid x_{<t})$ from text alone: every position of
#   every text is a training example, with the text as its own target shifted by one.
#   Its quality is the **perplexity** $e^{\mathcal{L}}$ on text it never saw.
# - The corpus is **real text**: 49,025 poems of the *Quan Tangshi*, split **by
#   document**; **characters** are the tokens, and batches are **windows cut from one
#   stream** of `<bos> text <eos>` documents, without padding.
# - The counted **baselines** reach a validation perplexity of 641 (unigram) and 220
#   (bigram). The **decoder-only Transformer** (chapter 07's block with
#   `cross_attention=False`, causal mask, tied weights) trained for 2,000 updates
#   reaches 101 on the validation set and 99.5 on the test set, 0.46 and 0.45 times the
#   bigram's; its tied output layer's bias follows the log frequency of each token.
# - **Form**: continuing held-out poems at temperature 0.6, the shipped model writes
#   98.9% of its lines in form (the poets 99.2%), and its longest runs shared with the
#   training text are no longer than the poets'.
# - Chapter 10's `generate` drives any next-token model, with the KV cache feeding one
#   token per step.
