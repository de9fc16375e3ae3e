"""Near-miss answers to chapter 05's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-split": {
        "reshapes straight to [B, heads, T, d_k], without the transpose": '''
def split_heads_manual(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, d_model] -> [B, num_heads, T, d_model // num_heads]."""
    b, t, d = x.shape
    return x.reshape(b, num_heads, t, d // num_heads)
''',
        "views the features as [d_k, heads] (head i gets every num_heads-th feature)": '''
def split_heads_manual(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, d_model] -> [B, num_heads, T, d_model // num_heads]."""
    b, t, d = x.shape
    return x.view(b, t, d // num_heads, num_heads).permute(0, 3, 1, 2)
''',
        "transposes the last two axes instead of time and heads": '''
def split_heads_manual(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, d_model] -> [B, num_heads, T, d_model // num_heads]."""
    b, t, d = x.shape
    return x.view(b, t, num_heads, d // num_heads).transpose(-2, -1)
''',
        "d_k from d_model = 12, the width of the visible test": '''
def split_heads_manual(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, d_model] -> [B, num_heads, T, d_model // num_heads]."""
    b, t, d = x.shape
    return x.view(b, t, num_heads, 12 // num_heads).transpose(1, 2)
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
    "ex4-merge": {
        "the function with the bug, unchanged": '''
def merge_heads_manual(x: torch.Tensor) -> torch.Tensor:
    """[B, h, T, d_k] -> [B, T, h * d_k]: the inverse of split_heads."""
    return merge_heads_with_a_bug(x)
''',
        "view after the transpose: fails on memory that is not contiguous": '''
def merge_heads_manual(x: torch.Tensor) -> torch.Tensor:
    """[B, h, T, d_k] -> [B, T, h * d_k]: the inverse of split_heads."""
    b, h, t, dk = x.shape
    return x.transpose(1, 2).view(b, t, h * dk)
''',
        "moves the heads last: features interleaved across heads": '''
def merge_heads_manual(x: torch.Tensor) -> torch.Tensor:
    """[B, h, T, d_k] -> [B, T, h * d_k]: the inverse of split_heads."""
    b, h, t, dk = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dk)
''',
    },
}
