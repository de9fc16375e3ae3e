"""Tests for the refinements of chapter 13, options of the modules that own each idea:
RotaryEmbedding (chapter 02), grouped-query attention and rotary positions in
MultiHeadAttention (chapter 05), the SwiGLU feed-forward (chapter 06), RMSNorm
(chapter 07) and LanguageModel's options (chapter 11)."""

import math

import pytest
import torch
import torch.nn.functional as F
from test_lm import EVERY_OPTION
from test_lm import small_lm as lm_2017

from transformer.blocks import Decoder, DecoderBlock, EncoderBlock, RMSNorm
from transformer.data import BOS_ID
from transformer.feedforward import FeedForward
from transformer.generation import KVCache, generate
from transformer.lm import LanguageModel
from transformer.masks import causal_mask
from transformer.multihead import MultiHeadAttention
from transformer.positional import RotaryEmbedding


# test_lm is importable: pytest puts each test file's folder on sys.path.
def small_lm(**kwargs):
    """test_lm's small model, with 4 heads so that 2 and 1 kv heads are both groups."""
    return lm_2017(**({"num_heads": 4} | kwargs))


# --- RMSNorm (chapter 07) ----------------------------------------------------------------

@pytest.mark.parametrize("shape, scale", [((3, 5, 8), 3.0), ((8,), 1.0), ((2, 1, 3, 8), 1e-4)])
def test_rmsnorm_equals_torch_in_values_and_gradients(shape, scale):
    """Tiny inputs (scale 1e-4) are where the place of eps matters."""
    torch.manual_seed(0)
    ours, theirs = RMSNorm(8, eps=1e-6), torch.nn.RMSNorm(8, eps=1e-6)
    with torch.no_grad():
        ours.weight.normal_()
        theirs.weight.copy_(ours.weight)
    x = (torch.randn(shape) * scale).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    out, ref = ours(x), theirs(x2)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-6)
    grad = torch.randn(shape)
    out.backward(grad)
    ref.backward(grad)
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, atol=1e-5, rtol=1e-5)


def test_rmsnorm_blocks_use_it_everywhere_and_the_default_stays_layernorm():
    block = DecoderBlock(16, 4, 32, norm="rms", cross_attention=False)
    assert isinstance(block.norm1, RMSNorm) and isinstance(block.norm3, RMSNorm)
    assert isinstance(EncoderBlock(16, 4, 32).norm1, torch.nn.LayerNorm)
    assert isinstance(Decoder(2, 16, 4, 32, norm_first=True, norm="rms").norm, RMSNorm)


# --- rotary positions (chapter 02) -------------------------------------------------------

def test_rope_scores_depend_only_on_the_offset():
    torch.manual_seed(0)
    rope = RotaryEmbedding(16, max_len=300)
    q, k = torch.randn(16), torch.randn(16)
    q_at, k_at = rope(q.expand(300, 16)), rope(k.expand(300, 16))  # row p: the vector at position p
    for offset in (0, 1, 7, 50, -20):
        scores = torch.stack([q_at[m + offset] @ k_at[m] for m in (20, 33, 100, 240)])
        assert (scores.max() - scores.min()).item() < 1e-4, (offset, scores)
    assert abs((q_at[10] @ k_at[3] - q_at[3] @ k_at[10]).item()) > 1e-3, "the sign of the offset matters"
    assert abs((q_at[10] @ k_at[3] - q @ k).item()) > 1e-3, "the offset matters"


def test_rope_equals_the_complex_number_form():
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, max_len=64)
    x = torch.randn(2, 3, 10, 8)
    for start in (0, 5, 54):
        z = torch.view_as_complex(x.double().reshape(2, 3, 10, 4, 2))  # pairs as complex numbers
        freqs = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)  # [4]
        angles = torch.arange(start, start + 10, dtype=torch.float64)[:, None] * freqs  # [10, 4]
        expected = torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
        torch.testing.assert_close(rope(x, start).double(), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(rope(x[..., :1, :]), x[..., :1, :], atol=0, rtol=0)  # position 0: no turn
    torch.testing.assert_close(rope(x).norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=0)


def test_rope_refuses_bad_arguments():
    with pytest.raises(ValueError, match="d_head must be even"):
        RotaryEmbedding(7)
    with pytest.raises(ValueError, match="d_head"):
        RotaryEmbedding(True)
    rope = RotaryEmbedding(8, max_len=10)
    with pytest.raises(ValueError, match="exceed max_len=10"):
        rope(torch.zeros(1, 4, 8), start=7)
    with pytest.raises(ValueError, match="d_head=8"):
        rope(torch.zeros(1, 4, 6))
    with pytest.raises(ValueError, match="rotary must be a RotaryEmbedding"):
        MultiHeadAttention(16, 4, rotary=RotaryEmbedding(8))
    mha = MultiHeadAttention(16, 4, rotary=RotaryEmbedding(4))
    with pytest.raises(ValueError, match="static_kv"):
        mha(torch.zeros(1, 2, 16), torch.zeros(1, 3, 16), torch.zeros(1, 3, 16), static_kv=True)


def test_rope_tables_come_back_after_meta_loading(tmp_path):
    model = small_lm(positions="rotary")
    model.save_pretrained(tmp_path / "m")
    loaded = LanguageModel.from_pretrained(tmp_path / "m")
    rope = loaded.decoder.layers[0].self_attn.rotary
    assert rope is loaded.decoder.layers[1].self_attn.rotary, "one table shared by every layer"
    assert torch.equal(rope.cos, RotaryEmbedding(4, 40).cos)


# --- grouped-query attention (chapter 05) --------------------------------------------------

def test_gqa_with_as_many_kv_heads_as_heads_is_multi_head_attention():
    torch.manual_seed(0)
    mha, gqa = MultiHeadAttention(16, 4), MultiHeadAttention(16, 4, num_kv_heads=4)
    gqa.load_state_dict(mha.state_dict())
    x, mask = torch.randn(2, 6, 16), causal_mask(6)
    for need_weights in (True, False):
        torch.testing.assert_close(gqa(x, x, x, mask, need_weights=need_weights)[0],
                                   mha(x, x, x, mask, need_weights=need_weights)[0], atol=0, rtol=0)


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_gqa_equals_mha_whose_kv_heads_are_repeated(num_kv_heads):
    """Each key/value head serves its group of query heads: copying it to every head of the
    group gives a plain multi-head attention with the same outputs."""
    torch.manual_seed(0)
    gqa = MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads)
    mha = MultiHeadAttention(16, 4)
    group = 4 // num_kv_heads
    state = gqa.state_dict()
    for name in ("k_proj", "v_proj"):
        weight = state[f"{name}.weight"].view(num_kv_heads, 4, 16)  # [h_kv, d_head, d_model]
        state[f"{name}.weight"] = weight.repeat_interleave(group, 0).reshape(16, 16)
        state[f"{name}.bias"] = state[f"{name}.bias"].view(num_kv_heads, 4).repeat_interleave(group, 0).flatten()
    mha.load_state_dict(state)
    x, mask = torch.randn(2, 6, 16), causal_mask(6)
    out, weights = gqa(x, x, x, mask)
    ref, ref_weights = mha(x, x, x, mask)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(weights, ref_weights, atol=1e-6, rtol=0)
    torch.testing.assert_close(gqa(x, x, x, mask, need_weights=False)[0], out, atol=1e-6, rtol=0)


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_the_kv_cache_shrinks_by_the_group_factor(num_kv_heads):
    model = small_lm(num_kv_heads=num_kv_heads)
    caches = [{"self": KVCache(20)} for _ in model.decoder.layers]
    model(torch.randint(4, 30, (3, 5)), caches)
    stored = sum(c["self"].k_buffer.numel() + c["self"].v_buffer.numel() for c in caches)
    assert stored == 2 * 2 * 3 * num_kv_heads * 20 * 4  # layers · (k, v) · batch · heads · capacity · d_head
    assert caches[0]["self"]["k"].shape == (3, num_kv_heads, 5, 4)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_kv_heads=3), r"num_kv_heads \(3\) must divide num_heads \(4\)"),
    (dict(num_kv_heads=True), "num_kv_heads"),
    (dict(num_kv_heads=0), "num_kv_heads"),
    (dict(num_kv_heads=2.0), "num_kv_heads"),
])
def test_mha_refuses_bad_num_kv_heads(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(16, 4, **kwargs)


# --- SwiGLU (chapter 06) -----------------------------------------------------------------

def test_swiglu_is_the_gated_formula_and_has_a_third_matrix():
    torch.manual_seed(0)
    ffn = FeedForward(8, 12, dropout=0.0, activation="swiglu")
    x = torch.randn(2, 5, 8)
    expected = ffn.linear2(F.silu(ffn.linear1(x)) * ffn.gate(x))
    torch.testing.assert_close(ffn(x), expected, atol=0, rtol=0)
    assert sum(p.numel() for p in ffn.parameters()) == 3 * 8 * 12 + 2 * 12 + 8
    assert FeedForward(8, 12, activation="gelu").gate is None


# --- the language model with every option ---------------------------------------------------

@pytest.mark.parametrize("options", [EVERY_OPTION, dict(positions="rotary"), dict(num_kv_heads=2)])
def test_lm_kv_cache_gives_the_logits_of_a_full_pass_with_options(options):
    model = small_lm(**options)
    ids = torch.randint(4, 30, (2, 11))
    full = model(ids)
    for caches in ([{} for _ in model.decoder.layers], [{"self": KVCache(11)} for _ in model.decoder.layers]):
        pieces = [model(ids[:, :4], caches), model(ids[:, 4:7], caches, start=4)]
        pieces += [model(ids[:, t:t + 1], caches, start=t) for t in range(7, 11)]
        torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=0)


def test_generate_with_and_without_cache_agree_with_every_option():
    model = small_lm(**EVERY_OPTION)
    prompt = torch.tensor([[BOS_ID, 5, 6], [BOS_ID, 7, 8]])
    for kwargs in (dict(), dict(do_sample=True, temperature=0.7, top_k=10)):
        draw = (lambda: dict(generator=torch.Generator().manual_seed(2))) if kwargs else dict
        a = generate(model, prompt, 20, use_cache=True, **draw(), **kwargs)
        b = generate(model, prompt, 20, use_cache=False, **draw(), **kwargs)
        assert torch.equal(a, b), kwargs


@pytest.mark.parametrize("norm_first", [True, False])
def test_lm_has_no_future_leak_with_every_option(norm_first):
    model = small_lm(norm_first=norm_first, **EVERY_OPTION)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        ids = torch.randint(4, 30, (2, 12), generator=g)
        t = int(torch.randint(1, 12, (1,), generator=g))
        changed = ids.clone()
        changed[:, t] = (changed[:, t] + 1 - 4) % 26 + 4
        before, after = model(ids), model(changed)
        torch.testing.assert_close(before[:, :t], after[:, :t], atol=0, rtol=0)
        assert not torch.equal(before[:, t:], after[:, t:])


def test_rotary_lm_has_no_added_position_signal():
    """With rotary positions a token's first-layer input does not depend on where it stands:
    only attention sees positions (the first position's logits equal those of the same
    token anywhere, in a model of one position of context)."""
    model = small_lm(positions="rotary")
    assert model.positional is None
    x = model.embed_dropout(model.embed(torch.tensor([[5, 5]])))
    torch.testing.assert_close(x[0, 0], x[0, 1], atol=0, rtol=0)


def test_lm_save_and_load_round_trip_with_options(tmp_path):
    model = small_lm(**EVERY_OPTION)
    with torch.no_grad():
        for layer in model.decoder.layers:
            layer.norm1.weight.normal_()
    model.save_pretrained(tmp_path / "lm")
    loaded = LanguageModel.from_pretrained(tmp_path / "lm")
    assert loaded.config == model.config
    assert {k: loaded.config[k] for k in EVERY_OPTION} == EVERY_OPTION
    ids = torch.randint(4, 30, (2, 9))
    assert torch.equal(loaded(ids), model(ids))


@pytest.mark.parametrize("kwargs, message", [
    (dict(positions="learned"), "positions must be one of"),
    (dict(positions=1), "positions must be one of"),
    (dict(norm="batch"), "norm must be one of"),
    (dict(norm=None), "norm must be one of"),
    (dict(activation="swish"), "activation must be one of"),
    (dict(num_kv_heads=3), "must divide num_heads"),
    (dict(num_kv_heads=True), "num_kv_heads"),
    (dict(positions="rotary", d_model=12, num_heads=4), "d_head must be even"),
])
def test_lm_refuses_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        small_lm(**kwargs)


def test_swiglu_with_two_thirds_width_keeps_the_parameter_count_close():
    gelu = small_lm(d_model=48, d_ff=192)
    swiglu = small_lm(d_model=48, d_ff=128, activation="swiglu")
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert math.isclose(count(swiglu), count(gelu), rel_tol=0.01)
