"""Near-miss answers to chapter 01's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-nearest": {
        "the largest dot product x . row, as the tied output layer scores tokens": '''
def nearest_ids(x: torch.Tensor, embed: TokenEmbedding) -> torch.Tensor:
    """x [..., d_model] -> ids [...] (int64): the token whose looked-up vector is nearest."""
    vectors = embed.embedding.weight.detach() * embed.scale  # [V, d_model]
    return (x @ vectors.T).argmax(dim=-1)
''',
        "forgets the scale: the nearest row of the table, not of what embed returns": '''
def nearest_ids(x: torch.Tensor, embed: TokenEmbedding) -> torch.Tensor:
    """x [..., d_model] -> ids [...] (int64): the token whose looked-up vector is nearest."""
    rows = embed.embedding.weight.detach()  # [V, d_model]
    return (x.unsqueeze(-2) - rows).pow(2).sum(dim=-1).argmin(dim=-1)
''',
        "always multiplies by sqrt(d_model), whether embed scales or not": '''
def nearest_ids(x: torch.Tensor, embed: TokenEmbedding) -> torch.Tensor:
    """x [..., d_model] -> ids [...] (int64): the token whose looked-up vector is nearest."""
    vectors = embed.embedding.weight.detach() * math.sqrt(embed.d_model)  # [V, d_model]
    return (x.unsqueeze(-2) - vectors).pow(2).sum(dim=-1).argmin(dim=-1)
''',
        "looks for the row equal to the vector: nothing matches once it has moved": '''
def nearest_ids(x: torch.Tensor, embed: TokenEmbedding) -> torch.Tensor:
    """x [..., d_model] -> ids [...] (int64): the token whose looked-up vector is nearest."""
    vectors = embed.embedding.weight.detach() * embed.scale  # [V, d_model]
    return (x.unsqueeze(-2) == vectors).all(dim=-1).long().argmax(dim=-1)
''',
        "torch.cdist on the vectors as a batch of rows: fails on a single vector": '''
def nearest_ids(x: torch.Tensor, embed: TokenEmbedding) -> torch.Tensor:
    """x [..., d_model] -> ids [...] (int64): the token whose looked-up vector is nearest."""
    vectors = embed.embedding.weight.detach() * embed.scale  # [V, d_model]
    return torch.cdist(x, vectors).argmin(dim=-1)
''',
        "flattens the vectors to [N, d_model] and returns N ids in a row": '''
def nearest_ids(x: torch.Tensor, embed: TokenEmbedding) -> torch.Tensor:
    """x [..., d_model] -> ids [...] (int64): the token whose looked-up vector is nearest."""
    vectors = embed.embedding.weight.detach() * embed.scale  # [V, d_model]
    flat = x.reshape(-1, x.size(-1))  # [N, d_model]
    return torch.cdist(flat, vectors).argmin(dim=-1)
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
    "ex3-grow": {
        "draws the new rows from N(0, 1/d_model) whatever embed's init_std": '''
def grow(embed: TokenEmbedding, n_new: int) -> TokenEmbedding:
    """A new TokenEmbedding of embed.vocab_size + n_new tokens: old rows kept, new rows drawn."""
    bigger = TokenEmbedding(embed.vocab_size + n_new, embed.d_model,
                            padding_idx=embed.embedding.padding_idx, scale=embed.scale != 1.0)
    bigger = bigger.to(embed.embedding.weight.dtype)
    with torch.no_grad():
        bigger.embedding.weight.normal_(0.0, embed.d_model ** -0.5)
        bigger.embedding.weight[:embed.vocab_size] = embed.embedding.weight
    return bigger
''',
        "draws the new rows with the old rows' measured std, not init_std": '''
def grow(embed: TokenEmbedding, n_new: int) -> TokenEmbedding:
    """A new TokenEmbedding of embed.vocab_size + n_new tokens: old rows kept, new rows drawn."""
    old = embed.embedding.weight.detach()
    bigger = TokenEmbedding(embed.vocab_size + n_new, embed.d_model,
                            padding_idx=embed.embedding.padding_idx,
                            scale=embed.scale != 1.0, init_std=old.std().item())
    bigger = bigger.to(old.dtype)
    with torch.no_grad():
        bigger.embedding.weight[:embed.vocab_size] = old
    return bigger
''',
        "appends rows of zeros": '''
def grow(embed: TokenEmbedding, n_new: int) -> TokenEmbedding:
    """A new TokenEmbedding of embed.vocab_size + n_new tokens: old rows kept, new rows drawn."""
    bigger = TokenEmbedding(embed.vocab_size + n_new, embed.d_model,
                            padding_idx=embed.embedding.padding_idx,
                            scale=embed.scale != 1.0, init_std=embed.init_std)
    bigger = bigger.to(embed.embedding.weight.dtype)
    with torch.no_grad():
        bigger.embedding.weight.zero_()
        bigger.embedding.weight[:embed.vocab_size] = embed.embedding.weight
    return bigger
''',
        "a fresh table of the new size: the old rows are drawn again, not copied": '''
def grow(embed: TokenEmbedding, n_new: int) -> TokenEmbedding:
    """A new TokenEmbedding of embed.vocab_size + n_new tokens: old rows kept, new rows drawn."""
    bigger = TokenEmbedding(embed.vocab_size + n_new, embed.d_model,
                            padding_idx=embed.embedding.padding_idx,
                            scale=embed.scale != 1.0, init_std=embed.init_std)
    return bigger.to(embed.embedding.weight.dtype)
''',
        "swaps a longer table into embed itself: vocab_size still counts the old tokens": '''
def grow(embed: TokenEmbedding, n_new: int) -> TokenEmbedding:
    """A new TokenEmbedding of embed.vocab_size + n_new tokens: old rows kept, new rows drawn."""
    old = embed.embedding.weight.detach()
    new_rows = torch.randn(n_new, embed.d_model, dtype=old.dtype) * embed.init_std
    embed.embedding = nn.Embedding.from_pretrained(torch.cat([old, new_rows]), freeze=False,
                                                   padding_idx=embed.embedding.padding_idx)
    return embed
''',
        "forgets the padding index: the <pad> row is copied as zeros, then trained": '''
def grow(embed: TokenEmbedding, n_new: int) -> TokenEmbedding:
    """A new TokenEmbedding of embed.vocab_size + n_new tokens: old rows kept, new rows drawn."""
    bigger = TokenEmbedding(embed.vocab_size + n_new, embed.d_model,
                            scale=embed.scale != 1.0, init_std=embed.init_std)
    bigger = bigger.to(embed.embedding.weight.dtype)
    with torch.no_grad():
        bigger.embedding.weight[:embed.vocab_size] = embed.embedding.weight
    return bigger
''',
        "always scale=True, the default: a table without the scale comes back scaled": '''
def grow(embed: TokenEmbedding, n_new: int) -> TokenEmbedding:
    """A new TokenEmbedding of embed.vocab_size + n_new tokens: old rows kept, new rows drawn."""
    bigger = TokenEmbedding(embed.vocab_size + n_new, embed.d_model,
                            padding_idx=embed.embedding.padding_idx, init_std=embed.init_std)
    bigger = bigger.to(embed.embedding.weight.dtype)
    with torch.no_grad():
        bigger.embedding.weight[:embed.vocab_size] = embed.embedding.weight
    return bigger
''',
        "keeps the new table in float32 whatever embed's dtype": '''
def grow(embed: TokenEmbedding, n_new: int) -> TokenEmbedding:
    """A new TokenEmbedding of embed.vocab_size + n_new tokens: old rows kept, new rows drawn."""
    bigger = TokenEmbedding(embed.vocab_size + n_new, embed.d_model,
                            padding_idx=embed.embedding.padding_idx,
                            scale=embed.scale != 1.0, init_std=embed.init_std)
    with torch.no_grad():
        bigger.embedding.weight[:embed.vocab_size] = embed.embedding.weight
    return bigger
''',
    },
    "ex4-grad": {
        "assigns grad[ids] = grad_out: a repeated token keeps one position's gradient, not the sum": '''
def embedding_grad(ids: torch.Tensor, grad_out: torch.Tensor, vocab_size: int, scale: float,
                   padding_idx: int | None = None) -> torch.Tensor:
    """ids [...] (integer), grad_out [..., d] -> the gradient of the table [vocab_size, d]."""
    grad = torch.zeros(vocab_size, grad_out.size(-1), dtype=grad_out.dtype)
    grad[ids] = grad_out * scale
    if padding_idx is not None:
        grad[padding_idx] = 0.0
    return grad
''',
        "forgets the scale": '''
def embedding_grad(ids: torch.Tensor, grad_out: torch.Tensor, vocab_size: int, scale: float,
                   padding_idx: int | None = None) -> torch.Tensor:
    """ids [...] (integer), grad_out [..., d] -> the gradient of the table [vocab_size, d]."""
    d = grad_out.size(-1)
    grad = torch.zeros(vocab_size, d, dtype=grad_out.dtype)
    grad.index_add_(0, ids.reshape(-1), grad_out.reshape(-1, d))
    if padding_idx is not None:
        grad[padding_idx] = 0.0
    return grad
''',
        "forgets the padding row": '''
def embedding_grad(ids: torch.Tensor, grad_out: torch.Tensor, vocab_size: int, scale: float,
                   padding_idx: int | None = None) -> torch.Tensor:
    """ids [...] (integer), grad_out [..., d] -> the gradient of the table [vocab_size, d]."""
    one_hot = F.one_hot(ids.reshape(-1), vocab_size).to(grad_out.dtype)  # [N, V]
    return one_hot.T @ grad_out.reshape(-1, grad_out.size(-1)) * scale
''',
        "zeroes grad[padding_idx] without testing for None (grad[None] is the whole table)": '''
def embedding_grad(ids: torch.Tensor, grad_out: torch.Tensor, vocab_size: int, scale: float,
                   padding_idx: int | None = None) -> torch.Tensor:
    """ids [...] (integer), grad_out [..., d] -> the gradient of the table [vocab_size, d]."""
    one_hot = F.one_hot(ids.reshape(-1), vocab_size).to(grad_out.dtype)  # [N, V]
    grad = one_hot.T @ grad_out.reshape(-1, grad_out.size(-1)) * scale
    grad[padding_idx] = 0.0
    return grad
''',
        "loops over ids.shape[0] and ids.shape[1]: ids [B, T] only": '''
def embedding_grad(ids: torch.Tensor, grad_out: torch.Tensor, vocab_size: int, scale: float,
                   padding_idx: int | None = None) -> torch.Tensor:
    """ids [...] (integer), grad_out [..., d] -> the gradient of the table [vocab_size, d]."""
    grad = torch.zeros(vocab_size, grad_out.size(-1), dtype=grad_out.dtype)
    for b in range(ids.shape[0]):
        for t in range(ids.shape[1]):
            grad[ids[b, t]] += scale * grad_out[b, t]
    if padding_idx is not None:
        grad[padding_idx] = 0.0
    return grad
''',
        "a float32 gradient whatever grad_out's dtype": '''
def embedding_grad(ids: torch.Tensor, grad_out: torch.Tensor, vocab_size: int, scale: float,
                   padding_idx: int | None = None) -> torch.Tensor:
    """ids [...] (integer), grad_out [..., d] -> the gradient of the table [vocab_size, d]."""
    d = grad_out.size(-1)
    one_hot = F.one_hot(ids.reshape(-1), vocab_size).float()  # [N, V]
    grad = one_hot.T @ grad_out.reshape(-1, d).float() * scale
    if padding_idx is not None:
        grad[padding_idx] = 0.0
    return grad
''',
        "autograd through section 2's one-hot product, which the exercise forbids": '''
def embedding_grad(ids: torch.Tensor, grad_out: torch.Tensor, vocab_size: int, scale: float,
                   padding_idx: int | None = None) -> torch.Tensor:
    """ids [...] (integer), grad_out [..., d] -> the gradient of the table [vocab_size, d]."""
    weight = torch.zeros(vocab_size, grad_out.size(-1), dtype=grad_out.dtype, requires_grad=True)
    (F.one_hot(ids, vocab_size).to(grad_out.dtype) @ weight * scale).backward(grad_out)
    grad = weight.grad
    if padding_idx is not None:
        grad[padding_idx] = 0.0
    return grad
''',
        "lets autograd do it (F.embedding and backward), which the exercise forbids": '''
def embedding_grad(ids: torch.Tensor, grad_out: torch.Tensor, vocab_size: int, scale: float,
                   padding_idx: int | None = None) -> torch.Tensor:
    """ids [...] (integer), grad_out [..., d] -> the gradient of the table [vocab_size, d]."""
    weight = torch.zeros(vocab_size, grad_out.size(-1), dtype=grad_out.dtype, requires_grad=True)
    (F.embedding(ids, weight, padding_idx=padding_idx) * scale).backward(grad_out)
    return weight.grad
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
