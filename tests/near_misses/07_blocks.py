"""Near-miss answers to chapter 07's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-layer-norm": {
        "unbiased variance (the default of .var()), 1/(d-1) instead of 1/d": '''
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise x [..., d] over its last dimension, then scale by weight [d] and shift by bias [d]."""
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight + bias
''',
        "eps added to the standard deviation, outside the square root": '''
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise x [..., d] over its last dimension, then scale by weight [d] and shift by bias [d]."""
    mu = x.mean(-1, keepdim=True)
    std = x.std(-1, unbiased=False, keepdim=True)
    return (x - mu) / (std + eps) * weight + bias
''',
        "statistics over the whole tensor, not over each vector's features": '''
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise x [..., d] over its last dimension, then scale by weight [d] and shift by bias [d]."""
    mu = x.mean()
    var = ((x - mu) ** 2).mean()
    return (x - mu) / torch.sqrt(var + eps) * weight + bias
''',
        "shift added before the scale: (x_hat + bias) * weight": '''
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise x [..., d] over its last dimension, then scale by weight [d] and shift by bias [d]."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return ((x - mu) / torch.sqrt(var + eps) + bias) * weight
''',
        "ignores eps: a constant 1e-5 inside (issue 20)": '''
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise x [..., d] over its last dimension, then scale by weight [d] and shift by bias [d]."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * weight + bias
''',
        "F.layer_norm, which the exercise forbids": '''
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise x [..., d] over its last dimension, then scale by weight [d] and shift by bias [d]."""
    return F.layer_norm(x, (x.size(-1),), weight, bias, eps)
''',
    },
    "ex2-pre-ln": {
        "the Post-LN order after all: the norm after the residual sum": '''
def pre_ln_forward(block: EncoderBlock, x: torch.Tensor,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """Pre-LN encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    x = block.norm1(x + block.self_attn(x, x, x, mask)[0])
    return block.norm2(x + block.ffn(x))
''',
        "normalises the residual stream itself, so the sum adds norm(x), not x": '''
def pre_ln_forward(block: EncoderBlock, x: torch.Tensor,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """Pre-LN encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    x = block.norm1(x)
    x = x + block.self_attn(x, x, x, mask)[0]
    x = block.norm2(x)
    return x + block.ffn(x)
''',
        "forgets to pass the mask to self-attention": '''
def pre_ln_forward(block: EncoderBlock, x: torch.Tensor,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """Pre-LN encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    h = block.norm1(x)
    x = x + block.self_attn(h, h, h)[0]
    return x + block.ffn(block.norm2(x))
''',
        "reuses norm1 before the FFN instead of norm2": '''
def pre_ln_forward(block: EncoderBlock, x: torch.Tensor,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """Pre-LN encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    h = block.norm1(x)
    x = x + block.self_attn(h, h, h, mask)[0]
    return x + block.ffn(block.norm1(x))
''',
        "flips block.norm_first and calls the block, leaving it flipped": '''
def pre_ln_forward(block: EncoderBlock, x: torch.Tensor,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """Pre-LN encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    block.norm_first = True
    return block(x, mask)
''',
        "flips norm_first, calls the block, flips it back (issue 20)": '''
def pre_ln_forward(block: EncoderBlock, x: torch.Tensor,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """Pre-LN encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    block.norm_first = True
    try:
        return block(x, mask)
    finally:
        block.norm_first = False
''',
        "a new Pre-LN block with the same weights": '''
def pre_ln_forward(block: EncoderBlock, x: torch.Tensor,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """Pre-LN encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    heads = block.self_attn.num_heads
    twin = EncoderBlock(block.d_model, heads, block.ffn.d_ff, norm_first=True).eval()
    twin.load_state_dict(block.state_dict())
    return twin(x, mask)
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
