"""Tests for transformer.training (chapter 09): loss, schedule, checkpoints, learning."""

import math
import random

import pytest
import torch
import torch.nn.functional as F

from transformer.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    Vocab,
    generate_corpus,
    is_held_out,
    split_corpus,
)
from transformer.model import Transformer
from transformer.training import (
    TRANSLATOR_CHECKPOINT,
    evaluate_loss,
    evaluate_translation,
    label_smoothed_cross_entropy,
    load_checkpoint,
    make_optimizer,
    noam_lr,
    save_checkpoint,
    shift_targets,
    train,
)


def test_shift_targets_is_teacher_forcing():
    tgt = torch.tensor([[BOS_ID, 7, 8, 9, EOS_ID], [BOS_ID, 5, EOS_ID, PAD_ID, PAD_ID]])
    decoder_input, labels = shift_targets(tgt)
    assert decoder_input.tolist() == [[BOS_ID, 7, 8, 9], [BOS_ID, 5, EOS_ID, PAD_ID]]
    assert labels.tolist() == [[7, 8, 9, EOS_ID], [5, EOS_ID, PAD_ID, PAD_ID]]
    with pytest.raises(ValueError, match="tgt must be"):
        shift_targets(torch.tensor([[BOS_ID]]))


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothing_equals_pytorch(eps):
    gen = torch.Generator().manual_seed(0)
    for trial in range(20):
        B, T, V = 1 + trial % 4, 1 + trial % 7, 5 + trial
        logits = 3 * torch.randn(B, T, V, generator=gen)
        labels = torch.randint(1, V, (B, T), generator=gen)
        labels[torch.rand(B, T, generator=gen) < 0.3] = PAD_ID
        labels[0, 0] = 1  # at least one real token
        ours = label_smoothed_cross_entropy(logits, labels, eps)
        theirs = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1),
                                 label_smoothing=eps, ignore_index=PAD_ID)
        assert torch.allclose(ours, theirs, atol=1e-5), (trial, ours, theirs)


def test_label_smoothing_ignores_padding_and_gives_gradients():
    logits = torch.randn(2, 4, 9, requires_grad=True)
    labels = torch.tensor([[3, 4, PAD_ID, PAD_ID], [5, 6, 7, PAD_ID]])
    loss = label_smoothed_cross_entropy(logits, labels)
    loss.backward()
    assert torch.all(logits.grad[labels == PAD_ID] == 0)
    assert torch.all(logits.grad[labels != PAD_ID].abs().sum(-1) > 0)
    with pytest.raises(ValueError, match="disagree"):
        label_smoothed_cross_entropy(torch.randn(2, 3, 9), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="eps"):
        label_smoothed_cross_entropy(logits, labels, eps=1.0)


@pytest.mark.parametrize("d_model,warmup", [(512, 4000), (64, 400), (256, 1), (128, 37)])
def test_schedule_peaks_at_warmup(d_model, warmup):
    rates = [noam_lr(s, d_model, warmup) for s in range(1, 3 * warmup + 50)]
    peak = max(range(len(rates)), key=rates.__getitem__) + 1
    assert peak == warmup
    assert math.isclose(rates[warmup - 1], (d_model * warmup) ** -0.5)
    assert all(a < b for a, b in zip(rates[: warmup - 1], rates[1:warmup], strict=True))  # warm-up rises
    assert all(a > b for a, b in zip(rates[warmup:-1], rates[warmup + 1:], strict=True))  # then decays
    assert math.isclose(noam_lr(4 * warmup, d_model, warmup), rates[warmup - 1] / 2)  # 1/sqrt(step)


def test_optimizer_is_adam_with_the_papers_settings_and_follows_the_schedule():
    model = torch.nn.Linear(3, 3)
    optimizer, scheduler = make_optimizer(model, d_model=64, warmup=10, factor=2.0)
    group = optimizer.param_groups[0]
    assert isinstance(optimizer, torch.optim.Adam)
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9
    for step in range(1, 25):
        assert math.isclose(group["lr"], 2.0 * noam_lr(step, 64, 10))
        model(torch.randn(2, 3)).sum().backward()
        optimizer.step()
        scheduler.step()


def small_vocabs():
    words = "a b c d e f g h".split()
    return Vocab(words), Vocab(words)


def test_checkpoint_round_trip(tmp_path):
    src_vocab, tgt_vocab = small_vocabs()
    config = dict(src_vocab_size=len(src_vocab), tgt_vocab_size=len(tgt_vocab), d_model=16,
                  num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, dropout=0.1)
    torch.manual_seed(0)
    model = Transformer(**config)
    path = save_checkpoint(tmp_path / "sub" / "m.pt", model, config, src_vocab, tgt_vocab,
                           metrics={"test_exact_match": 0.5})
    raw = torch.load(path, weights_only=True)  # plain data only: no pickled code
    assert set(raw) == {"format", "config", "model", "src_vocab", "tgt_vocab", "metrics"}
    ckpt = load_checkpoint(path)
    assert not ckpt.model.training
    assert ckpt.config == config and ckpt.metrics == {"test_exact_match": 0.5}
    assert ckpt.src_vocab == src_vocab and ckpt.tgt_vocab == tgt_vocab
    model.eval()
    src = torch.tensor([[BOS_ID, 4, 5, 6, EOS_ID]])
    tgt = torch.tensor([[BOS_ID, 7, 8]])
    with torch.no_grad():
        assert torch.equal(model(src, tgt), ckpt.model(src, tgt))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")


def test_shipped_translator_meets_the_accuracy_bar():
    assert TRANSLATOR_CHECKPOINT.is_file(), "run chapters/09_training.ipynb with TRANSFORMER_SAVE_CHECKPOINT=1"
    assert TRANSLATOR_CHECKPOINT.stat().st_size < 5e6
    ckpt = load_checkpoint()
    test = split_corpus(generate_corpus()).test
    result = evaluate_translation(ckpt.model, test, ckpt.src_vocab, ckpt.tgt_vocab)
    assert result.exact_match >= 0.95, result.exact_match
    held = [i for i, (en, _) in enumerate(test) if is_held_out(en)]
    assert sum(result.hypotheses[i] == test[i][1] for i in held) / len(held) >= 0.85  # unseen combinations
    i_love = evaluate_translation(ckpt.model, [("I love apples", "我 喜欢 苹果")], ckpt.src_vocab, ckpt.tgt_vocab)
    assert i_love.hypotheses == ["我 喜欢 苹果"]
    assert abs(ckpt.metrics["test_exact_match"] - result.exact_match) <= 0.005  # as saved


def test_a_small_model_learns_the_copy_task():
    rng = random.Random(0)
    letters = "a b c d e f g h".split()
    pairs = sorted({(s, s) for s in (" ".join(rng.choices(letters, k=rng.randint(1, 6)))
                                     for _ in range(3000))})
    rng.shuffle(pairs)
    train_pairs, test_pairs = pairs[:-200], pairs[-200:]
    src_vocab, tgt_vocab = small_vocabs()
    torch.manual_seed(0)
    model = Transformer(len(src_vocab), len(tgt_vocab), d_model=32, num_heads=2, num_encoder_layers=1,
                        num_decoder_layers=1, d_ff=64, dropout=0.0, max_len=16)
    before = evaluate_translation(model, test_pairs, src_vocab, tgt_vocab).exact_match
    history = train(model, train_pairs, test_pairs, src_vocab, tgt_vocab, epochs=10, batch_size=64,
                    warmup=100, factor=1.0, progress=False)
    after = evaluate_translation(model, test_pairs, src_vocab, tgt_vocab).exact_match
    assert before < 0.1 and after >= 0.9, (before, after)
    assert history["valid_loss"][-1] < history["valid_loss"][0]
    assert evaluate_loss(model, [(torch.tensor([[1, 4, 2]]), torch.tensor([[1, 4, 2]]))]) < 1.0
