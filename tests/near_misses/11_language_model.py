"""Near-miss answers to chapter 11's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-perplexity": {
        "averages over every position, the skipped ones clamped to id 0": '''
def perplexity_of(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """logits [B, T, V], labels [B, T] (IGNORE_INDEX = skip) -> exp(mean NLL of the counted labels)."""
    log_probs = logits.log_softmax(dim=-1)
    nll = -log_probs.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
    return math.exp(nll.mean().item())
''',
        "takes the raw logits as log-probabilities (no softmax)": '''
def perplexity_of(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """logits [B, T, V], labels [B, T] (IGNORE_INDEX = skip) -> exp(mean NLL of the counted labels)."""
    keep = labels != IGNORE_INDEX
    nll = -logits[keep].gather(-1, labels[keep][:, None]).squeeze(-1)
    return math.exp(nll.mean().item())
''',
        "exponentiates the sum instead of the mean": '''
def perplexity_of(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """logits [B, T, V], labels [B, T] (IGNORE_INDEX = skip) -> exp(mean NLL of the counted labels)."""
    log_probs = logits.log_softmax(dim=-1)
    keep = labels != IGNORE_INDEX
    nll = -log_probs[keep].gather(-1, labels[keep][:, None]).squeeze(-1)
    return math.exp(nll.sum().item())
''',
        "uses base 2 (2 ** cross-entropy in nats)": '''
def perplexity_of(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """logits [B, T, V], labels [B, T] (IGNORE_INDEX = skip) -> exp(mean NLL of the counted labels)."""
    log_probs = logits.log_softmax(dim=-1)
    keep = labels != IGNORE_INDEX
    nll = -log_probs[keep].gather(-1, labels[keep][:, None]).squeeze(-1)
    return 2.0 ** nll.mean().item()
''',
        "returns the mean probability's inverse, not exp of the mean log": '''
def perplexity_of(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """logits [B, T, V], labels [B, T] (IGNORE_INDEX = skip) -> exp(mean NLL of the counted labels)."""
    probs = logits.softmax(dim=-1)
    keep = labels != IGNORE_INDEX
    p = probs[keep].gather(-1, labels[keep][:, None]).squeeze(-1)
    return 1.0 / p.mean().item()
''',
    },
    "ex2-window": {
        "forgets the shift: the labels are the inputs": '''
def window_at(stream: torch.Tensor, start: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """stream [N] -> (inputs [seq_len], labels [seq_len]) of the window starting at start."""
    window = stream[start:start + seq_len]
    return window, window.masked_fill(window == BOS_ID, IGNORE_INDEX)
''',
        "keeps the <bos> labels": '''
def window_at(stream: torch.Tensor, start: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """stream [N] -> (inputs [seq_len], labels [seq_len]) of the window starting at start."""
    window = stream[start:start + seq_len + 1]
    return window[:-1], window[1:]
''',
        "hides the <bos> inputs instead of the <bos> labels": '''
def window_at(stream: torch.Tensor, start: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """stream [N] -> (inputs [seq_len], labels [seq_len]) of the window starting at start."""
    window = stream[start:start + seq_len + 1]
    return window[:-1].masked_fill(window[:-1] == BOS_ID, IGNORE_INDEX), window[1:]
''',
        "cuts seq_len ids and shifts inside them (labels one short, padded)": '''
def window_at(stream: torch.Tensor, start: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """stream [N] -> (inputs [seq_len], labels [seq_len]) of the window starting at start."""
    window = stream[start:start + seq_len]
    labels = torch.cat([window[1:], window.new_tensor([IGNORE_INDEX])])
    return window, labels.masked_fill(labels == BOS_ID, IGNORE_INDEX)
''',
        "windows of 5, the length of the visible test": '''
def window_at(stream: torch.Tensor, start: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """stream [N] -> (inputs [seq_len], labels [seq_len]) of the window starting at start."""
    window = stream[start:start + 6]
    labels = window[1:].masked_fill(window[1:] == BOS_ID, IGNORE_INDEX)
    return window[:-1], labels
''',
    },
    "ex3-regulated": {
        "checks each line but not that all lines share one length": '''
def regulated_poem(text: str) -> int | None:
    """5 or 7 if the poem is 2 or 4 regulated couplets, all of that length, else None."""
    forms = [verse_form(line) for line in text.split("\\n")]
    if len(forms) in (2, 4) and None not in forms:
        return forms[0]
    return None
''',
        "forgets the number of couplets": '''
def regulated_poem(text: str) -> int | None:
    """5 or 7 if the poem is 2 or 4 regulated couplets, all of that length, else None."""
    forms = [verse_form(line) for line in text.split("\\n")]
    if forms[0] is not None and all(f == forms[0] for f in forms):
        return forms[0]
    return None
''',
        "counts characters per line instead of using verse_form": '''
def regulated_poem(text: str) -> int | None:
    """5 or 7 if the poem is 2 or 4 regulated couplets, all of that length, else None."""
    lines = text.split("\\n")
    n = (len(lines[0]) - 2) // 2
    if len(lines) in (2, 4) and n in (5, 7) and all(len(line) == 2 * n + 2 for line in lines):
        return n
    return None
''',
        "accepts any number of couplets from two up": '''
def regulated_poem(text: str) -> int | None:
    """5 or 7 if the poem is 2 or 4 regulated couplets, all of that length, else None."""
    forms = [verse_form(line) for line in text.split("\\n")]
    if len(forms) >= 2 and forms[0] is not None and all(f == forms[0] for f in forms):
        return forms[0]
    return None
''',
    },
    "ex4-unigram": {
        "the function with the bug, unchanged": '''
def unigram_probs(stream: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[V] add-one smoothed probabilities of the labels of `stream`; 0 for <pad> and <bos>."""
    return unigram_probs_with_a_bug(stream, vocab_size)
''',
        "zeroes <pad> and <bos> after normalising: the rest sums to less than 1": '''
def unigram_probs(stream: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[V] add-one smoothed probabilities of the labels of `stream`; 0 for <pad> and <bos>."""
    probs = unigram_probs_with_a_bug(stream, vocab_size)
    probs[[PAD_ID, BOS_ID]] = 0.0
    return probs
''',
        "no smoothing: an unseen token gets probability 0": '''
def unigram_probs(stream: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[V] add-one smoothed probabilities of the labels of `stream`; 0 for <pad> and <bos>."""
    labels = next_token_labels(stream[1:])
    counts = torch.bincount(labels[labels != IGNORE_INDEX], minlength=vocab_size).float()
    return counts / counts.sum()
''',
        "counts the inputs instead of the labels": '''
def unigram_probs(stream: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[V] add-one smoothed probabilities of the labels of `stream`; 0 for <pad> and <bos>."""
    tokens = stream[:-1]
    counts = torch.bincount(tokens, minlength=vocab_size).float() + 1
    counts[[PAD_ID, BOS_ID]] = 0.0
    return counts / counts.sum()
''',
    },
}
