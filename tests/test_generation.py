"""Chapter 10: greedy decoding, sampling, beam search, the KV cache, translate and the CLI."""

import subprocess
import sys

import pytest
import torch

from transformer import Transformer
from transformer.generation import (
    IncrementalDecoder,
    UnknownWordsError,
    beam_search,
    cross_attention_weights,
    eval_mode,
    filter_logits,
    greedy_decode,
    length_penalty,
    load_translator,
    sample_decode,
    sequence_scores,
    translate,
)
from transformer.training import TRANSLATOR_CHECKPOINT

PAD, BOS, EOS = 0, 1, 2
needs_checkpoint = pytest.mark.skipif(
    not TRANSLATOR_CHECKPOINT.is_file(), reason="the shipped translator (chapter 09) is missing"
)


def random_model(seed: int, vocab: int = 30, norm_first: bool = False, layers: int = 2,
                 dropout: float = 0.1) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(vocab, vocab, d_model=32, num_heads=4, num_encoder_layers=2,
                        num_decoder_layers=layers, d_ff=64, dropout=dropout, norm_first=norm_first,
                        max_len=64)
    # Larger output weights give peakier, more varied next-token choices than Xavier's
    # near-uniform ones, so that the decoders do not all emit the same token.
    with torch.no_grad():
        model.generator.weight.mul_(8.0)
    return model.eval()


def random_src(seed: int, batch: int = 6, length: int = 7, vocab: int = 30) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, length), generator=g)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    src[torch.arange(length)[None, :] >= lengths[:, None]] = PAD  # ragged, padded sources
    return src


# --- the KV cache ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_cached_greedy_equals_uncached(seed):
    model = random_model(seed, norm_first=seed % 2 == 1, layers=1 + seed % 3)
    src = random_src(seed)
    with_cache = greedy_decode(model, src, BOS, EOS, max_new_tokens=25, use_cache=True)
    without = greedy_decode(model, src, BOS, EOS, max_new_tokens=25, use_cache=False)
    assert torch.equal(with_cache, without)


@pytest.mark.parametrize("seed", range(4))
def test_cached_beam_and_sampling_equal_uncached(seed):
    model, src = random_model(100 + seed), random_src(100 + seed)
    assert torch.equal(beam_search(model, src, BOS, EOS, 3, max_new_tokens=15, use_cache=True)[0],
                       beam_search(model, src, BOS, EOS, 3, max_new_tokens=15, use_cache=False)[0])
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


def test_cross_attention_projected_once_per_source():
    model, src = random_model(3, layers=3), random_src(3)
    calls = []
    hooks = [layer.cross_attn.k_proj.register_forward_hook(lambda *_: calls.append(1))
             for layer in model.decoder.layers]
    out = greedy_decode(model, src, BOS, None, max_new_tokens=10, use_cache=True)
    for hook in hooks:
        hook.remove()
    assert out.size(1) == 11
    assert len(calls) == 3  # once per layer, not once per layer and step


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


def test_bad_arguments_are_reported():
    model = random_model(0)
    with pytest.raises(ValueError, match="src"):
        greedy_decode(model, torch.zeros(5, dtype=torch.long), BOS, EOS)
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_decode(model, random_src(0), BOS, EOS, max_new_tokens=64)  # model.max_len is 64
    with pytest.raises(ValueError, match="temperature"):
        sample_decode(model, random_src(0), BOS, EOS, temperature=0.0)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, random_src(0), BOS, EOS, beam_size=0)


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
    with pytest.raises(ValueError, match="top_p"):
        filter_logits(logits, top_p=0.0)
    with pytest.raises(ValueError, match="top_k"):
        filter_logits(logits, top_k=0)


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


def test_beam_search_finds_better_than_greedy_somewhere():
    """Not a guarantee, but on an unsure model a wider beam should find better outputs."""
    model, src = random_model(9), random_src(9, batch=64)
    greedy_scores = sequence_scores(model, src, greedy_decode(model, src, BOS, EOS, 20))
    _, scores = beam_search(model, src, BOS, EOS, beam_size=4, max_new_tokens=20)
    assert int((scores > greedy_scores + 1e-4).sum()) > 0


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


def test_cross_attention_weights_shape_and_rows():
    model, src = random_model(12, layers=3), random_src(12)
    tgt = torch.randint(4, 30, (src.size(0), 5))
    w = cross_attention_weights(model, src, tgt)
    assert w.shape == (3, src.size(0), 4, 5, src.size(1))
    torch.testing.assert_close(w.sum(-1), torch.ones(3, src.size(0), 4, 5))
    assert bool((w.masked_select((src == PAD)[None, :, None, None, :].expand_as(w)) == 0).all())


# --- the shipped translator ----------------------------------------------------------------

@needs_checkpoint
def test_translate_the_running_example():
    assert translate("I love apples") == "我 喜欢 苹果"
    assert translate("I love apples", beam_size=1) == "我 喜欢 苹果"
    assert translate(["I love apples", "i love apples"]) == ["我 喜欢 苹果"] * 2


@needs_checkpoint
def test_translator_matches_references_and_cache():
    from transformer.data import generate_corpus, split_corpus

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


@needs_checkpoint
def test_translate_reports_unknown_words():
    with pytest.raises(UnknownWordsError) as info:
        translate("I love pineapples and apples and pineapples and durians")
    assert info.value.words == ["pineapples", "and", "durians"]
    assert "pineapples" in str(info.value) and "durians" in str(info.value)
    assert isinstance(info.value, ValueError)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transformer", *args],
                          capture_output=True, text=True, timeout=120, check=False)


@needs_checkpoint
def test_cli_translates():
    result = run_cli("translate", "I love apples")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "我 喜欢 苹果"


@needs_checkpoint
def test_cli_reports_unknown_words_without_a_traceback():
    result = run_cli("translate", "I love durians", "--beam", "1")
    assert result.returncode == 2
    assert "durians" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_cli_reports_a_missing_checkpoint(tmp_path):
    from transformer.__main__ import main

    assert main(["translate", "I love apples", "--checkpoint", str(tmp_path / "none.pt")]) == 1
