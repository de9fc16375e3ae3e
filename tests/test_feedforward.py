"""Tests for transformer.feedforward (chapter 06): the position-wise feed-forward network."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer.feedforward import FeedForward

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-12, rtol=1e-10)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_equals_ffn_of_torch_encoder_layer(dtype, activation):
    gen = torch.Generator().manual_seed(0)
    for d_model, d_ff in [(8, 32), (6, 10), (16, 64)]:
        torch.manual_seed(d_model)
        ours = FeedForward(d_model, d_ff, dropout=0.1, activation=activation).to(dtype).eval()
        heads = 2 if d_model % 2 == 0 else 1
        layer = nn.TransformerEncoderLayer(d_model, heads, d_ff, activation=activation,
                                           batch_first=True).to(dtype).eval()
        layer.linear1.load_state_dict(ours.linear1.state_dict())
        layer.linear2.load_state_dict(ours.linear2.state_dict())
        x = torch.randn(3, 5, d_model, generator=gen, dtype=dtype)
        # What the layer's feed-forward sublayer computes (eval: dropouts are identities).
        ref = layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))
        torch.testing.assert_close(ours(x), ref, **TOL[dtype])
        torch.testing.assert_close(ours(x), layer._ff_block(x), **TOL[dtype])


def test_default_width_is_four_times_d_model():
    f = FeedForward(12)
    assert f.linear1.weight.shape == (48, 12) and f.linear2.weight.shape == (12, 48)
    assert sum(p.numel() for p in f.parameters()) == 2 * 12 * 48 + 48 + 12


def test_position_wise_permutation_and_independence():
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    f = FeedForward(8, 24, dropout=0.0, activation="gelu")
    for _ in range(20):
        b, t = (int(torch.randint(1, 6, (), generator=gen)) for _ in range(2))
        x = torch.randn(b, t, 8, generator=gen)
        perm = torch.randperm(t, generator=gen)
        y = f(x)
        torch.testing.assert_close(f(x[:, perm]), y[:, perm])
        # Each position alone gives the same as in the sequence.
        torch.testing.assert_close(f(x.reshape(-1, 8)).reshape(b, t, 8), y)


def test_activation_is_used():
    torch.manual_seed(2)
    relu, gelu = FeedForward(4, 8, dropout=0.0), FeedForward(4, 8, dropout=0.0, activation="gelu")
    gelu.load_state_dict(relu.state_dict())
    x = torch.randn(2, 3, 4)
    h = relu.linear1(x)
    torch.testing.assert_close(relu(x), relu.linear2(h.clamp(min=0)))
    torch.testing.assert_close(gelu(x), gelu.linear2(torch.nn.functional.gelu(h)))
    assert not torch.allclose(relu(x), gelu(x))


def test_dropout_in_training_only():
    torch.manual_seed(3)
    f = FeedForward(8, dropout=0.5)
    x = torch.randn(4, 6, 8)
    assert not torch.equal(f.train()(x), f.train()(x))
    f.eval()
    assert torch.equal(f(x), f(x))
    # In training, dropout acts on the hidden layer: zeroing some hidden units, scaling the rest.
    torch.manual_seed(4)
    y = f.train()(x)
    torch.manual_seed(4)
    hidden = F.dropout(f.linear1(x).clamp(min=0), 0.5)  # nn.Dropout's draw
    torch.testing.assert_close(y, f.linear2(hidden))


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="activation"):
        FeedForward(8, activation="tanh")
    with pytest.raises(ValueError, match="d_model"):
        FeedForward(0)
    with pytest.raises(ValueError, match="d_ff"):
        FeedForward(8, d_ff=-1)
    with pytest.raises(ValueError, match="dropout"):
        FeedForward(8, dropout=1.0)
    with pytest.raises(ValueError, match=r"\[\.\.\., d_model=8\]"):
        FeedForward(8)(torch.randn(2, 3, 6))
