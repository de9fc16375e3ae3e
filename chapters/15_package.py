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
# 3. a top level that holds what a user of the models needs, and no more.

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
# ## 3 · The front door: what `import transformer` holds
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
from transformer.generation import GenerationConfig, generate
from transformer.kv_cache import KVCache
from transformer.translator import load_translator, translate
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
    "generate", "GenerationConfig", "KVCache", "translate", "load_translator",
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
# says what was expected, and a saved model that cannot be trusted is not loaded. The
# checks themselves still live in the chapters' modules, beside the idea each chapter
# teaches; the package's other needs (saving and loading, one `generate` for every model,
# the command line) are built where they are first needed, in chapters 08, 10 and 12.
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
