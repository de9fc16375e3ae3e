"""Tests for transformer.positional (chapter 02)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer import PositionalEncoding
from transformer.positional import sinusoidal_encoding


def direct_formula(positions, d_model):
    """The paper's formula evaluated scalar by scalar in float64."""
    return torch.tensor([[math.sin(p / 10000 ** (j / d_model)) if j % 2 == 0
                          else math.cos(p / 10000 ** ((j - 1) / d_model))
                          for j in range(d_model)] for p in positions], dtype=torch.float64)


@pytest.mark.parametrize("d_model", [2, 8, 64, 512])
def test_table_equals_the_direct_formula(d_model):
    pe = PositionalEncoding(d_model, max_len=200, dropout=0.0)
    assert pe.pe.shape == (200, d_model) and pe.pe.dtype == torch.float32
    assert torch.allclose(pe.pe.double(), direct_formula(range(200), d_model), atol=1e-6)


def test_table_is_accurate_at_large_positions():
    # float64 arithmetic: only the final float32 rounding remains (float32 angles lose ~1e-4)
    table = sinusoidal_encoding(10, 512, start=4990).double()
    assert torch.allclose(table, direct_formula(range(4990, 5000), 512), atol=1e-6)


def test_sinusoidal_encoding_start_is_a_slice():
    assert torch.equal(sinusoidal_encoding(7, 32, start=5), sinusoidal_encoding(12, 32)[5:])
    assert sinusoidal_encoding(0, 32).shape == (0, 32)


def test_norm_and_bounds():
    table = sinusoidal_encoding(300, 128)
    assert table.abs().max() <= 1
    assert torch.allclose(table.norm(dim=-1), torch.full((300,), math.sqrt(64)))


@settings(max_examples=100, deadline=None)
@given(half=st.integers(1, 128), pos=st.integers(0, 2000), k=st.integers(-500, 500))
def test_offset_is_a_fixed_rotation_and_dot_depends_only_on_k(half, pos, k):
    d = 2 * half
    if pos + k < 0:
        k = -pos
    w = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    c, s = torch.cos(w * k), torch.sin(w * k)
    R = torch.block_diag(*torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2))
    a = sinusoidal_encoding(1, d, start=pos)[0].double()
    b = sinusoidal_encoding(1, d, start=pos + k)[0].double()
    assert torch.allclose(R @ a, b, atol=1e-5)  # PE(pos + k) = R(k) PE(pos)
    assert abs(a @ b - torch.cos(w * k).sum()) < 1e-4  # independent of pos


def test_dot_product_matrix_is_toeplitz():
    table = sinusoidal_encoding(100, 64).double()
    gram = table @ table.T
    for k in range(-99, 100):
        diag = torch.diagonal(gram, offset=k)
        assert torch.allclose(diag, diag[0].expand_as(diag), atol=1e-4)


def test_forward_adds_the_table_in_eval_mode():
    pe = PositionalEncoding(16, max_len=20, dropout=0.5).eval()
    x = torch.randn(3, 7, 16)
    assert torch.equal(pe(x), x + pe.pe[:7])
    assert pe(x.double()).dtype == torch.float64


def test_dropout_is_applied_after_the_addition():
    torch.manual_seed(0)
    pe = PositionalEncoding(64, max_len=50, dropout=0.5).train()
    x = torch.zeros(4, 50, 64)  # so that x + PE = PE, which is nonzero almost everywhere
    y = pe(x)
    dropped = y == 0
    assert 0.4 < dropped.float().mean() < 0.6
    expected = pe.pe.expand(4, 50, 64) * 2.0
    assert torch.allclose(y[~dropped], expected[~dropped])


def test_buffer_is_not_persistent():
    pe = PositionalEncoding(32, max_len=100)
    assert "pe" in dict(pe.named_buffers())
    assert "pe" not in pe.state_dict() and pe.state_dict() == {}
    assert list(pe.parameters()) == []
    PositionalEncoding(32, max_len=300).load_state_dict(pe.state_dict())  # max_len-independent
    assert pe.double().pe.dtype == torch.float64  # still follows the module


@settings(max_examples=50, deadline=None)
@given(seq=st.integers(1, 20), start=st.integers(0, 30))
def test_start_offset_equals_slicing_a_longer_sequence(seq, start):
    pe = PositionalEncoding(8, max_len=50, dropout=0.0)
    g = torch.Generator().manual_seed(seq * 100 + start)
    long = torch.randn(2, start + seq, 8, generator=g)
    assert torch.equal(pe(long[:, start:], start=start), pe(long)[:, start:])


def test_one_token_at_a_time_equals_the_whole_sequence():
    pe = PositionalEncoding(8, max_len=10, dropout=0.0)
    x = torch.randn(2, 10, 8)
    steps = torch.cat([pe(x[:, t:t + 1], start=t) for t in range(10)], dim=1)
    assert torch.equal(steps, pe(x))


@pytest.mark.parametrize("d_model", [1, 3, 15, 511])
def test_odd_d_model_raises(d_model):
    with pytest.raises(ValueError, match="d_model must be even"):
        PositionalEncoding(d_model)
    with pytest.raises(ValueError, match="d_model must be even"):
        sinusoidal_encoding(4, d_model)


@pytest.mark.parametrize("kwargs,name", [
    (dict(d_model=0), "d_model"), (dict(d_model=-4), "d_model"), (dict(d_model=8.0), "d_model"),
    (dict(d_model=8, max_len=0), "max_len"), (dict(d_model=8, max_len=2.5), "max_len"),
    (dict(d_model=8, dropout=1.0), "dropout"), (dict(d_model=8, dropout=-0.1), "dropout"),
])
def test_bad_constructor_arguments_raise(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        PositionalEncoding(**kwargs)


@pytest.mark.parametrize("shape", [(5, 8), (8,), (1, 2, 5, 8), (1, 5, 6)])
def test_wrong_rank_or_width_raises(shape):
    pe = PositionalEncoding(8, max_len=10)
    with pytest.raises(ValueError, match=r"x must have shape \[batch, seq, 8\]"):
        pe(torch.randn(*shape))


def test_integer_input_raises_type_error():
    pe = PositionalEncoding(8, max_len=10)
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        pe(torch.ones(1, 3, 8, dtype=torch.long))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        pe([[0.0] * 8])


def test_too_long_raises():
    pe = PositionalEncoding(8, max_len=10)
    pe(torch.randn(1, 10, 8))  # exactly max_len is fine
    with pytest.raises(ValueError, match="exceed max_len=10"):
        pe(torch.randn(1, 11, 8))


@pytest.mark.parametrize("start", [-1, 1.0, True, 10])
def test_bad_start_raises(start):
    pe = PositionalEncoding(8, max_len=10)
    with pytest.raises(ValueError, match="start|max_len"):
        pe(torch.randn(1, 1, 8), start=start)
    pe(torch.randn(1, 1, 8), start=9)  # the last position is fine
