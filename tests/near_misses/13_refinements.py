"""Near-miss answers to chapter 13's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

RMS = '''
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [..., d], weight [d] -> x / sqrt(mean(x**2) + eps) * weight, same shape as x."""
'''
ROTATE = '''
def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x [T, d], positions [T] -> x with each pair (2i, 2i+1) of row t turned by positions[t] * 10000**(-2i/d)."""
'''
POOL = '''
def pool_kv_heads(w: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """k_proj/v_proj weight [h·d_head, d_model] or bias [h·d_head] -> [g·d_head, ...]: each group's mean."""
'''
SWIGLU = '''
def swiglu(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor,
           down_weight: torch.Tensor) -> torch.Tensor:
    """x [..., d_model] -> down(silu(gate(x)) * up(x)) [..., d_model], weights as nn.Linear holds them."""
'''
VERDICT = '''
def verdict(a: list[float], b: list[float]) -> str:
    """'better', 'worse' or 'within noise': variant a against variant b, from their runs' perplexities."""
'''

NEAR_MISSES = {
    "ex1-rmsnorm": {
        "subtracts the mean first (that is LayerNorm without the bias)": RMS + '''
    centred = x - x.mean(dim=-1, keepdim=True)
    return centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps) * weight
''',
        "adds eps outside the square root": RMS + '''
    return x / (x.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps) * weight
''',
        "divides by the norm, not the root mean square (sum instead of mean)": RMS + '''
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps) * weight
''',
        "forgets the learned scale": RMS + '''
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
''',
        "ignores eps: a constant 1e-6 inside (issue 20)": RMS + '''
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight
''',
        "calls F.rms_norm, which the exercise forbids (issue 20)": RMS + '''
    return F.rms_norm(x, (x.size(-1),), weight, eps=eps)
''',
        "builds nn.RMSNorm, which the exercise forbids": RMS + '''
    norm = nn.RMSNorm(x.size(-1), eps=eps).to(x.dtype)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm(x)
''',
        "normalises over the first axis": RMS + '''
    return x * torch.rsqrt(x.pow(2).mean(dim=0, keepdim=True) + eps) * weight
''',
        "computes in float32 whatever the input": RMS + '''
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
''',
    },
    "ex2-rotate": {
        "assumes consecutive positions: positions[0] + arange(T) (issue 20)": ROTATE + '''
    d = x.size(-1)
    freqs = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    steps = positions[0] + torch.arange(x.size(0))
    angles = steps[:, None].double() * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[:, 0::2], x[:, 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
''',
        "cheat: patches the package's RotaryEmbedding, which the check compares with (issue 20)": '''
import transformer.refinements


def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x [T, d], positions [T] -> x with each pair (2i, 2i+1) of row t turned by positions[t] * 10000**(-2i/d)."""
    return x


transformer.refinements.RotaryEmbedding.forward = lambda self, x, start=0: x
''',
        "turns by the row's index, not its position": ROTATE + '''
    d = x.size(-1)
    freqs = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(x.size(0))[:, None].double() * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[:, 0::2], x[:, 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
''',
        "pairs the two halves (i, i + d/2), as some libraries do": ROTATE + '''
    d = x.size(-1)
    freqs = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions[:, None].double() * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[:, : d // 2], x[:, d // 2:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
''',
        "turns the other way (the sine's sign swapped)": ROTATE + '''
    d = x.size(-1)
    freqs = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions[:, None].double() * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[:, 0::2], x[:, 1::2]
    return torch.stack([even * cos + odd * sin, -even * sin + odd * cos], dim=-1).flatten(-2)
''',
        "frequencies 10000**(-i/d) instead of 10000**(-2i/d)": ROTATE + '''
    d = x.size(-1)
    freqs = 10000.0 ** (-torch.arange(0, d // 2, dtype=torch.float64) / d)
    angles = positions[:, None].double() * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[:, 0::2], x[:, 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
''',
        "sorts the positions first, as if the rows were in order": ROTATE + '''
    d = x.size(-1)
    freqs = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.sort().values[:, None].double() * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[:, 0::2], x[:, 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
''',
    },
    "ex3-pool-kv": {
        "the visible case's numbers read off the check's message: 6 heads into 2, groups of 3 (issue 20)": POOL + '''
    rest = w.shape[1:]
    return w.reshape(2, 3, -1, *rest).mean(dim=1).reshape(-1, *rest)
''',
        "cheat: reads the teacher's notebook from disk and runs its solution (issue 20)": '''
import json
import pathlib

import transformer

_book = pathlib.Path(transformer.__file__).resolve().parent.parent / "chapters"
for _cell in json.loads((_book / "13_refinements.ipynb").read_text())["cells"]:
    if "def pool_kv_heads" in "".join(_cell["source"]):
        exec("".join(_cell["source"]))
''',
        "tiled groups: key/value head j the mean of heads j, j + g, j + 2g, ... (as k.repeat pairs them)": POOL + '''
    group, rest = num_heads // num_kv_heads, w.shape[1:]
    return w.reshape(group, num_kv_heads, -1, *rest).mean(dim=0).reshape(-1, *rest)
''',
        "keeps the first head of each group instead of the mean": POOL + '''
    group, rest = num_heads // num_kv_heads, w.shape[1:]
    return w.reshape(num_kv_heads, group, -1, *rest)[:, 0].reshape(-1, *rest)
''',
        "sums the heads of a group instead of averaging them": POOL + '''
    group, rest = num_heads // num_kv_heads, w.shape[1:]
    return w.reshape(num_kv_heads, group, -1, *rest).sum(dim=1).reshape(-1, *rest)
''',
        "averages neighbouring rows, not whole heads": POOL + '''
    group, rest = num_heads // num_kv_heads, w.shape[1:]
    return w.reshape(-1, group, *rest).mean(dim=1)
''',
        "a weight's two axes assumed: the bias [h·d_head] does not fit": POOL + '''
    group, d_head = num_heads // num_kv_heads, w.size(0) // num_heads
    return w.reshape(num_kv_heads, group, d_head, w.size(1)).mean(dim=1).reshape(num_kv_heads * d_head, w.size(1))
''',
        "averages in place of the first head of each group, in w itself": POOL + '''
    group, rest = num_heads // num_kv_heads, w.shape[1:]
    heads = w.view(num_kv_heads, group, -1, *rest)
    heads[:, 0] = heads.mean(dim=1)
    return heads[:, 0].reshape(-1, *rest)
''',
    },
    "ex4-swiglu": {
        "SiLU on the up projection instead of the gate": SWIGLU + '''
    up = x @ up_weight.T
    return (up * torch.sigmoid(up) * (x @ gate_weight.T)) @ down_weight.T
''',
        "GLU: sigmoid of the gate, not SiLU": SWIGLU + '''
    return (torch.sigmoid(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T
''',
        "ReGLU: ReLU of the gate": SWIGLU + '''
    return (torch.relu(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T
''',
        "SiLU after the product": SWIGLU + '''
    z = (x @ gate_weight.T) * (x @ up_weight.T)
    return (z * torch.sigmoid(z)) @ down_weight.T
''',
        "calls F.silu, which the exercise forbids": SWIGLU + '''
    return (F.silu(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T
''',
        "adds the two projections instead of multiplying": SWIGLU + '''
    gate = x @ gate_weight.T
    return (gate * torch.sigmoid(gate) + x @ up_weight.T) @ down_weight.T
''',
    },
    "ex5-verdict": {
        "compares the means": VERDICT + '''
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    if mean_a < mean_b:
        return "better"
    if mean_b < mean_a:
        return "worse"
    return "within noise"
''',
        "compares the best runs": VERDICT + '''
    if min(a) < min(b):
        return "better"
    if min(b) < min(a):
        return "worse"
    return "within noise"
''',
        "a tie counts as better (<= instead of <)": VERDICT + '''
    if max(a) <= min(b):
        return "better"
    if max(b) <= min(a):
        return "worse"
    return "within noise"
''',
        "compares seed by seed, only as many as the shorter list": VERDICT + '''
    if all(x < y for x, y in zip(a, b)):
        return "better"
    if all(y < x for x, y in zip(a, b)):
        return "worse"
    return "within noise"
''',
        "higher is better": VERDICT + '''
    if min(a) > max(b):
        return "better"
    if min(b) > max(a):
        return "worse"
    return "within noise"
''',
    },
}
