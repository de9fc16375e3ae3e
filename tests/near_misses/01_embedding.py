"""Near-miss answers to chapter 01's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-one-hot": {
        "lets F.one_hot infer the length from the ids (max id + 1), not from the table": '''
def one_hot_lookup(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """ids [...] (integer), weight [V, d] -> [..., d], as one_hot(ids) @ weight."""
    return F.one_hot(ids).to(weight.dtype) @ weight
''',
        "multiplies by sqrt(d) as TokenEmbedding does (the exercise is the bare table)": '''
def one_hot_lookup(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """ids [...] (integer), weight [V, d] -> [..., d], as one_hot(ids) @ weight."""
    one_hot = F.one_hot(ids, num_classes=weight.size(0)).to(weight.dtype)
    return one_hot @ weight * math.sqrt(weight.size(1))
''',
        "flattens the ids and never restores their shape": '''
def one_hot_lookup(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """ids [...] (integer), weight [V, d] -> [..., d], as one_hot(ids) @ weight."""
    return F.one_hot(ids.reshape(-1), num_classes=weight.size(0)).to(weight.dtype) @ weight
''',
        "keeps the one-hot vectors as integers (int64 @ float32)": '''
def one_hot_lookup(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """ids [...] (integer), weight [V, d] -> [..., d], as one_hot(ids) @ weight."""
    return F.one_hot(ids, num_classes=weight.size(0)) @ weight
''',
        "indexes the table, which the exercise forbids": '''
def one_hot_lookup(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """ids [...] (integer), weight [V, d] -> [..., d], as one_hot(ids) @ weight."""
    return weight[ids]
''',
        "F.embedding, which the exercise forbids": '''
def one_hot_lookup(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """ids [...] (integer), weight [V, d] -> [..., d], as one_hot(ids) @ weight."""
    return F.embedding(ids, weight)
''',
        "one-hot vectors in float32 whatever the table (fails on float64)": '''
def one_hot_lookup(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """ids [...] (integer), weight [V, d] -> [..., d], as one_hot(ids) @ weight."""
    return F.one_hot(ids, num_classes=weight.size(0)).float() @ weight
''',
    },
    "ex2-renumber": {
        "gathers with weight[perm] (the inverse renumbering)": '''
def renumber(weight: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """weight [V, d], perm [V] (old id -> new id) -> new_weight [V, d]."""
    return weight[perm]
''',
        "returns the table unchanged ('ids are labels, so nothing moves')": '''
def renumber(weight: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """weight [V, d], perm [V] (old id -> new id) -> new_weight [V, d]."""
    return weight
''',
        "scatters into the caller's table in place and returns it": '''
def renumber(weight: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """weight [V, d], perm [V] (old id -> new id) -> new_weight [V, d]."""
    weight[perm] = weight.clone()
    return weight
''',
    },
    "ex3-init": {
        "uses 1/d as the standard deviation (it is the variance)": '''
def init_scaled_(embedding: nn.Embedding) -> nn.Embedding:
    """Fill embedding.weight [V, d] from N(0, 1/d) in place, zero the padding row; return it."""
    d = embedding.embedding_dim
    with torch.no_grad():
        embedding.weight.normal_(0.0, 1 / d)
        if embedding.padding_idx is not None:
            embedding.weight[embedding.padding_idx].zero_()
    return embedding
''',
        "forgets to zero the padding row": '''
def init_scaled_(embedding: nn.Embedding) -> nn.Embedding:
    """Fill embedding.weight [V, d] from N(0, 1/d) in place, zero the padding row; return it."""
    nn.init.normal_(embedding.weight, 0.0, embedding.embedding_dim ** -0.5)
    return embedding
''',
        "replaces the weight by a new Parameter instead of filling it in place": '''
def init_scaled_(embedding: nn.Embedding) -> nn.Embedding:
    """Fill embedding.weight [V, d] from N(0, 1/d) in place, zero the padding row; return it."""
    V, d = embedding.weight.shape
    weight = torch.randn(V, d) * d ** -0.5
    if embedding.padding_idx is not None:
        weight[embedding.padding_idx] = 0
    embedding.weight = nn.Parameter(weight)
    return embedding
''',
        "zeroes weight[padding_idx] without testing for None (weight[None] is the whole table)": '''
def init_scaled_(embedding: nn.Embedding) -> nn.Embedding:
    """Fill embedding.weight [V, d] from N(0, 1/d) in place, zero the padding row; return it."""
    with torch.no_grad():
        embedding.weight.normal_(0.0, embedding.embedding_dim ** -0.5)
        embedding.weight[embedding.padding_idx] = 0
    return embedding
''',
    },
    "ex4-sparse-grad": {
        "builds the TokenEmbedding without padding_idx, so <pad> is trained": '''
def rows_updated(vocab_size: int, d_model: int, ids: torch.Tensor, padding_idx: int) -> list[int]:
    """ids [B, T] -> sorted row indices of the table that receive a non-zero gradient."""
    module = TokenEmbedding(vocab_size, d_model)
    module(ids).sum().backward()
    grad = module.embedding.weight.grad  # [vocab_size, d_model]
    return grad.abs().sum(dim=1).nonzero().flatten().tolist()
''',
        "takes nonzero() of the whole gradient: each row once per non-zero entry": '''
def rows_updated(vocab_size: int, d_model: int, ids: torch.Tensor, padding_idx: int) -> list[int]:
    """ids [B, T] -> sorted row indices of the table that receive a non-zero gradient."""
    module = TokenEmbedding(vocab_size, d_model, padding_idx=padding_idx)
    module(ids).sum().backward()
    return module.embedding.weight.grad.nonzero()[:, 0].tolist()
''',
        "returns a tensor of indices, not a list": '''
def rows_updated(vocab_size: int, d_model: int, ids: torch.Tensor, padding_idx: int) -> list[int]:
    """ids [B, T] -> sorted row indices of the table that receive a non-zero gradient."""
    module = TokenEmbedding(vocab_size, d_model, padding_idx=padding_idx)
    module(ids).sum().backward()
    return module.embedding.weight.grad.abs().sum(dim=1).nonzero().flatten()
''',
        "hard-codes <pad> = 0 instead of using the padding_idx argument": '''
def rows_updated(vocab_size: int, d_model: int, ids: torch.Tensor, padding_idx: int) -> list[int]:
    """ids [B, T] -> sorted row indices of the table that receive a non-zero gradient."""
    module = TokenEmbedding(vocab_size, d_model, padding_idx=0)
    module(ids).sum().backward()
    grad = module.embedding.weight.grad  # [vocab_size, d_model]
    return grad.abs().sum(dim=1).nonzero().flatten().tolist()
''',
    },
    "ex5-xavier": {
        "forgets the sqrt(d_model) scale": '''
position_norm = math.sqrt(64 / 2)
xavier_norms = {}
for _v in (100, 1_000, 10_000, 100_000):
    _table = nn.init.xavier_uniform_(torch.empty(_v, 64))
    xavier_norms[_v] = _table.norm(dim=1).mean().item()
''',
        "the position's norm as sqrt(d_model)": '''
position_norm = math.sqrt(64)
xavier_norms = {}
for _v in (100, 1_000, 10_000, 100_000):
    _table = nn.init.xavier_uniform_(torch.empty(_v, 64))
    xavier_norms[_v] = (_table * math.sqrt(64)).norm(dim=1).mean().item()
''',
        "the norm of the whole table instead of the mean norm of a row": '''
position_norm = math.sqrt(64 / 2)
xavier_norms = {}
for _v in (100, 1_000, 10_000, 100_000):
    _table = nn.init.xavier_uniform_(torch.empty(_v, 64))
    xavier_norms[_v] = (_table * math.sqrt(64)).norm().item()
''',
        "nn.Embedding's own init instead of Xavier": '''
position_norm = math.sqrt(64 / 2)
xavier_norms = {}
for _v in (100, 1_000, 10_000, 100_000):
    _table = nn.Embedding(_v, 64).weight.detach()
    xavier_norms[_v] = (_table * math.sqrt(64)).norm(dim=1).mean().item()
''',
    },
}
