"""Near-miss answers to chapter 05's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-split-qkv": {
        "the per-head layout [q_i, k_i, v_i] of GPT-NeoX and BLOOM (view [B, T, h, 3, d_k]), not PyTorch's": '''
def split_qkv(qkv: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """qkv [B, T, 3 * d_model] -> q, k, v, each [B, num_heads, T, d_model // num_heads] (views)."""
    b, t, three_d = qkv.shape
    parts = qkv.view(b, t, num_heads, 3, three_d // (3 * num_heads)).permute(3, 0, 2, 1, 4)
    return parts[0], parts[1], parts[2]
''',
        "cuts each part straight into [B, h, T, d_k], without the transpose": '''
def split_qkv(qkv: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """qkv [B, T, 3 * d_model] -> q, k, v, each [B, num_heads, T, d_model // num_heads] (views)."""
    b, t, three_d = qkv.shape
    q, k, v = qkv.chunk(3, dim=-1)
    return tuple(x.reshape(b, num_heads, t, three_d // (3 * num_heads)) for x in (q, k, v))
''',
        "chunks along the time axis instead of the features": '''
def split_qkv(qkv: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """qkv [B, T, 3 * d_model] -> q, k, v, each [B, num_heads, T, d_model // num_heads] (views)."""
    b, t, three_d = qkv.shape
    d = three_d // 3
    parts = qkv.view(b, t, 3 * num_heads, d // num_heads).transpose(1, 2)  # [B, 3h, T, d_k]
    return tuple(parts.chunk(3, dim=2))
''',
        "right values, but .contiguous() copies them, which the text forbids": '''
def split_qkv(qkv: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """qkv [B, T, 3 * d_model] -> q, k, v, each [B, num_heads, T, d_model // num_heads] (views)."""
    b, t, three_d = qkv.shape
    q, k, v = qkv.chunk(3, dim=-1)
    return tuple(x.reshape(b, t, num_heads, -1).transpose(1, 2).contiguous() for x in (q, k, v))
''',
        "squeeze() after split: also drops a batch, length or head axis of size 1": '''
def split_qkv(qkv: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """qkv [B, T, 3 * d_model] -> q, k, v, each [B, num_heads, T, d_model // num_heads] (views)."""
    b, t, three_d = qkv.shape
    parts = qkv.view(b, t, 3, num_heads, three_d // (3 * num_heads)).permute(2, 0, 3, 1, 4)
    q, k, v = parts.split(1, dim=0)  # each [1, B, h, T, d_k]
    return q.squeeze(), k.squeeze(), v.squeeze()
''',
    },
    "ex2-average": {
        "averages over the batch axis (dim 0) instead of the heads": '''
def averaged_weights(mha: MultiHeadAttention, query, key, value, mask=None) -> torch.Tensor:
    """Attention weights [B, Tq, Tk], the mean over the heads of mha's weights."""
    return mha(query, key, value, mask)[1].mean(dim=0)
''',
        "sums the heads instead of averaging them": '''
def averaged_weights(mha: MultiHeadAttention, query, key, value, mask=None) -> torch.Tensor:
    """Attention weights [B, Tq, Tk], the mean over the heads of mha's weights."""
    return mha(query, key, value, mask)[1].sum(dim=1)
''',
        "forgets to pass the mask on": '''
def averaged_weights(mha: MultiHeadAttention, query, key, value, mask=None) -> torch.Tensor:
    """Attention weights [B, Tq, Tk], the mean over the heads of mha's weights."""
    return mha(query, key, value)[1].mean(dim=1)
''',
        "inverts the mask, as nn.MultiheadAttention would want it": '''
def averaged_weights(mha: MultiHeadAttention, query, key, value, mask=None) -> torch.Tensor:
    """Attention weights [B, Tq, Tk], the mean over the heads of mha's weights."""
    return mha(query, key, value, ~mask)[1].mean(dim=1)
''',
        "assumes self-attention: the query as key and value": '''
def averaged_weights(mha: MultiHeadAttention, query, key, value, mask=None) -> torch.Tensor:
    """Attention weights [B, Tq, Tk], the mean over the heads of mha's weights."""
    return mha(query, query, query, mask)[1].mean(dim=1)
''',
    },
    "ex3-ablate": {
        "zeroes the head's slice of the output after out_proj, not before": '''
def ablate_head(mha: MultiHeadAttention, x: torch.Tensor, head: int) -> torch.Tensor:
    """Self-attention output [B, T, d_model] of mha on x [B, T, d_model], head `head` zeroed."""
    q, k, v = (mha.split_heads(p(x)) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    out, _ = scaled_dot_product_attention(q, k, v)
    y = mha.out_proj(mha.merge_heads(out)).clone()
    y[..., head * mha.d_head:(head + 1) * mha.d_head] = 0
    return y
''',
        "merges the heads with a plain reshape (no transpose back)": '''
def ablate_head(mha: MultiHeadAttention, x: torch.Tensor, head: int) -> torch.Tensor:
    """Self-attention output [B, T, d_model] of mha on x [B, T, d_model], head `head` zeroed."""
    q, k, v = (mha.split_heads(p(x)) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    out, _ = scaled_dot_product_attention(q, k, v)  # [B, h, T, d_head]
    out = out.clone()
    out[:, head] = 0
    b, _, t, _ = out.shape
    return mha.out_proj(out.reshape(b, t, mha.d_model))
''',
        "zeroes the head's queries (the head still returns a uniform average)": '''
def ablate_head(mha: MultiHeadAttention, x: torch.Tensor, head: int) -> torch.Tensor:
    """Self-attention output [B, T, d_model] of mha on x [B, T, d_model], head `head` zeroed."""
    q, k, v = (mha.split_heads(p(x)) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    q = q.clone()
    q[:, head] = 0
    out, _ = scaled_dot_product_attention(q, k, v)
    return mha.out_proj(mha.merge_heads(out))
''',
        "zeroes the columns of mha's own out_proj (the module is changed for good)": '''
def ablate_head(mha: MultiHeadAttention, x: torch.Tensor, head: int) -> torch.Tensor:
    """Self-attention output [B, T, d_model] of mha on x [B, T, d_model], head `head` zeroed."""
    with torch.no_grad():
        mha.out_proj.weight[:, head * mha.d_head:(head + 1) * mha.d_head] = 0
    return mha(x, x, x)[0]
''',
        "d_head = 6, the head width of the visible test": '''
def ablate_head(mha: MultiHeadAttention, x: torch.Tensor, head: int) -> torch.Tensor:
    """Self-attention output [B, T, d_model] of mha on x [B, T, d_model], head `head` zeroed."""
    q, k, v = (mha.split_heads(p(x)) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    out, _ = scaled_dot_product_attention(q, k, v)
    merged = mha.merge_heads(out).clone()
    merged[..., head * 6:(head + 1) * 6] = 0
    return mha.out_proj(merged)
''',
    },
    "ex4-scale": {
        "the function with the bug, unchanged": '''
def all_heads_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Projected q [B, Tq, d_model], k and v [B, Tk, d_model] -> [B, Tq, d_model]."""
    return all_heads_attention_with_a_bug(q, k, v, num_heads)
''',
        "divides by d_k, not by its square root": '''
def all_heads_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Projected q [B, Tq, d_model], k and v [B, Tk, d_model] -> [B, Tq, d_model]."""
    b, tq, d = q.shape
    q, k, v = (x.view(b, x.size(1), num_heads, -1).transpose(1, 2) for x in (q, k, v))
    scores = q @ k.transpose(-2, -1) / q.size(-1)
    weights = scores.softmax(dim=-1)
    return (weights @ v).transpose(1, 2).reshape(b, tq, d)
''',
        "divides by sqrt(num_heads) once more, instead of multiplying: sqrt(d_model * h)": '''
def all_heads_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Projected q [B, Tq, d_model], k and v [B, Tk, d_model] -> [B, Tq, d_model]."""
    b, tq, d = q.shape
    q, k, v = (x.view(b, x.size(1), num_heads, -1).transpose(1, 2) for x in (q, k, v))
    scores = q @ k.transpose(-2, -1) / d ** 0.5 / num_heads ** 0.5
    weights = scores.softmax(dim=-1)
    return (weights @ v).transpose(1, 2).reshape(b, tq, d)
''',
        "takes the 'bug' to be the softmax axis, and normalises over the queries": '''
def all_heads_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Projected q [B, Tq, d_model], k and v [B, Tk, d_model] -> [B, Tq, d_model]."""
    b, tq, d = q.shape
    q, k, v = (x.view(b, x.size(1), num_heads, -1).transpose(1, 2) for x in (q, k, v))
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    weights = scores.softmax(dim=-2)
    return (weights @ v).transpose(1, 2).reshape(b, tq, d)
''',
        "cuts keys and values with the queries' length: right in self-attention only": '''
def all_heads_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Projected q [B, Tq, d_model], k and v [B, Tk, d_model] -> [B, Tq, d_model]."""
    b, t, d = q.shape
    q, k, v = (x.reshape(b, t, num_heads, -1).transpose(1, 2) for x in (q, k, v))
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    weights = scores.softmax(dim=-1)
    return (weights @ v).transpose(1, 2).reshape(b, t, d)
''',
        "replaces the function by chapter 03's attention on the module's heads, which the text forbids": '''
def all_heads_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Projected q [B, Tq, d_model], k and v [B, Tk, d_model] -> [B, Tq, d_model]."""
    mha = MultiHeadAttention(q.size(-1), num_heads)
    out, _ = scaled_dot_product_attention(mha.split_heads(q), mha.split_heads(k), mha.split_heads(v))
    return mha.merge_heads(out)
''',
    },
}
