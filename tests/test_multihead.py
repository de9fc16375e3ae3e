"""Tests for transformer.multihead (chapter 05): multi-head attention and its KV cache."""

import pytest
import torch
from torch import nn

from transformer.fast_attention import FastMultiHeadAttention
from transformer.kv_cache import KVCache, StaticKVCache
from transformer.masks import causal_mask, padding_mask
from transformer.multihead import MultiHeadAttention

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-12, rtol=1e-10)}


def to_torch(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """torch.nn.MultiheadAttention (batch_first) with our weights copied in."""
    bias = ours.q_proj.bias is not None
    theirs = nn.MultiheadAttention(ours.d_model, ours.num_heads, bias=bias, batch_first=True)
    theirs = theirs.to(ours.q_proj.weight.dtype)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(
            torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
        )
        if bias:
            theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.load_state_dict(ours.out_proj.state_dict())
    return theirs.eval()


def random_config(gen: torch.Generator):
    heads = int(torch.randint(1, 5, (), generator=gen))
    d_model = heads * int(torch.randint(1, 6, (), generator=gen))
    b = int(torch.randint(1, 4, (), generator=gen))
    tq, tk = (int(torch.randint(1, 8, (), generator=gen)) for _ in range(2))
    return heads, d_model, b, tq, tk


def visible_mask(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """A random bool mask (True = may attend) in which every row sees at least one key."""
    mask = torch.rand(shape, generator=gen) < 0.6
    first = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    return mask | nn.functional.one_hot(first, shape[-1]).bool()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["self", "cross"])
@pytest.mark.parametrize("masking", ["none", "attn_mask", "key_padding"])
def test_equals_torch_multihead_attention(dtype, kind, masking):
    gen = torch.Generator().manual_seed(sum(map(ord, kind + masking)))
    for _ in range(10):
        heads, d_model, b, tq, tk = random_config(gen)
        if kind == "self":
            tk = tq
        torch.manual_seed(int(torch.randint(0, 10**6, (), generator=gen)))
        bias = bool(torch.randint(0, 2, (), generator=gen))
        ours = MultiHeadAttention(d_model, heads, bias=bias).to(dtype).eval()
        theirs = to_torch(ours)
        query = torch.randn(b, tq, d_model, generator=gen, dtype=dtype)
        key = query if kind == "self" else torch.randn(b, tk, d_model, generator=gen, dtype=dtype)
        value = query if kind == "self" else torch.randn(b, tk, d_model, generator=gen, dtype=dtype)
        kwargs, mask = {}, None
        if masking == "attn_mask":  # per batch and head, [B*h, Tq, Tk] in PyTorch
            mask = visible_mask(gen, (b, heads, tq, tk))
            kwargs["attn_mask"] = ~mask.reshape(b * heads, tq, tk)  # PyTorch: True = blocked
        elif masking == "key_padding":
            lengths = torch.randint(1, tk + 1, (b,), generator=gen)
            ids = (torch.arange(tk) < lengths[:, None]).long()  # 1 = real token, 0 = pad
            mask = padding_mask(ids, pad_id=0)  # [B, 1, 1, Tk]
            kwargs["key_padding_mask"] = ~mask[:, 0, 0]
        out, w = ours(query, key, value, mask)
        ref_out, ref_w = theirs(query, key, value, average_attn_weights=False, **kwargs)
        assert out.shape == (b, tq, d_model) and w.shape == (b, heads, tq, tk)
        torch.testing.assert_close(out, ref_out, **TOL[dtype])
        torch.testing.assert_close(w, ref_w, **TOL[dtype])


def test_gradients_equal_torch():
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4).double()
    theirs = to_torch(ours)
    x1 = torch.randn(2, 6, 16, dtype=torch.double, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    mask = causal_mask(6)
    ours(x1, x1, x1, mask)[0].square().sum().backward()
    theirs(x2, x2, x2, attn_mask=~mask[0, 0])[0].square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(
        torch.cat([ours.q_proj.weight.grad, ours.k_proj.weight.grad, ours.v_proj.weight.grad]),
        theirs.in_proj_weight.grad,
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_fused_self_attention_projection_equals_three_separate(dtype, bias):
    """Appendix 14's FastMultiHeadAttention: one tensor for query, key and value takes the
    one-GEMM path; equal copies take three, as chapter 05's module always does."""
    torch.manual_seed(5)
    mha = FastMultiHeadAttention(24, 4, bias=bias).to(dtype)
    x = torch.randn(3, 7, 24, dtype=dtype)
    mask = causal_mask(7) & padding_mask(torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5]))
    calls = []
    hooks = [p.register_forward_hook(lambda *a, n=n: calls.append(n))
             for n, p in (("q", mha.q_proj), ("k", mha.k_proj), ("v", mha.v_proj))]
    x1 = x.clone().requires_grad_()
    fused, fused_w = mha(x1, x1, x1, mask)
    assert calls == []  # fused: none of the three nn.Linear modules was called
    fused.square().sum().backward()
    fused_grads = [p.grad.clone() for p in mha.parameters()]
    mha.zero_grad()
    x2 = x.clone().requires_grad_()
    separate, separate_w = mha(x2, x2.clone(), x2.clone(), mask)  # same values, other tensors
    assert calls == ["q", "k", "v"]  # separate: three projections
    separate.square().sum().backward()
    plain = MultiHeadAttention(24, 4, bias=bias).to(dtype)
    plain.load_state_dict(mha.state_dict())
    calls.clear()
    for hook in hooks:
        hook.remove()
    hooks = [p.register_forward_hook(lambda *a, n=n: calls.append(n))
             for n, p in (("q", plain.q_proj), ("k", plain.k_proj), ("v", plain.v_proj))]
    plain_out, _ = plain(x, x, x, mask)
    assert calls == ["q", "k", "v"]  # chapter 05's module: three projections, whatever its inputs
    for hook in hooks:
        hook.remove()
    torch.testing.assert_close(fused, separate, **TOL[dtype])
    torch.testing.assert_close(plain_out, separate.detach(), **TOL[dtype])
    torch.testing.assert_close(fused_w, separate_w, **TOL[dtype])
    torch.testing.assert_close(x1.grad, x2.grad, **TOL[dtype])
    for g_fused, p in zip(fused_grads, mha.parameters(), strict=True):
        torch.testing.assert_close(g_fused, p.grad, **TOL[dtype])


def test_causal_mask_no_future_leak_and_weights():
    torch.manual_seed(1)
    mha = MultiHeadAttention(12, 3).eval()
    x = torch.randn(2, 7, 12)
    mask = causal_mask(7)
    out, w = mha(x, x, x, mask)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 7))
    assert (w.masked_select(~mask) == 0).all()
    for t in range(7):
        y = x.clone()
        y[:, t:] = torch.randn(2, 7 - t, 12)
        out2, _ = mha(y, y, y, mask)
        torch.testing.assert_close(out[:, :t], out2[:, :t])


def test_fully_masked_rows_give_zeros_not_nan():
    torch.manual_seed(2)
    mha = MultiHeadAttention(8, 2)
    q = torch.randn(3, 4, 8, requires_grad=True)
    kv = torch.randn(3, 5, 8, requires_grad=True)
    ids = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]])
    out, w = mha(q, kv, kv, padding_mask(ids))
    assert not out.isnan().any() and not w.isnan().any()
    assert (w[1] == 0).all()
    torch.testing.assert_close(out[1], mha.out_proj.bias.expand(4, 8))  # attention gave zeros
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(kv.grad).all()


def test_split_merge_roundtrip_and_head_slices():
    mha = MultiHeadAttention(12, 4)
    x = torch.randn(2, 5, 12)
    s = mha.split_heads(x)
    assert s.shape == (2, 4, 5, 3)
    for i in range(4):
        assert torch.equal(s[:, i], x[..., 3 * i:3 * i + 3])
    assert torch.equal(mha.merge_heads(s), x)


def test_parameter_count_is_independent_of_heads():
    counts = {sum(p.numel() for p in MultiHeadAttention(64, h).parameters()) for h in (1, 2, 4, 8)}
    assert counts == {4 * (64 * 64 + 64)}


@pytest.mark.parametrize("dtype", DTYPES)
def test_kv_cache_one_token_at_a_time_equals_full_causal(dtype):
    torch.manual_seed(3)
    mha = MultiHeadAttention(16, 4).to(dtype).eval()
    x = torch.randn(2, 6, 16, dtype=dtype)
    full, _ = mha(x, x, x, causal_mask(6))
    cache = KVCache(6)
    steps = []
    for t in range(6):
        xt = x[:, t:t + 1]
        steps.append(mha(xt, xt, xt, cache=cache)[0])
        # Earlier steps first, in time order: the cache holds the projections of x[:, :t+1].
        torch.testing.assert_close(cache["k"], mha.split_heads(mha.k_proj(x[:, :t + 1])))
        torch.testing.assert_close(cache["v"], mha.split_heads(mha.v_proj(x[:, :t + 1])))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL[dtype])
    # A prompt of several tokens first, then single steps, also matches.
    cache = KVCache(6)
    head, _ = mha(x[:, :3], x[:, :3], x[:, :3], causal_mask(3), cache=cache)
    tail = [mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=cache)[0] for t in range(3, 6)]
    torch.testing.assert_close(torch.cat([head, *tail], dim=1), full, **TOL[dtype])


def test_static_kv_reuses_cached_keys_and_values():
    torch.manual_seed(4)
    mha = MultiHeadAttention(16, 4).eval()
    memory = torch.randn(2, 5, 16)
    tgt = torch.randn(2, 4, 16)
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]))
    full, _ = mha(tgt, memory, memory, mask)
    calls = []
    hooks = [p.register_forward_hook(lambda *a, n=n: calls.append(n))
             for n, p in (("k", mha.k_proj), ("v", mha.v_proj))]
    cache = StaticKVCache()
    steps = []
    for t in range(4):
        steps.append(mha(tgt[:, t:t + 1], memory, memory, mask, cache=cache)[0])
        assert cache["k"].shape == (2, 4, 5, 4)  # never grows
    for hook in hooks:
        hook.remove()
    assert calls == ["k", "v"]  # projected once, on the first step
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    # The cached tensors are the ones used: changing them changes the output.
    cache["v"] = torch.zeros_like(cache["v"])
    out, _ = mha(tgt[:, :1], memory, memory, mask, cache=cache)
    torch.testing.assert_close(out, mha.out_proj.bias.expand(2, 1, 16))


def test_static_kv_with_empty_cache_projects_and_stores():
    mha = MultiHeadAttention(8, 2).eval()
    memory = torch.randn(1, 3, 8)
    cache = StaticKVCache()
    mha(torch.randn(1, 1, 8), memory, memory, cache=cache)
    torch.testing.assert_close(cache["k"], mha.split_heads(mha.k_proj(memory)))
    torch.testing.assert_close(cache["v"], mha.split_heads(mha.v_proj(memory)))


def test_a_cache_without_project_is_refused_by_name():
    """A plain dict (the protocol before chapter 10's caches had `project`) is a TypeError
    that names the method and the two caches, not an error deep inside."""
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 2, 8)
    with pytest.raises(TypeError, match=r"cache must have a project\(.*KVCache.*got dict"):
        mha(x, x, x, cache={})


def test_dropout_on_weights_in_training_only():
    torch.manual_seed(5)
    mha = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 8, 16)
    w_train = mha.train()(x, x, x)[1]
    zeros = (w_train == 0).float().mean().item()
    assert 0.35 < zeros < 0.65
    # Survivors are scaled by 1 / (1 - p) relative to the eval weights.
    w_eval = mha.eval()(x, x, x)[1]
    kept = w_train != 0
    torch.testing.assert_close(w_train[kept], 2 * w_eval[kept])
    torch.testing.assert_close(w_eval.sum(-1), torch.ones(2, 4, 8))
    assert torch.equal(mha(x, x, x)[0], mha(x, x, x)[0])


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="num_heads"):
        MultiHeadAttention(8, 0)
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(8, 2, dropout=1.5)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match="query must have shape"):
        mha(x[0], x, x)
    with pytest.raises(ValueError, match="key must have shape"):
        mha(x, x.unsqueeze(0), x)
    with pytest.raises(ValueError, match="value must have shape"):
        mha(x, x, torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match="same batch size"):
        mha(x, torch.randn(1, 3, 8), torch.randn(1, 3, 8))
    with pytest.raises(ValueError, match="same length"):
        mha(x, x, torch.randn(2, 4, 8))
    with pytest.raises(TypeError, match="bool"):
        mha(x, x, x, torch.ones(3, 3))
    with pytest.raises(ValueError, match="broadcast"):
        mha(x, x, x, torch.ones(2, 1, 4, 3, dtype=torch.bool))
