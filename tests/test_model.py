"""Tests for transformer.model (chapter 08): shapes, masks, invariants, parameter counts, errors."""

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.fast import speed_up
from transformer.kv_cache import KVCache, StaticKVCache
from transformer.model import PAPER_CONFIGS, Transformer, count_parameters

V = 40


def small(**kwargs) -> Transformer:
    torch.manual_seed(0)
    args = dict(d_model=16, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=32,
                max_len=24)
    args.update(kwargs)
    return Transformer(V, V, **args).eval()


MODELS = {"post": small(), "pre": small(norm_first=True)}
FAST_MODELS = {kind: speed_up(copy.deepcopy(model)) for kind, model in MODELS.items()}  # chapter 14


# --- the paper's Table 3 -----------------------------------------------------------

@pytest.mark.parametrize("name, paper, exact", [("base", 65e6, 63_119_496), ("big", 213e6, 214_282_376)])
def test_table3_parameter_counts(name, paper, exact):
    with torch.device("meta"):  # shapes only: the big model costs no memory
        model = Transformer(37_000, 37_000, **PAPER_CONFIGS[name], share_embeddings=True, tie_output=True)
    n = count_parameters(model)
    assert n == exact
    assert abs(n / paper - 1) < 0.05


def test_paper_configs():
    assert PAPER_CONFIGS["base"] == dict(d_model=512, num_heads=8, num_encoder_layers=6,
                                         num_decoder_layers=6, d_ff=2048, dropout=0.1)
    big = PAPER_CONFIGS["big"]
    assert (big["d_model"], big["num_heads"], big["d_ff"]) == (1024, 16, 4096)


def test_sharing_and_tying_make_one_parameter_counted_once():
    torch.manual_seed(0)
    kw = dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32)
    plain = Transformer(V, V, **kw)
    shared = Transformer(V, V, **kw, share_embeddings=True)
    tied = Transformer(V, V, **kw, share_embeddings=True, tie_output=True)
    tied_only = Transformer(V, V, **kw, tie_output=True)
    assert shared.src_embed is shared.tgt_embed
    assert tied.generator.weight is tied.tgt_embed.embedding.weight is tied.src_embed.embedding.weight
    assert tied_only.generator.weight is tied_only.tgt_embed.embedding.weight
    assert tied_only.src_embed is not tied_only.tgt_embed
    table = V * 16
    assert count_parameters(plain) - count_parameters(shared) == table
    assert count_parameters(shared) - count_parameters(tied) == table
    assert count_parameters(tied) == sum(p.numel() for p in set(tied.parameters()))
    frozen = Transformer(V, V, **kw)
    frozen.generator.requires_grad_(False)
    assert count_parameters(frozen) == count_parameters(plain) - (16 * V + V)
    assert count_parameters(frozen, trainable_only=False) == count_parameters(plain)


def test_initialisation():
    """Xavier on weight matrices; embedding tables N(0, 1/d_model) with a zero padding row."""
    torch.manual_seed(0)
    d = 64
    model = Transformer(2000, 2000, d_model=d, num_heads=4, num_encoder_layers=1,
                        num_decoder_layers=1, d_ff=128, share_embeddings=True, tie_output=True)
    table = model.src_embed.embedding.weight
    assert torch.all(table[0] == 0)  # pad_id = 0
    assert abs(table[1:].std().item() - d ** -0.5) < 0.05 * d ** -0.5
    w = model.encoder.layers[0].ffn.linear1.weight  # [128, 64]
    bound = math.sqrt(6 / (64 + 128))
    assert w.abs().max() <= bound
    assert abs(w.std().item() - bound / math.sqrt(3)) < 0.05 * bound
    untied = Transformer(2000, 2000, d_model=d, num_heads=4, num_encoder_layers=1,
                         num_decoder_layers=1, d_ff=128)
    gen_bound = math.sqrt(6 / (d + 2000))
    assert untied.generator.weight.abs().max() <= gen_bound


# --- shapes and the demo -------------------------------------------------------------

def test_seed_000_demo_shapes():
    torch.manual_seed(0)
    src = torch.tensor([[1, 5, 7, 9, 2, 0], [1, 8, 4, 2, 0, 0]])
    tgt = torch.tensor([[1, 6, 3, 2], [1, 9, 2, 0]])
    model = Transformer(32, 32, d_model=32, num_heads=4, num_encoder_layers=2,
                        num_decoder_layers=2, d_ff=64, dropout=0.1, max_len=32)
    assert model(src, tgt).shape == (2, 4, 32)
    assert model.make_src_mask(src).shape == (2, 1, 1, 6)
    tgt_mask = model.make_tgt_mask(tgt)
    assert tgt_mask.shape == (2, 1, 4, 4) and tgt_mask.dtype == torch.bool
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool)
    assert torch.equal(tgt_mask[1, 0], expected)
    assert model.encode(src).shape == (2, 6, 32)


def test_forward_returns_logits_not_probabilities():
    model = MODELS["post"]
    src, tgt = torch.randint(1, V, (2, 5)), torch.randint(1, V, (2, 4))
    out = model(src, tgt)
    assert not torch.allclose(out.sum(-1), torch.ones(2, 4))
    assert (out < 0).any()
    torch.testing.assert_close(out, model.decode(tgt, model.encode(src), model.make_src_mask(src)))


# --- properties over random inputs ----------------------------------------------------

@st.composite
def batches(draw):
    b = draw(st.integers(1, 3))
    s = draw(st.integers(1, 8))
    t = draw(st.integers(2, 8))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, V, (b, s), generator=g)
    tgt = torch.randint(1, V, (b, t), generator=g)
    # random right-padding of the source, at least one real token per sentence
    src_lens = torch.randint(1, s + 1, (b,), generator=g)
    src[torch.arange(s)[None] >= src_lens[:, None]] = 0
    return src, tgt, seed


@pytest.mark.parametrize("kind", ["post", "pre"])
@settings(max_examples=8, deadline=None)
@given(batch=batches(), cut=st.integers(1, 7))
def test_future_target_tokens_do_not_change_earlier_logits(kind, batch, cut):
    src, tgt, seed = batch
    cut = min(cut, tgt.size(1) - 1)
    model = MODELS[kind]
    tgt2 = tgt.clone()
    tgt2[:, cut:] = torch.randint(1, V, tgt2[:, cut:].shape, generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        a, b = model(src, tgt), model(src, tgt2)
    torch.testing.assert_close(a[:, :cut], b[:, :cut], atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["post", "pre"])
@settings(max_examples=8, deadline=None)
@given(batch=batches(), extra=st.integers(1, 6))
def test_appending_source_padding_leaves_logits_unchanged(kind, batch, extra):
    src, tgt, _ = batch
    model = MODELS[kind]
    padded = torch.cat([src, torch.zeros(src.size(0), extra, dtype=torch.long)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(padded, tgt), model(src, tgt), atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["post", "pre"])
@settings(max_examples=8, deadline=None)
@given(batch=batches())
def test_eval_encoder_skips_the_source_padding_and_the_logits_stay(kind, batch):
    """After speed_up, in eval mode, encode computes the real positions only (chapter 14):
    the memory of the plain path there, zero at the padding, and the same logits."""
    src, tgt, _ = batch
    model, real = MODELS[kind], src != 0
    fast = FAST_MODELS[kind]
    with torch.no_grad():
        skipped, plain = fast.encode(src), model.encode(src)
        torch.testing.assert_close(skipped[real], plain[real], atol=1e-5, rtol=0)
        assert torch.equal(skipped[~real], torch.zeros_like(skipped[~real]))
        torch.testing.assert_close(fast(src, tgt), model(src, tgt), atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["post", "pre"])
@settings(max_examples=6, deadline=None)
@given(batch=batches())
def test_fully_padded_source_gives_no_nan(kind, batch):
    src, tgt, _ = batch
    model = MODELS[kind]
    with torch.no_grad():
        out = model(torch.zeros_like(src), tgt)
        assert torch.isfinite(out).all()
        tgt_padded = tgt.clone()
        tgt_padded[:, 1:] = 0  # and a target that is all padding after <bos>
        assert torch.isfinite(model(torch.zeros_like(src), tgt_padded)).all()


def test_training_mode_gradients_are_finite_with_padding():
    torch.manual_seed(1)
    model = small(dropout=0.1).train()
    src = torch.tensor([[5, 6, 7, 0], [0, 0, 0, 0]])
    tgt = torch.tensor([[1, 4, 3], [1, 0, 0]])
    model(src, tgt).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# --- generation hooks (chapter 10) -------------------------------------------------------

def test_decode_start_shifts_positions():
    model = MODELS["post"]
    src, tgt = torch.randint(1, V, (1, 5)), torch.randint(1, V, (1, 3))
    memory = model.encode(src)
    with torch.no_grad():
        full = model.decode(tgt, memory)
        # the same token read as position 0 or as position 2: only the positions differ
        at0 = model.decode(tgt[:, 2:], memory)
        at2 = model.decode(tgt[:, 2:], memory, start=2)
    assert not torch.allclose(at0, at2)
    assert full.shape == (1, 3, V)


def test_incremental_decoding_with_caches_matches_full_pass():
    model = MODELS["pre"]
    torch.manual_seed(3)
    src, tgt = torch.randint(1, V, (2, 6)), torch.randint(1, V, (2, 5))
    src[1, 4:] = 0
    with torch.no_grad():
        src_mask = model.make_src_mask(src)
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask)
        caches = [{"self": KVCache(16), "cross": StaticKVCache()} for _ in model.decoder.layers]
        steps = [model.decode(tgt[:, t:t + 1], memory, src_mask, caches=caches, start=t)
                 for t in range(tgt.size(1))]
        # a prefill of 2 tokens, then 3 at once with the offset causal mask
        caches2 = [{"self": KVCache(16), "cross": StaticKVCache()} for _ in model.decoder.layers]
        first = model.decode(tgt[:, :2], memory, src_mask, caches=caches2, start=0)
        rest = model.decode(tgt[:, 2:], memory, src_mask, caches=caches2, start=2)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=0)


# --- bad input ----------------------------------------------------------------------------

def test_d_model_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=r"d_model \(30\).*num_heads \(8\)"):
        Transformer(V, V, d_model=30, num_heads=8, num_encoder_layers=1, num_decoder_layers=1, d_ff=8)


def test_mismatched_batch_sizes():
    model = MODELS["post"]
    with pytest.raises(ValueError, match=r"src and tgt must have the same batch size.*\(3, 5\).*\(2, 4\)"):
        model(torch.randint(1, V, (3, 5)), torch.randint(1, V, (2, 4)))
    memory = model.encode(torch.randint(1, V, (3, 5)))
    with pytest.raises(ValueError, match="memory has batch size 3 but tgt has 2"):
        model.decode(torch.randint(1, V, (2, 4)), memory)


def test_sequences_longer_than_max_len():
    model = MODELS["post"]  # max_len = 24
    with pytest.raises(ValueError, match=r"tgt is too long: tgt_len=25 exceeds max_len=24"):
        model(torch.randint(1, V, (1, 5)), torch.randint(1, V, (1, 25)))
    with pytest.raises(ValueError, match=r"src is too long: src_len=30 exceeds max_len=24"):
        model(torch.randint(1, V, (1, 30)), torch.randint(1, V, (1, 4)))
    with pytest.raises(ValueError, match=r"tgt is too long: tgt_len=1 at start=24"):
        model.decode(torch.randint(1, V, (1, 1)), torch.randn(1, 5, 16), start=24)
    model(torch.randint(1, V, (1, 24)), torch.randint(1, V, (1, 24)))  # the limit itself is fine


def test_other_bad_inputs():
    model = MODELS["post"]
    with pytest.raises(ValueError, match=r"src must be token ids of shape \[batch, src_len\]"):
        model(torch.randint(1, V, (5,)), torch.randint(1, V, (1, 4)))
    with pytest.raises(ValueError, match=r"tgt must be token ids of shape \[batch, tgt_len\]"):
        model(torch.randint(1, V, (1, 5)), torch.randint(1, V, (1, 4, 2)))
    with pytest.raises(IndexError, match="vocab_size=40"):
        model(torch.randint(1, V, (1, 5)), torch.full((1, 4), V))
    with pytest.raises(ValueError, match="share_embeddings needs src_vocab_size == tgt_vocab_size"):
        Transformer(10, 20, d_model=16, num_heads=2, share_embeddings=True)
