"""The model with PyTorch's toolchain (issue 11, item 3): torch.export (static and dynamic
shapes), torch.compile(fullgraph=True) as one graph, and the eager id-range check kept."""

import pytest
import torch
from torch.export import Dim

from transformer.model import Transformer

V = 29


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(V, V, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                       d_ff=24, max_len=40, tie_output=True).eval()


def small_model_in_training(seed: int, dropout: float) -> Transformer:
    """The fixture's size, seeded, in training mode, with the given dropout."""
    torch.manual_seed(seed)
    return Transformer(V, V, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                       d_ff=24, max_len=40, dropout=dropout).train()


def ids(batch: int, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    out = torch.randint(3, V, (batch, length), generator=g)
    out[0, -2:] = 0  # some padding
    return out


def test_export_static_shapes_matches_eager(model):
    src, tgt = ids(2, 7, 1), ids(2, 5, 2)
    program = torch.export.export(model, (src, tgt))
    with torch.no_grad():
        torch.testing.assert_close(program.module()(src, tgt), model(src, tgt), atol=1e-6, rtol=0)


def test_export_dynamic_batch_and_lengths_matches_eager(model):
    batch, src_len, tgt_len = Dim("batch", max=64), Dim("src_len", max=40), Dim("tgt_len", max=40)
    program = torch.export.export(
        model, (ids(3, 9, 1), ids(3, 6, 2)),
        dynamic_shapes={"src": {0: batch, 1: src_len}, "tgt": {0: batch, 1: tgt_len}})
    run = program.module()
    for b, s, t in [(2, 5, 4), (5, 11, 13), (3, 40, 40), (4, 2, 7)]:
        src, tgt = ids(b, s, b + s), ids(b, t, t)
        with torch.no_grad():
            torch.testing.assert_close(run(src, tgt), model(src, tgt), atol=1e-5, rtol=0)


def test_compile_fullgraph_is_one_graph_and_matches_eager(model):
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward  # run the captured graph as it is (no code generation: cheap)

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counting_backend, fullgraph=True, dynamic=False)
    src, tgt = ids(2, 7, 3), ids(2, 5, 4)
    with torch.no_grad():
        out = compiled(src, tgt)
        torch.testing.assert_close(out, model(src, tgt), atol=1e-5, rtol=0)
    assert len(graphs) == 1


def test_compile_fullgraph_forward_and_backward_through_aot_autograd():
    """Training mode, through AOT autograd (what inductor compiles, minus code generation,
    which costs tens of seconds per graph here): outputs and gradients within 1e-5."""
    torch._dynamo.reset()
    trained = small_model_in_training(seed=1, dropout=0.0)
    compiled = torch.compile(trained, backend="aot_eager", fullgraph=True)
    src, tgt = ids(2, 7, 5), ids(2, 5, 6)
    out = compiled(src, tgt)
    want = trained(src, tgt)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=0)
    out.square().mean().backward()
    compiled_grads = [p.grad.clone() for p in trained.parameters()]
    trained.zero_grad()
    want.square().mean().backward()
    for got, expected in zip(compiled_grads, (p.grad for p in trained.parameters()), strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_compile_fullgraph_trains_with_dropout():
    """With dropout on, a training-mode model still compiles as one graph: chapter 02's
    dropout hands over to F.dropout under torch.compile (its Tensor.random_ would be a
    graph break). The masks differ from eager's, so the check is on what dropout promises:
    a finite loss and gradients, and a mask that changes from call to call."""
    torch._dynamo.reset()
    trained = small_model_in_training(seed=2, dropout=0.3)
    # Dynamo's own backend: the graph break is Dynamo's, and AOT autograd would cost more time.
    compiled = torch.compile(trained, backend="eager", fullgraph=True)
    src, tgt = ids(2, 7, 5), ids(2, 5, 6)
    first, second = compiled(src, tgt), compiled(src, tgt)
    assert not torch.equal(first, second)  # dropout is on
    first.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in trained.parameters())
    trained.eval()
    torch.testing.assert_close(compiled(src, tgt), trained(src, tgt), atol=1e-5, rtol=0)


def test_cached_decoding_compiles_once_and_writes_the_same_tokens(model):
    """model.decode under torch.compile(fullgraph=True, dynamic=True), driven by greedy
    decoding with chapter 10's KV cache: no graph break, the same tokens as eager, and two
    graphs for 12 steps (the first step allocates the cache; every later one, whatever the
    cache's length, reuses one graph) instead of one per length."""
    from transformer.decoding import greedy_decode

    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    src = ids(2, 7, 7)
    want = greedy_decode(model, src, bos_id=1, eos_id=None, max_new_tokens=12)
    model.decode = torch.compile(model.decode, backend=counting_backend, fullgraph=True, dynamic=True)
    try:
        got = greedy_decode(model, src, bos_id=1, eos_id=None, max_new_tokens=12)
    finally:
        del model.decode  # the class's method again
    assert torch.equal(got, want)
    assert len(graphs) == 2


def test_eager_mode_still_checks_the_id_range(model):
    with pytest.raises(IndexError, match=r"tgt must lie in \[0, 28\]"):
        model(ids(2, 5, 1), ids(2, 4, 2) + V)
    with pytest.raises(IndexError, match=r"src must lie in \[0, 28\]"):
        model.encode(ids(2, 5, 1) - 10)
