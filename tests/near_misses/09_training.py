"""Near-miss answers to chapter 09's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-smoothed-targets": {
        "spreads eps over the V-1 wrong words only (not PyTorch's eps/V on every word)": '''
def smoothed_targets(labels: torch.Tensor, vocab_size: int, eps: float, pad_id: int = 0) -> torch.Tensor:
    """labels [N] -> q [N, vocab_size]: smoothed one-hot rows, zero rows at padding."""
    q = torch.full((labels.size(0), vocab_size), eps / (vocab_size - 1))
    q[torch.arange(labels.size(0)), labels] = 1.0 - eps
    return q * (labels != pad_id).unsqueeze(1)
''',
        "forgets to zero the rows of padding": '''
def smoothed_targets(labels: torch.Tensor, vocab_size: int, eps: float, pad_id: int = 0) -> torch.Tensor:
    """labels [N] -> q [N, vocab_size]: smoothed one-hot rows, zero rows at padding."""
    q = torch.full((labels.size(0), vocab_size), eps / vocab_size)
    q[torch.arange(labels.size(0)), labels] += 1.0 - eps
    return q
''',
        "sets the right word to 1 - eps (= instead of +=): its eps/V share is lost": '''
def smoothed_targets(labels: torch.Tensor, vocab_size: int, eps: float, pad_id: int = 0) -> torch.Tensor:
    """labels [N] -> q [N, vocab_size]: smoothed one-hot rows, zero rows at padding."""
    q = torch.full((labels.size(0), vocab_size), eps / vocab_size)
    q[torch.arange(labels.size(0)), labels] = 1.0 - eps
    return q * (labels != pad_id).unsqueeze(1)
''',
        "zeroes the pad column instead of the pad rows": '''
def smoothed_targets(labels: torch.Tensor, vocab_size: int, eps: float, pad_id: int = 0) -> torch.Tensor:
    """labels [N] -> q [N, vocab_size]: smoothed one-hot rows, zero rows at padding."""
    q = torch.full((labels.size(0), vocab_size), eps / vocab_size)
    q[torch.arange(labels.size(0)), labels] += 1.0 - eps
    q[:, pad_id] = 0.0
    return q
''',
        "zeroes the rows of label 0, whatever pad_id is": '''
def smoothed_targets(labels: torch.Tensor, vocab_size: int, eps: float, pad_id: int = 0) -> torch.Tensor:
    """labels [N] -> q [N, vocab_size]: smoothed one-hot rows, zero rows at padding."""
    q = torch.full((labels.size(0), vocab_size), eps / vocab_size)
    q[torch.arange(labels.size(0)), labels] += 1.0 - eps
    return q * (labels != 0).unsqueeze(1)
''',
    },
    "ex2-token-accuracy": {
        "counts the padding positions too (plain mean over every position)": '''
def token_accuracy(logits: torch.Tensor, labels: torch.Tensor, pad_id: int = 0) -> float:
    """logits [B, T, V], labels [B, T] -> share of non-pad positions predicted right."""
    return (logits.argmax(-1) == labels).float().mean().item()
''',
        "divides by the real tokens but counts a predicted <pad> at a pad position as right": '''
def token_accuracy(logits: torch.Tensor, labels: torch.Tensor, pad_id: int = 0) -> float:
    """logits [B, T, V], labels [B, T] -> share of non-pad positions predicted right."""
    keep = labels != pad_id
    return (logits.argmax(-1) == labels).sum().item() / keep.sum().item()
''',
        "returns a tensor, not a Python float": '''
def token_accuracy(logits: torch.Tensor, labels: torch.Tensor, pad_id: int = 0) -> float:
    """logits [B, T, V], labels [B, T] -> share of non-pad positions predicted right."""
    keep = labels != pad_id
    return ((logits.argmax(-1) == labels) & keep).sum() / keep.sum()
''',
        "takes the argmax over the time axis instead of the vocabulary": '''
def token_accuracy(logits: torch.Tensor, labels: torch.Tensor, pad_id: int = 0) -> float:
    """logits [B, T, V], labels [B, T] -> share of non-pad positions predicted right."""
    keep = labels != pad_id
    predicted = logits.argmax(1)[:, : labels.size(1)]
    return ((predicted == labels) & keep).sum().item() / keep.sum().item()
''',
        "compares with 0 instead of pad_id": '''
def token_accuracy(logits: torch.Tensor, labels: torch.Tensor, pad_id: int = 0) -> float:
    """logits [B, T, V], labels [B, T] -> share of non-pad positions predicted right."""
    keep = labels != 0 if pad_id >= 0 else torch.ones_like(labels, dtype=torch.bool)
    return ((logits.argmax(-1) == labels) & keep).sum().item() / keep.sum().item()
''',
    },
    "ex3-cosine": {
        "warm-up off by one: (step - 1) / warmup": '''
def warmup_cosine_lr(step: int, peak: float, warmup: int, total: int) -> float:
    """Learning rate at `step` (from 1): linear warm-up to `peak`, cosine decay to 0 at `total`."""
    if step <= warmup:
        return peak * (step - 1) / warmup
    if step >= total:
        return 0.0
    return 0.5 * peak * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
''',
        "measures the cosine from step 0 instead of from the end of the warm-up": '''
def warmup_cosine_lr(step: int, peak: float, warmup: int, total: int) -> float:
    """Learning rate at `step` (from 1): linear warm-up to `peak`, cosine decay to 0 at `total`."""
    if step <= warmup:
        return peak * step / warmup
    if step >= total:
        return 0.0
    return 0.5 * peak * (1 + math.cos(math.pi * step / total))
''',
        "no floor after total: the cosine rises again": '''
def warmup_cosine_lr(step: int, peak: float, warmup: int, total: int) -> float:
    """Learning rate at `step` (from 1): linear warm-up to `peak`, cosine decay to 0 at `total`."""
    if step <= warmup:
        return peak * step / warmup
    return 0.5 * peak * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
''',
        "forgets the 1/2: the decay starts at twice the peak": '''
def warmup_cosine_lr(step: int, peak: float, warmup: int, total: int) -> float:
    """Learning rate at `step` (from 1): linear warm-up to `peak`, cosine decay to 0 at `total`."""
    if step <= warmup:
        return peak * step / warmup
    if step >= total:
        return 0.0
    return peak * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
''',
        "the warm-up of the visible test, 100 steps, whatever warmup says": '''
def warmup_cosine_lr(step: int, peak: float, warmup: int, total: int) -> float:
    """Learning rate at `step` (from 1): linear warm-up to `peak`, cosine decay to 0 at `total`."""
    if step <= warmup:
        return peak * step / 100
    if step >= total:
        return 0.0
    return 0.5 * peak * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
''',
    },
    "ex4-clip": {
        "returns the norm after clipping instead of before": '''
def clip_grad_norm(parameters, max_norm: float) -> float:
    """Scale the gradients of `parameters` in place so their global L2 norm is <= max_norm."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads)).item()
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / norm)
    return min(norm, max_norm)
''',
        "clips each parameter's gradient on its own instead of the global norm": '''
def clip_grad_norm(parameters, max_norm: float) -> float:
    """Scale the gradients of `parameters` in place so their global L2 norm is <= max_norm."""
    grads = [p.grad for p in parameters if p.grad is not None]
    total = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads)).item()
    for g in grads:
        norm = g.norm().item()
        if norm > max_norm:
            g.mul_(max_norm / norm)
    return total
''',
        "scales the gradients even when the norm is already below max_norm (scales them up)": '''
def clip_grad_norm(parameters, max_norm: float) -> float:
    """Scale the gradients of `parameters` in place so their global L2 norm is <= max_norm."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads)).item()
    for g in grads:
        g.mul_(max_norm / norm)
    return norm
''',
        "rebinds a local name instead of scaling the gradients in place": '''
def clip_grad_norm(parameters, max_norm: float) -> float:
    """Scale the gradients of `parameters` in place so their global L2 norm is <= max_norm."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads)).item()
    if norm > max_norm:
        for g in grads:
            g = g * (max_norm / norm)
    return norm
''',
        "sums the per-parameter norms instead of the root of the sum of squares": '''
def clip_grad_norm(parameters, max_norm: float) -> float:
    """Scale the gradients of `parameters` in place so their global L2 norm is <= max_norm."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = sum(g.norm() for g in grads).item()
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / norm)
    return norm
''',
        "forgets that a parameter may have no gradient (p.grad is None)": '''
def clip_grad_norm(parameters, max_norm: float) -> float:
    """Scale the gradients of `parameters` in place so their global L2 norm is <= max_norm."""
    norm = torch.sqrt(sum((p.grad.detach() ** 2).sum() for p in parameters)).item()
    if norm > max_norm:
        for p in parameters:
            p.grad.mul_(max_norm / norm)
    return norm
''',
        "walks the parameters twice: a generator is empty the second time": '''
def clip_grad_norm(parameters, max_norm: float) -> float:
    """Scale the gradients of `parameters` in place so their global L2 norm is <= max_norm."""
    norm = math.sqrt(sum((p.grad.detach() ** 2).sum().item() for p in parameters if p.grad is not None))
    if norm > max_norm:
        for p in parameters:
            if p.grad is not None:
                p.grad.mul_(max_norm / norm)
    return norm
''',
    },
}
