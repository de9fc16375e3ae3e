"""The fused attention path (chapter 14): fused_attention runs F.scaled_dot_product_attention
with the book's guarantees and agrees with chapter 03's plain attention; FastMultiHeadAttention
(what speed_up makes of chapter 05's MultiHeadAttention) takes it when asked for no weights
(need_weights=False), and chapter 05's module never does."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.attention import scaled_dot_product_attention
from transformer.blocks import DecoderBlock, EncoderBlock
from transformer.fast import speed_up
from transformer.fast_attention import FastMultiHeadAttention, fused_attention
from transformer.model import Transformer
from transformer.multihead import MultiHeadAttention


@st.composite
def attention_inputs(draw):
    """q, k, v [B, h, Tq|Tk, d] and a random bool mask with some fully masked query rows."""
    b, h = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    tq, tk, d = draw(st.integers(1, 7)), draw(st.integers(1, 7)), draw(st.sampled_from([1, 4, 8]))
    seed = draw(st.integers(0, 2**16))
    shape = draw(st.sampled_from(["full", "padding", "causal", "none"]))
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, t, d, generator=g, dtype=torch.float64) for t in (tq, tk, tk))
    if shape == "full":
        mask = torch.rand(b, 1, tq, tk, generator=g) < 0.6
        mask[:, :, torch.randint(0, tq, (1,), generator=g)] = False  # a fully masked query row
    elif shape == "padding":
        mask = (torch.arange(tk) < torch.randint(0, tk + 1, (b,), generator=g)[:, None])[:, None, None]
    elif shape == "causal":
        mask = torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)[None, None]
    else:
        mask = None
    return q, k, v, mask


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@settings(max_examples=40, deadline=None)
@given(inputs=attention_inputs())
def test_fused_equals_explained_values_and_gradients(dtype, atol, inputs):
    q, k, v, mask = inputs
    results = []
    for fused in (False, True):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        out = fused_attention(*leaves, mask) if fused else scaled_dot_product_attention(*leaves, mask)[0]
        assert torch.isfinite(out).all()
        grads = torch.autograd.grad((out * torch.linspace(-1, 1, out.size(-1), dtype=dtype)).sum(), leaves)
        assert all(torch.isfinite(g).all() for g in grads)
        results.append((out, grads))
    (out_e, grads_e), (out_f, grads_f) = results
    torch.testing.assert_close(out_f, out_e, atol=atol, rtol=0)
    for gf, ge in zip(grads_f, grads_e, strict=True):
        torch.testing.assert_close(gf, ge, atol=10 * atol, rtol=0)
    if mask is not None:  # a query that sees nothing gets exactly zero
        empty = ~mask.any(-1).expand(out_f.shape[:-1])
        assert (out_f[empty] == 0).all()


def test_fully_masked_rows_are_zero_even_if_the_kernel_gave_nan(monkeypatch):
    """Older PyTorch releases return NaN for a query with no visible key: the guarantee must
    not depend on the kernel."""
    real = torch.nn.functional.scaled_dot_product_attention

    def nan_for_empty_rows(q, k, v, attn_mask=None, **kwargs):
        out = real(q, k, v, attn_mask=attn_mask, **kwargs)
        if attn_mask is not None:  # NaN in the output and in the gradients of empty rows
            empty = ~attn_mask.any(-1, keepdim=True)
            out = out * torch.where(empty, float("nan"), 1.0)
        return out

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", nan_for_empty_rows)
    q = torch.randn(2, 3, 4, 8, requires_grad=True)
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    mask[0, :, 1] = False  # query 1 of sentence 0 sees nothing
    out = fused_attention(q, q, q, mask)
    assert torch.isfinite(out).all() and (out[0, :, 1] == 0).all()
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_dropout_is_applied_on_the_fused_path_in_training_only():
    torch.manual_seed(0)
    mha = FastMultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 6, 16)
    mha.eval()
    a, _ = mha(x, x, x, need_weights=False)
    b, _ = mha(x, x, x, need_weights=False)
    explained, _ = mha(x, x, x)
    assert torch.equal(a, b)
    torch.testing.assert_close(a, explained, atol=1e-6, rtol=0)
    mha.train()
    c, _ = mha(x, x, x, need_weights=False)
    d, _ = mha(x, x, x, need_weights=False)
    assert not torch.allclose(c, d) and not torch.allclose(c, a)


def test_modules_take_need_weights():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    mha = MultiHeadAttention(8, 2).eval()
    memory = torch.randn(2, 7, 8)
    out, weights = mha(x, memory, memory, need_weights=False)
    assert weights is None and out.shape == (2, 5, 8)
    with pytest.raises(ValueError, match="need_weights must be True or False"):
        mha(x, x, x, need_weights="no")


def test_a_fast_model_uses_the_fused_path_and_a_plain_one_never_does():
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    torch.manual_seed(0)
    model = Transformer(20, 20, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=3,
                        d_ff=24).eval()
    src, tgt = torch.randint(1, 20, (2, 6)), torch.randint(1, 20, (2, 4))
    with torch.no_grad():
        explained_weights = []
        for layer in model.decoder.layers:  # force the explained path in every decoder sublayer
            for attn in (layer.self_attn, layer.cross_attn):
                attn.register_forward_pre_hook(
                    lambda _m, a, kw: (a, {**kw, "need_weights": True}), with_kwargs=True)
                attn.register_forward_hook(lambda _m, _i, out: explained_weights.append(out[1]))
        want = model(src, tgt)
        torch.nn.functional.scaled_dot_product_attention = spy
        try:
            fresh = Transformer(20, 20, d_model=16, num_heads=2, num_encoder_layers=2,
                                num_decoder_layers=3, d_ff=24).eval()
            fresh.load_state_dict(model.state_dict())
            plain = fresh(src, tgt)
            assert calls == []  # chapter 05's attention: scores, mask, softmax, weights @ v
            got = speed_up(fresh)(src, tgt)
        finally:
            torch.nn.functional.scaled_dot_product_attention = real
    assert len(calls) == 2 + 2 * 3  # after speed_up every attention sublayer went through the fused kernel
    torch.testing.assert_close(plain, want, atol=1e-6, rtol=0)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # a forward pre-hook still gets the weights out (chapter 10 draws the cross-attention)
    assert len(explained_weights) == 6 and all(w is not None for w in explained_weights)
    assert explained_weights[1].shape == (2, 2, 4, 6)


@pytest.mark.parametrize("norm_first", [False, True])
def test_blocks_fused_equal_explained_in_training_with_dropout_zero(norm_first):
    torch.manual_seed(0)
    enc = EncoderBlock(16, 4, 32, dropout=0.0, norm_first=norm_first).train()
    dec = DecoderBlock(16, 4, 32, dropout=0.0, norm_first=norm_first).train()
    x, memory = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    src_mask = (torch.arange(7) < torch.tensor([7, 3, 0])[:, None])[:, None, None]  # one empty source
    tgt_mask = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    fused = dec(x, enc(memory, src_mask), tgt_mask, src_mask)
    for block in (enc, dec):
        for name in ("self_attn", "cross_attn"):
            if hasattr(block, name):
                getattr(block, name).register_forward_pre_hook(
                    lambda _m, a, kw: (a, {**kw, "need_weights": True}), with_kwargs=True)
    explained = dec(x, enc(memory, src_mask), tgt_mask, src_mask)
    torch.testing.assert_close(fused, explained, atol=1e-5, rtol=0)
    g_fused = torch.autograd.grad(fused.sum(), list(enc.parameters()), retain_graph=True)
    g_explained = torch.autograd.grad(explained.sum(), list(enc.parameters()))
    for a, b in zip(g_fused, g_explained, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("with_mask", [False, True])
def test_is_causal_equals_the_causal_mask_values_and_gradients(need_weights, with_mask):
    """attend's is_causal=True (the flag the fused kernel takes) gives what chapter 04's causal
    mask gives, on both paths, alone or ANDed with a padding mask."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(3, 2, 7, 4, generator=g, dtype=torch.float64) for _ in range(3))
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    padding = (torch.arange(7) < torch.tensor([7, 4, 1])[:, None])[:, None, None]  # [3, 1, 1, 7]
    mask = padding if with_mask else None
    mha = MultiHeadAttention(8, 2).eval()  # attend alone: no projections, dropout off
    results = []
    for flag in (False, True):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        given = mask if flag else (causal if mask is None else mask & causal)
        out, weights = mha.attend(*leaves, given, need_weights=need_weights, is_causal=flag)
        grads = torch.autograd.grad((out * torch.linspace(-1, 1, 4, dtype=out.dtype)).sum(), leaves)
        results.append((out, grads, weights))
    (out_m, grads_m, w_m), (out_c, grads_c, w_c) = results
    torch.testing.assert_close(out_c, out_m, atol=1e-12, rtol=0)
    for a, b in zip(grads_c, grads_m, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    if need_weights:
        assert w_c.triu(1).eq(0).all()
        torch.testing.assert_close(w_c, w_m, atol=1e-12, rtol=0)


def test_is_causal_uses_the_kernels_flag_and_refuses_unequal_lengths(monkeypatch):
    """Without a mask, the fused path hands is_causal to PyTorch's kernel (which then skips the
    blocks above the diagonal) instead of building a mask; q_len != k_len is an error."""
    seen = []
    fused = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append((kwargs.get("attn_mask") is None, kwargs.get("is_causal", False)))
        return fused(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    mha = FastMultiHeadAttention(8, 2).eval()
    q = torch.randn(1, 2, 5, 4)
    mha.attend(q, q, q, None, need_weights=False, is_causal=True)
    assert seen == [(True, True)]
    for need_weights in (True, False):  # chapter 05's path and the fused one refuse it alike
        with pytest.raises(ValueError, match="is_causal needs Tq == Tk"):
            mha.attend(q, torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4), None, need_weights, is_causal=True)
    x = torch.randn(1, 5, 8)
    with pytest.raises(ValueError, match="is_causal"):
        mha(x, x, x, is_causal=1)


def test_is_causal_with_dropout_drops_only_visible_weights():
    """The explained path with dropout (the CPU's training path) under is_causal: nothing above
    the diagonal, and in eval-equivalent dropout 0 the rows sum to 1."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, dropout=0.5).train()
    q = torch.randn(2, 2, 6, 4)
    _, weights = mha.attend(q, q, q, None, need_weights=True, is_causal=True)
    assert weights.triu(1).eq(0).all() and weights.tril().ne(0).any()
    _, weights = mha.eval().attend(q, q, q, None, need_weights=True, is_causal=True)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 6))


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("with_padding", [False, True])
def test_decoder_block_tgt_is_causal_equals_the_causal_mask(norm_first, with_padding):
    """A decoder block in training mode (dropout 0, so the fused path runs) gives the same
    output and gradients with tgt_is_causal=True as with chapter 04's causal mask, alone or
    with a target padding mask, with cross-attention to a padded source."""
    torch.manual_seed(3)
    dec = DecoderBlock(16, 4, 32, dropout=0.0, norm_first=norm_first).train()
    x, memory = torch.randn(3, 6, 16), torch.randn(3, 5, 16)
    memory_mask = (torch.arange(5) < torch.tensor([5, 3, 1])[:, None])[:, None, None]  # [3, 1, 1, 5]
    padding = (torch.arange(6) < torch.tensor([6, 4, 2])[:, None])[:, None, None] if with_padding else None
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    by_mask = dec(x, memory, causal if padding is None else padding & causal, memory_mask)
    by_flag = dec(x, memory, padding, memory_mask, tgt_is_causal=True)
    torch.testing.assert_close(by_flag, by_mask, atol=1e-6, rtol=0)
    g_mask = torch.autograd.grad(by_mask.square().sum(), list(dec.parameters()))
    g_flag = torch.autograd.grad(by_flag.square().sum(), list(dec.parameters()))
    for a, b in zip(g_flag, g_mask, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="tgt_is_causal"):
        dec(x, memory, padding, memory_mask, tgt_is_causal=1)
