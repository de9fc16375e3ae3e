"""Tests for transformer.lm (chapter 11): the bigram baseline, perplexity, generation."""

import math

import pytest
import torch
import torch.nn.functional as F

from transformer.data import BOS_ID, EOS_ID, PAD_ID
from transformer.fast import speed_up
from transformer.generation import generate
from transformer.kv_cache import KVCache
from transformer.lm import BigramLanguageModel, LanguageModel, lm_loss, perplexity
from transformer.losses import IGNORE_INDEX
from transformer.poems import continue_poems
from transformer.text import CharVocab, encode_stream, random_windows
from transformer.training import TrainState, fit


@pytest.fixture(scope="module")
def vocab():
    return CharVocab.build(["床前明月光，疑是地上霜。\n举头望明月，低头思故乡。", "春眠不觉晓，处处闻啼鸟。"])


@pytest.fixture(scope="module")
def stream(vocab):
    return encode_stream(["床前明月光，疑是地上霜。\n举头望明月，低头思故乡。", "春眠不觉晓，处处闻啼鸟。"] * 3, vocab)


# --- the bigram baseline -----------------------------------------------------------

def test_bigram_counts_pairs_by_hand(vocab):
    stream = encode_stream(["明月明月光", "明光"], vocab)  # <bos> 明 月 明 月 光 <eos> <bos> 明 光 <eos>
    model = BigramLanguageModel(stream, len(vocab), weight=0.9)
    m, y, g = vocab.stoi["明"], vocab.stoi["月"], vocab.stoi["光"]
    probs = model.log_probs.exp()
    # 明 is followed by 月 twice and by 光 once; the unigram gets the other 10%.
    assert probs[m, y].item() == pytest.approx(0.9 * 2 / 3 + 0.1 * model.unigram[y].item())
    assert probs[m, g].item() == pytest.approx(0.9 * 1 / 3 + 0.1 * model.unigram[g].item())
    # After <eos> comes <bos>, which is never counted: <eos> is never a context with a label.
    assert torch.allclose(probs[EOS_ID], model.unigram)


def test_unigram_is_add_one_over_the_possible_labels(vocab):
    stream = encode_stream(["明月明月光"], vocab)  # labels: 明 月 明 月 光 <eos>
    model = BigramLanguageModel(stream, len(vocab), weight=0.0)
    possible = len(vocab) - 2  # every token but <pad> and <bos>
    expected = torch.ones(len(vocab)) / (6 + possible)
    expected[vocab.stoi["明"]] = expected[vocab.stoi["月"]] = 3 / (6 + possible)
    expected[vocab.stoi["光"]] = expected[EOS_ID] = 2 / (6 + possible)
    expected[[PAD_ID, BOS_ID]] = 0
    assert torch.allclose(model.unigram, expected)
    assert torch.allclose(model.log_probs.exp(), expected.expand(len(vocab), -1))


def test_bigram_rows_are_distributions_without_pad_or_bos(vocab, stream):
    for weight in (0.0, 0.3, 0.99):
        probs = BigramLanguageModel(stream, len(vocab), weight).log_probs.exp()
        assert torch.allclose(probs.sum(-1), torch.ones(len(vocab)), atol=1e-5)
        assert (probs[:, [PAD_ID, BOS_ID]] == 0).all()


def test_bigram_forward_has_a_language_models_interface(vocab, stream):
    model = BigramLanguageModel(stream, len(vocab))
    ids = stream[:10].view(2, 5)
    logits = model(ids)
    assert logits.shape == (2, 5, len(vocab))
    assert torch.equal(logits[1, 3], model.log_probs[ids[1, 3]])


@pytest.mark.parametrize("kwargs, message", [
    (dict(weight=1.0), "weight"),  # the bigram alone: infinite held-out perplexity
    (dict(weight=-0.1), "weight"),
    (dict(weight=True), "weight"),
    (dict(weight=float("nan")), "weight"),
    (dict(vocab_size=3), "outside"),
])
def test_bigram_refuses_bad_arguments(vocab, stream, kwargs, message):
    args = dict(stream=stream, vocab_size=len(vocab), weight=0.5) | kwargs
    with pytest.raises(ValueError, match=message):
        BigramLanguageModel(**args)
    with pytest.raises(ValueError, match="1-D LongTensor"):
        BigramLanguageModel(stream.float(), len(vocab))


# --- perplexity ----------------------------------------------------------------------

def test_perplexity_equals_exp_cross_entropy_over_the_stream(vocab, stream):
    model = BigramLanguageModel(stream, len(vocab), 0.5)
    labels = stream[1:].masked_fill(stream[1:] == BOS_ID, -100)  # chapter 09's IGNORE_INDEX
    want = math.exp(F.cross_entropy(model.log_probs[stream[:-1]], labels, ignore_index=-100).item())
    for seq_len in (1, 7, 64):  # the bigram looks one token back: windows do not matter
        assert perplexity(model, stream, seq_len, batch_size=3) == pytest.approx(want, rel=1e-5)


def test_lm_loss_is_the_mean_over_counted_labels_in_fits_form(vocab, stream):
    torch.manual_seed(0)
    model = LanguageModel(len(vocab), d_model=16, num_heads=2, num_layers=1, dropout=0.0)
    inputs, labels = random_windows(stream, 8, 20, torch.Generator().manual_seed(0))
    assert (labels == IGNORE_INDEX).any()  # windows across a document boundary
    loss, count = lm_loss(model, (inputs, labels))
    keep = labels != IGNORE_INDEX
    logits = model(inputs)
    want = -logits.log_softmax(-1)[keep].gather(-1, labels[keep][:, None]).mean()
    assert count == int(keep.sum()) and loss.item() == pytest.approx(want.item(), rel=1e-5)
    # chapter 09's fit trains a language model with it: the loss falls on a repeated batch
    state = TrainState(model, torch.optim.Adam(model.parameters(), lr=1e-2))
    run = fit(state, [(inputs, labels)] * 30, loss_fn=lm_loss, epochs=1, progress=False)
    assert run["loss"][-1] < 0.5 * run["loss"][0]


def test_the_bigrams_loss_is_read_from_its_table(vocab, stream):
    model = BigramLanguageModel(stream, len(vocab), 0.6)
    inputs, labels = random_windows(stream, 5, 9, torch.Generator().manual_seed(2))
    labels[0, :3] = IGNORE_INDEX
    plain = F.cross_entropy(model(inputs).flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
    calls = []
    model.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    loss, count = lm_loss(model, (inputs, labels))
    assert calls == [] and count == int((labels != IGNORE_INDEX).sum())  # no [B, T, V] logits
    assert loss.item() == pytest.approx(plain.item(), rel=1e-6)
    assert model.next_token_loss(inputs, torch.full_like(labels, IGNORE_INDEX)).item() == 0.0


def test_perplexity_of_a_uniform_model_is_the_number_of_choices(vocab, stream):
    model = BigramLanguageModel(stream, len(vocab), 0.0)
    model.log_probs.fill_(-math.log(len(vocab) - 2))
    model.log_probs[:, [PAD_ID, BOS_ID]] = float("-inf")
    assert perplexity(model, stream, 8) == pytest.approx(len(vocab) - 2, rel=1e-5)


def test_perplexity_restores_the_mode(vocab, stream):
    model = BigramLanguageModel(stream, len(vocab)).train()
    perplexity(model, stream, 8)
    assert model.training


# --- generation ------------------------------------------------------------------------

def test_generate_never_writes_pad_or_bos_and_pads_after_eos(vocab, stream):
    model = BigramLanguageModel(stream, len(vocab), 0.5)
    out = generate(model, torch.full((64, 1), BOS_ID), 30, do_sample=True, generator=torch.Generator().manual_seed(0))
    assert out.shape[0] == 64 and out.shape[1] <= 31
    assert torch.equal(out[:, 0], torch.full((64,), BOS_ID))
    for row in out[:, 1:].tolist():
        end = row.index(EOS_ID) + 1 if EOS_ID in row else len(row)
        assert BOS_ID not in row and PAD_ID not in row[:end]
        assert all(i == PAD_ID for i in row[end:])


class _LovesSpecials(torch.nn.Module):
    """A model whose favourite next tokens are <bos>, then <pad>, then <eos>."""

    pad_id, bos_id, eos_id, vocab_size = PAD_ID, BOS_ID, EOS_ID, 10

    def forward(self, ids):
        logits = torch.zeros(*ids.shape, 10)
        logits[..., BOS_ID], logits[..., PAD_ID], logits[..., EOS_ID] = 9.0, 8.0, 7.0
        return logits


def test_generate_never_writes_pad_or_bos_even_when_the_model_prefers_them():
    out = generate(_LovesSpecials(), torch.full((3, 1), BOS_ID), 5)
    assert out.tolist() == [[BOS_ID, EOS_ID]] * 3, "greedy must pick <eos>, the best allowed token"
    sampled = generate(_LovesSpecials(), torch.full((50, 1), BOS_ID), 5, do_sample=True, temperature=5.0,
                       generator=torch.Generator().manual_seed(0))
    assert not (sampled[:, 1:] == BOS_ID).any()


def test_generate_greedy_follows_the_most_likely_pair(vocab, stream):
    model = BigramLanguageModel(stream, len(vocab), 0.99)
    prompt = torch.tensor([[BOS_ID, vocab.stoi["春"]]])
    out = generate(model, prompt, 4)  # greedy by default, as Hugging Face's generate
    assert vocab.decode(out[0]) == "春眠不觉晓"


def test_generate_is_reproducible_with_a_seeded_generator(vocab, stream):
    model = BigramLanguageModel(stream, len(vocab), 0.5)
    prompt = torch.full((8, 1), BOS_ID)
    a = generate(model, prompt, 20, do_sample=True, generator=torch.Generator().manual_seed(3), top_k=5)
    b = generate(model, prompt, 20, do_sample=True, generator=torch.Generator().manual_seed(3), top_k=5)
    assert torch.equal(a, b)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(max_new_tokens=0), ValueError, "max_new_tokens"),
    (dict(max_new_tokens=True), ValueError, "max_new_tokens"),
    (dict(do_sample=True, temperature=0.0), ValueError, "temperature"),
    (dict(do_sample=True, temperature=float("nan")), ValueError, "temperature"),
    (dict(temperature=0.7), ValueError, "^temperature is used only when sampling: pass do_sample=True"),
    (dict(do_sample=1), ValueError, "do_sample"),
    (dict(do_sample=True, top_k=0), ValueError, "top_k"),
    (dict(do_sample=True, top_p=1.5), ValueError, "top_p"),
    (dict(input_ids=torch.zeros(2, 0, dtype=torch.long)), ValueError, "input_ids"),
    (dict(input_ids=torch.ones(2, 1)), TypeError, "input_ids"),
])
def test_generate_refuses_bad_arguments(vocab, stream, kwargs, error, message):
    model = BigramLanguageModel(stream, len(vocab))
    args = dict(input_ids=torch.full((2, 1), BOS_ID), max_new_tokens=5) | kwargs
    with pytest.raises(error, match=message):
        generate(model, **args)


def test_continue_poems_keeps_only_complete_lines(vocab, stream):
    model = BigramLanguageModel(stream, len(vocab), 0.99)
    written = continue_poems(model, ["床前明月光，疑是地上霜。", "春眠不觉晓，处处闻啼鸟。"], vocab,
                             max_new_tokens=30)
    assert len(written) == 2
    for lines in written:
        assert all(line and "\n" not in line for line in lines)
    # With 3 tokens there is no room for a whole line: nothing complete is returned.
    assert continue_poems(model, ["床前明月光，疑是地上霜。"], vocab, max_new_tokens=3) == [[]]


# --- the decoder-only language model ---------------------------------------------------

# Every refinement of chapter 13 at once (tests/test_refinements.py tests each one).
EVERY_OPTION = dict(positions="rotary", norm="rms", activation="swiglu", num_kv_heads=1)


def small_lm(model_class: type = LanguageModel, **kwargs):
    torch.manual_seed(0)
    config = dict(vocab_size=30, d_model=16, num_heads=2, num_layers=2, d_ff=24, dropout=0.0, max_len=40)
    return model_class(**(config | kwargs)).eval()


def variant(name: str) -> LanguageModel:
    """Chapter 11's model as built ("2017"), with chapter 13's refinements ("every_option"), or
    after appendix 14's speed_up ("2017-fast")."""
    from transformer.refinements import ModernLanguageModel

    if name == "every_option":
        return small_lm(ModernLanguageModel, **EVERY_OPTION)
    return speed_up(small_lm()) if name == "2017-fast" else small_lm()


VARIANTS = ["2017", "every_option", "2017-fast"]


def test_lm_shapes_tied_weights_and_no_cross_attention():
    model = small_lm()
    ids = torch.randint(4, 30, (3, 7))
    assert model(ids).shape == (3, 7, 30)
    assert model.generator.weight is model.embed.embedding.weight
    assert all(layer.cross_attn is None for layer in model.decoder.layers)
    untied = small_lm(tie_output=False)
    assert sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in model.parameters()) == 30 * 16


@pytest.mark.parametrize("norm_first", [True, False])
def test_lm_has_no_future_leak(norm_first):
    model = small_lm(norm_first=norm_first)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        ids = torch.randint(4, 30, (2, 12), generator=g)
        t = int(torch.randint(0, 12, (1,), generator=g))
        changed = ids.clone()
        changed[:, t] = (changed[:, t] + 1 - 4) % 26 + 4
        torch.testing.assert_close(model(ids)[:, :t], model(changed)[:, :t], atol=0, rtol=0)


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("train", [False, True])
def test_lm_causal_flag_equals_chapter_04s_mask(norm_first, train):
    """The model hands the causal mask to attention as a flag (is_causal, the fused kernel's):
    same logits and gradients as chapter 04's causal_mask given to the same blocks."""
    from transformer.masks import causal_mask

    model = small_lm(norm_first=norm_first, dropout=0.0).train(train)
    ids = torch.randint(4, 30, (3, 9))

    def by_mask(ids):  # the model's forward, spelled out with an explicit mask
        x = model.positional(model.embed(ids))
        return model.generator(model.decoder(x, None, causal_mask(ids.size(1))))

    a, b = model(ids), by_mask(ids)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    ga = torch.autograd.grad(a.square().sum(), list(model.parameters()))
    gb = torch.autograd.grad(b.square().sum(), list(model.parameters()))
    for x, y in zip(ga, gb, strict=True):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


def test_lm_gives_the_kernel_the_causal_flag_and_no_mask(monkeypatch):
    seen = []
    fused = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append((kwargs.get("attn_mask") is None, kwargs.get("is_causal", False)))
        return fused(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    model = small_lm(dropout=0.0).eval()
    with torch.no_grad():
        model(torch.randint(4, 30, (2, 6)))
        assert seen == []  # chapter 11's model as built: chapter 05's attention, no kernel
    speed_up(model)  # appendix 14: the fused kernel, given the flag instead of a mask
    with torch.no_grad():
        model(torch.randint(4, 30, (2, 6)))
        assert seen == [(True, True)] * len(model.decoder.layers)
        seen.clear()
        caches = [{"self": KVCache(16)} for _ in model.decoder.layers]
        model(torch.randint(4, 30, (2, 6)), caches)
        model(torch.randint(4, 30, (2, 1)), caches, start=6)  # one new position: no mask at all
        assert seen == [(True, True)] * len(model.decoder.layers) + [(True, False)] * len(model.decoder.layers)


def test_lm_kv_cache_gives_the_logits_of_a_full_pass():
    model = small_lm()
    ids = torch.randint(4, 30, (2, 11))
    full = model(ids)  # [2, 11, V]
    caches = [{"self": KVCache(16)} for _ in model.decoder.layers]
    pieces = [model(ids[:, :4], caches)]  # a prompt of 4, a chunk of 3, then one token at a time
    pieces.append(model(ids[:, 4:7], caches, start=4))
    for t in range(7, 11):
        pieces.append(model(ids[:, t:t + 1], caches, start=t))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=0)
    assert all(cache["self"]["k"].shape == (2, 2, 11, 8) for cache in caches)


def test_generate_with_and_without_cache_write_the_same_tokens():
    model = small_lm()
    prompt = torch.tensor([[BOS_ID, 5, 6], [BOS_ID, 7, 8]])
    for kwargs in (dict(), dict(do_sample=True, temperature=0.7, top_p=0.9)):
        draw = (lambda: dict(generator=torch.Generator().manual_seed(2))) if kwargs else dict
        a = generate(model, prompt, 20, use_cache=True, **draw(), **kwargs)
        b = generate(model, prompt, 20, use_cache=False, **draw(), **kwargs)
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="max_len"):
        generate(model, prompt, 38)


def test_generate_uses_the_cache_by_default_when_the_model_has_one():
    """The lengths the model is called with: the prompt, then one new token per step with
    the cache (the prefix each time without), and no call after the last token."""
    model = small_lm()
    prompt = torch.tensor([[BOS_ID, 5, 6], [BOS_ID, 7, 8]])
    lengths = []
    hook = model.register_forward_pre_hook(lambda module, args: lengths.append(args[0].size(1)))
    default = generate(model, prompt, 5, ignore_eos=True)
    assert lengths == [3, 1, 1, 1, 1]
    lengths.clear()
    without = generate(model, prompt, 5, ignore_eos=True, use_cache=False)
    assert lengths == [3, 4, 5, 6, 7]
    hook.remove()
    assert torch.equal(default, without) and default.shape == (2, 8)


def test_generate_drives_a_model_without_a_cache_and_refuses_to_cache_it():
    stream = torch.randint(3, 12, (200,))
    bigram = BigramLanguageModel(stream, 12, 0.5)
    prompt = torch.tensor([[BOS_ID, 5]])
    out = generate(bigram, prompt, 4, do_sample=True, generator=torch.Generator().manual_seed(0), ignore_eos=True)
    assert out.shape == (1, 6)
    with pytest.raises(ValueError, match="^use_cache=True needs a model whose decoder.layers take a KV cache"):
        generate(bigram, prompt, 4, use_cache=True)
    with pytest.raises(ValueError, match="use_cache must be True or False"):
        generate(bigram, prompt, 4, use_cache=1)


def test_lm_save_and_load_round_trip(tmp_path):
    model = small_lm(norm_first=False, activation="relu")
    with torch.no_grad():
        model.generator.bias.normal_()
    model.save_pretrained(tmp_path / "lm")
    loaded = LanguageModel.from_pretrained(tmp_path / "lm")
    assert loaded.config == model.config and not loaded.training
    assert loaded.generator.weight is loaded.embed.embedding.weight, "tied weights stay tied"
    ids = torch.randint(4, 30, (2, 9))
    assert torch.equal(loaded(ids), model(ids))
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


@pytest.mark.parametrize("kwargs, message", [
    (dict(vocab_size=0), "vocab_size"),
    (dict(max_len=True), "max_len"),
    (dict(pad_id=30), "pad_id"),
    (dict(tie_output=1), "tie_output"),
    (dict(num_heads=3), "divisible"),
])
def test_lm_refuses_bad_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        small_lm(**kwargs)


def test_lm_refuses_bad_calls():
    model = small_lm()
    with pytest.raises(ValueError, match="ids must be"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^ids is too long: positions 0\.\.40 exceed max_len"):
        model(torch.zeros(1, 41, dtype=torch.long))
    with pytest.raises(ValueError, match="start"):
        model(torch.zeros(1, 2, dtype=torch.long), start=-1)


# --- the toolchain: torch.export and torch.compile(fullgraph=True) -------------------------

@pytest.mark.parametrize("name", VARIANTS)
def test_lm_exports_with_dynamic_batch_and_length_and_matches_eager(name):
    model = variant(name)
    batch, length = torch.export.Dim("batch", max=64), torch.export.Dim("length", max=40)
    program = torch.export.export(model, (torch.randint(4, 30, (3, 9)),),
                                  dynamic_shapes={"ids": {0: batch, 1: length}})
    for b, t in [(1, 1), (2, 5), (5, 40)]:
        ids = torch.randint(4, 30, (b, t))
        with torch.no_grad():
            torch.testing.assert_close(program.module()(ids), model(ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", VARIANTS)
def test_lm_compiles_to_one_graph_and_keeps_the_eager_id_check(name):
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    model = variant(name)
    compiled = torch.compile(model, backend=counting_backend, fullgraph=True, dynamic=False)
    ids = torch.randint(4, 30, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids), model(ids), atol=1e-5, rtol=0)
    assert len(graphs) == 1
    with pytest.raises(IndexError, match="ids must lie in"):
        model(torch.full((1, 3), 30))  # an id outside the vocabulary, in eager mode


# --- saving with the vocabulary, and the shipped model ------------------------------------

def test_save_language_model_round_trips_in_half_precision(tmp_path, vocab):
    from transformer.lm import VOCAB_FILE, load_language_model, save_language_model

    torch.manual_seed(0)
    model = LanguageModel(len(vocab), d_model=16, num_heads=2, num_layers=1, dropout=0.0, max_len=32)
    saved = save_language_model(tmp_path / "lm", model, vocab, metrics={"note": "x"}, dtype=torch.float16)
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "model.safetensors", VOCAB_FILE]
    assert next(model.parameters()).dtype == torch.float32, "saving in half precision leaves the model alone"
    loaded, loaded_vocab, metrics = load_language_model(saved)
    assert loaded_vocab == vocab and metrics == {"note": "x"} and not loaded.training
    assert next(loaded.parameters()).dtype == torch.float32
    assert loaded.generator.weight is loaded.embed.embedding.weight
    for name, weight in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], weight.half().float()), name  # float16 rounding only
    with pytest.raises(ValueError, match="vocab has"):
        save_language_model(tmp_path / "bad", model, CharVocab.build(["明月"]))
    with pytest.raises(ValueError, match="dtype"):
        save_language_model(tmp_path / "bad", model, vocab, dtype=torch.int8)
    (saved / VOCAB_FILE).write_text('{"itos": ["<pad>"]}', encoding="utf-8")
    with pytest.raises(ValueError, match=VOCAB_FILE):
        load_language_model(saved)
    (saved / VOCAB_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=VOCAB_FILE):
        load_language_model(saved)


def test_the_shipped_language_model_is_small_and_loads():
    from transformer.lm import LM_CHECKPOINT, load_language_model

    size = sum(p.stat().st_size for p in LM_CHECKPOINT.iterdir())
    assert size <= 8_000_000, f"the shipped language model takes {size:,} bytes"
    model, vocab, metrics = load_language_model()
    assert len(vocab) == model.vocab_size and metrics["config"]["model"]["task"] == "lm"
    assert 0 < len(metrics["losses"]) <= metrics["step"] == metrics["config"]["train"]["steps"]
    curve = [step for step, _ in metrics["valid_curve"]]
    assert curve == sorted(curve) and curve[-1] <= metrics["step"]
    assert math.exp(metrics["valid_loss"]) < 150  # chapter 11: the bigram's validation perplexity is about 220
    ids = torch.tensor([vocab.encode("床前看月光，", add_special=True)[:-1]])
    assert model(ids).shape == (1, ids.size(1), len(vocab))
