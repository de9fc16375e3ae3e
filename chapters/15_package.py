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
# # 15 · Appendix: A package for others
#
# The chapters build each layer to teach one idea. The same code is also a package,
# `transformer`, that other people import without reading the chapter that built it, and
# for them a mistake has to fail at once, with a message that says which argument was
# wrong and what was expected. A silent wrong answer, or a NaN three layers further on, is
# the worst a library can do to its user. This appendix collects what the package does
# for that user:
#
# 1. bad input refused at the boundary, one error per mistake, layer by layer;
# 2. a saved model that is damaged or missing, refused with the file and what is wrong;
# 3. `generate` with Hugging Face's `GenerationConfig`, streamers and stopping criteria;
# 4. a translator and a poet that take text and give text;
# 5. commands for the shell: `python -m transformer translate` and `train`;
# 6. a top level that holds what a user of the models needs, and no more.

# %%
import json
import shutil
import tempfile
from pathlib import Path

import torch

from transformer.attention import scaled_dot_product_attention
from transformer.data import Vocab
from transformer.embedding import TokenEmbedding
from transformer.feedforward import FeedForward
from transformer.masks import causal_mask, combine_masks, padding_mask
from transformer.model import Transformer
from transformer.multihead import MultiHeadAttention
from transformer.positional import PositionalEncoding

_ = torch.manual_seed(0)

# %% [markdown]
# Why refuse rather than run? Plain PyTorch runs a padding mask that has lost its two
# singleton axes whenever it broadcasts, and gives weights that look like any others.
# Below, three sentences of three tokens ($B = T_q = 3$, the second and third padded),
# through `torch.nn.functional.scaled_dot_product_attention`: with the mask
# `[B, 1, 1, Tk]` each sentence hides its own padding; with `[B, Tk]` the mask is read as
# one `[Tq, Tk]` pattern for every sentence, so each *query* gets another sentence's row.

# %%
#| fig-cap: Attention weights of three sentences of three tokens under PyTorch's own
#|   attention, with the padding mask as [B, 1, 1, Tk] (top) and as [B, Tk] (bottom), which
#|   PyTorch broadcasts without complaint. Rows are queries, columns keys; sentence 3 is
#|   "<bos> <pad> <pad>".
#| fig-alt: Two rows of three heatmaps. Top: sentence 1 spreads its weights over its three
#|   tokens, sentence 2 over its first two, sentence 3 puts all its weight on its first
#|   token. Bottom: every sentence has the same pattern, the first query over three keys,
#|   the second over two and the third on one, so sentences 2 and 3 attend to their padding.
import matplotlib.pyplot as plt
import torch.nn.functional as F

ids3 = torch.tensor([[1, 3, 4], [1, 5, 0], [1, 0, 0]])  # [B=3, T=3], 0 = <pad>
q3 = torch.randn(3, 3, 8)  # [B, T, d_k]
keep = ids3 != 0  # [B, Tk]
one_hot_values = torch.eye(3).expand(3, 3, 3)  # value j is the j-th unit vector: the output is the weights
right = F.scaled_dot_product_attention(q3, q3, one_hot_values, attn_mask=keep[:, None, :])  # [B, Tq, Tk]
flat = F.scaled_dot_product_attention(q3, q3, one_hot_values, attn_mask=keep)  # accepted: read as [Tq, Tk]
fig, axes = plt.subplots(2, 3, figsize=(7, 4.6))
for row, (weights, label) in enumerate(((right, "[B, 1, 1, Tk]"), (flat, "[B, Tk]"))):
    for b in range(3):
        ax = axes[row, b]
        ax.imshow(weights[b].numpy(), vmin=0, vmax=1, cmap="Blues")
        ax.set_xticks(range(3))
        ax.set_yticks(range(3))
        ax.set_title(f"sentence {b + 1}, mask {label}", fontsize=8)
plt.tight_layout()
plt.show()
print("weight on padding, [B, 1, 1, Tk]:", round(right[~keep[:, None, :].expand(3, 3, 3)].sum().item(), 4),
      "| [B, Tk]:", round(flat[~keep[:, None, :].expand(3, 3, 3)].sum().item(), 4))

# %% [markdown]
# Under the right mask the padding gets no weight; under the flat one it gets 1.74 of the
# nine rows' weight, and nothing says so. The package refuses such a mask (section 1).
#
# ## 1 · Bad input, named
#
# Each layer checks its arguments where they enter it, once, and raises an error that
# names the argument: `TypeError` for a tensor of the wrong dtype, `ValueError` for a
# wrong shape, size or option, `IndexError` for an id outside the vocabulary. `refused`
# runs each bad call, prints the error, and fails if a call was accepted, so that the
# list below is also a test.

# %%
def refused(bad_calls: dict) -> None:
    """Run each bad call; print its error type and message, or fail if it was accepted."""
    for name, call in bad_calls.items():
        try:
            call()
        except (TypeError, ValueError, IndexError) as err:
            print(f"{name:>28} -> {type(err).__name__}: {err}")
        else:
            raise AssertionError(f"{name} was accepted")


# %% [markdown]
# **The embedding** (chapter 01). An id outside the vocabulary, and ids stored as floats,
# each beside what `nn.Embedding` alone says about the same call, then sizes that are not
# positive integers:

# %%
embed = TokenEmbedding(13, 8)
for bad_ids in (torch.tensor([[1, 99]]), torch.tensor([[1.0, 4.0]])):
    refused({"TokenEmbedding": lambda ids=bad_ids: embed(ids)})
    try:
        embed.embedding(bad_ids)
    except (IndexError, RuntimeError) as err:
        print(f"{'nn.Embedding alone':>28} -> {type(err).__name__}: {err}")
refused({
    "vocab_size = 0": lambda: TokenEmbedding(0, 8),
    "d_model = -8": lambda: TokenEmbedding(13, -8),
    "vocab_size = 13.0": lambda: TokenEmbedding(13.0, 8),
})

# %% [markdown]
# **Positional encoding** (chapter 02): an odd width, a missing batch axis, a wrong width,
# token ids where embeddings belong, and positions past `max_len`, in training and while
# generating.

# %%
positional = PositionalEncoding(16, max_len=64)
refused({
    "odd d_model": lambda: PositionalEncoding(15),
    "no batch axis": lambda: positional(torch.randn(5, 16)),
    "width 256, not 16": lambda: positional(torch.randn(1, 5, 256)),
    "token ids": lambda: positional(torch.tensor([[1, 4, 5, 2]])),
    "65 positions, max_len 64": lambda: positional(torch.randn(1, 65, 16)),
    "generating at position 64": lambda: positional(torch.randn(1, 1, 16), start=64),
    "start = -1": lambda: positional(torch.randn(1, 1, 16), start=-1),
})

# %% [markdown]
# **Masks and attention** (chapters 03 and 04). Scores of two sentences of five tokens,
# `[2, 5, 5]`. The padding mask without its two singleton axes is the most dangerous
# mistake, because where the batch size equals the query length it broadcasts and is
# silently wrong (chapter 04, section 9); here the sizes differ, and it is caught:

# %%
q = torch.randn(2, 5, 8)  # [B, T, d_k]
ids = torch.tensor([[1, 4, 5, 2, 0], [1, 6, 2, 0, 0]])  # [B, T], 0 = <pad>
pad = padding_mask(ids)  # [B, 1, 1, T]
causal = causal_mask(5)  # [1, 1, T, T]
both = combine_masks(pad, causal)  # [B, 1, T, T]
refused({
    "float 0/1 mask": lambda: scaled_dot_product_attention(q, q, q, both.float()[:, 0]),
    "int mask": lambda: scaled_dot_product_attention(q, q, q, causal.long()[0]),
    "mask of wrong shape": lambda: scaled_dot_product_attention(q, q, q, causal_mask(4)[0]),
    "padding mask [B, Tk]": lambda: scaled_dot_product_attention(q, q, q, pad[:, 0, 0]),
    "causal_mask(0)": lambda: causal_mask(0),
    "causal_mask(2.5)": lambda: causal_mask(2.5),
    "padding_mask of 1-D ids": lambda: padding_mask(torch.tensor([1, 2, 0])),
    "padding_mask of float ids": lambda: padding_mask(ids.float()),
    "combine a float mask": lambda: combine_masks(pad, causal.float()),
    "combine mismatched": lambda: combine_masks(pad, causal_mask(4)),
})

# %% [markdown]
# **Multi-head attention** (chapter 05). The two padding masks that broadcast silently
# in plain PyTorch are caught here too: `[B, Tk]` where the batch size equals the query
# length, and `[B, Tq, Tk]` where it equals the number of heads.

# %%
mha = MultiHeadAttention(d_model=16, num_heads=2)
x = torch.randn(2, 4, 16)  # [B, T, d_model]: two sentences of four tokens
x4 = torch.randn(4, 4, 16)  # as many sentences as positions
pad4 = torch.tensor([[True] * 4, [True] * 3 + [False], [True] * 2 + [False] * 2, [True] + [False] * 3])
refused({
    "d_model not divisible": lambda: MultiHeadAttention(10, 3),
    "no batch axis": lambda: mha(x[0], x[0], x[0]),
    "batch 2 against 1": lambda: mha(x, x[:1], x[:1]),
    "[B, Tk] mask, B == Tq": lambda: mha(x4, x4, x4, pad4),
    "[B, Tq, Tk] mask, B == heads": lambda: mha(x, x, x, pad4[:2, None, :].expand(2, 4, 4)),
})

# %% [markdown]
# **The feed-forward network** (chapter 06):

# %%
refused({
    "unknown activation": lambda: FeedForward(16, activation="tanh"),
    "d_model = 0": lambda: FeedForward(0),
    "input of width 12": lambda: FeedForward(16)(torch.randn(1, 5, 12)),
})

# %% [markdown]
# **The model** (chapter 08). An argument is named as the caller wrote it:
# `Transformer(0, 100)` names `src_vocab_size`, not an inner `vocab_size`.

# %%
model = Transformer(50, 50, d_model=32, num_heads=4, num_encoder_layers=1, num_decoder_layers=1,
                    d_ff=64, max_len=20).eval()
src, tgt = torch.randint(1, 50, (3, 7)), torch.randint(1, 50, (3, 6))
refused({
    "d_model not divisible": lambda: Transformer(100, 100, d_model=30, num_heads=8),
    "3 sources, 2 targets": lambda: model(src, tgt[:2]),
    "target past max_len": lambda: model(src, torch.randint(1, 50, (3, 25))),
    "source past max_len": lambda: model(torch.randint(1, 50, (3, 21)), tgt),
    "ids outside the vocabulary": lambda: model(src, tgt + 100),
    "an empty source": lambda: model(src[:, :0], tgt),
    "src_vocab_size = 0": lambda: Transformer(0, 100),
    "pad_id = -1": lambda: Transformer(100, 100, pad_id=-1),
    "tie_output = 'yes'": lambda: Transformer(100, 100, tie_output="yes"),
})

# %% [markdown]
# The model checks its token ids where they enter it, under the names the caller wrote,
# and that check is the only one that reads their values: the smallest and the largest id
# have to come back from the device to the host, and on a GPU each such read waits for
# all the work queued before it. Inside the model, the layers skip their own checks of
# tensors (`_inputs_checked`, chapter 01): the embeddings do not read the ids again, and
# no layer compares the shapes again. PyTorch's dispatch hook (`TorchDispatchMode`,
# which sees every operator a call runs) counts the reads of one forward pass, for
# models of one layer and of six on each side:

# %%
from torch.utils._python_dispatch import TorchDispatchMode


class HostReads(TorchDispatchMode):
    """Counts the operators that copy a value from the device to the host."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func._schema.name.split("::")[-1] in ("_local_scalar_dense", "nonzero")
        return func(*args, **(kwargs or {}))


host_reads = {}
for layers in (1, 6):
    deep = Transformer(50, 50, d_model=32, num_heads=4, num_encoder_layers=layers,
                       num_decoder_layers=layers, d_ff=64, max_len=20).eval()
    with torch.no_grad(), HostReads() as counter:
        deep(src, tgt)
    host_reads[layers] = counter.count
    print(f"{layers} layer(s) on each side: {counter.count} host reads in a forward pass")
assert host_reads[1] == host_reads[6] == 4, host_reads

# %% [markdown]
# Four at either depth: the minimum and the maximum of `src` and of `tgt`, read once
# where the model checks them.
#
# **The vocabulary** (chapter 09): a sentence with nothing in it, one too long for the
# model, and one that writes a special token as text.

# %%
vocab = Vocab.build(["I love apples", "you eat pears"])
refused({
    "empty sentence": lambda: vocab.encode(""),
    "only spaces": lambda: vocab.encode("   "),
    "20 words, max_len 14": lambda: vocab.encode(" ".join(["apples"] * 20), max_len=14),
    "a special token as text": lambda: vocab.encode("I love <eos>"),
})

# %% [markdown]
# ## 2 · A damaged or missing saved model
#
# `save_pretrained` writes a directory (chapter 08); `from_pretrained` refuses a damaged
# or wrong one with the file's name and what is wrong with it (the temporary directory is
# shown as `<dir>`): weights cut off half-way, a config that does not match the weights,
# no directory at all.

# %%
workdir = Path(tempfile.mkdtemp())
saved = model.save_pretrained(workdir / "model")


def refused_load(directory: Path) -> None:
    """Load a saved model that must be refused; print the error, or fail if it loads."""
    try:
        Transformer.from_pretrained(directory)
    except (FileNotFoundError, ValueError) as err:
        print(f"{type(err).__name__}: {str(err).replace(str(workdir), '<dir>')}")
    else:
        raise AssertionError(f"{directory} was loaded")


broken = workdir / "broken"
shutil.copytree(saved, broken)
weights = (broken / "model.safetensors").read_bytes()
(broken / "model.safetensors").write_bytes(weights[: len(weights) // 2])  # a truncated copy
refused_load(broken)
(broken / "model.safetensors").write_bytes(weights)
config = json.loads((broken / "config.json").read_text())
config["config"]["d_ff"] = 128  # weights of d_ff=64
(broken / "config.json").write_text(json.dumps(config))
refused_load(broken)
refused_load(workdir / "missing")
shutil.rmtree(workdir)

# %% [markdown]
# ## 3 · `generate` as Hugging Face users call it
#
# Chapter 10's `generate(model, input_ids, ...)` takes its options as keyword arguments.
# A Hugging Face user also keeps them in a `GenerationConfig`, to reuse them, shows
# words while they are generated with a *streamer*, and ends a row on a condition of their
# own with `stopping_criteria`. `hf_generate` adds those three to chapter 10's `generate`
# and nothing else: the config checks its fields once, when it is made, with chapter 10's
# `_check_options`; keyword arguments override its fields in a checked copy; the streamer
# and the stopping criteria become chapter 10's `on_step`. `model.generate(...)` (chapter
# 08) calls `hf_generate`, so every model of the book has them, and the package's top
# level holds it as `transformer.generate` (section 6).

# %%
#| export hf_generation
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch
from torch import Tensor, nn

from transformer.generation import _check_options, _special_id, generate


@dataclass(frozen=True)
class GenerationConfig:
    """generate's options, as Hugging Face's GenerationConfig names them, checked once.

    They are checked when the config is made (and when dataclasses.replace makes a changed
    copy), and cannot change after: the dataclass is frozen.

    Attributes:
        max_new_tokens: the most ids to generate per row, > 0 (None: as many as the
            model's max_len allows).
        do_sample: sample instead of taking the most likely id (default False).
        temperature, top_k, top_p: the sampling options, only with do_sample (None: 1.0,
            all ids, all ids).
        num_beams: > 1 for beam search with GNMT's length penalty (default 1).
        num_return_sequences: outputs per input, > 0 (default 1).
        length_penalty: with num_beams > 1, the penalty's exponent, >= 0 (default 0.6).
        bos_id, eos_id, pad_id: the special ids (None: the model's own, model.bos_id, ...).
        ignore_eos: never end a row at eos_id (default False; not with beams).
        use_cache: reuse keys and values between steps (None: when the model can).

    Each means what chapter 10's generate says of the argument of the same name.

    Raises:
        ValueError: an option is out of range or contradicts another (the message names it
            and says what to pass instead).
    """

    max_new_tokens: int | None = None
    do_sample: bool = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    num_beams: int = 1
    num_return_sequences: int = 1
    length_penalty: float = 0.6
    bos_id: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None
    ignore_eos: bool = False
    use_cache: bool | None = None

    def __post_init__(self) -> None:
        _check_options(**asdict(self))


def _generation_config(config: object, max_new_tokens: int | None, options: dict[str, Any]) -> GenerationConfig:
    """config (default GenerationConfig()) with max_new_tokens and options put in, checked."""
    if config is None:
        config = GenerationConfig()
    elif not isinstance(config, GenerationConfig):
        raise TypeError(f"generation_config must be a GenerationConfig or None, got {type(config).__name__}")
    unknown = sorted(set(options) - {field.name for field in fields(GenerationConfig)})
    if unknown:
        raise TypeError(f"generate got unknown options {unknown}: GenerationConfig lists the options")
    if max_new_tokens is not None:
        options = {**options, "max_new_tokens": max_new_tokens}
    return replace(config, **options)


def _check_callbacks(config: GenerationConfig, streamer: object, stopping_criteria: object) -> None:
    """A streamer has put(ids) and end(); stopping_criteria is a function; neither with beams."""
    if config.num_beams > 1 and (streamer is not None or stopping_criteria is not None):
        raise ValueError("streamer and stopping_criteria work with greedy decoding and sampling, not with "
                         "num_beams > 1 (a beam's best hypothesis is known only at the end)")
    if streamer is not None and not (callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None))):
        raise TypeError(f"streamer must have put(ids) and end() methods, got {type(streamer).__name__}")
    if stopping_criteria is not None and not callable(stopping_criteria):
        raise TypeError(f"stopping_criteria must be a function (ids, logits) -> bool [batch], "
                        f"got {type(stopping_criteria).__name__}")


def hf_generate(model: nn.Module, input_ids: Tensor | None = None, max_new_tokens: int | None = None, *,
                generation_config: GenerationConfig | None = None, attention_mask: Tensor | None = None,
                streamer: object = None, stopping_criteria: Callable[[Tensor, Tensor], object] | None = None,
                generator: torch.Generator | None = None, **options: Any) -> Tensor:
    """Generate token ids as Hugging Face's `model.generate` does; `model.generate` calls it.

    It is chapter 10's generate with a GenerationConfig, a streamer and stopping criteria;
    the package's top level holds it as `transformer.generate`.

    Args:
        model: the model (an nn.Module; a Translator's model is translator.model).
        input_ids: the source ids [B, S] of an encoder-decoder model, or the prompts
            [B, P] of a decoder-only model (default None: one prompt, `<bos>`).
        max_new_tokens: the most ids to generate per row, > 0 (default None: the config's,
            else as many as the model's max_len allows).
        generation_config: the options (default None: GenerationConfig()'s defaults).
        attention_mask: [B, T], 1 (or True) for a token, 0 for padding, as for chapter 10's
            generate (default None).
        streamer: an object whose `put(ids)` receives each step's new ids [B] (pad_id for a
            row without one) and whose `end()` is called at the end; not with beams.
        stopping_criteria: a function (ids so far [B, t], logits [B, V]) -> bool [B] (or one
            bool) that ends the rows it marks after their latest id; not with beams.
        generator: a seeded torch.Generator for a reproducible draw (default None).
        **options: fields of GenerationConfig (do_sample, temperature, top_k, top_p,
            num_beams, num_return_sequences, length_penalty, bos_id, eos_id, pad_id,
            ignore_eos, use_cache), which override generation_config's.

    Returns:
        Ids [B * num_return_sequences, ...], as chapter 10's generate returns them.

    Raises:
        TypeError: model is not an nn.Module, input_ids not an integer tensor, generator not
            a torch.Generator, streamer or stopping_criteria of the wrong kind, or an option
            unknown.
        ValueError: an option is out of range or contradicts another (the message names it
            and says what to pass instead).
    """
    config = _generation_config(generation_config, max_new_tokens, options)
    _check_callbacks(config, streamer, stopping_criteria)
    on_step = None
    if streamer is not None or stopping_criteria is not None:
        def on_step(tokens: Tensor, logits: Tensor, new: Tensor) -> object:  # tokens [B, t], new [B]
            if streamer is not None:  # the step's new ids, pad_id where a row wrote none
                streamer.put(tokens[:, -1].masked_fill(~new, _special_id(model, "pad_id", config.pad_id)))  # type: ignore[attr-defined]
            return None if stopping_criteria is None else stopping_criteria(tokens, logits)
    try:
        return generate(model, input_ids, attention_mask=attention_mask, generator=generator, on_step=on_step,
                        **asdict(config))
    finally:
        if streamer is not None:
            streamer.end()  # type: ignore[attr-defined]


# %% [markdown]
# On chapter 09's translator, below: one config used twice, the second time with
# `num_beams=1` overriding it (beam search and greedy decoding agree on these two
# sentences); a streamer that prints the first sentence's words as they come, `<eos>`
# included, then `(end)`; a stopping criterion that ends both rows after two words. The
# config refuses a contradiction when it is made, before any model runs.

# %%
from transformer.data import pad_sequences
from transformer.saving import load_checkpoint

checkpoint = load_checkpoint()
translator_model, english, chinese = checkpoint.model, checkpoint.src_vocab, checkpoint.tgt_vocab
sources = pad_sequences([english.encode("I love apples"), english.encode("the children drink hot tea in the park")])  # [2, S]
beams = GenerationConfig(num_beams=4, max_new_tokens=10)
print([chinese.decode(row) for row in hf_generate(translator_model, sources, generation_config=beams)])
print([chinese.decode(row) for row in hf_generate(translator_model, sources, generation_config=beams, num_beams=1)])


class PrintWords:
    """A streamer: prints the first row's new word at each step."""

    def put(self, ids: Tensor) -> None:  # [B]
        print(chinese.itos[int(ids[0])], end=" ")

    def end(self) -> None:
        print("(end)")


streamed = hf_generate(translator_model, sources[:1], streamer=PrintWords())
two_words = hf_generate(translator_model, sources, stopping_criteria=lambda ids, logits: ids.size(1) > 2)
print([chinese.decode(row) for row in two_words])
assert torch.equal(streamed, generate(translator_model, sources[:1]))
assert two_words.size(1) == 3  # <bos> and two words
assert torch.equal(translator_model.generate(sources, num_beams=4), hf_generate(translator_model, sources, num_beams=4))
try:
    GenerationConfig(temperature=0.7)
except ValueError as err:
    print(f"ValueError: {err}")

# %% [markdown]
# ## 4 · The apps: a translator and a poet
#
# Chapter 10 decodes ids into ids; a user has English text and wants Chinese text.
# `Translator` bundles a trained model with its two vocabularies; `load_translator()`
# loads chapter 09's (or any checkpoint saved by `save_checkpoint`); `translate(text)`
# does both and keeps the model for the next call. A word the model never saw would be
# encoded as `<unk>` and silently mistranslated, so the translator refuses it with an
# `UnknownWordsError` (a `ValueError`) that names every unknown word.

# %%
#| export translator
from functools import lru_cache
from pathlib import Path

from torch import Tensor

from transformer.data import Vocab, pad_sequences
from transformer.validation import _check_float, _check_int
from transformer.beam_search import beam_search
from transformer.decoding import greedy_decode
from transformer.model import Transformer
from transformer.pretrained import _as_directory
from transformer.saving import SRC_VOCAB_FILE, TGT_VOCAB_FILE, TRANSLATOR_CHECKPOINT, load_checkpoint


class UnknownWordsError(ValueError):
    """A sentence holds words outside the translator's source vocabulary.

    Args:
        words: the unknown words (each once, in order of appearance), kept as `.words`;
            the message names them.
    """

    def __init__(self, words: list[str]):
        self.words = words
        super().__init__(
            f"unknown word{'s' if len(words) > 1 else ''}: {', '.join(map(repr, words))}; "
            "the translator knows only the words of its toy corpus (chapter 09)"
        )


class Translator:
    """A trained Transformer with its vocabularies: English text in, Chinese text out.

    translator("I love apples") -> "我 喜欢 苹果"; a list of sentences gives a list
    (translated as one padded batch [batch, src_len]).

    Args:
        model: a trained encoder-decoder model (a chapter-08 Transformer).
        src_vocab: the source vocabulary it was trained with.
        tgt_vocab: the target vocabulary.
    """

    def __init__(self, model: Transformer, src_vocab: Vocab, tgt_vocab: Vocab):
        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab

    def encode(self, sentences: list[str]) -> Tensor:
        """Encode source sentences into ids [batch, src_len], padded with the model's pad_id.

        Args:
            sentences: the sentences; every word is checked before any is encoded.

        Returns:
            The ids [batch, src_len], `<bos> ... <eos>` per row.

        Raises:
            UnknownWordsError: a sentence holds words outside the source vocabulary.
            ValueError: a sentence is empty, too long for the model, or holds a special
                token's string such as `<eos>`.
        """
        unknown = list(dict.fromkeys(w for s in sentences for w in self.src_vocab.unknown_words(s)))
        if unknown:
            raise UnknownWordsError(unknown)
        limit = getattr(self.model, "max_len", None)
        return pad_sequences([self.src_vocab.encode(s, max_len=limit) for s in sentences], self.model.pad_id)

    def __call__(self, text: str | list[str], beam_size: int = 4, alpha: float = 0.6) -> str | list[str]:
        """Translate one sentence or a list of them.

        Args:
            text: a sentence (str), or a non-empty list of them.
            beam_size: 1 for greedy decoding, more for beam search (default 4, the paper's).
            alpha: beam search's length penalty (default 0.6).

        Returns:
            The translation (str), or a list of them for a list.

        Raises:
            TypeError: text is neither a str nor a list of str.
            UnknownWordsError: a sentence holds words outside the vocabulary.
            ValueError: a sentence cannot be encoded (see encode), the list is empty, or
                beam_size or alpha is out of range.
        """
        if isinstance(text, str):
            sentences = [text]
        elif isinstance(text, (list, tuple)) and all(isinstance(s, str) for s in text):
            sentences = list(text)
        else:
            raise TypeError(f"text must be a str or a list of str, got {type(text).__name__}"
                            + (" holding a non-str" if isinstance(text, (list, tuple)) else ""))
        if not sentences:
            raise ValueError("text must hold at least one sentence, got an empty list")
        _check_int("beam_size", beam_size)
        _check_float("alpha", alpha, 0.0)
        src = self.encode(sentences)  # [batch, src_len]
        max_new = min(2 * src.size(1) + 10, getattr(self.model, "max_len", 512) - 1)
        bos, eos = self.model.bos_id, self.model.eos_id  # the model's own, as generate takes them
        if beam_size == 1:
            out = greedy_decode(self.model, src, bos, eos, max_new_tokens=max_new)
        else:
            out, _ = beam_search(self.model, src, bos, eos, beam_size, alpha, max_new)
        result = [self.tgt_vocab.decode(row) for row in out]
        return result[0] if isinstance(text, str) else result


def load_translator(directory: str | Path | None = None) -> Translator:
    """Load a translator from a checkpoint written by chapter 09's `save_checkpoint`.

    Nothing is unpickled (safetensors weights, JSON config and vocabularies).

    Args:
        directory: the checkpoint directory; None (default) loads the translator shipped
            with the package (transformer/checkpoints/translator/).

    Returns:
        The Translator, its model in eval mode.

    Raises:
        FileNotFoundError: the directory or one of its files is missing.
        ValueError: a file is malformed (the message names it), or the checkpoint has
            no vocabularies.
    """
    directory = TRANSLATOR_CHECKPOINT if directory is None else _as_directory(directory)
    checkpoint = load_checkpoint(directory)
    if checkpoint.src_vocab is None or checkpoint.tgt_vocab is None:
        raise ValueError(f"{directory}: a model without vocabularies ({SRC_VOCAB_FILE}, {TGT_VOCAB_FILE}); "
                         "a translator needs them: save it with save_checkpoint(..., src_vocab, tgt_vocab)")
    return Translator(checkpoint.model, checkpoint.src_vocab, checkpoint.tgt_vocab)


@lru_cache(maxsize=1)
def _shipped_translator() -> Translator:
    return load_translator()


def translate(text: str | list[str], beam_size: int = 4) -> str | list[str]:
    """Translate English into Chinese with the shipped translator (loaded once, then reused).

    translate("I love apples") -> "我 喜欢 苹果".

    Args:
        text: a sentence, or a list of them.
        beam_size: 4 (default, the paper's) for beam search, 1 for greedy decoding.

    Returns:
        The translation, or a list of them.

    Raises:
        TypeError: text is neither a str nor a list of str.
        UnknownWordsError: a sentence holds words outside the vocabulary (named).
        ValueError: a sentence is empty, holds a special token's string, or is too long;
            or beam_size is not a positive integer.
    """
    return _shipped_translator()(text, beam_size=beam_size)


# %% [markdown]
# One sentence, then a list (one padded batch), then greedy decoding with `beam_size=1`
# ("school" with "tomorrow" is a combination held out of training), then the four
# mistakes a caller can make: unknown words, a special token written as text, an empty
# sentence and something that is not text.

# %%
print(translate("I love apples"))
print(translate(["I love apples", "I ate apples in the park yesterday", "do you eat apples?"]))
print(translate(["I will borrow magazines at school tomorrow", "did you see the dog ?"], beam_size=1))
print(translate("I love apples."), "|", translate("Do you love apples?"))
for bad in ["I love pineapples and mangoes", "<eos> <pad>", "", 123]:
    try:
        translate(bad)
    except (ValueError, TypeError) as err:  # UnknownWordsError is a ValueError
        print(f"{type(err).__name__}: {err}")

# %% [markdown]
# Chapter 11's language model ships with the package too, and makes the second app:
# `write_poem` continues a poem from its first line, sampling as chapter 11 did, at
# temperature 0.6. A seed makes the draw repeatable; a character the model never saw is
# refused by name, as the translator refuses a word.

# %%
#| export poet
from functools import lru_cache

import torch

from transformer.lm import LanguageModelCheckpoint, load_language_model
from transformer.poems import continue_poems
from transformer.validation import _check_float, _check_int


@lru_cache(maxsize=1)
def _shipped_poet() -> LanguageModelCheckpoint:
    return load_language_model()


def write_poem(first_line: str, temperature: float = 0.6, seed: int | None = None) -> str:
    """Continue a poem from its first line with the language model shipped with the package.

    write_poem("白日依山尽，黄河入海流。", seed=0) -> that line, then the lines the model
    wrote (up to 52 characters, chapter 11's `continue_poems`), one per line.

    Args:
        first_line: the poem's first line (a couplet such as "白日依山尽，黄河入海流。"),
            in characters the model knows, without a line break.
        temperature: > 0; lower is more predictable (default 0.6, as in chapter 11).
        seed: an integer >= 0 for a repeatable draw (default None: a new draw each call).

    Returns:
        The poem: first_line and each complete line the model wrote, joined by line breaks.

    Raises:
        TypeError: first_line is not a str.
        ValueError: first_line is empty, holds a line break or a character the model
            never saw (named), or temperature or seed is out of range.
    """
    if not isinstance(first_line, str):
        raise TypeError(f"first_line must be a str, got {type(first_line).__name__}")
    if not first_line.strip() or "\n" in first_line:
        raise ValueError(f"first_line must be one line of text, got {first_line!r}")
    _check_float("temperature", temperature, 0.0, low_closed=False)
    if seed is not None:
        _check_int("seed", seed, 0)
    model, vocab, _ = _shipped_poet()
    unknown = list(dict.fromkeys(vocab.unknown_words(first_line)))
    if unknown:
        raise ValueError(f"first_line holds characters the model never saw: {', '.join(map(repr, unknown))}")
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    (written,) = continue_poems(model, [first_line], vocab, do_sample=True, temperature=temperature,
                                generator=generator)
    return "\n".join([first_line, *written])


# %%
# NBVAL_IGNORE_OUTPUT
print(write_poem("白日依山尽，黄河入海流。", seed=0))  # a draw: another CPU's rounding may change it

# %%
assert write_poem("白日依山尽，黄河入海流。", seed=0) == write_poem("白日依山尽，黄河入海流。", seed=0)
for bad in ["white sun", "", 7]:
    try:
        write_poem(bad)
    except (ValueError, TypeError) as err:
        print(f"{type(err).__name__}: {err}")

# %% [markdown]
# ## 5 · The command line
#
# Chapter 12 trains from a config file under `torchrun` with a three-line script. A user
# wants commands instead: `python -m transformer translate "I love apples"`,
# `python -m transformer poem "白日依山尽，黄河入海流。"` and
# `python -m transformer train CONFIG`, which print one line on standard error for a
# mistake of theirs rather than a traceback, and exit with a status a shell script can
# test. Each command is a function from the arguments a shell passes to an exit status,
# so that it can be called, and tested, without starting a process.
#
# `translate` prints one translation per sentence; a sentence it cannot translate gives
# exit status 2, a checkpoint it cannot load 1.

# %%
#| export commands
import argparse
import sys
from importlib import resources

from transformer.trainer import train_from_config
from transformer.translator import load_translator


def translate_command(argv: list[str] | None = None) -> int:
    """`python -m transformer translate "I love apples"`: print each sentence's translation.

    Never prints a traceback for a problem of the input or the checkpoint: one line on
    standard error says what is wrong.

    Args:
        argv: the arguments after `translate` (default None: sys.argv[2:]).

    Returns:
        The exit status: 0 if every sentence was translated; 1 if the checkpoint cannot
        be loaded (missing, corrupt or malformed: the message names the file); 2 for bad
        input (a sentence with unknown words, a special token, no words, or too long; a
        bad option, as argparse reports it).
    """
    parser = argparse.ArgumentParser(prog="python -m transformer translate",
                                     description="Translate English sentences into Chinese with the "
                                                 "toy translator of the book.")
    parser.add_argument("sentences", nargs="+", help="English sentences, each one argument")
    parser.add_argument("--beam", type=int, default=4, help="beam size (1 = greedy; default 4)")
    parser.add_argument("--checkpoint", default=None,
                        help="a checkpoint directory written by chapter 09's save_checkpoint")
    args = parser.parse_args(sys.argv[2:] if argv is None else argv)
    if args.beam < 1:
        parser.error(f"--beam must be a positive integer, got {args.beam}")
    try:
        translator = load_translator(args.checkpoint)
    except (OSError, ValueError) as err:  # FileNotFoundError is an OSError
        print(f"error: cannot load the translator: {err}", file=sys.stderr)
        return 1
    status = 0
    for sentence in args.sentences:
        try:
            print(translator(sentence, beam_size=args.beam))
        except ValueError as err:  # UnknownWordsError is one
            print(f"error: cannot translate {sentence!r}: {err}", file=sys.stderr)
            status = 2
    return status

# %% [markdown]
# Called with the arguments a shell would pass after `translate`, standard error shown
# where it is written:

# %%
import contextlib

for argv in (["I love apples"], ["I love durians"], ["I love apples", "--checkpoint", "no/such/directory"]):
    with contextlib.redirect_stderr(sys.stdout):
        status = translate_command(argv)
    print("exit status:", status)

# %% [markdown]
# `poem` prints the poem that `write_poem` writes; a seed repeats it.

# %%
#| export commands
from transformer.poet import write_poem


def poem_command(argv: list[str] | None = None) -> int:
    """`python -m transformer poem "白日依山尽，黄河入海流。"`: print a poem that goes on from that line.

    Args:
        argv: the arguments after `poem` (default None: sys.argv[2:]).

    Returns:
        The exit status: 0 if the poem was written; 1 if the language model cannot be
        loaded; 2 for bad input (a character the model never saw, an empty line, a bad
        option), with one line on standard error.
    """
    parser = argparse.ArgumentParser(prog="python -m transformer poem",
                                     description="Continue a classical Chinese poem from its first line "
                                                 "with the language model of the book (chapter 11).")
    parser.add_argument("first_line", help="the poem's first line, such as 白日依山尽，黄河入海流。")
    parser.add_argument("--temperature", type=float, default=0.6, help="> 0; lower is more predictable (default 0.6)")
    parser.add_argument("--seed", type=int, default=None, help="an integer >= 0 to write the same poem again")
    args = parser.parse_args(sys.argv[2:] if argv is None else argv)
    try:
        print(write_poem(args.first_line, args.temperature, args.seed))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the shipped model's files are missing or unreadable
        print(f"error: cannot load the language model: {err}", file=sys.stderr)
        return 1
    return 0

# %%
# NBVAL_IGNORE_OUTPUT
print("exit status:", poem_command(["白日依山尽，黄河入海流。", "--seed", "1"]))

# %%
with contextlib.redirect_stderr(sys.stdout):
    status = poem_command(["白日依山尽，黄河入海流。", "--temperature", "0"])
print("exit status:", status)

# %% [markdown]
# `train` hands a config to chapter 12's `train_from_config`. A bad config is one line on
# standard error, and so is every other failure a user can cause: a missing pairs file,
# a run directory that cannot be written, or a resume with a config whose model or data
# differ from the checkpoint's (the checkpoint stores its config, and the message names
# each key that changed). The configs of the book ship inside the package:
# `python -m transformer train --example book > book.toml` writes one to start from.

# %%
#| export commands
from pathlib import Path


def train_command(argv: list[str] | None = None) -> int:
    """`python -m transformer train CONFIG` (also under torchrun): train as the config says.

    A problem of the config, the data or the checkpoint gets one line on standard error
    and the exit status 2, never a traceback.

    Args:
        argv: the arguments after `train` (default None: sys.argv[2:]).

    Returns:
        The exit status: 0 when training finished or stopped cleanly on SIGTERM (run the
        same command again to resume), 2 for a bad config, data or checkpoint.
    """
    parser = argparse.ArgumentParser(
        prog="python -m transformer train",
        description="Train what CONFIG says (a translator or a language model); under `torchrun "
                    "--nproc_per_node=N` on N processes.")
    parser.add_argument("config", nargs="?", help="a .toml or .json training config; "
                        "`--example book > my.toml` writes one to start from")
    parser.add_argument("--example", choices=example_configs(), default=None,
                        help="print a config shipped with the package (book: the toy translator; base, "
                        "big: the paper's models; lm: chapter 11's language model; refinements: the "
                        "2017 model of chapter 13's comparison) and exit")
    parser.add_argument("--out", default=None, help="the run's directory (default: runs/CONFIG-NAME); "
                        "a checkpoint found there is resumed")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(sys.argv[2:] if argv is None else argv)
    if args.example is not None:
        if args.config is not None:
            parser.error("give either CONFIG or --example, not both")
        print(example_config(args.example), end="")
        return 0
    if args.config is None:
        parser.error("the config is required: a .toml or .json file (`--example book > my.toml` writes one)")
    try:
        train_from_config(args.config, args.out or Path("runs") / Path(args.config).stem,
                          progress=not args.no_progress)
    except ValueError as err:
        print(f"train: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the run directory cannot be written (a file in the way, no space, ...)
        print(f"train: cannot write the run in {str(args.out or 'runs/')!r}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("train: interrupted; run the same command to resume from the last checkpoint", file=sys.stderr)
        return 130
    return 0


def example_configs() -> list[str]:
    """The names of the configs shipped with the package (transformer/configs/NAME.toml)."""
    return sorted(p.name.removesuffix(".toml") for p in resources.files("transformer").joinpath("configs").iterdir()
                  if p.name.endswith(".toml"))


def example_config(name: str) -> str:
    """The text of the shipped config NAME (see example_configs), to copy and edit.

    Raises:
        ValueError: no shipped config has that name.
    """
    if name not in example_configs():
        raise ValueError(f"example must be one of {', '.join(example_configs())}, got {name!r}")
    return resources.files("transformer").joinpath("configs", f"{name}.toml").read_text(encoding="utf-8")

# %% [markdown]
# A config with a misspelt key, and the first lines of the shipped `book` config:

# %%
bad_config = Path(tempfile.mkdtemp()) / "typo.toml"
bad_config.write_text(example_config("book").replace("[train]", "[train]\nlearning_rat = 0.1", 1))
with contextlib.redirect_stderr(sys.stdout):
    status = train_command([str(bad_config), "--out", str(bad_config.parent / "run")])
print("exit status:", status)
print("\n".join(example_config("book").splitlines()[:6]))
shutil.rmtree(bad_config.parent)

# %% [markdown]
# `python -m transformer` runs the package's `__main__.py`; `main` hands the arguments
# after the command's name to its function. The same `main` is the `transformer` command
# that `pip install` puts on the PATH (the `[project.scripts]` table of
# `pyproject.toml`), so `transformer translate "I love apples"` works too.

# %%
#| export commands
COMMANDS = {"translate": translate_command, "poem": poem_command, "train": train_command}


def main(argv: list[str] | None = None) -> int:
    """`python -m transformer COMMAND ...`: hand the arguments after COMMAND to its function.

    Args:
        argv: the arguments (default None: sys.argv[1:]).

    Returns:
        The command's exit status; 2 for a missing or unknown command (0 for -h).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(f"usage: python -m transformer {{{','.join(COMMANDS)}}} ...   (COMMAND -h for its options)")
        return 0
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m transformer {{{','.join(COMMANDS)}}} ...\n"
              f"error: expected a command, one of {', '.join(COMMANDS)}; got {' '.join(argv[:1]) or 'none'}",
              file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])

# %%
#| export __main__
import sys

from transformer.commands import main

if __name__ == "__main__" and __package__ == "transformer":  # run as `python -m transformer`, not imported
    sys.exit(main())

# %% [markdown]
# The same commands as a shell runs them, in a new process:

# %%
import shlex
import subprocess

for argv in (["translate", "I love apples"], ["translate", "I love durians"], ["tarnslate"]):
    result = subprocess.run([sys.executable, "-m", "transformer", *argv], capture_output=True, text=True, check=False)
    print(f"$ python -m transformer {shlex.join(argv)}\n  standard output: {result.stdout.strip()!r}\n"
          f"  standard error, last line: {(result.stderr.strip().splitlines() or [''])[-1]!r}\n"
          f"  exit status: {result.returncode}")

# %% [markdown]
# ## 6 · The front door: what `import transformer` holds
#
# The chapters' modules export every piece they build, close to two hundred names (counted
# below). A user of the models needs few of them, in the groups that `torch.nn` and Hugging Face
# have taught: the models and their configurations, the layers, the masks, generation,
# training, saving and loading. The next cell is the package's `__init__.py` (the cell
# is exported there); every other name stays importable from its module, as in
# `from transformer.beam_search import beam_search`.

# %%
#| export __init__
# Models and their configurations
from transformer.pretrained import PretrainedModel
from transformer.model import PAPER_CONFIGS, Transformer, count_parameters
from transformer.lm import LanguageModel
from transformer.refinements import ModernLanguageModel
# Layers
from transformer.embedding import TokenEmbedding
from transformer.positional import PositionalEncoding
from transformer.multihead import MultiHeadAttention
from transformer.feedforward import FeedForward
from transformer.blocks import Decoder, DecoderBlock, Encoder, EncoderBlock
from transformer.refinements import GroupedQueryAttention, RMSNorm, RotaryEmbedding, SwiGLU
# Masks (True = may attend)
from transformer.masks import causal_mask, combine_masks, padding_mask
# Generation
from transformer.hf_generation import GenerationConfig
from transformer.hf_generation import hf_generate as generate  # model.generate as a function
from transformer.kv_cache import KVCache
from transformer.translator import load_translator, translate
from transformer.poet import write_poem
# Training
from transformer.losses import label_smoothed_cross_entropy
from transformer.schedule import make_optimizer
from transformer.training import fit
from transformer.trainer import train_from_config
from transformer.fast import speed_up
# Saving and loading
from transformer.saving import load_checkpoint, save_checkpoint
# Vocabularies
from transformer.data import Vocab
from transformer.text import CharVocab

__all__ = [
    "PretrainedModel", "Transformer", "PAPER_CONFIGS", "count_parameters", "LanguageModel",
    "ModernLanguageModel",
    "TokenEmbedding", "PositionalEncoding", "MultiHeadAttention", "FeedForward", "EncoderBlock",
    "DecoderBlock", "Encoder", "Decoder", "RotaryEmbedding", "RMSNorm", "SwiGLU", "GroupedQueryAttention",
    "causal_mask", "padding_mask", "combine_masks",
    "generate", "GenerationConfig", "KVCache", "translate", "load_translator", "write_poem",
    "label_smoothed_cross_entropy", "make_optimizer", "fit", "train_from_config", "speed_up",
    "save_checkpoint", "load_checkpoint",
    "Vocab", "CharVocab",
]

# %%
import importlib
import pkgutil

import transformer

modules = sorted(m.name for m in pkgutil.iter_modules(transformer.__path__) if not m.name.startswith("_"))
exported = {name for m in modules for name in getattr(importlib.import_module(f"transformer.{m}"), "__all__", [])}
print(f"{len(modules)} modules export {len(exported)} public names; the top level holds {len(transformer.__all__)}")
assert set(transformer.__all__) <= exported and len(transformer.__all__) == len(set(transformer.__all__))
assert all(getattr(transformer, name) is globals()[name] for name in __all__), "the cell above is the top level"

# %% [markdown]
# ## What we can do now, and what is still missing
#
# Every layer of the package refuses a wrong argument with an error that names it and
# says what was expected, and a saved model that cannot be trusted is not loaded. A user
# translates text or continues a poem with one call or one command, generates as a Hugging
# Face user would, and trains from a config with another command. The checks themselves
# still live in the chapters' modules, beside the idea each chapter teaches; saving and
# loading, and one `generate` for every model, are built where they are first needed, in
# chapters 08 to 10.
#
# ## Summary
#
# - Bad input fails at the boundary, once, with the argument's name and what was expected:
#   `TypeError` for a tensor of the wrong dtype, `ValueError` for a wrong shape, size or
#   option, `IndexError` for an id outside the vocabulary.
# - The padding masks that broadcast silently in plain PyTorch (`[B, Tk]` where the batch
#   size equals the query length, `[B, Tq, Tk]` where it equals the number of heads) are
#   refused.
# - A damaged, mismatched or missing saved model is refused with the file and the reason.
# - `model.generate(...)` takes a `GenerationConfig` (checked once, when it is made), a
#   `streamer` and `stopping_criteria`, built on chapter 10's `generate` and its `on_step`.
# - `translate(text)`, `load_translator(directory)` and `write_poem(first_line)` take text
#   and give text; a word or character the model never saw is named, not guessed.
# - `python -m transformer translate|poem|train` (or `transformer ...` once installed)
#   prints one line on standard error for a user's mistake, and exits with a status a
#   shell can test: 0 done, 1 a checkpoint that cannot be loaded, 2 bad input.
