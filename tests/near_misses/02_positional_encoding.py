"""Near-miss answers to chapter 02's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-rotation": {
        "the textbook rotation [[cos, -sin], [sin, cos]], which assumes (cos, sin) pairs": '''
def rotation_matrix(k: int, d_model: int) -> torch.Tensor:
    """R(k) [d_model, d_model] float64 with R(k) @ PE(pos) = PE(pos + k)."""
    w = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    c, s = torch.cos(w * k), torch.sin(w * k)
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    R[idx, idx], R[idx, idx + 1] = c, -s
    R[idx + 1, idx], R[idx + 1, idx + 1] = s, c
    return R
''',
        "frequencies 10000^(-i/d_model): the 2 of 2i/d_model forgotten": '''
def rotation_matrix(k: int, d_model: int) -> torch.Tensor:
    """R(k) [d_model, d_model] float64 with R(k) @ PE(pos) = PE(pos + k)."""
    i = torch.arange(d_model // 2, dtype=torch.float64)
    w = 10000.0 ** (-i / d_model)
    c, s = torch.cos(w * k), torch.sin(w * k)
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    R[idx, idx], R[idx, idx + 1] = c, s
    R[idx + 1, idx], R[idx + 1, idx + 1] = -s, c
    return R
''',
        "frequencies 10000^(-2i/d_model) with i already even (the 2 counted twice)": '''
def rotation_matrix(k: int, d_model: int) -> torch.Tensor:
    """R(k) [d_model, d_model] float64 with R(k) @ PE(pos) = PE(pos + k)."""
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    w = 10000.0 ** (-2 * i / d_model)
    c, s = torch.cos(w * k), torch.sin(w * k)
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    R[idx, idx], R[idx, idx + 1] = c, s
    R[idx + 1, idx], R[idx + 1, idx + 1] = -s, c
    return R
''',
        "puts block i at rows i, i+1 (overlapping blocks) instead of 2i, 2i+1": '''
def rotation_matrix(k: int, d_model: int) -> torch.Tensor:
    """R(k) [d_model, d_model] float64 with R(k) @ PE(pos) = PE(pos + k)."""
    w = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    c, s = torch.cos(w * k), torch.sin(w * k)
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(d_model // 2)
    R[idx, idx], R[idx, idx + 1] = c, s
    R[idx + 1, idx], R[idx + 1, idx + 1] = -s, c
    return R
''',
        "frequencies from d_model = 64, the size of the visible test": '''
def rotation_matrix(k: int, d_model: int) -> torch.Tensor:
    """R(k) [d_model, d_model] float64 with R(k) @ PE(pos) = PE(pos + k)."""
    w = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / 64))
    c, s = torch.cos(w * k), torch.sin(w * k)
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    R[idx, idx], R[idx, idx + 1] = c, s
    R[idx + 1, idx], R[idx + 1, idx + 1] = -s, c
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
    "ex4-offset-similarity": {
        "frequencies 10000^(-i/d_model): the 2 of 2i/d_model forgotten": '''
def offset_similarity(k: int, d_model: int) -> float:
    """PE(pos) . PE(pos + k) = sum_i cos(w_i k), for any pos."""
    i = torch.arange(d_model // 2, dtype=torch.float64)
    return torch.cos(10000.0 ** (-i / d_model) * k).sum().item()
''',
        "frequencies 10000^(-2i/d_model) with i already even (the 2 counted twice)": '''
def offset_similarity(k: int, d_model: int) -> float:
    """PE(pos) . PE(pos + k) = sum_i cos(w_i k), for any pos."""
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    return torch.cos(10000.0 ** (-2 * i / d_model) * k).sum().item()
''',
        "sums a cosine per dimension, d_model terms, instead of one per pair": '''
def offset_similarity(k: int, d_model: int) -> float:
    """PE(pos) . PE(pos + k) = sum_i cos(w_i k), for any pos."""
    j = torch.arange(d_model, dtype=torch.float64)
    return torch.cos(10000.0 ** (-j / d_model) * k).sum().item()
''',
        "frequencies from d_model = 256, the size of the visible test": '''
def offset_similarity(k: int, d_model: int) -> float:
    """PE(pos) . PE(pos + k) = sum_i cos(w_i k), for any pos."""
    w = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / 256))
    return torch.cos(w * k).sum().item()
''',
    },
}
