"""Near-miss answers to chapter 07's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-group-norm": {
        "groups of every groups-th feature: the view as [..., d // groups, groups]": '''
def group_norm(x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise each group of d // groups consecutive features of x [..., d] on its own,
    then scale by weight [d] and shift by bias [d]."""
    d = x.size(-1)
    g = x.unflatten(-1, (d // groups, groups))  # [..., d // groups, groups]
    mu = g.mean(-2, keepdim=True)
    var = ((g - mu) ** 2).mean(-2, keepdim=True)
    return ((g - mu) / torch.sqrt(var + eps)).flatten(-2) * weight + bias
''',
        "LayerNorm over all d features: the groups ignored": '''
def group_norm(x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise each group of d // groups consecutive features of x [..., d] on its own,
    then scale by weight [d] and shift by bias [d]."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight + bias
''',
        "unbiased variance (the default of .var()), 1/(n-1) instead of 1/n": '''
def group_norm(x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise each group of d // groups consecutive features of x [..., d] on its own,
    then scale by weight [d] and shift by bias [d]."""
    g = x.unflatten(-1, (groups, x.size(-1) // groups))
    mu = g.mean(-1, keepdim=True)
    var = g.var(-1, keepdim=True)
    return ((g - mu) / torch.sqrt(var + eps)).flatten(-2) * weight + bias
''',
        "eps added to the standard deviation, outside the square root": '''
def group_norm(x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise each group of d // groups consecutive features of x [..., d] on its own,
    then scale by weight [d] and shift by bias [d]."""
    g = x.unflatten(-1, (groups, x.size(-1) // groups))
    mu = g.mean(-1, keepdim=True)
    std = g.std(-1, unbiased=False, keepdim=True)
    return ((g - mu) / (std + eps)).flatten(-2) * weight + bias
''',
        "works for [B, T, d] only (b, t, d = x.shape), not for any [..., d]": '''
def group_norm(x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise each group of d // groups consecutive features of x [..., d] on its own,
    then scale by weight [d] and shift by bias [d]."""
    b, t, d = x.shape
    g = x.view(b, t, groups, d // groups)
    mu = g.mean(-1, keepdim=True)
    var = ((g - mu) ** 2).mean(-1, keepdim=True)
    return ((g - mu) / torch.sqrt(var + eps)).view(b, t, d) * weight + bias
''',
        "ignores eps: a constant 1e-5 inside": '''
def group_norm(x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise each group of d // groups consecutive features of x [..., d] on its own,
    then scale by weight [d] and shift by bias [d]."""
    g = x.unflatten(-1, (groups, x.size(-1) // groups))
    mu = g.mean(-1, keepdim=True)
    var = ((g - mu) ** 2).mean(-1, keepdim=True)
    return ((g - mu) / torch.sqrt(var + 1e-5)).flatten(-2) * weight + bias
''',
        "F.group_norm on the tokens, which the exercise forbids": '''
def group_norm(x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise each group of d // groups consecutive features of x [..., d] on its own,
    then scale by weight [d] and shift by bias [d]."""
    d = x.size(-1)
    return F.group_norm(x.reshape(-1, d), groups, weight, bias, eps).reshape(x.shape)
''',
        "F.layer_norm on each group, which the exercise forbids": '''
def group_norm(x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise each group of d // groups consecutive features of x [..., d] on its own,
    then scale by weight [d] and shift by bias [d]."""
    size = x.size(-1) // groups
    g = F.layer_norm(x.unflatten(-1, (groups, size)), (size,), eps=eps)
    return g.flatten(-2) * weight + bias
''',
    },
    "ex2-deepnorm": {
        "alpha on the sublayer's output: norm(x + alpha * F(x))": '''
def deepnorm_forward(block: EncoderBlock, x: torch.Tensor, mask: torch.Tensor | None,
                     alpha: float) -> torch.Tensor:
    """DeepNorm encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    x = block.norm1(x + alpha * block.self_attn(x, x, x, mask)[0])
    return block.norm2(x + alpha * block.ffn(x))
''',
        "scales the stream before the sublayer reads it: norm(alpha x + F(alpha x))": '''
def deepnorm_forward(block: EncoderBlock, x: torch.Tensor, mask: torch.Tensor | None,
                     alpha: float) -> torch.Tensor:
    """DeepNorm encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    x = alpha * x
    x = block.norm1(x + block.self_attn(x, x, x, mask)[0])
    x = alpha * x
    return block.norm2(x + block.ffn(x))
''',
        "alpha in the self-attention sublayer only, not in the FFN's": '''
def deepnorm_forward(block: EncoderBlock, x: torch.Tensor, mask: torch.Tensor | None,
                     alpha: float) -> torch.Tensor:
    """DeepNorm encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    x = block.norm1(alpha * x + block.self_attn(x, x, x, mask)[0])
    return block.norm2(x + block.ffn(x))
''',
        "forgets to pass the mask to self-attention": '''
def deepnorm_forward(block: EncoderBlock, x: torch.Tensor, mask: torch.Tensor | None,
                     alpha: float) -> torch.Tensor:
    """DeepNorm encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    x = block.norm1(alpha * x + block.self_attn(x, x, x)[0])
    return block.norm2(alpha * x + block.ffn(x))
''',
        "the Pre-LN order with alpha: alpha x + F(norm(x))": '''
def deepnorm_forward(block: EncoderBlock, x: torch.Tensor, mask: torch.Tensor | None,
                     alpha: float) -> torch.Tensor:
    """DeepNorm encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    h = block.norm1(x)
    x = alpha * x + block.self_attn(h, h, h, mask)[0]
    return alpha * x + block.ffn(block.norm2(x))
''',
        "DeepNet's alpha for six layers, (2 * 6) ** 0.25, instead of the argument": '''
def deepnorm_forward(block: EncoderBlock, x: torch.Tensor, mask: torch.Tensor | None,
                     alpha: float) -> torch.Tensor:
    """DeepNorm encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    alpha = (2 * 6) ** 0.25  # DeepNet's value for N = 6 encoder blocks
    x = block.norm1(alpha * x + block.self_attn(x, x, x, mask)[0])
    return block.norm2(alpha * x + block.ffn(x))
''',
        "scales x in place (x *= alpha), changing the caller's tensor": '''
def deepnorm_forward(block: EncoderBlock, x: torch.Tensor, mask: torch.Tensor | None,
                     alpha: float) -> torch.Tensor:
    """DeepNorm encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    f = block.self_attn(x, x, x, mask)[0]
    x *= alpha
    x = block.norm1(x + f)
    return block.norm2(alpha * x + block.ffn(x))
''',
    },
    "ex3-decoder-params": {
        "counts the weight matrices but no biases": '''
def decoder_block_params(d_model: int, d_ff: int) -> int:
    """Number of parameters of one DecoderBlock(d_model, num_heads, d_ff)."""
    attention = 4 * d_model * d_model
    ffn = 2 * d_model * d_ff
    norms = 3 * 2 * d_model
    return 2 * attention + ffn + norms
''',
        "two LayerNorms, as in the encoder block": '''
def decoder_block_params(d_model: int, d_ff: int) -> int:
    """Number of parameters of one DecoderBlock(d_model, num_heads, d_ff)."""
    attention = 4 * (d_model * d_model + d_model)
    ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model
    norms = 2 * 2 * d_model
    return 2 * attention + ffn + norms
''',
        "assumes d_ff = 4 * d_model": '''
def decoder_block_params(d_model: int, d_ff: int) -> int:
    """Number of parameters of one DecoderBlock(d_model, num_heads, d_ff)."""
    attention = 4 * (d_model * d_model + d_model)
    ffn = 8 * d_model * d_model + 4 * d_model + d_model
    norms = 3 * 2 * d_model
    return 2 * attention + ffn + norms
''',
        "three projections per attention (q, k, v), forgetting the output projection": '''
def decoder_block_params(d_model: int, d_ff: int) -> int:
    """Number of parameters of one DecoderBlock(d_model, num_heads, d_ff)."""
    attention = 3 * (d_model * d_model + d_model)
    ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model
    norms = 3 * 2 * d_model
    return 2 * attention + ffn + norms
''',
        "builds a block and counts its parameters (issue 20)": '''
def decoder_block_params(d_model: int, d_ff: int) -> int:
    """Number of parameters of one DecoderBlock(d_model, num_heads, d_ff)."""
    return sum(p.numel() for p in DecoderBlock(d_model, 1, d_ff).parameters())
''',
        "cheat: the numbers that the failure messages reveal (issue 20)": '''
def decoder_block_params(d_model: int, d_ff: int) -> int:
    """Number of parameters of one DecoderBlock(d_model, num_heads, d_ff)."""
    return {(8, 16): 904, (32, 128): 16_992, (64, 100): 46_628, (512, 2048): 4_204_032}[(d_model, d_ff)]
''',
    },
    "ex4-stream": {
        "includes the encoder's final norm in the Pre-LN run (every value flat)": '''
def _stream_norms(norm_first: bool) -> list[float]:
    torch.manual_seed(0)
    encoder = Encoder(12, 64, 4, 256, dropout=0.0, norm_first=norm_first).eval()
    torch.manual_seed(1)
    x = torch.randn(8, 10, 64)
    norms = []
    with torch.no_grad():
        for block in encoder.layers:
            x = block(x)
            norms.append(encoder.norm(x).norm(dim=-1).mean().item())
    return norms


post_ln_norms, pre_ln_norms = _stream_norms(False), _stream_norms(True)
''',
        "the norm of the whole batch tensor instead of the mean token norm": '''
def _stream_norms(norm_first: bool) -> list[float]:
    torch.manual_seed(0)
    encoder = Encoder(12, 64, 4, 256, dropout=0.0, norm_first=norm_first).eval()
    torch.manual_seed(1)
    x = torch.randn(8, 10, 64)
    norms = []
    with torch.no_grad():
        for block in encoder.layers:
            x = block(x)
            norms.append(x.norm().item())
    return norms


post_ln_norms, pre_ln_norms = _stream_norms(False), _stream_norms(True)
''',
        "the two lists swapped": '''
def _stream_norms(norm_first: bool) -> list[float]:
    torch.manual_seed(0)
    encoder = Encoder(12, 64, 4, 256, dropout=0.0, norm_first=norm_first).eval()
    torch.manual_seed(1)
    x = torch.randn(8, 10, 64)
    norms = []
    with torch.no_grad():
        for block in encoder.layers:
            x = block(x)
            norms.append(x.norm(dim=-1).mean().item())
    return norms


pre_ln_norms, post_ln_norms = _stream_norms(False), _stream_norms(True)
''',
    },
}
