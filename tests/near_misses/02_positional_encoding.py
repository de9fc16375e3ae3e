"""Near-miss answers to chapter 02's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-half-split-rotation": {
        "section 5's rotation, the block-diagonal matrix of the paper's interleaved layout": '''
def half_split_rotation(k: int, d_model: int) -> torch.Tensor:
    """R'(k) [d_model, d_model] float64 with R'(k) @ PE'(pos) = PE'(pos + k), where PE'
    stores the sines of all pairs first, then their cosines."""
    return rotation(k, d_model)
''',
        "the textbook rotation's signs [[cos, -sin], [sin, cos]]: turns by -k": '''
def half_split_rotation(k: int, d_model: int) -> torch.Tensor:
    """R'(k) [d_model, d_model] float64 with R'(k) @ PE'(pos) = PE'(pos + k), where PE'
    stores the sines of all pairs first, then their cosines."""
    half = d_model // 2
    w = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    c, s = torch.cos(w * k), torch.sin(w * k)
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    i = torch.arange(half)
    R[i, i], R[i, i + half] = c, -s
    R[i + half, i], R[i + half, i + half] = s, c
    return R
''',
        "the frequencies of tensor2tensor and fairseq, log(10000) / (d_model/2 - 1) apart": '''
def half_split_rotation(k: int, d_model: int) -> torch.Tensor:
    """R'(k) [d_model, d_model] float64 with R'(k) @ PE'(pos) = PE'(pos + k), where PE'
    stores the sines of all pairs first, then their cosines."""
    half = d_model // 2
    w = torch.exp(torch.arange(half, dtype=torch.float64) * (-math.log(10000.0) / max(half - 1, 1)))
    c, s = torch.cos(w * k), torch.sin(w * k)
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    i = torch.arange(half)
    R[i, i], R[i, i + half] = c, s
    R[i + half, i], R[i + half, i + half] = -s, c
    return R
''',
        "the turn by |k|: the offset taken as a distance, wrong for negative offsets": '''
def half_split_rotation(k: int, d_model: int) -> torch.Tensor:
    """R'(k) [d_model, d_model] float64 with R'(k) @ PE'(pos) = PE'(pos + k), where PE'
    stores the sines of all pairs first, then their cosines."""
    half = d_model // 2
    w = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    c, s = torch.cos(w * abs(k)), torch.sin(w * abs(k))
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    i = torch.arange(half)
    R[i, i], R[i, i + half] = c, s
    R[i + half, i], R[i + half, i + half] = -s, c
    return R
''',
        "the second half starts at dimension 32, the visible test's d_model / 2": '''
def half_split_rotation(k: int, d_model: int) -> torch.Tensor:
    """R'(k) [d_model, d_model] float64 with R'(k) @ PE'(pos) = PE'(pos + k), where PE'
    stores the sines of all pairs first, then their cosines."""
    w = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    c, s = torch.cos(w * k), torch.sin(w * k)
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    i = torch.arange(d_model // 2)
    R[i, i], R[i, (i + 32) % d_model] = c, s
    R[(i + 32) % d_model, i], R[(i + 32) % d_model, (i + 32) % d_model] = -s, c
    return R
''',
    },
    "ex2-learned": {
        "numbers positions from 1": '''
class LearnedPositionalEmbedding(nn.Module):
    """x [batch, seq, d_model] -> x + table[0 .. seq-1], a learned table [max_len, d_model]."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(1, x.size(1) + 1, device=x.device)  # [seq]
        return x + self.table(positions)
''',
        "takes the positions along the batch axis, x.size(0)": '''
class LearnedPositionalEmbedding(nn.Module):
    """x [batch, seq, d_model] -> x + table[0 .. seq-1], a learned table [max_len, d_model]."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.size(0), device=x.device)
        return x + self.table(positions)
''',
        "swaps the arguments: nn.Embedding(d_model, max_len)": '''
class LearnedPositionalEmbedding(nn.Module):
    """x [batch, seq, d_model] -> x + table[0 .. seq-1], a learned table [max_len, d_model]."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(d_model, max_len)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.size(1), device=x.device)
        return x + self.table(positions)
''',
        "freezes the table (from_pretrained), so nothing learns it": '''
class LearnedPositionalEmbedding(nn.Module):
    """x [batch, seq, d_model] -> x + table[0 .. seq-1], a learned table [max_len, d_model]."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding.from_pretrained(torch.randn(max_len, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.size(1), device=x.device)
        return x + self.table(positions)
''',
        "positions 0..3, the length of the visible test's sentences": '''
class LearnedPositionalEmbedding(nn.Module):
    """x [batch, seq, d_model] -> x + table[0 .. seq-1], a learned table [max_len, d_model]."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table(torch.arange(4))
''',
    },
    "ex3-read-positions": {
        "takes the argmax over the table's axis (dim=0): one answer per position": '''
def read_positions(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x [n, d], table [max_len, d] -> [n] positions (int64) of best-matching rows."""
    return (x @ table.T).argmax(dim=0)
''',
        "largest Euclidean distance instead of largest dot product": '''
def read_positions(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x [n, d], table [max_len, d] -> [n] positions (int64) of best-matching rows."""
    return torch.cdist(x, table).argmax(dim=-1)
''',
        "returns the best scores instead of where they are": '''
def read_positions(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x [n, d], table [max_len, d] -> [n] positions (int64) of best-matching rows."""
    return (x @ table.T).max(dim=-1).values
''',
    },
    "ex4-read-offset": {
        "reads the fastest pair (it turns k radians): right only up to whole turns": '''
def offset_between(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a = PE(p), b = PE(p + k), each [n, d_model] -> the offsets k [n] (int64)."""
    a, b = a.double(), b.double()
    turn = torch.atan2(b[:, 0], b[:, 1]) - torch.atan2(a[:, 0], a[:, 1])
    turn = torch.remainder(turn + math.pi, 2 * math.pi) - math.pi
    return torch.round(turn).long()
''',
        "does not bring the difference of angles into [-pi, pi): wrong where the slow hand passes half a turn": '''
def offset_between(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a = PE(p), b = PE(p + k), each [n, d_model] -> the offsets k [n] (int64)."""
    d_model = a.size(-1)
    w = 10000.0 ** (-(d_model - 2) / d_model)
    a, b = a.double(), b.double()
    turn = torch.atan2(b[:, -2], b[:, -1]) - torch.atan2(a[:, -2], a[:, -1])
    return torch.round(turn / w).long()
''',
        "reads both positions from a table of 5000 (exercise 3's argmax) and subtracts: wrong past the table": '''
def offset_between(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a = PE(p), b = PE(p + k), each [n, d_model] -> the offsets k [n] (int64)."""
    table = sinusoidal_encoding(5000, a.size(-1))
    return (b @ table.T).argmax(dim=-1) - (a @ table.T).argmax(dim=-1)
''',
        "the angle as atan2(cos, sin), though the table stores (sin, cos): the offset comes out negated": '''
def offset_between(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a = PE(p), b = PE(p + k), each [n, d_model] -> the offsets k [n] (int64)."""
    d_model = a.size(-1)
    w = 10000.0 ** (-(d_model - 2) / d_model)
    a, b = a.double(), b.double()
    turn = torch.atan2(b[:, -1], b[:, -2]) - torch.atan2(a[:, -1], a[:, -2])
    turn = torch.remainder(turn + math.pi, 2 * math.pi) - math.pi
    return torch.round(turn / w).long()
''',
        "truncates with .long() instead of rounding: 4.9997 becomes 4": '''
def offset_between(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a = PE(p), b = PE(p + k), each [n, d_model] -> the offsets k [n] (int64)."""
    d_model = a.size(-1)
    w = 10000.0 ** (-(d_model - 2) / d_model)
    a, b = a.double(), b.double()
    turn = torch.atan2(b[:, -2], b[:, -1]) - torch.atan2(a[:, -2], a[:, -1])
    turn = torch.remainder(turn + math.pi, 2 * math.pi) - math.pi
    return (turn / w).long()
''',
        "returns the estimate as floats, not rounded to integers": '''
def offset_between(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a = PE(p), b = PE(p + k), each [n, d_model] -> the offsets k [n] (int64)."""
    d_model = a.size(-1)
    w = 10000.0 ** (-(d_model - 2) / d_model)
    a, b = a.double(), b.double()
    turn = torch.atan2(b[:, -2], b[:, -1]) - torch.atan2(a[:, -2], a[:, -1])
    turn = torch.remainder(turn + math.pi, 2 * math.pi) - math.pi
    return turn / w
''',
    },
}
