"""Near-miss answers to chapter 04's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-causal": {
        "the window counted one too wide (i - j <= window)": '''
def sliding_window_mask(size, window):
    """[size, size] bool: True where key j may be read by query i (i - window < j <= i)."""
    i = torch.arange(size)[:, None]
    j = torch.arange(size)[None, :]
    return (j <= i) & (i - j <= window)
''',
        "a symmetric band: the future inside the window is visible too": '''
def sliding_window_mask(size, window):
    """[size, size] bool: True where key j may be read by query i (i - window < j <= i)."""
    i = torch.arange(size)[:, None]
    j = torch.arange(size)[None, :]
    return (i - j).abs() < window
''',
        "uses < instead of <= (the query cannot read itself)": '''
def sliding_window_mask(size, window):
    """[size, size] bool: True where key j may be read by query i (i - window < j <= i)."""
    i = torch.arange(size)[:, None]
    j = torch.arange(size)[None, :]
    return (j < i) & (i - j < window)
''',
        "query and key axes swapped (the window looks forward)": '''
def sliding_window_mask(size, window):
    """[size, size] bool: True where key j may be read by query i (i - window < j <= i)."""
    i = torch.arange(size)[None, :]
    j = torch.arange(size)[:, None]
    return (j <= i) & (i - j < window)
''',
        "ignores the window: the plain causal mask": '''
def sliding_window_mask(size, window):
    """[size, size] bool: True where key j may be read by query i (i - window < j <= i)."""
    return causal_mask(size)[0, 0]
''',
        "returns a 0/1 float mask instead of a bool one": '''
def sliding_window_mask(size, window):
    """[size, size] bool: True where key j may be read by query i (i - window < j <= i)."""
    i = torch.arange(size)[:, None]
    j = torch.arange(size)[None, :]
    return ((j <= i) & (i - j < window)).float()
''',
        "triu with the wrong diagonal offset (window + 1 keys)": '''
def sliding_window_mask(size, window):
    """[size, size] bool: True where key j may be read by query i (i - window < j <= i)."""
    ones = torch.ones(size, size, dtype=torch.bool)
    return ones.tril() & ones.triu(-window)
''',
    },
    "ex2-packed": {
        "same segment only: a token reads the rest of its sentence, its future included": '''
def packed_mask(segments):
    """segments [B, T] -> bool [B, 1, T, T]: True where key j <= query i, in the same segment."""
    return (segments[:, :, None] == segments[:, None, :])[:, None]
''',
        "the causal mask only: each sentence reads the ones packed before it": '''
def packed_mask(segments):
    """segments [B, T] -> bool [B, 1, T, T]: True where key j <= query i, in the same segment."""
    b, t = segments.shape
    return causal_mask(t).expand(b, 1, t, t)
''',
        "the causal part turned round (key j >= query i): the future, not the past": '''
def packed_mask(segments):
    """segments [B, T] -> bool [B, 1, T, T]: True where key j <= query i, in the same segment."""
    t = segments.size(1)
    same = segments[:, :, None] == segments[:, None, :]
    return (same & torch.ones(t, t, dtype=torch.bool).triu())[:, None]
''',
        "returns [B, T, T], without the heads axis": '''
def packed_mask(segments):
    """segments [B, T] -> bool [B, 1, T, T]: True where key j <= query i, in the same segment."""
    same = segments[:, :, None] == segments[:, None, :]
    return same & causal_mask(segments.size(1))[0]
''',
        "every row split as the first row is (segments[0])": '''
def packed_mask(segments):
    """segments [B, T] -> bool [B, 1, T, T]: True where key j <= query i, in the same segment."""
    b, t = segments.shape
    same = segments[0][:, None] == segments[0][None, :]
    return (same & causal_mask(t)[0, 0]).expand(b, 1, t, t)
''',
        "sentence lengths from torch.unique, which sorts the ids: right only for ids 0, 1, 2 in order": '''
def packed_mask(segments):
    """segments [B, T] -> bool [B, 1, T, T]: True where key j <= query i, in the same segment."""
    rows = []
    for row in segments:
        _, lengths = torch.unique(row, return_counts=True)
        blocks = [torch.ones(n, n, dtype=torch.bool).tril() for n in lengths.tolist()]
        rows.append(torch.block_diag(*blocks))
    return torch.stack(rows)[:, None]
''',
        "sentence lengths from torch.bincount: ids taken as counts from 0": '''
def packed_mask(segments):
    """segments [B, T] -> bool [B, 1, T, T]: True where key j <= query i, in the same segment."""
    rows = []
    for row in segments:
        lengths = torch.bincount(row)
        blocks = [torch.ones(n, n, dtype=torch.bool).tril() for n in lengths.tolist()]
        rows.append(torch.block_diag(*blocks))
    return torch.stack(rows)[:, None]
''',
    },
    "ex3-additive": {
        "uses -inf (the exercise asks for a finite value)": '''
def additive_mask(mask, dtype):
    """bool mask -> float mask of dtype: 0 where True, finfo(dtype).min where False."""
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))
''',
        "uses the common -1e9 patch instead of the dtype's minimum": '''
def additive_mask(mask, dtype):
    """bool mask -> float mask of dtype: 0 where True, finfo(dtype).min where False."""
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, -1e9)
''',
        "inverted: the minimum where the mask is True (may attend)": '''
def additive_mask(mask, dtype):
    """bool mask -> float mask of dtype: 0 where True, finfo(dtype).min where False."""
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, torch.finfo(dtype).min)
''',
        "forgets dtype= in torch.zeros (always float32)": '''
def additive_mask(mask, dtype):
    """bool mask -> float mask of dtype: 0 where True, finfo(dtype).min where False."""
    return torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(dtype).min)
''',
        "assumes a mask of four axes [B, 1, Tq, Tk], one head": '''
def additive_mask(mask, dtype):
    """bool mask -> float mask of dtype: 0 where True, finfo(dtype).min where False."""
    b, _, tq, tk = mask.shape
    out = torch.zeros(b, 1, tq, tk, dtype=dtype)
    return out.masked_fill(~mask, torch.finfo(dtype).min)
''',
    },
    "ex4-leak": {
        "stops one t early: range(1, T - 1) never tries t = T-1": '''
def future_leak(attend, x):
    """Largest change of attend(x)[:, :t] when x[:, t:] is scrambled, over t = 1..T-1."""
    T = x.size(1)
    base = attend(x)
    worst = 0.0
    for t in range(1, T - 1):
        x2 = x.clone()
        x2[:, t:] = torch.randn_like(x2[:, t:])
        worst = max(worst, (attend(x2)[:, :t] - base[:, :t]).abs().max().item())
    return worst
''',
        "tries only t = 1 (scrambles everything after the first token once)": '''
def future_leak(attend, x):
    """Largest change of attend(x)[:, :t] when x[:, t:] is scrambled, over t = 1..T-1."""
    x2 = x.clone()
    x2[:, 1:] = torch.randn_like(x2[:, 1:])
    return (attend(x2)[:, :1] - attend(x)[:, :1]).abs().max().item()
''',
        "compares output[:, :t+1], the scrambled position itself included": '''
def future_leak(attend, x):
    """Largest change of attend(x)[:, :t] when x[:, t:] is scrambled, over t = 1..T-1."""
    T = x.size(1)
    base = attend(x)
    worst = 0.0
    for t in range(1, T):
        x2 = x.clone()
        x2[:, t:] = torch.randn_like(x2[:, t:])
        worst = max(worst, (attend(x2)[:, :t + 1] - base[:, :t + 1]).abs().max().item())
    return worst
''',
        "scrambles the caller's x in place (no clone)": '''
def future_leak(attend, x):
    """Largest change of attend(x)[:, :t] when x[:, t:] is scrambled, over t = 1..T-1."""
    T = x.size(1)
    base = attend(x)
    worst = 0.0
    for t in range(1, T):
        x[:, t:] = torch.randn_like(x[:, t:])
        worst = max(worst, (attend(x)[:, :t] - base[:, :t]).abs().max().item())
    return worst
''',
    },
    "ex5-empty-rows": {
        "the function with the bug, unchanged": '''
def masked_softmax(scores, mask):
    """scores [..., Tq, Tk], bool mask (broadcasts) -> weights, rows of zeros where nothing is seen."""
    return masked_softmax_with_a_bug(scores, mask)
''',
        "nan_to_num after the softmax: right weights, NaN gradient": '''
def masked_softmax(scores, mask):
    """scores [..., Tq, Tk], bool mask (broadcasts) -> weights, rows of zeros where nothing is seen."""
    return torch.nan_to_num(masked_softmax_with_a_bug(scores, mask))
''',
        "where() zeroes the empty rows after the softmax: NaN gradient": '''
def masked_softmax(scores, mask):
    """scores [..., Tq, Tk], bool mask (broadcasts) -> weights, rows of zeros where nothing is seen."""
    weights = masked_softmax_with_a_bug(scores, mask)
    return torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros_like(weights))
''',
        "-1e9 instead of -inf: finite, but an empty row becomes uniform, not zeros": '''
def masked_softmax(scores, mask):
    """scores [..., Tq, Tk], bool mask (broadcasts) -> weights, rows of zeros where nothing is seen."""
    return scores.masked_fill(~mask, -1e9).softmax(dim=-1)
''',
    },
}
