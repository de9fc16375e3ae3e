"""Near-miss answers to chapter 12's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-global-loss": {
        "averages the processes' means (right only when every shard has as many tokens)": '''
def global_mean_loss(losses: list[float], tokens: list[int]) -> float:
    """Per-process (mean loss, token count) -> the whole batch's mean loss per token."""
    return sum(losses) / len(losses)
''',
        "sums the weighted losses but divides by the number of processes": '''
def global_mean_loss(losses: list[float], tokens: list[int]) -> float:
    """Per-process (mean loss, token count) -> the whole batch's mean loss per token."""
    return sum(loss * n for loss, n in zip(losses, tokens)) / len(losses)
''',
        "weights by tokens but forgets to divide: the summed loss": '''
def global_mean_loss(losses: list[float], tokens: list[int]) -> float:
    """Per-process (mean loss, token count) -> the whole batch's mean loss per token."""
    return float(sum(loss * n for loss, n in zip(losses, tokens)))
''',
    },
    "ex2-allreduce-bytes": {
        "forgets the factor 2 (counts the reduce-scatter only)": '''
def ring_allreduce_bytes(num_params: int, world_size: int, bytes_per_value: int = 4) -> int:
    """Bytes each process sends to all-reduce num_params gradients over world_size processes."""
    return (world_size - 1) * num_params * bytes_per_value // world_size
''',
        "every process sends its whole gradient to every other one": '''
def ring_allreduce_bytes(num_params: int, world_size: int, bytes_per_value: int = 4) -> int:
    """Bytes each process sends to all-reduce num_params gradients over world_size processes."""
    return (world_size - 1) * num_params * bytes_per_value
''',
        "2 P regardless of W (one process still sends)": '''
def ring_allreduce_bytes(num_params: int, world_size: int, bytes_per_value: int = 4) -> int:
    """Bytes each process sends to all-reduce num_params gradients over world_size processes."""
    return 2 * num_params * bytes_per_value
''',
        "floating point: int(2 * (W - 1) / W * P * bytes), wrong past 2**53": '''
def ring_allreduce_bytes(num_params: int, world_size: int, bytes_per_value: int = 4) -> int:
    """Bytes each process sends to all-reduce num_params gradients over world_size processes."""
    return int(2 * (world_size - 1) / world_size * num_params * bytes_per_value)
''',
    },
    "ex3-resume-position": {
        "off by one: the last batch trained instead of the next one": '''
def resume_position(step: int, batches_per_epoch: int) -> tuple[int, int]:
    """Updates done so far -> (epoch, index of the next batch in it)."""
    return divmod(step - 1, batches_per_epoch)
''',
        "epoch and position swapped": '''
def resume_position(step: int, batches_per_epoch: int) -> tuple[int, int]:
    """Updates done so far -> (epoch, index of the next batch in it)."""
    return step % batches_per_epoch, step // batches_per_epoch
''',
        "counts epochs from 1": '''
def resume_position(step: int, batches_per_epoch: int) -> tuple[int, int]:
    """Updates done so far -> (epoch, index of the next batch in it)."""
    return step // batches_per_epoch + 1, step % batches_per_epoch
''',
    },
    "ex4-accumulate": {
        "the function with the bug, unchanged": '''
def accumulate(model: nn.Module, pieces: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Leave in model's parameters the gradient of the whole batch's mean loss per token."""
    accumulate_with_a_bug(model, pieces)
''',
        "divides by every item, padding included": '''
def accumulate(model: nn.Module, pieces: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Leave in model's parameters the gradient of the whole batch's mean loss per token."""
    model.zero_grad()
    total = sum(len(targets) for _, targets in pieces)
    for inputs, targets in pieces:
        (F.cross_entropy(model(inputs), targets, reduction="sum") / total).backward()
''',
        "forgets to start from zero gradients": '''
def accumulate(model: nn.Module, pieces: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Leave in model's parameters the gradient of the whole batch's mean loss per token."""
    total = sum(int((targets != -100).sum()) for _, targets in pieces)
    for inputs, targets in pieces:
        (F.cross_entropy(model(inputs), targets, reduction="sum") / total).backward()
''',
        "weights each piece's mean loss by its number of items, padding included": '''
def accumulate(model: nn.Module, pieces: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Leave in model's parameters the gradient of the whole batch's mean loss per token."""
    model.zero_grad()
    total = sum(len(targets) for _, targets in pieces)
    for inputs, targets in pieces:
        (F.cross_entropy(model(inputs), targets) * len(targets) / total).backward()
''',
    },
}
