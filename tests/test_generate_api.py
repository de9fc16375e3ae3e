"""`generate` / `model.generate` (chapter 10), as Hugging Face users know it, on both models:
the translator (chapter 08's Transformer) and the language model (chapter 11)."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer import GenerationConfig, LanguageModel, PretrainedModel, Transformer, generate
from transformer.beam_search import beam_search, sequence_scores
from transformer.decoding import greedy_decode, sample_decode
from transformer.generation import generate as plain_generate  # chapter 10's: keywords only


def translator(seed=0, **kwargs):
    torch.manual_seed(seed)
    model = Transformer(30, 30, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                        d_ff=32, max_len=24, **kwargs).eval()
    with torch.no_grad():
        model.generator.weight.mul_(4.0)  # peaky, so that outputs end at different lengths
    return model


def language_model(seed=0, **kwargs):
    torch.manual_seed(seed)
    model = LanguageModel(40, d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0, max_len=40,
                          **kwargs).eval()
    with torch.no_grad():
        model.generator.bias.normal_(0, 2.0)
    return model


def left_pad(prompts, pad_id=0):
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    return ids, (ids != pad_id).long() if pad_id not in sum(prompts, []) else None


# --- the translator: the method is the chapter's functions --------------------------------

def test_translator_generate_is_greedy_decode_and_beam_search_with_the_config_ids():
    model = translator()
    src = torch.randint(3, 30, (4, 6))
    src[1, 3:] = 0  # padding
    assert torch.equal(model.generate(src), greedy_decode(model, src, 1, 2))
    assert torch.equal(generate(model, src), model.generate(src))
    tokens, _ = beam_search(model, src, 1, 2, 3)
    assert torch.equal(model.generate(src, num_beams=3), tokens)
    # length_penalty (Hugging Face's name) is beam_search's alpha (GNMT's), and it matters.
    differs = False
    for seed in range(6):
        other, ids = translator(seed), torch.randint(3, 30, (8, 5))
        short, _ = beam_search(other, ids, 1, 2, 3, alpha=0.0, max_new_tokens=6)
        long, _ = beam_search(other, ids, 1, 2, 3, alpha=3.0, max_new_tokens=6)
        assert torch.equal(other.generate(ids, 6, num_beams=3, length_penalty=0.0), short)
        assert torch.equal(other.generate(ids, 6, num_beams=3, length_penalty=3.0), long)
        differs |= not torch.equal(short, long)
    assert differs, "no seed where the length penalty changes the beam's choice"
    lm = language_model()
    assert model.lm_head is model.generator and lm.lm_head is lm.generator
    drawn = sample_decode(model, src, 1, 2, generator=torch.Generator().manual_seed(5))
    assert torch.equal(model.generate(src, do_sample=True, generator=torch.Generator().manual_seed(5)), drawn)


def test_several_beam_hypotheses_come_best_first_and_scored_right():
    model = translator(1)
    src = torch.randint(3, 30, (3, 5))
    tokens, scores = beam_search(model, src, 1, 2, 4, num_return_sequences=3, keep_greedy=False)
    assert tokens.shape[0] == 9 and scores.shape == (9,)
    per_source = scores.view(3, 3)
    assert (per_source[:, :-1] >= per_source[:, 1:]).all()  # best first
    torch.testing.assert_close(sequence_scores(model, src.repeat_interleave(3, 0), tokens), scores,
                               atol=1e-4, rtol=0)
    assert torch.equal(model.generate(src, num_beams=4, num_return_sequences=3), tokens)
    best, _ = beam_search(model, src, 1, 2, 4, keep_greedy=False)
    assert torch.equal(tokens[::3, : best.size(1)], best)


def test_sampling_several_sequences_repeats_each_source():
    model = translator(2)
    src = torch.randint(3, 30, (2, 5))
    out = model.generate(src, do_sample=True, num_return_sequences=3, generator=torch.Generator().manual_seed(0))
    alone = sample_decode(model, src.repeat_interleave(3, 0), 1, 2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, alone)


def test_no_special_id_is_hard_coded():
    """A translator whose pad, bos and eos are 3, 4, 5: never writes 3 or 4, stops at 5."""
    model = translator(3, pad_id=3, bos_id=4, eos_id=5)
    with torch.no_grad():  # make the specials the favourite tokens, and 0, 1, 2 ordinary ones
        model.generator.bias[[3, 4]] += 50.0
    src = torch.randint(6, 30, (8, 5))
    out = model.generate(src)
    assert (out[:, 0] == 4).all() and not (out[:, 1:] == 4).any()
    for row in out[:, 1:].tolist():
        end = row.index(5) + 1 if 5 in row else len(row)
        assert 3 not in row[:end] and all(i == 3 for i in row[end:])
    lm = language_model(4, pad_id=39, bos_id=38, eos_id=7)
    with torch.no_grad():
        lm.generator.bias[[38, 39]] += 50.0
        lm.generator.bias[7] += 5.0  # a likely end
    out = lm.generate(torch.tensor([[38, 10, 11]] * 4), 12, do_sample=True,
                      generator=torch.Generator().manual_seed(0))
    written = out[:, 3:]
    assert not (written == 38).any()
    for row in written.tolist():
        end = row.index(7) + 1 if 7 in row else len(row)
        assert 39 not in row[:end] and all(i == 39 for i in row[end:])
    assert (written == 7).any(), "the model's own eos_id ends rows"


# --- the language model: prompts of several lengths, beam search ---------------------------

@settings(max_examples=15, deadline=None)
@given(lengths=st.lists(st.integers(1, 7), min_size=2, max_size=4), seed=st.integers(0, 50),
       beams=st.sampled_from([1, 3]), use_cache=st.booleans())
def test_each_row_of_a_left_padded_batch_equals_its_prompt_alone(lengths, seed, beams, use_cache):
    model = language_model(seed % 3)
    g = torch.Generator().manual_seed(seed)
    prompts = [[1] + torch.randint(3, 40, (n - 1,), generator=g).tolist() for n in lengths]
    ids, mask = left_pad(prompts)
    batch = model.generate(ids, 8, attention_mask=mask, num_beams=beams, use_cache=use_cache)
    width = ids.size(1)
    for prompt, row in zip(prompts, batch, strict=True):
        alone = model.generate(torch.tensor([prompt]), 8, num_beams=beams, use_cache=use_cache)[0]
        start = width - len(prompt)
        assert (row[:start] == 0).all()  # the left padding is kept
        assert torch.equal(row[start:start + alone.size(0)], alone), (prompt, row, alone)
        assert (row[start + alone.size(0):] == 0).all()  # padding after the row's end


def test_beam_search_for_the_language_model_never_scores_below_greedy():
    model = language_model(5)
    prompt = torch.tensor([[1, 12, 13], [1, 20, 21]])
    greedy = model.generate(prompt, 10)
    beams = model.generate(prompt, 10, num_beams=4)

    def score(out):  # log P of the generated ids, GNMT-normalised as beam search ranks them
        logp = model(out[:, :-1]).log_softmax(-1).gather(-1, out[:, 1:, None]).squeeze(-1)[:, 2:]
        real = out[:, 3:] != 0
        return (logp * real).sum(-1) / ((5 + real.sum(-1)) / 6) ** 0.6

    with torch.no_grad():
        assert (score(beams) >= score(greedy) - 1e-5).all()


def test_streamer_and_stopping_criteria():
    model = language_model(6)
    ids, mask = left_pad([[1, 5, 6, 7], [1, 9]])

    class Collect:
        def __init__(self):
            self.steps, self.ended = [], False

        def put(self, value):
            self.steps.append(value.clone())

        def end(self):
            self.ended = True

    streamer = Collect()
    out = model.generate(ids, 6, attention_mask=mask, streamer=streamer, ignore_eos=True)
    assert streamer.ended
    # Row 1 (the short prompt) generated first; every new id was streamed, in order.
    streamed = torch.stack(streamer.steps, dim=1)  # [2, steps]
    for row, new in zip(out, streamed, strict=True):
        written = new[new != 0]
        assert torch.equal(written, row[ids.size(1):][: written.numel()])
        assert written.numel() == 6
    # The criterion sees each row as [its prompt, its new ids] (no left padding): at width 5,
    # row 0 (prompt 4) has written 1 id and row 1 (prompt 2) 3 ids; both end there.
    stopped = model.generate(ids, 6, attention_mask=mask, ignore_eos=True,
                             stopping_criteria=lambda tokens, logits: torch.full((2,), tokens.size(1) >= 5))
    width = ids.size(1)
    assert torch.equal(stopped[0, width:width + 1], out[0, width:width + 1]) and (stopped[0, width + 1:] == 0).all()
    assert torch.equal(stopped[1, width:width + 3], out[1, width:width + 3]) and stopped.size(1) == width + 3


def test_both_models_have_the_method_and_no_module_is_changed_at_import():
    """model.generate is appendix 15's hf_generate around chapter 10's generate, imported when
    called: nothing of chapter 08's class is set from outside (importing the package assigns no
    attribute to it)."""
    for model, ids in ((translator(), torch.randint(3, 30, (1, 4))), (language_model(), torch.tensor([[1, 5]]))):
        assert torch.equal(model.generate(ids, 3), generate(model, ids, 3))
    assert "generate_function" not in vars(PretrainedModel)
    assert vars(PretrainedModel)["generate"].__module__ == "transformer.pretrained"


def test_a_generation_config_is_checked_once_and_keyword_arguments_override_it():
    model, src = translator(), torch.randint(3, 30, (3, 6))
    beams = GenerationConfig(num_beams=3, max_new_tokens=8)
    assert torch.equal(model.generate(src, generation_config=beams), model.generate(src, 8, num_beams=3))
    # A keyword argument overrides the config's field; the config itself does not change.
    assert torch.equal(generate(model, src, generation_config=beams, num_beams=1), model.generate(src, 8))
    assert beams.num_beams == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        beams.num_beams = 0  # type: ignore[misc]  # it was checked when made: it cannot change after
    # Checked when made, with the field's name, and again when an override makes a copy.
    for bad, name in ((dict(num_beams=0), "num_beams"), (dict(top_k=5), "top_k"),
                      (dict(do_sample=True, temperature=0.0), "temperature"),
                      (dict(num_beams=2, ignore_eos=True), "eos_id"), (dict(length_penalty=-1.0), "length_penalty")):
        with pytest.raises(ValueError, match=name):
            GenerationConfig(**bad)
        with pytest.raises(ValueError, match=name):
            model.generate(src, generation_config=GenerationConfig(), **bad)
    with pytest.raises(TypeError, match="num_beam"):
        model.generate(src, num_beam=3)  # a misspelt option is named, not ignored
    with pytest.raises(TypeError, match="generation_config"):
        model.generate(src, generation_config={"num_beams": 3})


def test_chapter_10s_generate_takes_an_on_step_hook_and_refuses_what_it_cannot_do():
    model, ids = language_model(6), torch.tensor([[1, 5, 6], [1, 7, 8]])
    seen = []

    def on_step(tokens, logits, new):
        seen.append((tokens.size(1), logits.shape, new.clone()))
        return tokens.size(1) >= 5  # end every row once it holds 5 ids

    out = plain_generate(model, ids, 6, ignore_eos=True, on_step=on_step)
    assert out.shape == (2, 5) and [width for width, _, _ in seen] == [4, 5]
    assert all(shape == (2, model.vocab_size) and bool(new.all()) for _, shape, new in seen)
    assert torch.equal(out, plain_generate(model, ids, 6, ignore_eos=True)[:, :5])
    with pytest.raises(TypeError, match="on_step"):
        plain_generate(model, ids, 3, on_step=3)
    with pytest.raises(ValueError, match="on_step"):
        plain_generate(model, ids, 3, num_beams=2, on_step=on_step)
    with pytest.raises(ValueError, match="temperature"):
        plain_generate(model, ids, 3, temperature=0.7)  # without do_sample it would change nothing
    with pytest.raises(TypeError, match="generation_config"):
        plain_generate(model, ids, 3, generation_config=GenerationConfig())  # chapter 10's takes keywords only
