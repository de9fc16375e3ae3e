"""Tests for transformer.benchmarks (the benchmark appendix, chapter 14): the counts that the
MFU and the bandwidth bound rest on, and the timing helpers."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from transformer.benchmarks import (
    TorchReference,
    bytes_per_token,
    interleaved,
    machine_info,
    paired_models,
    random_batch,
    train_step_flops,
)
from transformer.model import Transformer
from transformer.multihead import MultiHeadAttention


@pytest.mark.parametrize("sizes", [
    dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, d_ff=24),
    dict(d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=1, d_ff=64),
])
@pytest.mark.parametrize("shape", [(2, 5, 7), (3, 9, 4)])
def test_train_step_flops_is_three_times_the_counted_forward(sizes, shape):
    """PyTorch's FLOP counter, on the real forward pass, agrees with the formula (the
    explained attention path: the counter has no formula for the CPU fused kernel)."""
    batch, src_len, tgt_len = shape
    torch.manual_seed(0)
    model = Transformer(50, 50, **sizes, max_len=16, dropout=0.0).eval()
    src = torch.randint(1, 50, (batch, src_len))
    tgt = torch.randint(1, 50, (batch, tgt_len))
    for module in model.modules():  # the explained path, whose matmuls the counter sees
        if isinstance(module, MultiHeadAttention):
            module.register_forward_pre_hook(
                lambda _m, args, kwargs: (args, {**kwargs, "need_weights": True}), with_kwargs=True)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(src, tgt)
    assert train_step_flops(model, batch, src_len, tgt_len) == 3 * counter.get_total_flops()


def test_bytes_per_token_counts_what_a_cached_step_reads():
    torch.manual_seed(0)
    d, d_ff, vocab, layers = 16, 40, 30, 2
    for tied in (False, True):
        model = Transformer(vocab, vocab, d_model=d, num_heads=2, num_encoder_layers=1,
                            num_decoder_layers=layers, d_ff=d_ff, tie_output=tied)
        per_layer = (4 * (d * d + d)  # self-attention
                     + 2 * (d * d + d)  # cross-attention: query and output projections only
                     + 2 * d * d_ff + d_ff + d  # FFN
                     + 3 * 2 * d)  # LayerNorms
        generator = vocab * d + vocab
        assert bytes_per_token(model) == 4 * (layers * per_layer + generator + d)


def test_interleaved_runs_each_function_in_turn():
    calls = []
    result = interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                         repeats=3, warmup=1)
    assert calls == ["a", "b"] * 4
    assert set(result) == {"a", "b"} and all(t >= 0 for t in result.values())


def test_reference_and_batch_shapes():
    ours, ref = paired_models(vocab=40, d_model=16, num_heads=2, num_layers=1, d_ff=24,
                              dropout=0.0, max_len=20)
    assert isinstance(ref, TorchReference)
    src, tgt_in, labels = random_batch(3, 9, 6, 40)
    assert src.shape == (3, 9) and tgt_in.shape == labels.shape == (3, 6)
    assert (src[:, 0] != 0).all()  # every sentence has at least half its length
    with torch.no_grad():
        assert ours.eval()(src, tgt_in).shape == ref.eval()(src, tgt_in).shape == (3, 6, 40)
    info = machine_info()
    assert set(info) == {"cpu", "cores", "torch", "threads", "python"} and info["torch"] == torch.__version__
