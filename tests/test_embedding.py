"""Tests for transformer.embedding (chapter 01)."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer import TokenEmbedding


def test_shape_and_lookup_equals_one_hot_matmul():
    emb = TokenEmbedding(50, 16)
    ids = torch.randint(0, 50, (3, 7))
    out = emb(ids)
    assert out.shape == (3, 7, 16)
    expected = F.one_hot(ids, 50).float() @ emb.embedding.weight * math.sqrt(16)
    assert torch.allclose(out, expected, atol=1e-6)


@settings(max_examples=50, deadline=None)
@given(vocab=st.integers(1, 40), d=st.integers(1, 32), seed=st.integers(0, 10_000))
def test_lookup_property(vocab, d, seed):
    g = torch.Generator().manual_seed(seed)
    emb = TokenEmbedding(vocab, d, scale=False)
    ids = torch.randint(0, vocab, (2, 5), generator=g)
    assert torch.equal(emb(ids), emb.embedding.weight[ids])


def test_scale_option_is_exactly_sqrt_d_model():
    scaled, plain = TokenEmbedding(20, 64), TokenEmbedding(20, 64, scale=False)
    plain.embedding.weight.data.copy_(scaled.embedding.weight.data)
    ids = torch.arange(20).view(4, 5)
    assert scaled.scale == pytest.approx(8.0) and plain.scale == 1.0
    assert torch.allclose(scaled(ids), plain(ids) * 8.0)


def test_default_init_gives_unit_variance_outputs():
    torch.manual_seed(0)
    for scale in (True, False):
        emb = TokenEmbedding(4000, 256, scale=scale)
        std = emb.embedding.weight.std().item()
        assert std == pytest.approx(256 ** -0.5 if scale else 1.0, rel=0.02)
        out = emb(torch.arange(4000).view(40, 100))
        assert out.std().item() == pytest.approx(1.0, rel=0.02)
    assert TokenEmbedding(10, 4, init_std=0.5).init_std == 0.5


def test_padding_row_is_zero_and_gets_no_gradient():
    emb = TokenEmbedding(10, 8, padding_idx=0)
    assert torch.all(emb.embedding.weight[0] == 0)
    ids = torch.tensor([[3, 4, 0, 0]])
    emb(ids).sum().backward()
    grad = emb.embedding.weight.grad
    assert torch.all(grad[0] == 0)
    rows = set(grad.abs().sum(1).nonzero().flatten().tolist())
    assert rows == {3, 4}
    emb.reset_parameters()
    assert torch.all(emb.embedding.weight[0] == 0)


def test_any_leading_shape_and_empty_input():
    emb = TokenEmbedding(10, 4)
    assert emb(torch.tensor(3)).shape == (4,)
    assert emb(torch.tensor([1, 2])).shape == (2, 4)
    assert emb(torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0, 4)
    assert emb(torch.tensor([[1, 2]], dtype=torch.int32)).shape == (1, 2, 4)


def test_tied_output_can_share_the_weight():
    emb = TokenEmbedding(30, 8)
    head = nn.Linear(8, 30, bias=False)
    head.weight = emb.embedding.weight
    assert head.weight.data_ptr() == emb.embedding.weight.data_ptr()


@pytest.mark.parametrize("bad", [[[-1, 2]], [[0, 10]], [[10]]])
def test_ids_out_of_range_raise_index_error_naming_ids(bad):
    emb = TokenEmbedding(10, 4)
    with pytest.raises(IndexError, match=r"ids must lie in \[0, 9\]"):
        emb(torch.tensor(bad))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool])
def test_non_integer_ids_raise_type_error_naming_ids(dtype):
    emb = TokenEmbedding(10, 4)
    with pytest.raises(TypeError, match="ids must be an integer tensor"):
        emb(torch.ones(1, 2, dtype=dtype))


def test_non_tensor_ids_raise_type_error():
    with pytest.raises(TypeError, match="ids must be a torch.Tensor"):
        TokenEmbedding(10, 4)([[1, 2]])


@pytest.mark.parametrize("name,kwargs", [
    ("vocab_size", dict(vocab_size=0, d_model=4)),
    ("vocab_size", dict(vocab_size=-3, d_model=4)),
    ("vocab_size", dict(vocab_size=10.0, d_model=4)),
    ("vocab_size", dict(vocab_size=True, d_model=4)),
    ("d_model", dict(vocab_size=10, d_model=0)),
    ("d_model", dict(vocab_size=10, d_model=-4)),
    ("d_model", dict(vocab_size=10, d_model=2.5)),
    ("padding_idx", dict(vocab_size=10, d_model=4, padding_idx=10)),
    ("padding_idx", dict(vocab_size=10, d_model=4, padding_idx=1.0)),
    ("init_std", dict(vocab_size=10, d_model=4, init_std=0.0)),
])
def test_bad_constructor_arguments_raise_value_error_naming_them(name, kwargs):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        TokenEmbedding(**kwargs)
