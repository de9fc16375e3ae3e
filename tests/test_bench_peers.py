"""tools/bench_peers.py (issue 25) times what it says: each side's timed generate call gives the
tokens of its own eager reference (a plain loop of full forward passes, or the library without
its cache), both sides write the same number of tokens, and the models have equal sizes.
Skipped where Hugging Face transformers is not installed (requirements-bench.txt)."""

import pytest
import torch

pytest.importorskip("transformers")

from tools import bench_peers as bench  # noqa: E402 - after the skip: it exits without transformers

NEW_TOKENS = 6


def eager_greedy_lm(model, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """The plain reference: a full forward pass over everything so far, argmax, append."""
    ids = prompts
    with torch.no_grad():
        for _ in range(new_tokens):
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def eager_greedy_translator(model, src: torch.Tensor, new_tokens: int) -> torch.Tensor:
    out = torch.full((src.size(0), 1), model.bos_id, dtype=torch.long)
    with torch.no_grad():
        for _ in range(new_tokens):
            out = torch.cat([out, model(src, out)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out


@pytest.mark.parametrize("batch", [1, 3])
def test_language_models_generate_their_eager_tokens_and_as_many(batch):
    ours, theirs, prompts = bench.lm_generation_inputs(batch, prompt_len=5)
    timed_ours, timed_theirs = bench.greedy_fns(ours, theirs, prompts, NEW_TOKENS)
    mine = timed_ours()
    torch.testing.assert_close(mine, eager_greedy_lm(ours, prompts, NEW_TOKENS), atol=0, rtol=0)
    hf = timed_theirs()
    hf_eager = theirs.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=NEW_TOKENS,
                               min_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1, use_cache=False)
    torch.testing.assert_close(hf, hf_eager, atol=0, rtol=0)
    assert mine.shape == hf.shape == (batch, 5 + NEW_TOKENS)


@pytest.mark.parametrize("batch", [1, 3])
def test_translators_generate_their_eager_tokens_and_as_many(batch):
    ours, theirs, src = bench.translator_generation_inputs(batch, src_len=7)
    timed_ours, timed_theirs = bench.greedy_fns(ours, theirs, src, NEW_TOKENS)
    mine = timed_ours()
    torch.testing.assert_close(mine, eager_greedy_translator(ours, src, NEW_TOKENS), atol=0, rtol=0)
    hf = timed_theirs()
    hf_eager = theirs.generate(src, attention_mask=torch.ones_like(src), max_new_tokens=NEW_TOKENS,
                               min_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1, use_cache=False)
    torch.testing.assert_close(hf, hf_eager, atol=0, rtol=0)
    assert mine.shape == hf.shape == (batch, 1 + NEW_TOKENS)  # the start id, then the new ids


@pytest.mark.parametrize("size", ["issue", "chapter11"])
def test_peers_have_equal_sizes_and_both_train_steps_learn(size):
    """Parameter counts within 3% (ours has the bias of its output layer and LayerNorms laid out
    differently, GPT-2 learned positions), and a few steps of each lower its loss on the batch."""
    sizes = bench.ISSUE_LM if size == "issue" else bench.chapter11_lm()
    small = dict(sizes, batch=2, seq_len=16)  # the same model, a quick batch
    ours_step, theirs_step, counts = bench.lm_train_steps(small)
    assert abs(counts["ours"] / counts["theirs"] - 1) < 0.03, counts
    ours_losses = [ours_step() for _ in range(4)]
    theirs_losses = [theirs_step() for _ in range(4)]
    assert ours_losses[-1] < ours_losses[0] and theirs_losses[-1] < theirs_losses[0]

