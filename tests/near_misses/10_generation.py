"""Near-miss answers to chapter 10's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-min-p": {
        "an absolute bar: p < min_p, not min_p times the largest p": '''
def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """[..., vocab] -> [..., vocab]: -inf where p < min_p * (the row's largest p), logits elsewhere."""
    probs = logits.softmax(dim=-1)
    return logits.masked_fill(probs < min_p, float("-inf"))
''',
        "the bar on the logits: logit < min_p times the largest logit": '''
def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """[..., vocab] -> [..., vocab]: -inf where p < min_p * (the row's largest p), logits elsewhere."""
    return logits.masked_fill(logits < min_p * logits.amax(dim=-1, keepdim=True), float("-inf"))
''',
        "one bar for the whole tensor: the largest p of all rows": '''
def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """[..., vocab] -> [..., vocab]: -inf where p < min_p * (the row's largest p), logits elsewhere."""
    probs = logits.softmax(dim=-1)
    return logits.masked_fill(probs < min_p * probs.max(), float("-inf"))
''',
        "<= instead of <: the most likely token goes too when min_p is 1": '''
def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """[..., vocab] -> [..., vocab]: -inf where p < min_p * (the row's largest p), logits elsewhere."""
    probs = logits.softmax(dim=-1)
    bar = min_p * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(probs <= bar, float("-inf"))
''',
        "softmax along the first axis, which is the vocabulary only for one row": '''
def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """[..., vocab] -> [..., vocab]: -inf where p < min_p * (the row's largest p), logits elsewhere."""
    probs = logits.softmax(dim=0)
    bar = min_p * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(probs < bar, float("-inf"))
''',
        "masks in place (masked_fill_): the caller's logits change": '''
def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """[..., vocab] -> [..., vocab]: -inf where p < min_p * (the row's largest p), logits elsewhere."""
    probs = logits.softmax(dim=-1)
    bar = min_p * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill_(probs < bar, float("-inf"))
''',
        "returns the kept probabilities instead of the logits": '''
def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """[..., vocab] -> [..., vocab]: -inf where p < min_p * (the row's largest p), logits elsewhere."""
    probs = logits.softmax(dim=-1)
    bar = min_p * probs.amax(dim=-1, keepdim=True)
    return probs.masked_fill(probs < bar, float("-inf"))
''',
        "computes in float32 whatever the dtype of the logits": '''
def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """[..., vocab] -> [..., vocab]: -inf where p < min_p * (the row's largest p), logits elsewhere."""
    logits = logits.float()
    probs = logits.softmax(dim=-1)
    bar = min_p * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(probs < bar, float("-inf"))
''',
    },
    "ex2-repetition": {
        "divides every generated token's logit, whatever its sign (a negative one goes up)": '''
def repetition_penalty(logits: torch.Tensor, generated: torch.Tensor, penalty: float) -> torch.Tensor:
    """logits [B, V], generated [B, t] ids -> penalised logits [B, V]."""
    seen = torch.zeros_like(logits, dtype=torch.bool).scatter(1, generated, True)
    return torch.where(seen, logits / penalty, logits)
''',
        "penalises once per occurrence (penalty ** count) instead of once per token": '''
def repetition_penalty(logits: torch.Tensor, generated: torch.Tensor, penalty: float) -> torch.Tensor:
    """logits [B, V], generated [B, t] ids -> penalised logits [B, V]."""
    counts = torch.zeros_like(logits).scatter_add(1, generated, torch.ones_like(generated, dtype=logits.dtype))
    factor = penalty ** counts
    return torch.where(logits > 0, logits / factor, logits * factor)
''',
        "marks the first t positions of the vocabulary instead of the generated ids": '''
def repetition_penalty(logits: torch.Tensor, generated: torch.Tensor, penalty: float) -> torch.Tensor:
    """logits [B, V], generated [B, t] ids -> penalised logits [B, V]."""
    seen = torch.zeros_like(logits, dtype=torch.bool)
    seen[:, : generated.size(1)] = True
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)
''',
        "changes the input logits in place": '''
def repetition_penalty(logits: torch.Tensor, generated: torch.Tensor, penalty: float) -> torch.Tensor:
    """logits [B, V], generated [B, t] ids -> penalised logits [B, V]."""
    for b in range(logits.size(0)):
        for token in set(generated[b].tolist()):
            if logits[b, token] > 0:
                logits[b, token] /= penalty
            else:
                logits[b, token] *= penalty
    return logits
''',
        "the penalty of the visible example, 2, whatever penalty says": '''
def repetition_penalty(logits: torch.Tensor, generated: torch.Tensor, penalty: float) -> torch.Tensor:
    """logits [B, V], generated [B, t] ids -> penalised logits [B, V]."""
    seen = torch.zeros_like(logits, dtype=torch.bool).scatter(1, generated, True)
    return torch.where(seen, torch.where(logits > 0, logits / 2, logits * 2), logits)
''',
    },
    "ex3-cache-bytes": {
        "keys only: forgets that the values are cached too": '''
def kv_cache_bytes(num_layers: int, batch: int, length: int, d_model: int,
                   bytes_per_value: int = 4) -> int:
    """Bytes held by the self-attention keys and values of every decoder layer."""
    return num_layers * batch * length * d_model * bytes_per_value
''',
        "always 4 bytes a value (ignores bytes_per_value)": '''
def kv_cache_bytes(num_layers: int, batch: int, length: int, d_model: int,
                   bytes_per_value: int = 4) -> int:
    """Bytes held by the self-attention keys and values of every decoder layer."""
    return 2 * num_layers * batch * length * d_model * 4
''',
        "counts one position too many (length + 1, as if <bos> were extra)": '''
def kv_cache_bytes(num_layers: int, batch: int, length: int, d_model: int,
                   bytes_per_value: int = 4) -> int:
    """Bytes held by the self-attention keys and values of every decoder layer."""
    return 2 * num_layers * batch * (length + 1) * d_model * bytes_per_value
''',
        "counts bits, not bytes": '''
def kv_cache_bytes(num_layers: int, batch: int, length: int, d_model: int,
                   bytes_per_value: int = 4) -> int:
    """Bytes held by the self-attention keys and values of every decoder layer."""
    return 2 * num_layers * batch * length * d_model * bytes_per_value * 8
''',
    },
    "ex4-beam-step": {
        "divides the flat index by the number of beams instead of the vocabulary size": '''
def best_extensions(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """scores [K, V] -> (beams [k], tokens [k]) of the k best entries, best first."""
    best = scores.flatten().topk(k).indices
    return best // scores.size(0), best % scores.size(0)
''',
        "takes the best token of each beam, then the best beams (not the best of all K*V)": '''
def best_extensions(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """scores [K, V] -> (beams [k], tokens [k]) of the k best entries, best first."""
    values, tokens = scores.max(dim=1)
    beams = values.topk(min(k, scores.size(0))).indices
    return beams, tokens[beams]
''',
        "sorts in increasing order: the k worst extensions": '''
def best_extensions(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """scores [K, V] -> (beams [k], tokens [k]) of the k best entries, best first."""
    best = scores.flatten().argsort()[:k]
    return best // scores.size(1), best % scores.size(1)
''',
        "returns (tokens, beams): the pair in the wrong order": '''
def best_extensions(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """scores [K, V] -> (beams [k], tokens [k]) of the k best entries, best first."""
    best = scores.flatten().topk(k).indices
    return best % scores.size(1), best // scores.size(1)
''',
    },
}
