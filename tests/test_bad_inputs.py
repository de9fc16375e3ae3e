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
    TokenEmbedding,
    Transformer,
    causal_mask,
    combine_masks,
    padding_mask,
)
from transformer.attention import SingleHeadSelfAttention, scaled_dot_product_attention
from transformer.positional import sinusoidal_encoding

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
])
def test_attention_settings(kwargs, name):
    q = torch.randn(2, 3, 4)
    assert_named_error(lambda: scaled_dot_product_attention(q, q, q, **kwargs), name, ValueError)


@pytest.mark.parametrize("kwargs, name", [
    (dict(need_weights=0), "need_weights"), (dict(is_causal=1), "is_causal"),
    (dict(is_causal="yes"), "is_causal"),
])
def test_multihead_flags(kwargs, name):
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    assert_named_error(lambda: mha(x, x, x, **kwargs), name, ValueError)


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


# ---- the table: every bad input an engineer tried, and more, over the whole public API ----
#
# Each case is (id, call, name): call() must raise an error whose message names `name` (the
# argument as the caller wrote it, or the option/file of a command). A case that raises
# nothing is *silent*; one that raises another kind of error, or a message without the
# name, is *obscure*. The commands (`python -m transformer translate` / `train`) must
# instead exit non-zero with one line on standard error that names it, never a traceback.

import contextlib  # noqa: E402
import io  # noqa: E402
from pathlib import Path  # noqa: E402

from transformer import (  # noqa: E402
    CharVocab,
    GenerationConfig,
    LanguageModel,
    generate,
    label_smoothed_cross_entropy,
    load_checkpoint,
    load_translator,
    make_optimizer,
    translate,
    write_poem,
)
from transformer.attention_maps import cross_attention_weights  # noqa: E402
from transformer.beam_search import beam_search, length_penalty, sequence_scores  # noqa: E402
from transformer.commands import main  # noqa: E402
from transformer.config import load_config  # noqa: E402
from transformer.data import pad_sequences  # noqa: E402
from transformer.decoding import filter_logits, greedy_decode, sample_decode  # noqa: E402
from transformer.fast import linear_cross_entropy  # noqa: E402
from transformer.lm import BigramLanguageModel, lm_loss, perplexity  # noqa: E402
from transformer.losses import shift_targets  # noqa: E402
from transformer.schedule import noam_lr  # noqa: E402
from transformer.text import encode_stream, random_windows  # noqa: E402
from transformer.training import translation_loss  # noqa: E402

torch.manual_seed(0)
_TR = Transformer(**MODEL).eval()  # a small translator: V = 30, max_len 12
_LM = LanguageModel(V, d_model=8, num_heads=2, num_layers=1, max_len=12).eval()
_SRC = torch.randint(3, V, (2, 5))
_PROMPT = torch.randint(3, V, (2, 3))


def _nan_model():
    model = Transformer(**MODEL).eval()
    with torch.no_grad():
        model.generator.weight.fill_(float("nan"))
    return model


def _translator():
    return load_translator()


CASES = [
    # model.generate / generate: options, ids, masks, models
    ("generate: max_new_tokens=0", lambda: _TR.generate(_SRC, 0), "max_new_tokens"),
    ("generate: a misspelt option", lambda: _TR.generate(_SRC, num_beam=2), "num_beam"),
    ("generate: a dict as generation_config", lambda: _TR.generate(_SRC, generation_config={"num_beams": 2}),
     "generation_config"),
    ("GenerationConfig: num_beams=0", lambda: GenerationConfig(num_beams=0), "num_beams"),
    ("GenerationConfig: top_p=1.5", lambda: GenerationConfig(do_sample=True, top_p=1.5), "top_p"),
    ("generate: max_new_tokens past max_len", lambda: _TR.generate(_SRC, 50), "max_new_tokens"),
    ("generate: max_new_tokens=True", lambda: _TR.generate(_SRC, True), "max_new_tokens"),
    ("generate: max_new_tokens=2.5", lambda: _TR.generate(_SRC, 2.5), "max_new_tokens"),
    ("generate: temperature without do_sample", lambda: _TR.generate(_SRC, temperature=0.7), "temperature"),
    ("generate: top_k without do_sample", lambda: _TR.generate(_SRC, top_k=5), "top_k"),
    ("generate: top_p without do_sample", lambda: _TR.generate(_SRC, top_p=0.9), "top_p"),
    ("generate: generator without do_sample",
     lambda: _TR.generate(_SRC, generator=torch.Generator()), "generator"),
    ("generate: temperature=0", lambda: _TR.generate(_SRC, do_sample=True, temperature=0.0), "temperature"),
    ("generate: temperature=nan",
     lambda: _TR.generate(_SRC, do_sample=True, temperature=math.nan), "temperature"),
    ("generate: temperature=-1", lambda: _TR.generate(_SRC, do_sample=True, temperature=-1.0), "temperature"),
    ("generate: top_k=0", lambda: _TR.generate(_SRC, do_sample=True, top_k=0), "top_k"),
    ("generate: top_k=True", lambda: _TR.generate(_SRC, do_sample=True, top_k=True), "top_k"),
    ("generate: top_p=0", lambda: _TR.generate(_SRC, do_sample=True, top_p=0.0), "top_p"),
    ("generate: top_p=1.5", lambda: _TR.generate(_SRC, do_sample=True, top_p=1.5), "top_p"),
    ("generate: top_p=nan", lambda: _TR.generate(_SRC, do_sample=True, top_p=math.nan), "top_p"),
    ("generate: do_sample=1", lambda: _TR.generate(_SRC, do_sample=1), "do_sample"),
    ("generate: do_sample='yes'", lambda: _TR.generate(_SRC, do_sample="yes"), "do_sample"),
    ("generate: generator=0", lambda: _TR.generate(_SRC, do_sample=True, generator=0), "generator"),
    ("generate: num_beams=0", lambda: _TR.generate(_SRC, num_beams=0), "num_beams"),
    ("generate: num_beams=2.0", lambda: _TR.generate(_SRC, num_beams=2.0), "num_beams"),
    ("generate: num_beams with do_sample", lambda: _TR.generate(_SRC, num_beams=2, do_sample=True), "num_beams"),
    ("generate: num_return_sequences=0", lambda: _TR.generate(_SRC, num_return_sequences=0), "num_return_sequences"),
    ("generate: num_return_sequences > 1 greedy",
     lambda: _TR.generate(_SRC, num_return_sequences=2), "num_return_sequences"),
    ("generate: num_return_sequences > num_beams",
     lambda: _TR.generate(_SRC, num_beams=2, num_return_sequences=3), "num_return_sequences"),
    ("generate: length_penalty=-1", lambda: _TR.generate(_SRC, num_beams=2, length_penalty=-1.0),
     "length_penalty"),
    ("generate: length_penalty=nan", lambda: _TR.generate(_SRC, num_beams=2, length_penalty=math.nan),
     "length_penalty"),
    ("generate: streamer with beams", lambda: _TR.generate(_SRC, num_beams=2, streamer=[]), "streamer"),
    ("generate: streamer without put", lambda: _TR.generate(_SRC, streamer=object()), "streamer"),
    ("generate: stopping_criteria not callable", lambda: _TR.generate(_SRC, stopping_criteria=3),
     "stopping_criteria"),
    ("generate: use_cache=1", lambda: _TR.generate(_SRC, use_cache=1), "use_cache"),
    ("generate: ignore_eos='no'", lambda: _TR.generate(_SRC, ignore_eos="no"), "ignore_eos"),
    ("generate: bos_id outside the vocabulary", lambda: _TR.generate(_SRC, bos_id=V), "bos_id"),
    ("generate: eos_id outside the vocabulary", lambda: _TR.generate(_SRC, eos_id=V + 3), "eos_id"),
    ("generate: bos_id=-1", lambda: _TR.generate(_SRC, bos_id=-1), "bos_id"),
    ("generate: bos_id equal to pad_id", lambda: _TR.generate(_SRC, bos_id=0), "bos_id"),
    ("generate: eos_id equal to bos_id", lambda: _TR.generate(_SRC, eos_id=1), "eos_id"),
    ("generate: eos_id equal to pad_id", lambda: _TR.generate(_SRC, eos_id=0), "eos_id"),
    ("generate: a translator with another pad_id", lambda: _TR.generate(_SRC, pad_id=5), "pad_id"),
    ("generate: input_ids float", lambda: _TR.generate(_SRC.float()), "input_ids"),
    ("generate: input_ids a list", lambda: _TR.generate([[3, 4]]), "input_ids"),
    ("generate: input_ids 1-D", lambda: _TR.generate(_SRC[0]), "input_ids"),
    ("generate: input_ids empty", lambda: _TR.generate(_SRC[:, :0]), "input_ids"),
    ("generate: input_ids None for a translator", lambda: _TR.generate(None), "input_ids"),
    ("generate: source ids past the vocabulary", lambda: _TR.generate(_SRC + V), "src"),
    ("generate: a source row only padding", lambda: _TR.generate(torch.zeros(2, 4, dtype=torch.long)), "src"),
    ("generate: attention_mask of another shape",
     lambda: _TR.generate(_SRC, attention_mask=torch.ones(2, 4)), "attention_mask"),
    ("generate: attention_mask of 2s", lambda: _TR.generate(_SRC, attention_mask=torch.full((2, 5), 2)),
     "attention_mask"),
    ("generate: attention_mask float", lambda: _TR.generate(_SRC, attention_mask=torch.ones(2, 5) * 0.5),
     "attention_mask"),
    ("generate: attention_mask a list", lambda: _TR.generate(_SRC, attention_mask=[[1] * 5] * 2),
     "attention_mask"),
    ("generate: attention_mask row of zeros",
     lambda: _TR.generate(_SRC, attention_mask=torch.tensor([[1] * 5, [0] * 5])), "attention_mask"),
    ("generate: a Translator instead of its model", lambda: generate(_translator(), _SRC), "model"),
    ("generate: a string as model", lambda: generate("my-model", _SRC), "model"),
    ("generate: NaN weights", lambda: _nan_model().generate(_SRC), "NaN"),
    ("generate: NaN weights, beam search", lambda: _nan_model().generate(_SRC, num_beams=2), "NaN"),
    ("LM generate: right padding", lambda: _LM.generate(_PROMPT, 3, attention_mask=torch.tensor(
        [[1, 1, 0], [1, 1, 1]])), "attention_mask"),
    ("LM generate: pad_id inside a prompt", lambda: _LM.generate(torch.tensor([[1, 0, 5]]), 3), "pad_id"),
    ("LM generate: prompt plus max_new_tokens past max_len", lambda: _LM.generate(_PROMPT, 10), "max_new_tokens"),
    ("LM generate: prompt filling max_len", lambda: _LM.generate(torch.randint(3, V, (1, 12))), "max_len"),
    ("LM generate: beams with ignore_eos", lambda: _LM.generate(_PROMPT, 3, num_beams=2, ignore_eos=True),
     "eos_id"),
    ("LM generate: prompt ids past the vocabulary", lambda: _LM.generate(_PROMPT + V, 3), "input_ids"),
    ("LM generate: use_cache for the bigram", lambda: generate(
        BigramLanguageModel(torch.randint(3, 10, (50,)), 10), torch.tensor([[1]]), 3, use_cache=True), "use_cache"),
    ("LM generate: no max_new_tokens for a model without max_len", lambda: generate(
        BigramLanguageModel(torch.randint(3, 10, (50,)), 10), torch.tensor([[1]])), "max_new_tokens"),
    # the decoding functions of chapter 10
    ("greedy_decode: a language model", lambda: greedy_decode(_LM, _PROMPT, 1, 2), "model"),
    ("sample_decode: a language model", lambda: sample_decode(_LM, _PROMPT, 1, 2), "model"),
    ("beam_search: a language model", lambda: beam_search(_LM, _PROMPT, 1, 2), "model"),
    ("greedy_decode: bos_id=None", lambda: greedy_decode(_TR, _SRC, None, 2), "bos_id"),
    ("greedy_decode: src_mask float", lambda: greedy_decode(_TR, _SRC, 1, 2, src_mask=torch.ones(2, 1, 1, 5)),
     "src_mask"),
    ("greedy_decode: src_mask of another shape",
     lambda: greedy_decode(_TR, _SRC, 1, 2, src_mask=torch.ones(2, 5, dtype=torch.bool)), "src_mask"),
    ("beam_search: eos_id=None", lambda: beam_search(_TR, _SRC, 1, None), "eos_id"),
    ("beam_search: beam_size=True", lambda: beam_search(_TR, _SRC, 1, 2, beam_size=True), "beam_size"),
    ("beam_search: keep_greedy=1", lambda: beam_search(_TR, _SRC, 1, 2, keep_greedy=1), "keep_greedy"),
    ("beam_search: several outputs with keep_greedy",
     lambda: beam_search(_TR, _SRC, 1, 2, 3, num_return_sequences=2), "keep_greedy"),
    ("sequence_scores: tgt id past the vocabulary",
     lambda: sequence_scores(_TR, _SRC, torch.tensor([[1, 5, V + 4], [1, 5, 2]])), "tgt"),
    ("sequence_scores: tgt float", lambda: sequence_scores(_TR, _SRC, torch.ones(2, 3)), "tgt"),
    ("sequence_scores: tgt of another batch", lambda: sequence_scores(_TR, _SRC, torch.ones(3, 3).long()), "tgt"),
    ("sequence_scores: tgt only <bos>", lambda: sequence_scores(_TR, _SRC, torch.ones(2, 1).long()), "tgt"),
    ("sequence_scores: a token after padding",
     lambda: sequence_scores(_TR, _SRC, torch.tensor([[1, 0, 5], [1, 5, 2]])), "tgt"),
    ("cross_attention_weights: a language model", lambda: cross_attention_weights(_LM, _PROMPT, _PROMPT), "model"),
    ("filter_logits: top_k=-1", lambda: filter_logits(torch.randn(2, 5), top_k=-1), "top_k"),
    ("filter_logits: top_p=2", lambda: filter_logits(torch.randn(2, 5), top_p=2.0), "top_p"),
    ("length_penalty: alpha=-0.1", lambda: length_penalty(torch.tensor([3]), -0.1), "alpha"),
    # translate, Translator, load_translator
    ("translate: an unknown word", lambda: translate("I love durians"), "durians"),
    ("translate: <eos> as a word", lambda: translate("<eos>"), "<eos>"),
    ("translate: an empty sentence", lambda: translate(""), "text"),
    ("translate: a number", lambda: translate(123), "text"),
    ("translate: a list holding a number", lambda: translate(["I love apples", 3]), "text"),
    ("translate: an empty list", lambda: translate([]), "text"),
    ("translate: beam_size=0", lambda: translate("I love apples", beam_size=0), "beam_size"),
    ("translate: beam_size=True", lambda: translate("I love apples", beam_size=True), "beam_size"),
    ("translate: a sentence too long", lambda: translate(" ".join(["apples"] * 40)), "max_len"),
    ("write_poem: characters the model never saw", lambda: write_poem("hello"), "first_line"),
    ("write_poem: not a str", lambda: write_poem(["白日依山尽"]), "first_line"),
    ("write_poem: a blank line", lambda: write_poem("  "), "first_line"),
    ("write_poem: temperature=0", lambda: write_poem("白日依山尽", temperature=0), "temperature"),
    ("write_poem: seed=-1", lambda: write_poem("白日依山尽", seed=-1), "seed"),
    ("write_poem: seed=1.5", lambda: write_poem("白日依山尽", seed=1.5), "seed"),
    ("Translator: alpha=nan", lambda: _translator()("I love apples", alpha=math.nan), "alpha"),
    ("load_translator: a number", lambda: load_translator(123), "directory"),
    ("load_translator: a missing directory", lambda: load_translator("/nonexistent/model"), "/nonexistent/model"),
    ("load_checkpoint: a number", lambda: load_checkpoint(3.5), "directory"),
    ("from_pretrained: a number", lambda: Transformer.from_pretrained(7), "directory"),
    ("from_pretrained: a missing directory", lambda: Transformer.from_pretrained("/nonexistent/m"),
     "/nonexistent/m"),
    ("from_pretrained: map_location='gpu9'", lambda: Transformer.from_pretrained(
        load_translator.__globals__["TRANSLATOR_CHECKPOINT"], map_location="gpu9"), "map_location"),
    ("from_pretrained: a translator as a LanguageModel", lambda: LanguageModel.from_pretrained(
        load_translator.__globals__["TRANSLATOR_CHECKPOINT"]), "LanguageModel"),
    ("save_pretrained: a number", lambda: _TR.save_pretrained(5), "directory"),
    ("save_pretrained: metadata not JSON", lambda: _TR.save_pretrained("/tmp/unused-model-dir",
                                                                      metadata={"x": object()}), "metadata"),
    # masks with ambiguous axes (batch == q_len, batch == heads)
    ("MultiHeadAttention: [B, Tk] padding with B == Tq", lambda: MultiHeadAttention(8, 2)(
        torch.randn(3, 3, 8), torch.randn(3, 3, 8), torch.randn(3, 3, 8), torch.ones(3, 3, dtype=torch.bool)),
     "mask"),
    ("MultiHeadAttention: [B, Tq, Tk] with B == heads", lambda: MultiHeadAttention(8, 2)(
        torch.randn(2, 3, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 8), torch.ones(2, 3, 3, dtype=torch.bool)),
     "mask"),
    ("Transformer.encode: [B, S] src_mask with B == S", lambda: _TR.encode(
        torch.randint(3, V, (4, 4)), torch.ones(4, 4, dtype=torch.bool)), "src_mask"),
    ("Transformer: [B, T, T] tgt_mask with B == heads", lambda: _TR(
        _SRC, _SRC, tgt_mask=torch.ones(2, 5, 5, dtype=torch.bool)), "tgt_mask"),
    # training
    ("label_smoothed_cross_entropy: all labels ignored", lambda: label_smoothed_cross_entropy(
        torch.randn(2, 3, V), torch.full((2, 3), -100)), "ignore_index"),
    ("label_smoothed_cross_entropy: eps=1", lambda: label_smoothed_cross_entropy(
        torch.randn(2, 3, V), torch.ones(2, 3).long(), eps=1.0), "eps"),
    ("label_smoothed_cross_entropy: labels past V", lambda: label_smoothed_cross_entropy(
        torch.randn(2, 3, V), torch.full((2, 3), V)), "labels"),
    ("translation_loss: targets only padding", lambda: translation_loss(
        _TR, (_SRC, torch.tensor([[1, 0, 0], [1, 0, 0]]))), "ignore_index"),
    ("translation_loss: not a pair", lambda: translation_loss(_TR, _SRC), "batch"),
    ("shift_targets: float targets", lambda: shift_targets(torch.ones(2, 3)), "tgt"),
    ("noam_lr: warmup=0", lambda: noam_lr(1, 512, warmup=0), "warmup"),
    ("noam_lr: factor=nan", lambda: noam_lr(1, 512, factor=math.nan), "factor"),
    ("make_optimizer: warmup=-1", lambda: make_optimizer(_TR, warmup=-1), "warmup"),
    ("pad_sequences: a sequence of strings", lambda: pad_sequences([["a", "b"]]), "seqs"),
    ("Vocab.encode: an unknown word is refused", lambda: _translator().src_vocab.encode(3), "text"),
    # the language model and its data
    ("LanguageModel: vocab_size=0", lambda: LanguageModel(0), "vocab_size"),
    ("LanguageModel: pad_id=vocab_size", lambda: LanguageModel(10, pad_id=10), "pad_id"),
    ("LanguageModel: bos_id=-1", lambda: LanguageModel(10, bos_id=-1), "bos_id"),
    ("LanguageModel: eos_id=True", lambda: LanguageModel(10, eos_id=True), "eos_id"),
    ("LanguageModel: positions='learned'", lambda: LanguageModel(10, positions="learned"), "positions"),
    ("LanguageModel: ids past max_len", lambda: _LM(torch.randint(3, V, (1, 13))), "max_len"),
    ("LanguageModel: ids 1-D", lambda: _LM(torch.randint(3, V, (5,))), "ids"),
    ("Transformer: bos_id=-1", lambda: Transformer(**MODEL, bos_id=-1), "bos_id"),
    ("Transformer: eos_id=2.0", lambda: Transformer(**MODEL, eos_id=2.0), "eos_id"),
    ("BigramLanguageModel: weight=1", lambda: BigramLanguageModel(torch.randint(3, 10, (50,)), 10, 1.0), "weight"),
    ("BigramLanguageModel: float stream", lambda: BigramLanguageModel(torch.rand(50), 10), "stream"),
    ("lm_loss: all labels ignored", lambda: lm_loss(_LM, (_PROMPT, torch.full((2, 3), -100))), "ignore_index"),
    ("linear_cross_entropy: chunk_size=0",
     lambda: linear_cross_entropy(torch.randn(3, 4), torch.randn(5, 4), None, torch.zeros(3, dtype=torch.long),
                                  chunk_size=0), "chunk_size"),
    ("linear_cross_entropy: a label past V",
     lambda: linear_cross_entropy(torch.randn(3, 4), torch.randn(5, 4), None, torch.tensor([0, 5, 1])), "labels"),
    ("linear_cross_entropy: labels of another shape",
     lambda: linear_cross_entropy(torch.randn(2, 3, 4), torch.randn(5, 4), None, torch.zeros(6, dtype=torch.long)),
     "labels"),
    ("linear_cross_entropy: d differs",
     lambda: linear_cross_entropy(torch.randn(3, 4), torch.randn(5, 3), None, torch.zeros(3, dtype=torch.long)),
     "share d"),
    ("linear_cross_entropy: bias of the wrong size",
     lambda: linear_cross_entropy(torch.randn(3, 4), torch.randn(5, 4), torch.randn(4),
                                  torch.zeros(3, dtype=torch.long)), "bias"),
    ("linear_cross_entropy: float labels",
     lambda: linear_cross_entropy(torch.randn(3, 4), torch.randn(5, 4), None, torch.zeros(3)), "labels"),
    ("linear_cross_entropy: integer hidden",
     lambda: linear_cross_entropy(torch.zeros(3, 4, dtype=torch.long), torch.randn(5, 4), None,
                                  torch.zeros(3, dtype=torch.long)), "hidden"),
    ("perplexity: batch_size=0", lambda: perplexity(_LM, torch.randint(3, V, (40,)), 8, batch_size=0), "batch_size"),
    ("random_windows: seq_len=0", lambda: random_windows(torch.randint(3, V, (40,)), 2, 0), "seq_len"),
    ("CharVocab.encode: not a string", lambda: CharVocab.build(["abc"]).encode(5), "text"),
    ("encode_stream: a string, not a list", lambda: encode_stream("abc", CharVocab.build(["abc"])), "texts"),
    # configs of the train command (as a dict)
    ("load_config: unknown section", lambda: load_config({"modle": {}}), "modle"),
    ("load_config: unknown key", lambda: load_config({"train": {"stpes": 3}}), "train.stpes"),
    ("load_config: steps=0", lambda: load_config({"train": {"steps": 0}}), "train.steps"),
    ("load_config: d_model not divisible", lambda: load_config({"model": {"d_model": 10, "num_heads": 3}}),
     "model.d_model"),
    ("load_config: precision fp8", lambda: load_config({"train": {"precision": "fp8"}}), "train.precision"),
    ("load_config: dropout=1.5", lambda: load_config({"model": {"dropout": 1.5}}), "model.dropout"),
    ("load_config: a .yaml file", lambda: load_config("my.yaml"), "my.yaml"),
    ("load_config: a missing file", lambda: load_config("missing.toml"), "missing.toml"),
    ("load_config: paper='huge'", lambda: load_config({"model": {"paper": "huge"}}), "model.paper"),
    ("load_config: micro_batches > batch_size",
     lambda: load_config({"train": {"micro_batches": 9, "batch_size": 4}}), "train.micro_batches"),
]


def _command(argv, tmp: Path | None = None):
    """Run `python -m transformer ARGV` in this process; return (exit status, stderr)."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), contextlib.chdir(tmp or Path.cwd()):
        try:
            status = main(argv)
        except SystemExit as stop:  # argparse exits
            status = stop.code
    return status, err.getvalue()


def _write(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text, encoding="utf-8")
    return name


TINY = '[model]\nd_model = 8\nnum_heads = 2\nnum_encoder_layers = 1\nnum_decoder_layers = 1\nd_ff = 16\n' \
       '[data]\ncorpus_size = 200\nvalid_size = 10\n[train]\nsteps = 2\nbatch_size = 8\nwarmup = 2\n' \
       'checkpoint_every = 1\nlog_every = 1\n'

# (id, argv built in a temporary directory, name the one-line error must hold)
COMMAND_CASES = [
    ("no command", lambda t: [], "command"),
    ("unknown command", lambda t: ["fly"], "fly"),
    ("translate: unknown word", lambda t: ["translate", "I love durians"], "durians"),
    ("translate: special token", lambda t: ["translate", "<pad>"], "<pad>"),
    ("translate: empty sentence", lambda t: ["translate", ""], "''"),
    ("translate: --beam 0", lambda t: ["translate", "--beam", "0", "I love apples"], "--beam"),
    ("translate: --beam x", lambda t: ["translate", "--beam", "x", "I love apples"], "--beam"),
    ("translate: no sentence", lambda t: ["translate"], "sentences"),
    ("translate: missing checkpoint", lambda t: ["translate", "--checkpoint", "nowhere", "hi"], "nowhere"),
    ("translate: checkpoint is a file", lambda t: ["translate", "--checkpoint", _write(t, "f.txt", "x"), "hi"],
     "f.txt"),
    ("translate: checkpoint with broken config", lambda t: ["translate", "--checkpoint",
                                                             _broken_checkpoint(t), "I love apples"], "config.json"),
    ("poem: unknown characters", lambda t: ["poem", "white sun"], "'w'"),
    ("poem: empty line", lambda t: ["poem", ""], "first_line"),
    ("poem: two lines", lambda t: ["poem", "白日依山尽，\n黄河入海流。"], "first_line"),
    ("poem: --temperature 0", lambda t: ["poem", "白日依山尽", "--temperature", "0"], "temperature"),
    ("poem: --seed -1", lambda t: ["poem", "白日依山尽", "--seed", "-1"], "seed"),
    ("poem: --seed x", lambda t: ["poem", "白日依山尽", "--seed", "x"], "--seed"),
    ("poem: no line", lambda t: ["poem"], "first_line"),
    ("train: no config", lambda t: ["train"], "config"),
    ("train: missing config file", lambda t: ["train", "nothing.toml"], "nothing.toml"),
    ("train: config of another format", lambda t: ["train", _write(t, "c.yaml", "a: 1")], "c.yaml"),
    ("train: config not TOML", lambda t: ["train", _write(t, "c.toml", "[model\n")], "c.toml"),
    ("train: unknown key", lambda t: ["train", _write(t, "c.toml", "[train]\nstpes = 3\n")], "train.stpes"),
    ("train: negative steps", lambda t: ["train", _write(t, "c.toml", "[train]\nsteps = -3\n")], "train.steps"),
    ("train: fp16 on a CPU", lambda t: ["train", _write(t, "c.toml", TINY + 'precision = "fp16"\ndevice = "cpu"\n'),
                                        "--out", "r", "--no-progress"], "fp16"),
    ("train: missing pairs file", lambda t: ["train", _write(t, "c.toml", TINY.replace(
        "[data]\n", '[data]\npairs = "nope.tsv"\n')), "--out", "r", "--no-progress"], "nope.tsv"),
    ("train: --out is a file", lambda t: ["train", _write(t, "c.toml", TINY), "--out", _write(t, "taken", "x"),
                                          "--no-progress"], "taken"),
    ("train: --example unknown", lambda t: ["train", "--example", "huge"], "--example"),
    ("train: --example and a config", lambda t: ["train", "c.toml", "--example", "book"], "--example"),
    ("train: resume with another d_model", lambda t: _changed_resume(t), "model.d_model"),
]


def _broken_checkpoint(tmp: Path) -> str:
    directory = tmp / "broken"
    directory.mkdir()
    (directory / "config.json").write_text("{not json", encoding="utf-8")
    (directory / "model.safetensors").write_bytes(b"")
    return "broken"


def _changed_resume(tmp: Path) -> list[str]:
    """A run trained 2 steps with one config, then resumed with a larger d_model."""
    status, err = _command(["train", _write(tmp, "a.toml", TINY), "--out", "run", "--no-progress"], tmp)
    assert status == 0, err
    return ["train", _write(tmp, "b.toml", TINY.replace("steps = 2", "steps = 4").replace(
        "d_model = 8", "d_model = 16")), "--out", "run", "--no-progress"]


def classify(call, name) -> str:
    """'clear', 'silent' or 'obscure' (with the reason) for one case of CASES."""
    try:
        call()
    except (ValueError, TypeError, IndexError, FileNotFoundError, RuntimeError) as err:
        if re.search(rf"(^|\W){re.escape(name)}(\W|$)", str(err)):
            return "clear"
        return f"obscure: {type(err).__name__}: {err}"
    except Exception as err:  # noqa: BLE001 - any other kind is obscure by definition
        return f"obscure: {type(err).__name__}: {err}"
    return "silent"


def classify_command(argv, name, tmp: Path) -> str:
    status, err = _command(argv, tmp)
    lines = [line for line in err.splitlines() if line.strip()]
    if status == 0:
        return "silent"
    if "Traceback" in err:
        return f"obscure: a traceback: {err[-300:]}"
    last = lines[-1] if lines else ""
    if name not in last:
        return f"obscure: exit {status}, {last!r} does not name {name!r}"
    if len([line for line in lines if not line.startswith(("usage:", " "))]) > 1:
        return f"obscure: more than one line: {err!r}"
    return "clear"


@pytest.mark.parametrize("case, call, name", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(case, call, name):
    assert classify(call, name) == "clear", case


@pytest.mark.parametrize("case, make_argv, name", COMMAND_CASES, ids=[c[0] for c in COMMAND_CASES])
def test_bad_command_line_gets_one_clear_line(case, make_argv, name, tmp_path):
    argv = make_argv(tmp_path)
    assert classify_command(argv, name, tmp_path) == "clear", case


def test_the_report_counts_no_silent_and_no_obscure_case(tmp_path, capsys):
    """The engineer's tally, over the table above: how many cases, and none silent or obscure."""
    results = {case: classify(call, name) for case, call, name in CASES}
    for case, make_argv, name in COMMAND_CASES:
        work = tmp_path / str(len(results))
        work.mkdir()
        results[case] = classify_command(make_argv(work), name, work)
    silent = [c for c, r in results.items() if r == "silent"]
    obscure = [f"{c}: {r}" for c, r in results.items() if r.startswith("obscure")]
    with capsys.disabled():
        print(f"\nbad inputs: {len(results)} cases, {len(results) - len(silent) - len(obscure)} clear, "
              f"{len(silent)} silent, {len(obscure)} obscure")
    assert len(results) >= 150 and not silent and not obscure, (silent, obscure)
