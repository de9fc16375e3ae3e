"""Chapter 10: greedy decoding, sampling, beam search, the KV cache, translate and the CLI."""

import math
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer import Transformer
from transformer.attention_maps import cross_attention_weights
from transformer.beam_search import beam_search, length_penalty, sequence_scores
from transformer.decoding import eval_mode, filter_logits, greedy_decode, sample_decode
from transformer.kv_cache import IncrementalDecoder, KVCache
from transformer.multihead import MultiHeadAttention
from transformer.saving import TRANSLATOR_CHECKPOINT
from transformer.translator import UnknownWordsError, load_translator, translate

PAD, BOS, EOS = 0, 1, 2


def random_model(seed: int, vocab: int = 30, norm_first: bool = False, layers: int = 2,
                 dropout: float = 0.1, pad_id: int = PAD, max_len: int = 64) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(vocab, vocab, d_model=32, num_heads=4, num_encoder_layers=2,
                        num_decoder_layers=layers, d_ff=64, dropout=dropout, norm_first=norm_first,
                        max_len=max_len, pad_id=pad_id)
    # Larger output weights give peakier, more varied next-token choices than Xavier's
    # near-uniform ones, so that the decoders do not all emit the same token.
    with torch.no_grad():
        model.generator.weight.mul_(8.0)
    return model.eval()


def random_src(seed: int, batch: int = 6, length: int = 7, vocab: int = 30, pad_id: int = PAD) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, length), generator=g) if vocab > 5 else \
        torch.randint(0, vocab, (batch, length), generator=g)
    src[src == pad_id] = (pad_id + 1) % vocab  # real tokens never equal pad_id
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    src[torch.arange(length)[None, :] >= lengths[:, None]] = pad_id  # ragged, padded sources
    return src


def prefers(model: Transformer, *ids: int) -> Transformer:
    """The model with its output bias pushed towards ids: an untrained model that 'wants' them."""
    with torch.no_grad():
        for rank, i in enumerate(ids):
            model.generator.bias[i] += 100.0 - 10 * rank
    return model


# --- the KV cache ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_cached_greedy_equals_uncached(seed):
    model = random_model(seed, norm_first=seed % 2 == 1, layers=1 + seed % 3)
    src = random_src(seed)
    with_cache = greedy_decode(model, src, BOS, EOS, max_new_tokens=25, use_cache=True)
    without = greedy_decode(model, src, BOS, EOS, max_new_tokens=25, use_cache=False)
    assert torch.equal(with_cache, without)


@pytest.mark.parametrize("batch", [1, 5])
def test_cached_steps_give_the_full_decoders_logits(batch):
    """Each cached step's logits are those of the full, masked decoder, also for prefixes
    with padding inside."""
    model = random_model(3)
    src = random_src(batch, batch=batch)
    tgt = torch.randint(4, 30, (batch, 9), generator=torch.Generator().manual_seed(10 + batch))
    tgt[:, 0] = BOS
    tgt[-1, 3:5] = PAD  # the last row's prefix has padding from position 3 on
    with eval_mode(model):
        src_mask = model.make_src_mask(src)
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask)  # [B, 9, V]: padding and causal masks
        step = IncrementalDecoder(model, memory, src_mask, use_cache=True)
        for t in range(1, 10):
            torch.testing.assert_close(step(tgt[:, :t]), full[:, t - 1], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("seed", range(4))
def test_cached_beam_and_sampling_equal_uncached(seed):
    model, src = random_model(100 + seed), random_src(100 + seed)
    for keep_greedy in (True, False):
        assert torch.equal(
            beam_search(model, src, BOS, EOS, 3, max_new_tokens=15, use_cache=True, keep_greedy=keep_greedy)[0],
            beam_search(model, src, BOS, EOS, 3, max_new_tokens=15, use_cache=False, keep_greedy=keep_greedy)[0])
    draws = [sample_decode(model, src, BOS, EOS, 15, generator=torch.Generator().manual_seed(seed),
                           use_cache=use_cache) for use_cache in (True, False)]
    assert torch.equal(*draws)


def test_incremental_logits_match_full_decoder():
    """Each cached step's logits equal the last row of a full teacher-forced decode."""
    model, src = random_model(7), random_src(7)
    tgt = torch.randint(4, 30, (src.size(0), 9))
    tgt[:, 0] = BOS
    with eval_mode(model):
        src_mask = model.make_src_mask(src)
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask)  # [B, 9, V]
        step = IncrementalDecoder(model, memory, src_mask, use_cache=True)
        for t in range(1, 10):
            torch.testing.assert_close(step(tgt[:, :t]), full[:, t - 1], atol=1e-5, rtol=1e-4)
        # The cache grew one position per step; cross keys have the source's length.
        assert step.caches[0]["self"]["k"].shape[2] == 9
        assert step.caches[0]["cross"]["k"].shape[2] == src.size(1)
        # A first call with a whole prefix, then one token at a time, gives the same logits.
        again = IncrementalDecoder(model, memory, src_mask, use_cache=True)
        torch.testing.assert_close(again(tgt[:, :5]), full[:, 4], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(again(tgt[:, :6]), full[:, 5], atol=1e-5, rtol=1e-4)


def test_kv_cache_writes_in_place_and_returns_views():
    cache = KVCache(capacity=5)
    g = torch.Generator().manual_seed(0)
    ks, vs = torch.randn(2, 3, 5, 4, generator=g), torch.randn(2, 3, 5, 4, generator=g)
    k, v = cache.append(ks[:, :, :2], vs[:, :, :2])  # a first call with two positions
    buffer = cache.k_buffer.data_ptr()
    for t in range(2, 5):
        k, v = cache.append(ks[:, :, t:t + 1], vs[:, :, t:t + 1])
        assert cache.k_buffer.data_ptr() == buffer, "the buffer was reallocated"
        assert k.data_ptr() == buffer and k._base is cache.k_buffer  # a view, no copy
    assert torch.equal(k, ks) and torch.equal(v, vs) and cache.length == 5
    with pytest.raises(ValueError, match="holds 5 positions"):
        cache.append(ks[:, :, :1], vs[:, :, :1])
    cache.reorder(torch.tensor([1, 1]))
    assert torch.equal(cache.k_buffer[0], ks[1]) and torch.equal(cache.k_buffer[1], ks[1])


def test_decoding_appends_to_the_preallocated_cache():
    """With chapter 05's cache hook (MultiHeadAttention calls cache.append), nothing is concatenated."""
    model, src = random_model(8, layers=2), random_src(8)
    calls, buffers = [], {}
    original = KVCache.append

    def spy(self, k, v):
        out = original(self, k, v)
        calls.append(k.size(2))
        buffers.setdefault(id(self), (self, self.k_buffer.data_ptr()))
        return out

    KVCache.append = spy
    try:
        out = greedy_decode(model, src, BOS, None, max_new_tokens=8)
    finally:
        KVCache.append = original
    assert out.size(1) == 9
    assert calls == [1] * (8 * 2)  # one position per step and layer
    assert len(buffers) == 2  # one cache per layer ...
    for cache, first in buffers.values():
        assert cache.k_buffer.data_ptr() == first  # ... whose buffer was never reallocated
        # the layer kept a view of the buffer (the storage tells)
        assert cache["k"].untyped_storage().data_ptr() == cache.k_buffer.untyped_storage().data_ptr()
        assert cache["k"].data_ptr() == first and cache["k"].size(2) == 8


# --- never <pad> or <bos>; every output has a score ------------------------------------

def check_layout(out: torch.Tensor, bos: int, eos: int | None, pad: int) -> None:
    """<bos> first; then real tokens (never <pad> or <bos>); after <eos>, only padding."""
    assert bool((out[:, 0] == bos).all())
    for row in out.tolist():
        body = row[1:]
        end = body.index(eos) + 1 if eos is not None and eos in body else len(body)
        assert end >= 1, f"empty output {row}"
        assert pad not in body[:end] and bos not in body[:end], f"<pad> or <bos> generated: {row}"
        assert all(i == pad for i in body[end:]), f"tokens after <eos>: {row}"


def test_the_issues_untrained_model_no_longer_writes_pad():
    """An untrained model that prefers <pad>, then <bos>: the decoders write neither."""
    model = prefers(random_model(0, vocab=12), PAD, BOS)
    src = random_src(0, batch=2, vocab=12)
    for out in (greedy_decode(model, src, BOS, EOS, max_new_tokens=3),
                sample_decode(model, src, BOS, EOS, 3, top_k=1),
                sample_decode(model, src, BOS, EOS, 3, top_p=0.01, generator=torch.Generator().manual_seed(0)),
                beam_search(model, src, BOS, EOS, max_new_tokens=3)[0]):
        check_layout(out, BOS, EOS, PAD)
        assert out.size(1) >= 2


def test_the_issues_empty_beam_output_cannot_happen():
    """beam_search returned [[1], [1]] with scores 0 on an untrained model: now at least one token."""
    model = prefers(random_model(0, vocab=12), PAD)
    src = random_src(1, batch=2, vocab=12)
    tokens, scores = beam_search(model, src, BOS, EOS, beam_size=4, max_new_tokens=3)
    assert tokens.size(1) >= 2 and bool((tokens[:, 1] != PAD).all())
    assert bool((scores < 0).all()), "a real output has a probability below 1"
    torch.testing.assert_close(sequence_scores(model, src, tokens), scores)


def test_sequence_scores_refuses_what_no_decoder_writes():
    model, src = random_model(0), random_src(0, batch=2)
    with pytest.raises(ValueError, match="no generated token"):
        sequence_scores(model, src, torch.tensor([[BOS, PAD], [BOS, 5]]))
    with pytest.raises(ValueError, match="tgt must be"):
        sequence_scores(model, src, torch.tensor([[BOS], [BOS]]))
    with pytest.raises(ValueError, match="after padding"):
        sequence_scores(model, src, torch.tensor([[BOS, 5, PAD, 6], [BOS, 5, 6, EOS]]))
    with pytest.raises(TypeError, match="tgt"):
        sequence_scores(model, src, torch.tensor([[1.0, 5.0], [1.0, 5.0]]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), vocab=st.integers(5, 20), pad_id=st.integers(0, 4),
       bias=st.floats(0.0, 30.0), beam=st.integers(1, 5), batch=st.integers(1, 4),
       keep_greedy=st.booleans())
def test_decoders_never_write_pad_or_bos_and_beam_scores_agree(seed, vocab, pad_id, bias, beam, batch,
                                                               keep_greedy):
    """Over random models (pad_id not always 0, <pad> and <bos> often favoured) and sources."""
    bos, eos = (pad_id + 1) % vocab, (pad_id + 2) % vocab
    torch.manual_seed(seed)
    model = Transformer(vocab, vocab, d_model=16, num_heads=2, num_encoder_layers=1,
                        num_decoder_layers=1, d_ff=16, max_len=12, pad_id=pad_id).eval()
    with torch.no_grad():
        model.generator.weight.mul_(4.0)
        model.generator.bias[[pad_id, bos]] += bias
    src = random_src(seed, batch=batch, length=5, vocab=vocab, pad_id=pad_id)
    check_layout(greedy_decode(model, src, bos, eos, 8), bos, eos, pad_id)
    check_layout(greedy_decode(model, src, bos, None, 8), bos, None, pad_id)
    check_layout(sample_decode(model, src, bos, eos, 8, temperature=2.0,
                               generator=torch.Generator().manual_seed(seed)), bos, eos, pad_id)
    tokens, scores = beam_search(model, src, bos, eos, beam, max_new_tokens=8, keep_greedy=keep_greedy)
    check_layout(tokens, bos, eos, pad_id)
    torch.testing.assert_close(sequence_scores(model, src, tokens), scores, atol=1e-4, rtol=1e-5)


# --- greedy decoding ---------------------------------------------------------------------

@pytest.mark.parametrize("decode", ["greedy", "beam", "sample"])
@pytest.mark.parametrize("training", [True, False])
def test_mode_is_restored(decode, training):
    model, src = random_model(1), random_src(1)
    model.train(training)
    model.decoder.layers[0].train(not training)  # a mixed state must survive too
    before = [m.training for m in model.modules()]
    if decode == "greedy":
        greedy_decode(model, src, BOS, EOS, 8)
    elif decode == "beam":
        beam_search(model, src, BOS, EOS, 2, max_new_tokens=8)
    else:
        sample_decode(model, src, BOS, EOS, 8, generator=torch.Generator().manual_seed(0))
    assert [m.training for m in model.modules()] == before


def test_mode_is_restored_after_an_error():
    model = random_model(1).train()
    with pytest.raises(RuntimeError), eval_mode(model):
        assert not model.training
        raise RuntimeError("boom")
    assert all(m.training for m in model.modules())


def test_greedy_is_deterministic_despite_dropout():
    model, src = random_model(2, dropout=0.5).train(), random_src(2)
    assert torch.equal(greedy_decode(model, src, BOS, EOS, 10), greedy_decode(model, src, BOS, EOS, 10))


@pytest.mark.parametrize("seed", range(6))
def test_each_row_stops_at_its_own_eos(seed):
    """With token e as <eos>, each row is its free-running output up to its first e, then padding."""
    model, src = random_model(200 + seed), random_src(200 + seed, batch=8)
    free = greedy_decode(model, src, BOS, None, max_new_tokens=12)  # never stops
    eos = int(free[0, 3])  # a token that row 0 emits at step 3 (maybe earlier too)
    out = greedy_decode(model, src, BOS, eos, max_new_tokens=12)
    for row_free, row in zip(free, out, strict=True):
        hits = (row_free[1:] == eos).nonzero()
        end = int(hits[0]) + 2 if len(hits) else row_free.size(0)  # columns up to its first eos
        assert torch.equal(row[:end], row_free[:end])
        assert bool((row[end:] == PAD).all())
    # The loop stops when the last row has ended, not before and not later.
    ends = [int((r[1:] == eos).nonzero()[0]) + 2 if bool((r[1:] == eos).any()) else free.size(1)
            for r in free]
    assert out.size(1) == max(ends)


# --- bad input: one clear error naming the caller's argument ------------------------------

MODEL = random_model(0)
SRC = random_src(0)


def bad_calls():
    """(label, call, exception, text the message must contain): the families of bad input."""
    m, s = MODEL, SRC
    calls = []
    for value in (0, -3, True, 2.0, "4", None):
        calls.append((f"beam_size={value!r}", lambda v=value: beam_search(m, s, BOS, EOS, beam_size=v),
                      ValueError, "beam_size"))
    for value in (math.nan, math.inf, -0.1, True, "0.6"):
        calls.append((f"alpha={value!r}", lambda v=value: beam_search(m, s, BOS, EOS, alpha=v),
                      ValueError, "alpha"))
        calls.append((f"sequence_scores alpha={value!r}",
                      lambda v=value: sequence_scores(m, s, torch.tensor([[BOS, 5]] * 6), alpha=v),
                      ValueError, "alpha"))
        calls.append((f"length_penalty alpha={value!r}", lambda v=value: length_penalty(torch.tensor(3), v),
                      ValueError, "alpha"))
    for value in (0, -1, math.nan, math.inf, True, "1"):
        calls.append((f"temperature={value!r}", lambda v=value: sample_decode(m, s, BOS, EOS, temperature=v),
                      ValueError, "temperature"))
    for value in (0.0, 1.5, -0.2, math.nan, True, "0.9"):
        calls.append((f"top_p={value!r}", lambda v=value: sample_decode(m, s, BOS, EOS, top_p=v),
                      ValueError, "top_p"))
        calls.append((f"filter_logits top_p={value!r}", lambda v=value: filter_logits(torch.randn(3), top_p=v),
                      ValueError, "top_p"))
    for value in (0, -2, True, 2.5):
        calls.append((f"top_k={value!r}", lambda v=value: sample_decode(m, s, BOS, EOS, top_k=v),
                      ValueError, "top_k"))
    for name in ("greedy", "sample", "beam"):
        decode = {"greedy": greedy_decode, "sample": sample_decode,
                  "beam": lambda *a, **kw: beam_search(*a, **kw)[0]}[name]
        for value in (0, -1, True, 1.5, 64):  # the model's max_len is 64
            calls.append((f"{name} max_new_tokens={value!r}",
                          lambda d=decode, v=value: d(m, s, BOS, EOS, max_new_tokens=v), ValueError, "max_new_tokens"))
        for value in (30, -1, True, 2.0, PAD, BOS):  # outside the vocabulary of 30, or a blocked id
            calls.append((f"{name} eos_id={value!r}", lambda d=decode, v=value: d(m, s, BOS, v), ValueError, "eos_id"))
        for value in (30, -1, False, PAD):
            calls.append((f"{name} bos_id={value!r}", lambda d=decode, v=value: d(m, s, v, EOS), ValueError, "bos_id"))
        for value in (1, "yes", None):
            calls.append((f"{name} use_cache={value!r}",
                          lambda d=decode, v=value: d(m, s, BOS, EOS, use_cache=v), ValueError, "use_cache"))
        for label, src, error in (("1-D", s[0], ValueError), ("float", s.float(), TypeError),
                                  ("no rows", s[:0], ValueError), ("no columns", s[:, :0], ValueError),
                                  ("a list", s.tolist(), TypeError), ("an all-padding row", torch.cat([s, torch.zeros_like(s[:1])]), ValueError)):
            calls.append((f"{name} src {label}", lambda d=decode, x=src: d(m, x, BOS, EOS), error, "src"))
        for label, mask in (("float", torch.ones(6, 1, 1, 7)), ("wrong shape", torch.ones(6, 7, dtype=torch.bool))):
            calls.append((f"{name} src_mask {label}", lambda d=decode, x=mask: d(m, s, BOS, EOS, src_mask=x),
                          ValueError, "src_mask"))
    calls.append(("keep_greedy=1", lambda: beam_search(m, s, BOS, EOS, keep_greedy=1), ValueError, "keep_greedy"))
    calls.append(("beam eos_id=None", lambda: beam_search(m, s, BOS, None), ValueError, "eos_id"))
    calls.append(("generator='seed'", lambda: sample_decode(m, s, BOS, EOS, generator="seed"), TypeError, "generator"))
    calls.append(("capacity=0", lambda: KVCache(0), ValueError, "capacity"))
    return calls


BAD_CALLS = bad_calls()


@pytest.mark.parametrize("label, call, error, name", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_names_the_argument(label, call, error, name):
    with pytest.raises(error, match=name):
        call()


@settings(max_examples=40, deadline=None)
@given(value=st.one_of(st.booleans(), st.integers(-5, 0), st.floats(allow_nan=True, allow_infinity=True),
                       st.text(max_size=3), st.none()))
def test_beam_size_is_a_positive_integer_and_nothing_else(value):
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(MODEL, SRC[:1], BOS, EOS, beam_size=value, max_new_tokens=2)


@settings(max_examples=40, deadline=None)
@given(value=st.one_of(st.floats(max_value=0.0), st.just(math.nan), st.just(math.inf), st.booleans()))
def test_temperature_must_be_positive_and_finite(value):
    with pytest.raises(ValueError, match="temperature"):
        sample_decode(MODEL, SRC[:1], BOS, EOS, max_new_tokens=2, temperature=value)


@settings(max_examples=40, deadline=None)
@given(value=st.one_of(st.floats(allow_nan=True).filter(lambda p: not 0 < p <= 1), st.booleans()))
def test_top_p_must_lie_in_zero_one(value):
    with pytest.raises(ValueError, match="top_p"):
        filter_logits(torch.randn(2, 5), top_p=value)


# --- sampling ------------------------------------------------------------------------------

def test_sampling_is_reproducible_from_a_seed():
    model, src = random_model(5), random_src(5, batch=8)

    def draw(seed):
        return sample_decode(model, src, BOS, EOS, 20, temperature=1.3, top_k=10, top_p=0.95,
                             generator=torch.Generator().manual_seed(seed))

    assert torch.equal(draw(0), draw(0))
    assert not torch.equal(draw(0), draw(1))


def test_top_k_one_is_greedy():
    model, src = random_model(6), random_src(6)
    assert torch.equal(sample_decode(model, src, BOS, EOS, 15, top_k=1), greedy_decode(model, src, BOS, EOS, 15))


def test_filter_logits():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.0, 1.0, 5.0, 1.0]])
    kept = torch.isfinite(filter_logits(logits, top_k=2))
    assert kept.tolist() == [[False, True, True, False], [False, True, True, True]]  # ties kept
    probs = logits.softmax(-1)  # row 0: [.087, .644, .237, .032]
    assert torch.isfinite(filter_logits(logits, top_p=0.6)).tolist()[0] == [False, True, False, False]
    assert torch.isfinite(filter_logits(logits, top_p=0.7)).tolist()[0] == [False, True, True, False]
    assert probs[0, 1] > 0.6
    # The most likely token always survives; nothing is dropped at p = 1.
    g = torch.Generator().manual_seed(0)
    random_logits = torch.randn(50, 20, generator=g)
    top = random_logits.argmax(-1)
    filtered = filter_logits(random_logits, top_p=1e-6)
    assert bool(torch.isfinite(filtered.gather(-1, top[:, None])).all())
    assert bool((torch.isfinite(filtered).sum(-1) == 1).all())
    assert torch.equal(filter_logits(random_logits, top_p=1.0), random_logits)


# --- beam search ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_beam_one_equals_greedy(seed):
    model, src = random_model(300 + seed, norm_first=seed % 2 == 0), random_src(300 + seed)
    beam, _ = beam_search(model, src, BOS, EOS, beam_size=1, max_new_tokens=20)
    assert torch.equal(beam, greedy_decode(model, src, BOS, EOS, max_new_tokens=20))


@pytest.mark.parametrize("seed", range(8))
def test_beam_score_never_below_greedy(seed):
    model, src = random_model(400 + seed), random_src(400 + seed, batch=16)
    greedy = greedy_decode(model, src, BOS, EOS, max_new_tokens=20)
    greedy_scores = sequence_scores(model, src, greedy)
    for k in (2, 4):
        tokens, scores = beam_search(model, src, BOS, EOS, beam_size=k, max_new_tokens=20)
        assert bool((scores >= greedy_scores - 1e-5).all())
        torch.testing.assert_close(scores, sequence_scores(model, src, tokens))


def test_keep_greedy_is_what_keeps_beam_above_greedy():
    """Plain beam search sometimes ends below greedy on an unsure model; the greedy row fixes that."""
    torch.manual_seed(1)
    model = Transformer(50, 50, d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=64).eval()
    with torch.no_grad():
        model.generator.weight.mul_(4.0)
    src = torch.randint(4, 50, (200, 8))
    greedy_scores = sequence_scores(model, src, greedy_decode(model, src, BOS, EOS, max_new_tokens=20))
    _, plain = beam_search(model, src, BOS, EOS, 4, max_new_tokens=20, keep_greedy=False)
    _, kept = beam_search(model, src, BOS, EOS, 4, max_new_tokens=20, keep_greedy=True)
    assert int((plain < greedy_scores - 1e-5).sum()) > 0, "the test model no longer shows pruning losses"
    assert bool((kept >= greedy_scores - 1e-5).all())
    assert bool((kept >= plain - 1e-5).all())


def test_beam_search_finds_better_than_greedy_somewhere():
    """Not a guarantee, but on an unsure model a wider beam should find better outputs."""
    model, src = random_model(9), random_src(9, batch=64)
    greedy_scores = sequence_scores(model, src, greedy_decode(model, src, BOS, EOS, 20))
    _, scores = beam_search(model, src, BOS, EOS, beam_size=4, max_new_tokens=20)
    assert int((scores > greedy_scores + 1e-4).sum()) > 0


def test_a_beam_wider_than_the_vocabulary_still_works():
    model, src = random_model(10, vocab=5), random_src(10, vocab=5)  # 3 writable ids, beam 6
    tokens, scores = beam_search(model, src, BOS, EOS, beam_size=6, max_new_tokens=6)
    check_layout(tokens, BOS, EOS, PAD)
    assert bool(torch.isfinite(scores).all())
    torch.testing.assert_close(sequence_scores(model, src, tokens), scores, atol=1e-4, rtol=1e-5)


def test_length_penalty():
    assert length_penalty(torch.tensor(1), 0.6).item() == pytest.approx(1.0)
    assert length_penalty(torch.tensor(10), 0.0).item() == 1.0
    assert length_penalty(torch.tensor(25), 1.0).item() == pytest.approx(5.0)


def test_sequence_scores_by_hand():
    model, src = random_model(11), random_src(11, batch=2)
    tgt = torch.tensor([[BOS, 5, 6, EOS, PAD], [BOS, 7, 8, 9, EOS]])
    with eval_mode(model):
        logp = model(src, tgt[:, :-1]).log_softmax(-1)
    expected = torch.stack([
        (logp[0, 0, 5] + logp[0, 1, 6] + logp[0, 2, EOS]) / ((5 + 3) / 6) ** 0.6,
        (logp[1, 0, 7] + logp[1, 1, 8] + logp[1, 2, 9] + logp[1, 3, EOS]) / ((5 + 4) / 6) ** 0.6,
    ])
    torch.testing.assert_close(sequence_scores(model, src, tgt, alpha=0.6), expected)


# --- cross-attention weights ------------------------------------------------------------

def test_cross_attention_weights_shape_and_rows():
    model, src = random_model(12, layers=3), random_src(12)
    tgt = torch.randint(4, 30, (src.size(0), 5))
    w = cross_attention_weights(model, src, tgt)
    assert w.shape == (3, src.size(0), 4, 5, src.size(1))
    torch.testing.assert_close(w.sum(-1), torch.ones(3, src.size(0), 4, 5))
    assert bool((w.masked_select((src == PAD)[None, :, None, None, :].expand_as(w)) == 0).all())


class WeightsOnRequest(MultiHeadAttention):
    """An attention module that returns its weights only with need_weights=True (PyTorch's API)."""

    def forward(self, query, key, value, mask=None, cache=None, need_weights=False):
        out, weights = super().forward(query, key, value, mask, cache=cache)
        return out, weights if need_weights else None


def test_cross_attention_weights_asks_for_the_weights():
    model, src = random_model(13), random_src(13)
    tgt = torch.randint(4, 30, (src.size(0), 5))
    expected = cross_attention_weights(model, src, tgt)
    for layer in model.decoder.layers:
        layer.cross_attn.__class__ = WeightsOnRequest
    assert model.decoder.layers[0].cross_attn(torch.randn(1, 2, 32), torch.randn(1, 3, 32),
                                             torch.randn(1, 3, 32))[1] is None
    torch.testing.assert_close(cross_attention_weights(model, src, tgt), expected)


# --- the shipped translator ----------------------------------------------------------------

def test_translate_the_running_example():
    assert translate("I love apples") == "我 喜欢 苹果"
    assert translate("I love apples", beam_size=1) == "我 喜欢 苹果"
    assert translate(["I love apples", "i love apples"]) == ["我 喜欢 苹果"] * 2


def test_punctuation_follows_the_corpus():
    assert translate("I love apples.") == translate("I love apples!") == "我 喜欢 苹果"
    assert translate("Do you love apples?") == translate("do you love apples ?")
    assert translate("Do you love apples?").endswith("吗 ？")


@pytest.mark.parametrize("text", ["<eos> <pad>", "<unk>", "I love <bos> apples", "I love apples <EOS>"])
def test_special_tokens_are_not_words(text):
    with pytest.raises(ValueError, match="special token"):
        translate(text)


@pytest.mark.parametrize("text, error, match", [
    (123, TypeError, "text"), (None, TypeError, "text"), (["I love apples", 5], TypeError, "text"),
    ([], ValueError, "at least one sentence"), ("", ValueError, "at least one word"),
    (" . ", ValueError, "at least one word"),
])
def test_translate_refuses_what_is_not_text(text, error, match):
    with pytest.raises(error, match=match):
        translate(text)


@pytest.mark.parametrize("beam_size", [0, True, 2.0, -1])
def test_translate_refuses_a_bad_beam_size(beam_size):
    with pytest.raises(ValueError, match="beam_size"):
        translate("I love apples", beam_size=beam_size)


def test_translator_matches_references_and_cache():
    from transformer.grammar import generate_corpus, split_corpus

    translator = load_translator()
    pairs = split_corpus(generate_corpus()).test[:100]
    src = translator.encode([en for en, _ in pairs])
    greedy = greedy_decode(translator.model, src, BOS, EOS, 30)
    assert torch.equal(greedy, greedy_decode(translator.model, src, BOS, EOS, 30, use_cache=False))
    beam, beam_scores = beam_search(translator.model, src, BOS, EOS, 4, 0.6, 30)
    assert bool((beam_scores >= sequence_scores(translator.model, src, greedy) - 1e-5).all())
    hyps = translator([en for en, _ in pairs])
    right = sum(h == zh for h, (_, zh) in zip(hyps, pairs, strict=True))
    assert right >= 90, f"{right}/100 held-out sentences right"


def test_translate_reports_unknown_words():
    with pytest.raises(UnknownWordsError) as info:
        translate("I love pineapples with apples with pineapples with durians")
    assert info.value.words == ["pineapples", "with", "durians"]
    assert "pineapples" in str(info.value) and "durians" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_load_translator_needs_vocabularies(tmp_path):
    random_model(0).save_pretrained(tmp_path / "digits")
    with pytest.raises(ValueError, match="without vocabularies"):
        load_translator(tmp_path / "digits")


# --- the command line ----------------------------------------------------------------------

def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transformer", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_cli_translates():
    result = run_cli("translate", "I love apples", "I love apples.")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["我 喜欢 苹果", "我 喜欢 苹果"]


def one_clean_line(stderr: str, *words: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr and "weights_only" not in stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """The CLI in this process (an exception escaping main would fail the test): status, out, err."""
    from transformer.commands import main

    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("sentence, words", [
    ("I love durians", ["durians"]), ("", ["at least one word"]), ("   ", ["at least one word"]),
    ("<eos> <pad>", ["<eos>"]), (" ".join(["apples"] * 40), ["too long"]),
])
def test_cli_refuses_a_sentence_in_one_line(capsys, sentence, words):
    status, out, err = run_main(capsys, "translate", sentence, "--beam", "1")
    assert status == 2 and out == ""
    one_clean_line(err, *words)


def test_cli_translates_the_good_sentences_and_reports_the_bad():
    result = run_cli("translate", "I love apples", "I love durians")  # the real command
    assert result.returncode == 2
    assert result.stdout.strip() == "我 喜欢 苹果"
    one_clean_line(result.stderr, "durians")


def broken_checkpoints(tmp_path):
    """(label, directory, what the message must name) for checkpoints that cannot be loaded."""
    import shutil

    def copy(name):
        target = tmp_path / name
        shutil.copytree(TRANSLATOR_CHECKPOINT, target)
        return target

    cases = [("missing directory", tmp_path / "nowhere", "nowhere")]
    d = copy("corrupt_weights")
    (d / "model.safetensors").write_bytes(b"\x80\x04 not safetensors at all")
    cases.append(("corrupt weights", d, "model.safetensors"))
    d = copy("list_config")
    (d / "config.json").write_text("[1, 2, 3]")
    cases.append(("list-shaped config.json", d, "config.json"))
    d = copy("list_vocab")
    (d / "src_vocab.json").write_text('["<pad>", "<bos>"]')
    cases.append(("list-shaped vocabulary", d, "src_vocab.json"))
    d = copy("corrupt_vocab")
    (d / "tgt_vocab.json").write_text('{"itos": ["<pad>", ')
    cases.append(("corrupt vocabulary", d, "tgt_vocab.json"))
    d = copy("no_vocab")
    (d / "tgt_vocab.json").unlink()
    cases.append(("one vocabulary missing", d, "tgt_vocab.json"))
    d = copy("no_weights")
    (d / "model.safetensors").unlink()
    cases.append(("weights missing", d, "model.safetensors"))
    old = tmp_path / "translator.pt"
    old.write_bytes(b"PK\x03\x04 a pickle archive")
    cases.append(("an old .pt file", old, "translator.pt"))
    return cases


def test_cli_reports_a_bad_checkpoint_in_one_line(tmp_path, capsys):
    for label, directory, name in broken_checkpoints(tmp_path):
        status, out, err = run_main(capsys, "translate", "I love apples", "--checkpoint", str(directory))
        assert status == 1 and out == "", (label, err)
        one_clean_line(err, name)
    label, directory, name = broken_checkpoints(tmp_path / "again")[1]  # and the real command
    result = run_cli("translate", "I love apples", "--checkpoint", str(directory))
    assert result.returncode == 1 and result.stdout == ""
    one_clean_line(result.stderr, name)


def test_cli_reports_a_missing_checkpoint(tmp_path, capsys):
    status, _, err = run_main(capsys, "translate", "I love apples", "--checkpoint", str(tmp_path / "none"))
    assert status == 1 and "none" in err


def test_cli_refuses_a_bad_beam(capsys):
    with pytest.raises(SystemExit) as info:
        run_main(capsys, "translate", "I love apples", "--beam", "0")
    assert info.value.code == 2 and "--beam" in capsys.readouterr().err
