"""Near-miss answers to chapter 03's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-weights": {
        "forgets the division by sqrt(d_k)": '''
def attention_weights(q, k):
    """q [..., Tq, d_k], k [..., Tk, d_k] -> weights [..., Tq, Tk], rows summing to 1."""
    scores = q @ k.transpose(-2, -1)  # [..., Tq, Tk]
    scores = scores - scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores)
    return e / e.sum(dim=-1, keepdim=True)
''',
        "naive exp, no maximum subtracted (overflows on large scores)": '''
def attention_weights(q, k):
    """q [..., Tq, d_k], k [..., Tk, d_k] -> weights [..., Tq, Tk], rows summing to 1."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [..., Tq, Tk]
    e = torch.exp(scores)
    return e / e.sum(dim=-1, keepdim=True)
''',
        "subtracts the global maximum, not each row's (other rows underflow to 0/0)": '''
def attention_weights(q, k):
    """q [..., Tq, d_k], k [..., Tk, d_k] -> weights [..., Tq, Tk], rows summing to 1."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [..., Tq, Tk]
    e = torch.exp(scores - scores.max())
    return e / e.sum(dim=-1, keepdim=True)
''',
        "normalises over the queries (dim=-2) instead of the keys": '''
def attention_weights(q, k):
    """q [..., Tq, d_k], k [..., Tk, d_k] -> weights [..., Tq, Tk], rows summing to 1."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [..., Tq, Tk]
    scores = scores - scores.amax(dim=-2, keepdim=True)
    e = torch.exp(scores)
    return e / e.sum(dim=-2, keepdim=True)
''',
        "transposes with permute(0, 1, 3, 2): right on 4-D input only (issue 20)": '''
def attention_weights(q, k):
    """q [..., Tq, d_k], k [..., Tk, d_k] -> weights [..., Tq, Tk], rows summing to 1."""
    scores = q @ k.permute(0, 1, 3, 2) / math.sqrt(q.size(-1))  # [B, H, Tq, Tk]
    scores = scores - scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores)
    return e / e.sum(dim=-1, keepdim=True)
''',
        "calls torch.softmax, which the exercise forbids (issue 20)": '''
def attention_weights(q, k):
    """q [..., Tq, d_k], k [..., Tk, d_k] -> weights [..., Tq, Tk], rows summing to 1."""
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
''',
        "softmax through a saved reference, log_softmax(...).exp()": '''
_log_softmax = torch.nn.functional.log_softmax


def attention_weights(q, k):
    """q [..., Tq, d_k], k [..., Tk, d_k] -> weights [..., Tq, Tk], rows summing to 1."""
    return _log_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1).exp()
''',
        "divides by sqrt(8), the d_k of the visible test, not of q": '''
def attention_weights(q, k):
    """q [..., Tq, d_k], k [..., Tk, d_k] -> weights [..., Tq, Tk], rows summing to 1."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    scores = scores - scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores)
    return e / e.sum(dim=-1, keepdim=True)
''',
    },
    "ex2-sharpness": {
        "the two-key formula log(p / (1 - p)) / (best - second), for any number of keys": '''
def sharpness_for(scores, p):
    """scores [..., n], a target 1/n < p < 1 -> beta [...] >= 0 with max softmax(beta * s) = p."""
    top2 = scores.topk(2, dim=-1).values  # [..., 2]
    return math.log(p / (1 - p)) / (top2[..., 0] - top2[..., 1])
''',
        "searches only in [0, 100]: a best score that wins by a hair needs more": '''
def sharpness_for(scores, p):
    """scores [..., n], a target 1/n < p < 1 -> beta [...] >= 0 with max softmax(beta * s) = p."""
    low = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    high = torch.full_like(low, 100.0)
    for _ in range(100):
        middle = (low + high) / 2
        too_soft = torch.softmax(middle.unsqueeze(-1) * scores, dim=-1).amax(dim=-1) < p
        low, high = torch.where(too_soft, middle, low), torch.where(too_soft, high, middle)
    return (low + high) / 2
''',
        "stops after ten halvings of [0, 10]": '''
def sharpness_for(scores, p):
    """scores [..., n], a target 1/n < p < 1 -> beta [...] >= 0 with max softmax(beta * s) = p."""
    low = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    high = torch.full_like(low, 10.0)
    for _ in range(10):
        middle = (low + high) / 2
        too_soft = torch.softmax(middle.unsqueeze(-1) * scores, dim=-1).amax(dim=-1) < p
        low, high = torch.where(too_soft, middle, low), torch.where(too_soft, high, middle)
    return (low + high) / 2
''',
        "one sharpness for the whole batch, from the mean weight of the best keys": '''
def sharpness_for(scores, p):
    """scores [..., n], a target 1/n < p < 1 -> beta [...] >= 0 with max softmax(beta * s) = p."""
    def best_weight(beta):
        return torch.softmax(beta * scores, dim=-1).amax(dim=-1).mean().item()

    low, high = 0.0, 1.0
    while best_weight(high) < p:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if best_weight(middle) < p else (low, middle)
    return torch.full(scores.shape[:-1], (low + high) / 2)
''',
        "returns the temperature 1 / beta instead of the sharpness": '''
def sharpness_for(scores, p):
    """scores [..., n], a target 1/n < p < 1 -> beta [...] >= 0 with max softmax(beta * s) = p."""
    def best_weight(beta):
        return torch.softmax(beta.unsqueeze(-1) * scores, dim=-1).amax(dim=-1)

    low = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    high = torch.ones_like(low)
    while (best_weight(high) < p).any():
        high = torch.where(best_weight(high) < p, 2 * high, high)
    for _ in range(100):
        middle = (low + high) / 2
        too_soft = best_weight(middle) < p
        low, high = torch.where(too_soft, middle, low), torch.where(too_soft, high, middle)
    return 2 / (low + high)
''',
    },
    "ex3-raw": {
        "returns the pair (output, weights)": '''
def self_attention(x, w_q, w_k, w_v):
    """x [B, T, d_model], w_* [d_model, d_k] -> output [B, T, d_k]."""
    return scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
''',
        "uses x itself as the values (w_v forgotten)": '''
def self_attention(x, w_q, w_k, w_v):
    """x [B, T, d_model], w_* [d_model, d_k] -> output [B, T, d_k]."""
    out, _ = scaled_dot_product_attention(x @ w_q, x @ w_k, x)
    return out
''',
        "cheat: patches the notebook's SingleHeadSelfAttention to agree (issue 20)": '''
def self_attention(x, w_q, w_k, w_v):
    """x [B, T, d_model], w_* [d_model, d_k] -> output [B, T, d_k]."""
    return x @ w_v


SingleHeadSelfAttention.forward = lambda self, x, mask=None: (self.v_proj(x), None)
''',
        "cheat: reads the teacher's notebook from disk and runs its solution": '''
import json
import pathlib

import transformer

_book = pathlib.Path(transformer.__file__).resolve().parent.parent / "chapters"
for _cell in json.loads((_book / "03_attention.ipynb").read_text())["cells"]:
    if "def self_attention" in "".join(_cell["source"]):
        exec("".join(_cell["source"]))
''',
        "cheat: patches the package's class that the check compares with": '''
import transformer.attention


def self_attention(x, w_q, w_k, w_v):
    """x [B, T, d_model], w_* [d_model, d_k] -> output [B, T, d_k]."""
    return x @ w_v


transformer.attention.SingleHeadSelfAttention.forward = lambda self, x, mask=None: (self.v_proj(x), None)
''',
        "divides by sqrt(d_k) again, though the function already does": '''
def self_attention(x, w_q, w_k, w_v):
    """x [B, T, d_model], w_* [d_model, d_k] -> output [B, T, d_k]."""
    q = x @ w_q / math.sqrt(w_q.size(1))
    out, _ = scaled_dot_product_attention(q, x @ w_k, x @ w_v)
    return out
''',
        "swaps the roles of queries and keys": '''
def self_attention(x, w_q, w_k, w_v):
    """x [B, T, d_model], w_* [d_model, d_k] -> output [B, T, d_k]."""
    out, _ = scaled_dot_product_attention(x @ w_k, x @ w_q, x @ w_v)
    return out
''',
    },
    "ex4-entropy": {
        "no guard for 0 log 0 (NaN on one-hot rows)": '''
def attention_entropy(weights):
    """weights [..., Tq, Tk] -> entropy per row [..., Tq] (natural log)."""
    return -(weights * weights.log()).sum(dim=-1)
''',
        "log base 2 instead of the natural log": '''
def attention_entropy(weights):
    """weights [..., Tq, Tk] -> entropy per row [..., Tq] (natural log)."""
    return -(weights * weights.clamp_min(1e-30).log2()).sum(dim=-1)
''',
        "forgets the minus sign": '''
def attention_entropy(weights):
    """weights [..., Tq, Tk] -> entropy per row [..., Tq] (natural log)."""
    return (weights * weights.clamp_min(1e-30).log()).sum(dim=-1)
''',
        "nan_to_num of the naive formula: 0 for a row like [.5, .5, 0, 0] (issue 20)": '''
def attention_entropy(weights):
    """weights [..., Tq, Tk] -> entropy per row [..., Tq] (natural log)."""
    return torch.nan_to_num(-(weights * weights.log()).sum(-1))
''',
        "log(w + 1e-9): about 2e-8 off on one-hot rows, and wrong where w is tiny": '''
def attention_entropy(weights):
    """weights [..., Tq, Tk] -> entropy per row [..., Tq] (natural log)."""
    return -(weights * (weights + 1e-3).log()).sum(dim=-1)
''',
        "sums over the queries axis (dim=-2) instead of the keys": '''
def attention_entropy(weights):
    """weights [..., Tq, Tk] -> entropy per row [..., Tq] (natural log)."""
    return -(weights * weights.clamp_min(1e-30).log()).sum(dim=-2)
''',
    },
}
