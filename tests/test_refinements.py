"""Tests for the refinements of chapter 13 (transformer.refinements): RotaryEmbedding,
RMSNorm, SwiGLU and GroupedQueryAttention, the hooks of earlier chapters they enter
through (MultiHeadAttention's `positional` and `attend`, chapter 05; the blocks' `norm`,
`self_attention` and `feed_forward`, chapter 07), and ModernLanguageModel, the subclass of
chapter 11's LanguageModel whose named options include them."""

import math
import subprocess
import sys

import pytest
import torch
from test_lm import EVERY_OPTION

from transformer.blocks import Decoder, DecoderBlock, EncoderBlock
from transformer.data import BOS_ID
from transformer.generation import generate
from transformer.kv_cache import KVCache, StaticKVCache
from transformer.lm import LanguageModel
from transformer.masks import causal_mask
from transformer.multihead import MultiHeadAttention
from transformer.refinements import (
    GroupedQueryAttention,
    ModernLanguageModel,
    RMSNorm,
    RotaryEmbedding,
    SwiGLU,
)


# test_lm is importable: pytest puts each test file's folder on sys.path.
def small_lm(**kwargs):
    """test_lm's small model as a ModernLanguageModel, with 4 heads so that 2 and 1 kv heads
    are both groups."""
    torch.manual_seed(0)
    config = dict(vocab_size=30, d_model=16, num_heads=4, num_layers=2, d_ff=24, dropout=0.0, max_len=40)
    return ModernLanguageModel(**(config | kwargs)).eval()


# --- RMSNorm, through the blocks' norm hook (chapter 07) -----------------------------------

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
    block = DecoderBlock(16, 4, 32, norm=RMSNorm, cross_attention=False)
    assert isinstance(block.norm1, RMSNorm) and isinstance(block.norm3, RMSNorm)
    assert isinstance(EncoderBlock(16, 4, 32).norm1, torch.nn.LayerNorm)
    assert isinstance(EncoderBlock(16, 4, 32, norm=RMSNorm).norm2, RMSNorm)
    assert isinstance(Decoder(2, 16, 4, 32, norm_first=True, norm=RMSNorm).norm, RMSNorm)
    with pytest.raises(ValueError, match="norm must be a function of d_model"):
        DecoderBlock(16, 4, 32, norm="rms")


def test_block_hooks_build_the_sublayers_they_are_given():
    block = DecoderBlock(16, 4, 32, dropout=0.0, cross_attention=False, feed_forward=SwiGLU,
                         self_attention=lambda d, h, p: GroupedQueryAttention(d, h, p, num_kv_heads=2))
    assert isinstance(block.ffn, SwiGLU) and block.ffn.gate_proj.out_features == 32
    assert isinstance(block.self_attn, GroupedQueryAttention) and block.self_attn.num_kv_heads == 2
    assert type(DecoderBlock(16, 4, 32).self_attn) is MultiHeadAttention  # the 2017 default


# --- rotary positions, through MultiHeadAttention's positional hook (chapter 05) ----------

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


def test_rope_is_chapter_02s_rotation_of_each_pair():
    """One rotation convention across the book: pair (x[2i], x[2i+1]) at position m is
    multiplied by R(m w_i) = [[cos, -sin], [sin, cos]] (counterclockwise)."""
    x = torch.randn(5, 8)
    turned = RotaryEmbedding(8, max_len=64)(x, start=9)
    for t in range(5):
        for i in range(4):
            angle = (9 + t) * 10000.0 ** (-2 * i / 8)
            R = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
            torch.testing.assert_close(turned[t, 2 * i:2 * i + 2], R @ x[t, 2 * i:2 * i + 2], atol=1e-5, rtol=0)


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
    with pytest.raises(ValueError, match="positional must be a module or function"):
        MultiHeadAttention(16, 4, positional="rotary")
    mha = MultiHeadAttention(16, 4, positional=RotaryEmbedding(4))
    with pytest.raises(ValueError, match="StaticKVCache .cross-attention. for an attention with positional"):
        mha(torch.zeros(1, 2, 16), torch.zeros(1, 3, 16), torch.zeros(1, 3, 16), cache=StaticKVCache())


def test_positional_hook_gets_the_queries_keys_and_the_cache_length():
    """The hook is general: any f(x, start). It sees queries and keys [B, h, T, d_head],
    with start = the positions already cached; an identity hook changes nothing."""
    torch.manual_seed(0)
    calls = []

    def spy(x, start):
        calls.append((tuple(x.shape), start))
        return x

    plain, hooked = MultiHeadAttention(16, 4), MultiHeadAttention(16, 4, positional=spy)
    hooked.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(hooked(x, x, x, causal_mask(5))[0], plain(x, x, x, causal_mask(5))[0],
                               atol=0, rtol=0)
    assert calls == [((2, 4, 5, 4), 0)] * 2  # queries, then keys
    calls.clear()
    cache = KVCache(8)
    hooked(x[:, :3], x[:, :3], x[:, :3], causal_mask(3), cache=cache)
    hooked(x[:, 3:4], x[:, 3:4], x[:, 3:4], cache=cache)
    assert calls == [((2, 4, 3, 4), 0)] * 2 + [((2, 4, 1, 4), 3)] * 2


def test_rope_tables_come_back_after_meta_loading(tmp_path):
    model = small_lm(positions="rotary")
    model.save_pretrained(tmp_path / "m")
    loaded = ModernLanguageModel.from_pretrained(tmp_path / "m")
    rope = loaded.decoder.layers[0].self_attn.positional
    assert isinstance(rope, RotaryEmbedding)
    assert rope is loaded.decoder.layers[1].self_attn.positional, "one table shared by every layer"
    assert torch.equal(rope.cos, RotaryEmbedding(4, 40).cos)


# --- grouped-query attention, through MultiHeadAttention's attend (chapter 05) -------------

def test_gqa_with_as_many_kv_heads_as_heads_is_multi_head_attention():
    torch.manual_seed(0)
    mha, gqa = MultiHeadAttention(16, 4), GroupedQueryAttention(16, 4, num_kv_heads=4)
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
    gqa = GroupedQueryAttention(16, 4, num_kv_heads=num_kv_heads)
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
def test_gqa_refuses_bad_num_kv_heads(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GroupedQueryAttention(16, 4, **kwargs)


def test_gqa_caches_the_grouped_heads_and_decodes_exactly_with_rope():
    """Cached decoding (rotary positions offset by the cache length) equals the full pass."""
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(16, 4, num_kv_heads=2, positional=RotaryEmbedding(4, 20)).eval()
    x = torch.randn(2, 9, 16)
    full = gqa(x, x, x, causal_mask(9))[0]
    cache = KVCache(9)
    pieces = [gqa(x[:, :4], x[:, :4], x[:, :4], causal_mask(4), cache=cache)[0]]
    pieces += [gqa(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=cache)[0] for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=0)
    assert cache["k"].shape == (2, 2, 9, 4)


# --- SwiGLU, through the decoder block's feed_forward hook (chapter 07) --------------------

def test_swiglu_is_the_gated_formula_without_biases():
    torch.manual_seed(0)
    ffn = SwiGLU(8, 12, dropout=0.0)
    x = torch.randn(2, 5, 8)
    expected = x @ ffn.gate_proj.weight.T
    expected = (expected * torch.sigmoid(expected) * (x @ ffn.up_proj.weight.T)) @ ffn.down_proj.weight.T
    torch.testing.assert_close(ffn(x), expected, atol=1e-6, rtol=0)
    assert sum(p.numel() for p in ffn.parameters()) == 3 * 8 * 12  # three matrices, no bias
    with pytest.raises(ValueError, match="d_model=8"):
        ffn(torch.zeros(2, 7))


# --- the language model with every option ---------------------------------------------------

@pytest.mark.parametrize("options", [EVERY_OPTION, dict(positions="rotary"), dict(num_kv_heads=2)])
def test_lm_kv_cache_gives_the_logits_of_a_full_pass_with_options(options):
    model = small_lm(**options)
    ids = torch.randint(4, 30, (2, 11))
    full = model(ids)
    caches = [{"self": KVCache(11)} for _ in model.decoder.layers]
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


def test_lm_options_build_the_refinements_of_chapter_13():
    model = small_lm(**EVERY_OPTION)
    block = model.decoder.layers[0]
    assert isinstance(block.self_attn, GroupedQueryAttention) and block.self_attn.num_kv_heads == 1
    assert isinstance(block.self_attn.positional, RotaryEmbedding)
    assert isinstance(block.ffn, SwiGLU) and isinstance(block.norm1, RMSNorm)
    assert isinstance(model.decoder.norm, RMSNorm)


def test_chapter_11s_tables_are_unchanged_by_chapter_13():
    """Importing the refinements fills no table of chapter 11: its LanguageModel knows the
    2017 names only, in any process, and refuses the new ones by name."""
    assert ModernLanguageModel.POSITIONS["rotary"] is RotaryEmbedding
    assert (ModernLanguageModel.NORMS["rms"], ModernLanguageModel.FEED_FORWARDS["swiglu"],
            ModernLanguageModel.ATTENTIONS["grouped-query"]) == (RMSNorm, SwiGLU, GroupedQueryAttention)
    assert list(LanguageModel.POSITIONS) == ["sinusoidal"] and list(LanguageModel.NORMS) == ["layer"]
    assert list(LanguageModel.FEED_FORWARDS) == ["relu", "gelu"] and list(LanguageModel.ATTENTIONS) == ["multi-head"]
    with pytest.raises(ValueError, match="positions must be one of"):
        LanguageModel(30, d_model=16, num_heads=4, positions="rotary")
    with pytest.raises(ValueError, match="num_kv_heads needs grouped-query attention.*ModernLanguageModel"):
        LanguageModel(30, d_model=16, num_heads=4, num_kv_heads=2)


def test_a_fresh_process_loads_a_modern_model(tmp_path):
    """A model saved with the refinements loads with ModernLanguageModel.from_pretrained in a
    fresh process; chapter 11's LanguageModel refuses the file by naming its class."""
    small_lm(**EVERY_OPTION).save_pretrained(tmp_path / "lm")
    code = ("import sys; from transformer.refinements import ModernLanguageModel; "
            "m = ModernLanguageModel.from_pretrained(sys.argv[1]); "
            "print(type(m.decoder.layers[0].self_attn).__name__, type(m.decoder.layers[0].ffn).__name__)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "lm")], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["GroupedQueryAttention", "SwiGLU"]
    with pytest.raises(ValueError, match="ModernLanguageModel"):
        LanguageModel.from_pretrained(tmp_path / "lm")


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
    loaded = ModernLanguageModel.from_pretrained(tmp_path / "lm")
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
