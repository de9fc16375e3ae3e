"""Tests for transformer.fast (chapter 14): fast_dropout, FastDropout and speed_up."""

import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from test_blocks import FF, SRC, D, H, randomise_norms, torch_encoder_layer

from transformer import LanguageModel, Transformer, speed_up
from transformer.blocks import Encoder
from transformer.fast import (
    FastDecodingTransformer,
    FastDropout,
    FastLanguageModel,
    PackedEncoder,
    SlicedLossLanguageModel,
    fast_dropout,
    linear_cross_entropy,
)
from transformer.fast_attention import FastMultiHeadAttention
from transformer.lm import lm_loss
from transformer.losses import IGNORE_INDEX
from transformer.masks import padding_mask
from transformer.multihead import MultiHeadAttention

# --- fast_dropout: nn.Dropout's law with a cheaper draw on the CPU ---------------------------


def sigmas(rate: float, p: float, n: int) -> float:
    """How many standard deviations a dropped fraction `rate` of n entries lies from p."""
    return abs(rate - p) / math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 1 / 3])
def test_dropout_drops_a_fraction_p_and_keeps_the_mean(p):
    torch.manual_seed(0)
    out = fast_dropout(torch.ones(400_000), p)
    dropped = (out == 0).float().mean().item()
    assert sigmas(dropped, p, 400_000) < 5
    survivors = out[out != 0].unique()
    assert len(survivors) == 1  # one scale, that of the rounded p
    assert survivors.item() == pytest.approx(1 / (1 - round(p * 65536) / 65536), rel=1e-6)
    assert out.mean().item() == pytest.approx(1.0, abs=5 * math.sqrt(p / (1 - p) / 400_000))


def test_dropout_draws_every_entry_alike():
    # Four entries share one 64-bit draw; each of the four 16-bit pieces must be uniform
    # (a 63-bit draw, torch's default random_(), would keep every fourth entry more often).
    torch.manual_seed(1)
    out = fast_dropout(torch.ones(100_000, 4), 0.5)  # column k: piece k of each draw
    for column in (out == 0).float().mean(dim=0).tolist():
        assert sigmas(column, 0.5, 100_000) < 5
    torch.manual_seed(2)
    odd = fast_dropout(torch.ones(3, 7, 5), 0.3)  # a size that is not a multiple of four
    assert odd.shape == (3, 7, 5) and ((odd == 0) | (odd > 1)).all()


def test_dropout_gradient_is_the_mask_times_the_scale():
    x = torch.randn(64, 32, requires_grad=True)
    torch.manual_seed(3)
    out = fast_dropout(x, 0.2)
    out.backward(torch.ones_like(out))
    kept = out != 0
    scale = 1 / (1 - round(0.2 * 65536) / 65536)
    assert torch.equal(x.grad, kept.float() * scale)
    assert torch.allclose(out, x * kept * scale)


def test_dropout_is_the_identity_in_eval_and_at_p_zero():
    x = torch.randn(5, 6)
    assert fast_dropout(x, 0.3, training=False) is x and fast_dropout(x, 0.0) is x
    layer = FastDropout(0.3).eval()
    assert layer(x) is x


def test_dropout_repeats_under_the_same_seed_and_keeps_dtype_and_layout():
    x = torch.randn(8, 16, 12).transpose(1, 2)  # not contiguous
    torch.manual_seed(5)
    first = fast_dropout(x, 0.25)
    torch.manual_seed(5)
    assert torch.equal(first, fast_dropout(x, 0.25))
    assert first.shape == x.shape and torch.equal(first != 0, (first != 0) & (x != 0))
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        assert fast_dropout(x.to(dtype), 0.25).dtype == dtype


def test_fast_dropout_module_is_an_nn_dropout_that_uses_it():
    layer = FastDropout(0.25)
    assert isinstance(layer, torch.nn.Dropout) and layer.p == 0.25 and layer.training
    x = torch.randn(10, 10)
    torch.manual_seed(6)
    expected = fast_dropout(x, 0.25)
    torch.manual_seed(6)
    assert torch.equal(layer(x), expected)


@pytest.mark.parametrize("p", [-0.1, 1.0, float("nan"), "0.1", True])
def test_dropout_refuses_a_bad_p(p):
    with pytest.raises(ValueError, match="p must be a number in"):
        fast_dropout(torch.ones(3), p)
    with pytest.raises(ValueError, match="p must be a number in"):
        FastDropout(p)


def test_dropout_refuses_integer_input():
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        fast_dropout(torch.ones(3, dtype=torch.long), 0.1)


def test_speed_up_swaps_the_plain_classes_and_nothing_else():
    torch.manual_seed(0)
    model = Transformer(20, 20, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                        d_ff=32, dropout=0.2, max_len=12)
    plain = copy.deepcopy(model)
    assert speed_up(model) is model
    before = [type(m) for m in plain.modules()]
    after = [type(m) for m in model.modules()]
    assert len(before) == len(after) and before.count(torch.nn.Dropout) > 0
    assert after.count(torch.nn.Dropout) == 0
    assert after.count(FastDropout) == before.count(torch.nn.Dropout)
    assert all(m.p == 0.2 for m in model.modules() if isinstance(m, FastDropout))
    changed = sorted(((a, b) for a, b in zip(before, after, strict=True) if a is not b), key=str)
    attentions = before.count(MultiHeadAttention)
    assert attentions == 3 and after.count(FastMultiHeadAttention) == attentions
    assert changed == sorted([(Encoder, PackedEncoder), (Transformer, FastDecodingTransformer)]
                             + [(torch.nn.Dropout, FastDropout)] * after.count(FastDropout)
                             + [(MultiHeadAttention, FastMultiHeadAttention)] * attentions, key=str)
    # the class is the whole change: every module keeps the attributes it had
    assert all(vars(m).keys() == vars(p).keys() for m, p in zip(model.modules(), plain.modules(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), model.state_dict().values(), strict=True))
    src, tgt = torch.randint(4, 20, (3, 7)), torch.randint(4, 20, (3, 6))
    with torch.no_grad():  # eval mode: the encoder packs the real positions, to float rounding
        torch.testing.assert_close(plain.eval()(src, tgt), model.eval()(src, tgt), atol=1e-5, rtol=0)


def test_speed_up_trains_with_the_fast_draw():
    # In training, the model's dropout draws its masks with fast_dropout: reproduce one
    # feed-forward sublayer's output with the same seed.
    torch.manual_seed(0)
    model = speed_up(LanguageModel(30, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.5, max_len=16))
    ffn = model.decoder.layers[0].ffn
    x = torch.randn(2, 5, 16)
    torch.manual_seed(7)
    got = ffn.train()(x)
    torch.manual_seed(7)
    expected = ffn.linear2(fast_dropout(ffn.activation(ffn.linear1(x)), 0.5))
    assert torch.equal(got, expected)


def test_speed_up_keeps_each_modules_mode_and_refuses_a_non_module():
    layer = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.1).eval())
    speed_up(layer)
    assert isinstance(layer[1], FastDropout) and not layer[1].training
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        speed_up("model")


# --- PackedEncoder: the encoder that skips the padding in eval mode -------------------------

ALL_PAD = torch.tensor([[1, 5, 7, 9, 2, 0, 0], [0, 0, 0, 0, 0, 0, 0], [1, 3, 0, 0, 0, 0, 0]])
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def packed(encoder: Encoder) -> PackedEncoder:
    """A PackedEncoder holding a copy of encoder's modules."""
    out = copy.deepcopy(encoder)
    out.__class__ = PackedEncoder
    return out


@pytest.mark.parametrize("ids", [SRC, ALL_PAD], ids=["padded", "a sentence of padding only"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_packed_encoder_matches_every_position_and_torch(dtype, norm_first, ids):
    """Eval mode: the memory of the plain path at the real positions, zero at the padding,
    as nn.TransformerEncoder's nested-tensor path returns it."""
    torch.manual_seed(3)
    enc = Encoder(3, D, H, FF, norm_first=norm_first).to(dtype).eval()
    randomise_norms(enc)
    fast = packed(enc)
    x, real = torch.randn(3, 7, D, dtype=dtype), ids != 0
    with torch.no_grad():
        plain, skipped = enc(x, padding_mask(ids)), fast(x, padding_mask(ids))
    assert torch.isfinite(skipped).all()
    torch.testing.assert_close(skipped[real], plain[real], atol=TOL[dtype], rtol=0)
    assert torch.equal(skipped[~real], torch.zeros_like(skipped[~real]))
    if not norm_first:  # PyTorch takes its nested-tensor path for Post-LN stacks
        ref = torch.nn.TransformerEncoder(torch_encoder_layer(enc.layers[0], "relu", dtype), 3)
        for ref_layer, layer in zip(ref.layers, enc.layers, strict=True):
            ref_layer.load_state_dict(torch_encoder_layer(layer, "relu", dtype).state_dict())
        with torch.no_grad(), warnings.catch_warnings():  # "nested tensors ... prototype", once
            warnings.simplefilter("ignore", UserWarning)
            # equal at the padding too: zeros, which only the nested-tensor path gives
            torch.testing.assert_close(skipped, ref.eval()(x, src_key_padding_mask=~real),
                                       atol=TOL[dtype], rtol=0)


def test_packed_encoder_packs_in_eval_mode_only_and_never_behind_a_hook():
    torch.manual_seed(4)
    enc = packed(Encoder(2, D, H, FF, dropout=0.3))
    plain = copy.deepcopy(enc)
    plain.__class__ = Encoder
    x, mask, real = torch.randn(3, 7, D), padding_mask(SRC), SRC != 0
    torch.manual_seed(0)
    trained = plain(x, mask)
    torch.manual_seed(0)
    assert torch.equal(enc(x, mask), trained)  # training: the plain path, the same masks
    enc.eval()
    with torch.no_grad():
        assert torch.equal(enc(x, mask)[~real], torch.zeros(int((~real).sum()), D))  # skipped
        seen = []
        hook = enc.layers[1].self_attn.register_forward_hook(lambda _m, _i, out: seen.append(out))
        hooked = enc(x, mask)
        hook.remove()
        assert len(seen) == 1 and hooked[~real].abs().sum() > 0  # the hook fired: every position
        torch.testing.assert_close(hooked, plain.eval()(x, mask), atol=0, rtol=0)
        shapes = []  # a hook on a block (hidden states, say) sees the grid too
        hook = enc.layers[0].register_forward_pre_hook(lambda _m, args: shapes.append(args[0].shape))
        enc(x, mask)
        hook.remove()
        assert shapes == [(3, 7, D)]
        # a mask that is not a padding mask [B, 1, 1, S]: the plain path, every position
        full = torch.ones(3, 1, 7, 7, dtype=torch.bool)
        torch.testing.assert_close(enc(x, full), plain(x, full), atol=0, rtol=0)


def test_packed_encoder_checks_x_and_the_mask():
    enc = packed(Encoder(1, D, H, FF)).eval()
    with pytest.raises(ValueError, match=r"x must have shape \[batch, len, d_model=16\]"):
        enc(torch.randn(3, 7, D + 1), padding_mask(SRC))
    with pytest.raises(TypeError, match="float64"):
        enc(torch.randn(3, 7, D, dtype=torch.float64), padding_mask(SRC))
    ambiguous = torch.ones(7, 7, dtype=torch.bool)  # [Tq, Tk] or [B, Tk]? with B == 7 it is unclear
    with pytest.raises(ValueError, match="mask of shape"):  # not a padding mask: the plain path's check
        enc(torch.randn(7, 7, D), ambiguous)
    with pytest.raises(TypeError, match="bool"):
        enc(torch.randn(3, 7, D), padding_mask(SRC).float())


def test_speed_up_packs_the_translators_encoder_and_keeps_its_logits():
    torch.manual_seed(2)
    model = Transformer(20, 20, d_model=D, num_heads=H, num_encoder_layers=2, num_decoder_layers=1,
                        d_ff=FF, max_len=12).eval()
    fast = speed_up(copy.deepcopy(model))
    assert type(fast.encoder) is PackedEncoder and type(model.encoder) is Encoder
    src = SRC % 20
    tgt = torch.tensor([[1, 6, 3, 2], [1, 9, 2, 4], [1, 4, 0, 0]])
    with torch.no_grad():
        memory = fast.encode(src)
        assert torch.equal(memory[src == 0], torch.zeros(int((src == 0).sum()), D))
        torch.testing.assert_close(memory[src != 0], model.encode(src)[src != 0], atol=1e-5, rtol=0)
        torch.testing.assert_close(fast(src, tgt), model(src, tgt), atol=1e-5, rtol=0)


# --- the loss without the logits (linear_cross_entropy) ----------------------------

def _plain_and_sliced(hidden, weight, bias, labels, chunk_size):
    """(loss, grads of hidden, weight, bias) of the plain loss and of the sliced one."""
    results = []
    for sliced in (False, True):
        leaves = [t.detach().clone().requires_grad_() if t is not None else None for t in (hidden, weight, bias)]
        h, w, b = leaves
        if sliced:
            loss = linear_cross_entropy(h, w, b, labels, chunk_size=chunk_size)
        else:
            loss = F.cross_entropy(F.linear(h, w, b).flatten(0, -2), labels.flatten(), ignore_index=IGNORE_INDEX)
        loss.backward()
        results.append((loss.detach(), [None if t is None else t.grad for t in leaves]))
    return results


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 128])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_cross_entropy_is_the_plain_loss_with_its_gradients(chunk_size, with_bias):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 5, 6, generator=g, dtype=torch.float64)
    weight = torch.randn(11, 6, generator=g, dtype=torch.float64)
    bias = torch.randn(11, generator=g, dtype=torch.float64) if with_bias else None
    labels = torch.randint(0, 11, (2, 5), generator=g)
    labels[0, 1] = labels[1, 4] = IGNORE_INDEX  # skipped: neither the mean nor the gradients count them
    (plain, plain_grads), (sliced, sliced_grads) = _plain_and_sliced(hidden, weight, bias, labels, chunk_size)
    # float64 in, float64 inside: agreement to float64's rounding
    assert sliced.dtype == torch.float64 and sliced.item() == pytest.approx(plain.item(), rel=1e-12)
    for got, want in zip(sliced_grads, plain_grads, strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            assert got.dtype == want.dtype and torch.allclose(got, want, rtol=1e-10, atol=1e-12)


def test_linear_cross_entropy_scales_with_the_gradient_it_is_given():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(4, 3, generator=g, requires_grad=True)
    weight = torch.randn(5, 3, generator=g, requires_grad=True)
    labels = torch.tensor([0, 4, 2, 1])
    (3.0 * linear_cross_entropy(hidden, weight, None, labels)).backward()
    sliced = hidden.grad.clone()
    hidden.grad = None
    (3.0 * F.cross_entropy(hidden @ weight.T, labels)).backward()
    assert torch.allclose(sliced, hidden.grad, atol=1e-6)


def test_linear_cross_entropy_without_grad_and_under_autocast():
    g = torch.Generator().manual_seed(2)
    hidden, weight, bias = torch.randn(6, 8, generator=g), torch.randn(9, 8, generator=g), torch.randn(9, generator=g)
    labels = torch.randint(0, 9, (6,), generator=g)
    want = F.cross_entropy(F.linear(hidden, weight, bias), labels)
    with torch.no_grad():
        assert linear_cross_entropy(hidden, weight, bias, labels).item() == pytest.approx(want.item(), rel=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # computed in float32 all the same
        got = linear_cross_entropy(hidden.bfloat16(), weight, bias, labels)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(F.cross_entropy(F.linear(hidden.bfloat16().float(), weight, bias),
                                                       labels).item(), rel=1e-6)


def test_linear_cross_entropy_of_no_counted_label_is_zero_not_nan():
    loss = linear_cross_entropy(torch.randn(3, 4), torch.randn(5, 4), None, torch.full((3,), IGNORE_INDEX))
    assert loss.item() == 0.0


def test_lm_loss_of_a_sped_up_language_model_never_builds_the_logits():
    torch.manual_seed(0)
    vocab_size = 23
    model = speed_up(LanguageModel(vocab_size, d_model=16, num_heads=2, num_layers=1, dropout=0.0))
    assert type(model) is FastLanguageModel and isinstance(model, SlicedLossLanguageModel)
    inputs = torch.randint(3, vocab_size, (4, 12), generator=torch.Generator().manual_seed(1))
    labels = torch.roll(inputs, -1, dims=1)
    labels[0, :2] = IGNORE_INDEX
    calls = []
    handle = model.generator.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    loss, _ = lm_loss(model, (inputs, labels))
    loss.backward()
    assert calls == []  # the output layer was never called on the whole batch
    sliced = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    plain = F.cross_entropy(model(inputs).flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
    plain.backward()
    handle.remove()
    assert calls == [(4, 12, vocab_size)] and loss.item() == pytest.approx(plain.item(), rel=1e-5)
    for got, p in zip(sliced, model.parameters(), strict=True):
        assert torch.allclose(got, p.grad, rtol=1e-4, atol=1e-6)


def test_a_sped_up_model_saves_and_loads_as_the_plain_one(tmp_path):
    torch.manual_seed(3)
    lm = speed_up(LanguageModel(30, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=16))
    lm.save_pretrained(tmp_path / "lm")
    plain = LanguageModel.from_pretrained(tmp_path / "lm")  # the file names the plain class
    assert type(plain) is LanguageModel
    assert all(torch.equal(a, b) for a, b in zip(lm.state_dict().values(), plain.state_dict().values(), strict=True))
    assert type(SlicedLossLanguageModel.from_pretrained(tmp_path / "lm")) is SlicedLossLanguageModel
    translator = speed_up(Transformer(20, 20, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                      d_ff=32, max_len=12))
    translator.save_pretrained(tmp_path / "translator")
    loaded = Transformer.from_pretrained(tmp_path / "translator")
    assert type(loaded) is Transformer and type(loaded.encoder) is Encoder
    assert type(FastDecodingTransformer.from_pretrained(tmp_path / "translator")) is FastDecodingTransformer
    with pytest.raises(ValueError, match="holds a LanguageModel, not a Transformer"):
        Transformer.from_pretrained(tmp_path / "lm")


# --- FastDecodingTransformer and FastLanguageModel: decoding does less, the same ids ------

def small_translator(seed: int) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(30, 30, d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                        d_ff=64, dropout=0.0, max_len=40)
    with torch.no_grad():  # peakier outputs than Xavier's: the greedy ids vary
        model.generator.weight.mul_(8.0)
    return model.eval()


@pytest.mark.parametrize("padded", [False, True])
def test_fast_decoding_leaves_out_only_the_masks_that_hide_nothing(padded, monkeypatch):
    """In cached steps an all-True mask is not passed on; one that hides a key is; the
    logits of every step stay bit for bit those of the plain class."""
    plain = small_translator(4)
    fast = copy.deepcopy(plain)
    fast.__class__ = FastDecodingTransformer
    src = torch.randint(4, 30, (3, 6), generator=torch.Generator().manual_seed(5))
    if padded:
        src[1, 4:] = plain.pad_id
    tgt = torch.randint(4, 30, (3, 8), generator=torch.Generator().manual_seed(6))
    tgt[:, 0] = 1
    tgt[2, 3:5] = plain.pad_id  # one row's prefix has padding inside
    seen = []
    decode = Transformer.decode

    def spy(self, tgt, memory, src_mask=None, tgt_mask=None, caches=None, start=0):
        seen.append((src_mask is None, tgt_mask is None))
        return decode(self, tgt, memory, src_mask, tgt_mask, caches, start)

    monkeypatch.setattr(Transformer, "decode", spy)
    from transformer.kv_cache import IncrementalDecoder
    with torch.no_grad():
        steps = [IncrementalDecoder(m, m.encode(src, m.make_src_mask(src)), m.make_src_mask(src))
                 for m in (plain, fast)]
        for t in range(1, 9):
            seen.clear()
            assert torch.equal(steps[0](tgt[:, :t]), steps[1](tgt[:, :t]))
            # seen: the plain call (masks given), then the fast one's super().decode
            assert len(seen) == 2 and seen[0] == (False, False) and seen[1][0] == (not padded)
            assert seen[1][1] == (t <= 3)  # from position 3 on a key of row 2 is padding


def test_fast_decoding_generates_the_plain_ids_as_an_ordinary_tensor():
    plain = small_translator(7)
    fast = speed_up(copy.deepcopy(plain))
    assert type(fast) is FastDecodingTransformer
    src = torch.randint(4, 30, (4, 6), generator=torch.Generator().manual_seed(8))
    src[2, 3:] = plain.pad_id
    for options in ({}, {"num_beams": 3}, {"do_sample": True, "generator": torch.Generator().manual_seed(0)}):
        ids = fast.generate(src, 12, **options)
        if "generator" in options:
            options["generator"] = torch.Generator().manual_seed(0)
        assert torch.equal(ids, plain.generate(src, 12, **options)), options
        assert not ids.is_inference()
    ids[:, 1] = 5  # in place, outside inference mode
    fast.train()
    fast(src, ids).sum().backward()  # the embedding saves the ids for backward
    assert fast.generator.weight.grad is not None


def test_a_sped_up_language_model_generates_the_plain_ids():
    torch.manual_seed(0)
    lm = LanguageModel(30, d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0, max_len=32).eval()
    fast = speed_up(copy.deepcopy(lm))
    prompts = torch.randint(3, 30, (2, 5), generator=torch.Generator().manual_seed(1))
    ids = fast.generate(prompts, 10, ignore_eos=True)
    assert torch.equal(ids, lm.generate(prompts, 10, ignore_eos=True)) and not ids.is_inference()
