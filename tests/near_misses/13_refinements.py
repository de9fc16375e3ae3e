"""Near-miss answers to chapter 13's exercises: mistakes students really make.

`python tools/exercises.py verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-rmsnorm": {
        "subtracts the mean first (that is LayerNorm without the bias)": '''
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [..., d], weight [d] -> x / sqrt(mean(x**2) + eps) * weight, same shape as x."""
    centred = x - x.mean(dim=-1, keepdim=True)
    return centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps) * weight
''',
        "adds eps outside the square root": '''
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [..., d], weight [d] -> x / sqrt(mean(x**2) + eps) * weight, same shape as x."""
    return x / (x.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps) * weight
''',
        "divides by the norm, not the root mean square (sum instead of mean)": '''
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [..., d], weight [d] -> x / sqrt(mean(x**2) + eps) * weight, same shape as x."""
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps) * weight
''',
        "forgets the learned scale": '''
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [..., d], weight [d] -> x / sqrt(mean(x**2) + eps) * weight, same shape as x."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
''',
    },
    "ex2-rotate": {
        "pairs the two halves (i, i + d/2) instead of neighbours (2i, 2i + 1)": '''
def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x [T, d], positions [T] -> x with each pair (2i, 2i+1) of row t turned by positions[t] * 10000**(-2i/d)."""
    d = x.size(-1)
    freqs = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions[:, None].double() * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[:, : d // 2], x[:, d // 2:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
''',
        "turns the wrong way (the sine's sign swapped)": '''
def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x [T, d], positions [T] -> x with each pair (2i, 2i+1) of row t turned by positions[t] * 10000**(-2i/d)."""
    d = x.size(-1)
    freqs = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions[:, None].double() * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[:, 0::2], x[:, 1::2]
    return torch.stack([even * cos + odd * sin, -even * sin + odd * cos], dim=-1).flatten(-2)
''',
        "frequencies 10000**(-i/d) instead of 10000**(-2i/d)": '''
def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x [T, d], positions [T] -> x with each pair (2i, 2i+1) of row t turned by positions[t] * 10000**(-2i/d)."""
    d = x.size(-1)
    freqs = 10000.0 ** (-torch.arange(0, d // 2, dtype=torch.float64) / d)
    angles = positions[:, None].double() * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[:, 0::2], x[:, 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
''',
        "counts positions from the row index, ignoring the positions given": '''
def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x [T, d], positions [T] -> x with each pair (2i, 2i+1) of row t turned by positions[t] * 10000**(-2i/d)."""
    d = x.size(-1)
    freqs = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(x.size(0), dtype=torch.float64)[:, None] * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[:, 0::2], x[:, 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
''',
    },
    "ex3-repeat-kv": {
        "tiles the heads (repeat): query head j reads head j % g, not j // (h / g)": '''
def repeat_kv(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    """k [B, g, T, d] -> [B, num_heads, T, d]: query head j reads key/value head j // (num_heads // g)."""
    return k.repeat(1, num_heads // k.size(1), 1, 1)
''',
        "repeats along time instead of heads, then reshapes": '''
def repeat_kv(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    """k [B, g, T, d] -> [B, num_heads, T, d]: query head j reads key/value head j // (num_heads // g)."""
    b, g, t, d = k.shape
    return k.repeat_interleave(num_heads // g, dim=2).reshape(b, num_heads, t, d)
''',
        "expands on a new axis before the heads: the copies interleave, as with repeat": '''
def repeat_kv(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    """k [B, g, T, d] -> [B, num_heads, T, d]: query head j reads key/value head j // (num_heads // g)."""
    b, g, t, d = k.shape
    return k[:, None].expand(b, num_heads // g, g, t, d).reshape(b, num_heads, t, d)
''',
    },
}
