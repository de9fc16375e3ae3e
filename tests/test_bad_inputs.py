"""Bad input, by family, over the public API of chapters 01-08 (issue 11, item 5): every bad
value gets a clear error that names the argument as the caller wrote it. Property-based:
hypothesis draws the bad values."""

import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer import (
    Decoder,
    DecoderBlock,
    Encoder,
    EncoderBlock,
    FeedForward,
    MultiHeadAttention,
    PositionalEncoding,
    SingleHeadSelfAttention,
    TokenEmbedding,
    Transformer,
    causal_mask,
    combine_masks,
    padding_mask,
    scaled_dot_product_attention,
    sinusoidal_encoding,
)

V = 30
MODEL = dict(src_vocab_size=V, tgt_vocab_size=V, d_model=8, num_heads=2, num_encoder_layers=1,
             num_decoder_layers=1, d_ff=16, max_len=12)

# (callable, valid keyword arguments): every public constructor or function with settings
BUILDERS = {
    "TokenEmbedding": (TokenEmbedding, dict(vocab_size=V, d_model=8)),
    "PositionalEncoding": (PositionalEncoding, dict(d_model=8, max_len=12, dropout=0.1)),
    "sinusoidal_encoding": (sinusoidal_encoding, dict(length=5, d_model=8, start=0)),
    "SingleHeadSelfAttention": (SingleHeadSelfAttention, dict(d_model=8, d_k=4)),
    "causal_mask": (causal_mask, dict(size=4)),
    "MultiHeadAttention": (MultiHeadAttention, dict(d_model=8, num_heads=2, dropout=0.1)),
    "FeedForward": (FeedForward, dict(d_model=8, d_ff=16, dropout=0.1)),
    "EncoderBlock": (EncoderBlock, dict(d_model=8, num_heads=2, d_ff=16, dropout=0.1)),
    "DecoderBlock": (DecoderBlock, dict(d_model=8, num_heads=2, d_ff=16, dropout=0.1)),
    "Encoder": (Encoder, dict(num_layers=1, d_model=8, num_heads=2, d_ff=16)),
    "Decoder": (Decoder, dict(num_layers=1, d_model=8, num_heads=2, d_ff=16)),
    "Transformer": (Transformer, MODEL),
}
SIZES = [(builder, name) for builder, (_, kwargs) in BUILDERS.items() for name in kwargs
         if name not in ("dropout", "start", "length")]
NON_NEGATIVE = [("sinusoidal_encoding", "start"), ("sinusoidal_encoding", "length")]
PROBABILITIES = [(builder, "dropout") for builder, (_, kwargs) in BUILDERS.items() if "dropout" in kwargs]
PROBABILITIES += [("Transformer", "dropout"), ("EncoderBlock", "dropout")]
FLAGS = [("TokenEmbedding", "scale"), ("SingleHeadSelfAttention", "bias"),
         ("MultiHeadAttention", "bias"), ("EncoderBlock", "norm_first"), ("DecoderBlock", "norm_first"),
         ("Encoder", "norm_first"), ("Transformer", "norm_first"),
         ("Transformer", "share_embeddings"), ("Transformer", "tie_output")]

not_an_int = st.one_of(st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
                       st.text(max_size=3), st.lists(st.integers(1, 4), max_size=2))
bad_sizes = st.one_of(st.integers(max_value=0), not_an_int)
bad_non_negative = st.one_of(st.integers(max_value=-1), not_an_int)
bad_probabilities = st.one_of(
    st.floats(max_value=-1e-9), st.floats(min_value=1.0), st.just(math.nan), st.just(math.inf),
    st.booleans(), st.text(max_size=3), st.none())
bad_flags = st.one_of(st.integers(), st.floats(allow_nan=True), st.text(max_size=3), st.none())


def assert_named_error(call, name, errors=(ValueError, TypeError)):
    """call() raises one of errors, and the message names `name` as a word."""
    with pytest.raises(errors) as info:
        call()
    assert re.search(rf"(^|\W){re.escape(name)}(\W|$)", str(info.value)), (name, str(info.value))
    return str(info.value)


def build(builder, **overrides):
    fn, kwargs = BUILDERS[builder]
    return fn(**{**kwargs, **overrides})


@pytest.mark.parametrize("builder, name", SIZES)
@settings(max_examples=12, deadline=None)
@given(value=bad_sizes)
def test_sizes_must_be_positive_integers(builder, name, value):
    if name == "pad_id":
        return
    assert_named_error(lambda: build(builder, **{name: value}), name, ValueError)


@pytest.mark.parametrize("builder, name", NON_NEGATIVE)
@settings(max_examples=12, deadline=None)
@given(value=bad_non_negative)
def test_positions_must_be_non_negative_integers(builder, name, value):
    assert_named_error(lambda: build(builder, **{name: value}), name, ValueError)


@pytest.mark.parametrize("builder, name", sorted(set(PROBABILITIES)))
@settings(max_examples=12, deadline=None)
@given(value=bad_probabilities)
def test_probabilities_must_lie_in_zero_one(builder, name, value):
    assert_named_error(lambda: build(builder, **{name: value}), name, ValueError)


@pytest.mark.parametrize("builder, name", FLAGS)
@settings(max_examples=10, deadline=None)
@given(value=bad_flags)
def test_flags_must_be_booleans(builder, name, value):
    assert_named_error(lambda: build(builder, **{name: value}), name, ValueError)


@settings(max_examples=20, deadline=None)
@given(pad_id=st.one_of(st.integers(max_value=-1), st.integers(min_value=V), not_an_int),
       tgt_vocab=st.integers(V, V + 5))
def test_pad_id_must_be_an_id_of_both_vocabularies(pad_id, tgt_vocab):
    message = assert_named_error(
        lambda: Transformer(**{**MODEL, "tgt_vocab_size": tgt_vocab, "pad_id": pad_id}), "pad_id",
        ValueError)
    assert f"[0, {V - 1}]" in message


@pytest.mark.parametrize("name", ["src_vocab_size", "tgt_vocab_size", "num_encoder_layers",
                                  "num_decoder_layers", "max_len"])
def test_the_model_names_its_own_arguments_not_its_parts(name):
    message = assert_named_error(lambda: Transformer(**{**MODEL, name: 0}), name, ValueError)
    assert "vocab_size must" not in message.replace(name, "") and "num_layers" not in message


@pytest.mark.parametrize("hyper", [dict(d_model=9), dict(d_model=10, num_heads=3),
                                   dict(activation="tanh"), dict(activation=None),
                                   dict(share_embeddings=True, tgt_vocab_size=V + 1)])
def test_inconsistent_settings(hyper):
    name = next(iter(hyper))
    assert_named_error(lambda: Transformer(**{**MODEL, **hyper}), name, ValueError)


# --- tensors: dtypes, shapes, batches, empties, id ranges, masks -------------------------------

@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Transformer(**MODEL).eval()


def ids(b=2, t=5, high=V):
    return torch.randint(1, high, (b, t))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool, torch.complex64])
def test_ids_of_a_non_integer_dtype(model, dtype):
    bad = ids().to(dtype)
    assert_named_error(lambda: model(bad, ids()), "src", TypeError)
    assert_named_error(lambda: model(ids(), bad), "tgt", TypeError)
    assert_named_error(lambda: model.encode(bad), "src", TypeError)
    assert_named_error(lambda: model.decode(bad, torch.randn(2, 3, 8)), "tgt", TypeError)
    assert_named_error(lambda: model.src_embed(bad), "ids", TypeError)
    assert_named_error(lambda: padding_mask(bad), "ids", TypeError)


@pytest.mark.parametrize("bad", [[[1, 2, 3]], 7, None, "1 2 3"])
def test_ids_that_are_not_tensors(model, bad):
    assert_named_error(lambda: model(bad, ids()), "src", TypeError)
    assert_named_error(lambda: model(ids(), bad), "tgt", TypeError)


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=4).filter(lambda s: len(s) != 2))
def test_ids_of_the_wrong_rank(shape):
    torch.manual_seed(0)
    model = Transformer(**MODEL).eval()
    bad = torch.randint(1, V, shape)
    assert_named_error(lambda: model(bad, ids(b=shape[0] if shape else 1)), "src", ValueError)
    assert_named_error(lambda: model(ids(b=shape[0] if shape else 1), bad), "tgt", ValueError)


@pytest.mark.parametrize("shape", [(2, 0), (0, 5), (0, 0)])
def test_empty_source_or_target(model, shape):
    empty = torch.zeros(shape, dtype=torch.long)
    assert_named_error(lambda: model(empty, ids(b=shape[0] or 1)), "src", ValueError)
    assert_named_error(lambda: model(ids(b=shape[0] or 2), empty), "tgt", ValueError)
    assert_named_error(lambda: model.encode(empty), "src", ValueError)


@settings(max_examples=25, deadline=None)
@given(b_src=st.integers(1, 4), b_tgt=st.integers(1, 4))
def test_mismatched_batches(b_src, b_tgt):
    if b_src == b_tgt:
        return
    torch.manual_seed(0)
    model = Transformer(**MODEL).eval()
    assert_named_error(lambda: model(ids(b=b_src), ids(b=b_tgt)), "src", ValueError)
    assert_named_error(lambda: model.decode(ids(b=b_tgt), torch.randn(b_src, 3, 8)), "memory", ValueError)
    mha = MultiHeadAttention(8, 2)
    assert_named_error(lambda: mha(torch.randn(b_src, 3, 8), torch.randn(b_tgt, 4, 8),
                                   torch.randn(b_tgt, 4, 8)), "query", ValueError)


@settings(max_examples=30, deadline=None)
@given(bad_id=st.one_of(st.integers(min_value=-2**63, max_value=-1), st.integers(min_value=V, max_value=2**63 - 1)),
       where=st.sampled_from(["src", "tgt"]))
def test_ids_out_of_range_name_the_argument(bad_id, where):
    torch.manual_seed(0)
    model = Transformer(**MODEL).eval()
    src, tgt = ids(), ids()
    (src if where == "src" else tgt)[1, 2] = bad_id
    message = assert_named_error(lambda: model(src, tgt), where, IndexError)
    assert str(bad_id) in message and f"vocab_size={V}" in message
    with pytest.raises(IndexError, match=r"^ids must lie in"):
        model.src_embed(src if where == "src" else tgt)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_memory_of_another_dtype_is_explained(model, dtype):
    memory = torch.randn(2, 3, 8, dtype=dtype)
    message = assert_named_error(lambda: model.decode(ids(), memory), "memory", TypeError)
    assert str(dtype) in message and "torch.float32" in message
    block = DecoderBlock(8, 2, 16)
    assert_named_error(lambda: block(torch.randn(2, 5, 8), memory), "memory", TypeError)
    assert_named_error(lambda: block(torch.randn(2, 5, 8, dtype=dtype), torch.randn(2, 3, 8)), "x", TypeError)


@settings(max_examples=25, deadline=None)
@given(width=st.integers(1, 12).filter(lambda w: w != 8), rank=st.sampled_from([2, 3, 4]))
def test_streams_of_the_wrong_shape(width, rank):
    torch.manual_seed(0)
    x = torch.randn(*([2, 5, width] if rank == 3 else [2, 5, 3, width] if rank == 4 else [5, width]))
    good = torch.randn(2, 5, 8)
    assert_named_error(lambda: EncoderBlock(8, 2, 16)(x), "x", ValueError)
    assert_named_error(lambda: DecoderBlock(8, 2, 16)(good, x), "memory", ValueError)
    assert_named_error(lambda: MultiHeadAttention(8, 2)(good, x, x), "key", ValueError)
    assert_named_error(lambda: MultiHeadAttention(8, 2)(good, None, good), "key", ValueError)
    assert_named_error(lambda: MultiHeadAttention(8, 2)(good, good, None, cache={}), "value", ValueError)
    assert_named_error(lambda: PositionalEncoding(8)(x), "x", ValueError)
    assert_named_error(lambda: FeedForward(8)(torch.randn(2, width)), "x", ValueError)


MASK_DTYPES = [torch.float32, torch.int64, torch.uint8, torch.float64]


@pytest.mark.parametrize("dtype", MASK_DTYPES)
def test_masks_of_the_wrong_dtype(model, dtype):
    src, tgt = ids(t=6), ids(t=4)
    memory = model.encode(src)
    bad_src = model.make_src_mask(src).to(dtype)
    bad_tgt = model.make_tgt_mask(tgt).to(dtype)
    assert_named_error(lambda: model.encode(src, bad_src), "src_mask", TypeError)
    assert_named_error(lambda: model.decode(tgt, memory, bad_src), "src_mask", TypeError)
    assert_named_error(lambda: model.decode(tgt, memory, tgt_mask=bad_tgt), "tgt_mask", TypeError)
    q = torch.randn(2, 4, 8)
    assert_named_error(lambda: scaled_dot_product_attention(q, q, q, bad_tgt[:, 0]), "mask", TypeError)
    assert_named_error(lambda: combine_masks(causal_mask(4), bad_tgt), "masks", TypeError)


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=5))
def test_masks_of_the_wrong_shape(shape):
    """A mask that does not broadcast to [B=2, heads, q_len, k_len] is refused, naming it."""
    torch.manual_seed(0)
    model = Transformer(**MODEL).eval()
    src = ids(t=6)
    target = [2, MODEL["num_heads"], 6, 6]
    extra = len(shape) - len(target)  # leading size-1 axes beyond the scores' rank are allowed
    core = shape[extra:] if extra > 0 and all(n == 1 for n in shape[:extra]) else shape
    if len(core) <= 4 and all(m in (1, s) for m, s in zip(reversed(core), reversed(target), strict=False)):
        return  # this one broadcasts: not a bad input
    mask = torch.ones(shape, dtype=torch.bool)
    assert_named_error(lambda: model.encode(src, mask), "src_mask", ValueError)
    q = torch.randn(2, MODEL["num_heads"], 6, 8)
    assert_named_error(lambda: scaled_dot_product_attention(q, q, q, mask), "mask", ValueError)


@pytest.mark.parametrize("kwargs, name", [
    (dict(dropout_p=-0.1), "dropout_p"), (dict(dropout_p=1.0), "dropout_p"),
    (dict(dropout_p=math.nan), "dropout_p"), (dict(dropout_p=True), "dropout_p"),
    (dict(scale=0.0), "scale"), (dict(scale=math.nan), "scale"), (dict(scale=-1.0), "scale"),
    (dict(need_weights=0), "need_weights"),
])
def test_attention_settings(kwargs, name):
    q = torch.randn(2, 3, 4)
    assert_named_error(lambda: scaled_dot_product_attention(q, q, q, **kwargs), name, ValueError)


@pytest.mark.parametrize("make", [
    lambda: (torch.randn(2, 3, 4), torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 3, 4)),
    lambda: (torch.randint(0, 3, (2, 3, 4)),) * 3,
    lambda: ([[1.0]], torch.randn(2, 3, 4), torch.randn(2, 3, 4)),
])
def test_attention_tensors_of_the_wrong_kind(make):
    q, k, v = make()
    with pytest.raises(TypeError, match=r"^(q|k|v|q, k, v) "):
        scaled_dot_product_attention(q, k, v)


def test_decode_start_and_ids_past_max_len(model):
    memory = model.encode(ids())
    assert_named_error(lambda: model.decode(ids(t=1), memory, start=-1), "start", ValueError)
    assert_named_error(lambda: model.decode(ids(t=1), memory, start=True), "start", ValueError)
    assert_named_error(lambda: model.decode(ids(t=3), memory, start=10), "tgt", ValueError)
    assert_named_error(lambda: PositionalEncoding(8, max_len=4)(torch.randn(1, 5, 8)), "max_len", ValueError)
