"""Near-miss answers to chapter 06's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-by-hand": {
        "forgets the ReLU between the two layers": '''
def ffn_by_hand(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                b2: torch.Tensor) -> torch.Tensor:
    """x [..., d_model]; w1 [d_ff, d_model], b1 [d_ff], w2 [d_model, d_ff], b2 [d_model]."""
    return (x @ w1.T + b1) @ w2.T + b2
''',
        "adds b1 after the ReLU instead of before": '''
def ffn_by_hand(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                b2: torch.Tensor) -> torch.Tensor:
    """x [..., d_model]; w1 [d_ff, d_model], b1 [d_ff], w2 [d_model, d_ff], b2 [d_model]."""
    return (torch.relu(x @ w1.T) + b1) @ w2.T + b2
''',
        "applies ReLU after the second layer as well": '''
def ffn_by_hand(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                b2: torch.Tensor) -> torch.Tensor:
    """x [..., d_model]; w1 [d_ff, d_model], b1 [d_ff], w2 [d_model, d_ff], b2 [d_model]."""
    return torch.relu(torch.relu(x @ w1.T + b1) @ w2.T + b2)
''',
        "uses GELU where the formula says max(0, .)": '''
def ffn_by_hand(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                b2: torch.Tensor) -> torch.Tensor:
    """x [..., d_model]; w1 [d_ff, d_model], b1 [d_ff], w2 [d_model, d_ff], b2 [d_model]."""
    return F.gelu(x @ w1.T + b1) @ w2.T + b2
''',
        "F.linear, which the exercise forbids": '''
def ffn_by_hand(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                b2: torch.Tensor) -> torch.Tensor:
    """x [..., d_model]; w1 [d_ff, d_model], b1 [d_ff], w2 [d_model, d_ff], b2 [d_model]."""
    return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)
''',
    },
    "ex2-sort": {
        "puts min first and max second": '''
def sorting_ffn() -> FeedForward:
    """A FeedForward(2, 4) mapping each position's (a, b) to (max(a, b), min(a, b))."""
    f = FeedForward(2, d_ff=4, dropout=0.0)
    with torch.no_grad():
        f.linear1.weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [-1.0, -1.0]]))
        f.linear1.bias.zero_()
        f.linear2.weight.copy_(torch.tensor([[-0.5, -0.5, 0.5, -0.5], [0.5, 0.5, 0.5, -0.5]]))
        f.linear2.bias.zero_()
    return f
''',
        "forgets the halves: max = (a + b) + |a - b|": '''
def sorting_ffn() -> FeedForward:
    """A FeedForward(2, 4) mapping each position's (a, b) to (max(a, b), min(a, b))."""
    f = FeedForward(2, d_ff=4, dropout=0.0)
    with torch.no_grad():
        f.linear1.weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [-1.0, -1.0]]))
        f.linear1.bias.zero_()
        f.linear2.weight.copy_(torch.tensor([[1.0, 1.0, 1.0, -1.0], [-1.0, -1.0, 1.0, -1.0]]))
        f.linear2.bias.zero_()
    return f
''',
        "writes a + b as ReLU(a + b) alone (right only when a + b > 0)": '''
def sorting_ffn() -> FeedForward:
    """A FeedForward(2, 4) mapping each position's (a, b) to (max(a, b), min(a, b))."""
    f = FeedForward(2, d_ff=4, dropout=0.0)
    with torch.no_grad():
        f.linear1.weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]))
        f.linear1.bias.zero_()
        f.linear2.weight.copy_(torch.tensor([[0.5, 0.5, 0.5, 0.0], [-0.5, -0.5, 0.5, 0.0]]))
        f.linear2.bias.zero_()
    return f
''',
        "sets the weights but leaves the biases at their random initial values": '''
def sorting_ffn() -> FeedForward:
    """A FeedForward(2, 4) mapping each position's (a, b) to (max(a, b), min(a, b))."""
    f = FeedForward(2, d_ff=4, dropout=0.0)
    with torch.no_grad():
        f.linear1.weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [-1.0, -1.0]]))
        f.linear2.weight.copy_(torch.tensor([[0.5, 0.5, 0.5, -0.5], [-0.5, -0.5, 0.5, -0.5]]))
    return f
''',
    },
    "ex3-conv": {
        "always uses nn.ReLU(), whatever ffn.activation_name says": '''
def as_convolutions(ffn: FeedForward) -> nn.Sequential:
    """The same map as ffn (in eval mode), as Conv1d(k=1) -> activation -> Conv1d(k=1)."""
    conv1 = nn.Conv1d(ffn.d_model, ffn.d_ff, kernel_size=1)
    conv2 = nn.Conv1d(ffn.d_ff, ffn.d_model, kernel_size=1)
    with torch.no_grad():
        conv1.weight.copy_(ffn.linear1.weight[:, :, None])
        conv1.bias.copy_(ffn.linear1.bias)
        conv2.weight.copy_(ffn.linear2.weight[:, :, None])
        conv2.bias.copy_(ffn.linear2.bias)
    return nn.Sequential(conv1, nn.ReLU(), conv2)
''',
        "copies the weights but not the biases": '''
def as_convolutions(ffn: FeedForward) -> nn.Sequential:
    """The same map as ffn (in eval mode), as Conv1d(k=1) -> activation -> Conv1d(k=1)."""
    conv1 = nn.Conv1d(ffn.d_model, ffn.d_ff, kernel_size=1)
    conv2 = nn.Conv1d(ffn.d_ff, ffn.d_model, kernel_size=1)
    with torch.no_grad():
        conv1.weight.copy_(ffn.linear1.weight[:, :, None])
        conv2.weight.copy_(ffn.linear2.weight[:, :, None])
    act = nn.ReLU() if ffn.activation_name == "relu" else nn.GELU()
    return nn.Sequential(conv1, act, conv2)
''',
        "uses the tanh approximation of GELU": '''
def as_convolutions(ffn: FeedForward) -> nn.Sequential:
    """The same map as ffn (in eval mode), as Conv1d(k=1) -> activation -> Conv1d(k=1)."""
    conv1 = nn.Conv1d(ffn.d_model, ffn.d_ff, kernel_size=1)
    conv2 = nn.Conv1d(ffn.d_ff, ffn.d_model, kernel_size=1)
    with torch.no_grad():
        conv1.weight.copy_(ffn.linear1.weight[:, :, None])
        conv1.bias.copy_(ffn.linear1.bias)
        conv2.weight.copy_(ffn.linear2.weight[:, :, None])
        conv2.bias.copy_(ffn.linear2.bias)
    act = nn.ReLU() if ffn.activation_name == "relu" else nn.GELU(approximate="tanh")
    return nn.Sequential(conv1, act, conv2)
''',
        "the sizes of the visible test, Conv1d(8, 20) and Conv1d(20, 8)": '''
def as_convolutions(ffn: FeedForward) -> nn.Sequential:
    """The same map as ffn (in eval mode), as Conv1d(k=1) -> activation -> Conv1d(k=1)."""
    conv1, conv2 = nn.Conv1d(8, 20, kernel_size=1), nn.Conv1d(20, 8, kernel_size=1)
    with torch.no_grad():
        conv1.weight.copy_(ffn.linear1.weight[:, :, None])
        conv1.bias.copy_(ffn.linear1.bias)
        conv2.weight.copy_(ffn.linear2.weight[:, :, None])
        conv2.bias.copy_(ffn.linear2.bias)
    return nn.Sequential(conv1, nn.ReLU() if ffn.activation_name == "relu" else nn.GELU(), conv2)
''',
    },
    "ex4-silent": {
        "counts outputs <= 0, so GELU's small negative values count as silent": '''
silent = {}
for _act in ("relu", "gelu"):
    torch.manual_seed(0)
    _f = FeedForward(128, 512, dropout=0.0, activation=_act)
    _x = torch.randn(16, 10, 128)
    with torch.no_grad():
        _hidden = _f.activation(_f.linear1(_x))
    silent[_act] = (_hidden <= 0).float().mean().item()
silent_relu, silent_gelu = silent["relu"], silent["gelu"]
''',
        "looks at the FFN's output instead of its hidden layer": '''
silent = {}
for _act in ("relu", "gelu"):
    torch.manual_seed(0)
    _f = FeedForward(128, 512, dropout=0.0, activation=_act)
    with torch.no_grad():
        _out = _f(torch.randn(16, 10, 128))
    silent[_act] = (_out <= 0).float().mean().item()
silent_relu, silent_gelu = silent["relu"], silent["gelu"]
''',
        "counts the units that are silent for every input (none at initialisation)": '''
silent = {}
for _act in ("relu", "gelu"):
    torch.manual_seed(0)
    _f = FeedForward(128, 512, dropout=0.0, activation=_act)
    with torch.no_grad():
        _hidden = _f.activation(_f.linear1(torch.randn(16, 10, 128)))
    silent[_act] = (_hidden == 0).all(dim=0).all(dim=0).float().mean().item()
silent_relu, silent_gelu = silent["relu"], silent["gelu"]
''',
    },
}
