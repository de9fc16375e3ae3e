"""Tests for transformer.blocks (chapter 07): parity with PyTorch's own layers, invariants."""


import pytest
import torch
from torch import nn

from transformer.blocks import Decoder, DecoderBlock, Encoder, EncoderBlock
from transformer.kv_cache import KVCache, StaticKVCache
from transformer.masks import causal_mask, padding_mask

D, H, FF = 16, 4, 40


def copy_attention(ours, ref: nn.MultiheadAttention) -> None:
    """Copy our fused q/k/v/out projections into nn.MultiheadAttention's in_proj layout."""
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)


def copy_common(ours, ref) -> None:
    """FFN and LayerNorms share names with nn.Transformer*Layer."""
    with torch.no_grad():
        ref.linear1.load_state_dict(ours.ffn.linear1.state_dict())
        ref.linear2.load_state_dict(ours.ffn.linear2.state_dict())
        for name in ("norm1", "norm2", "norm3"):
            if hasattr(ours, name):
                getattr(ref, name).load_state_dict(getattr(ours, name).state_dict())


def randomise_norms(module: nn.Module) -> None:
    """Non-trivial LayerNorm gamma/beta, so that a swapped norm would be caught."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.3)
                m.bias.normal_(0.0, 0.3)


def torch_encoder_layer(block: EncoderBlock, activation: str, dtype) -> nn.TransformerEncoderLayer:
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation=activation, batch_first=True,
                                     norm_first=block.norm_first, dtype=dtype)
    copy_attention(block.self_attn, ref.self_attn)
    copy_common(block, ref)
    return ref.eval()


def torch_decoder_layer(block: DecoderBlock, activation: str, dtype) -> nn.TransformerDecoderLayer:
    ref = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, activation=activation, batch_first=True,
                                     norm_first=block.norm_first, dtype=dtype)
    copy_attention(block.self_attn, ref.self_attn)
    copy_attention(block.cross_attn, ref.multihead_attn)
    copy_common(block, ref)
    return ref.eval()


SRC = torch.tensor([[1, 5, 7, 9, 2, 0, 0], [1, 8, 4, 2, 6, 3, 2], [1, 3, 0, 0, 0, 0, 0]])
TGT = torch.tensor([[1, 6, 3, 2, 0], [1, 9, 2, 4, 7], [1, 4, 0, 0, 0]])
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def real_positions(out: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return out[ids != 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_matches_torch(dtype, norm_first, activation):
    torch.manual_seed(0)
    block = EncoderBlock(D, H, FF, activation=activation, norm_first=norm_first).to(dtype).eval()
    randomise_norms(block)
    ref = torch_encoder_layer(block, activation, dtype)
    x = torch.randn(3, 7, D, dtype=dtype)
    ours = block(x, padding_mask(SRC))
    theirs = ref(x, src_key_padding_mask=SRC == 0)  # PyTorch: True = padding
    # PyTorch may give anything at padded query positions; compare the real ones.
    torch.testing.assert_close(real_positions(ours, SRC), real_positions(theirs, SRC),
                               atol=TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_block_matches_torch(dtype, norm_first, activation):
    torch.manual_seed(1)
    block = DecoderBlock(D, H, FF, activation=activation, norm_first=norm_first).to(dtype).eval()
    randomise_norms(block)
    ref = torch_decoder_layer(block, activation, dtype)
    y, memory = torch.randn(3, 5, D, dtype=dtype), torch.randn(3, 7, D, dtype=dtype)
    tgt_mask = causal_mask(5) & padding_mask(TGT)
    ours = block(y, memory, tgt_mask, padding_mask(SRC))
    theirs = ref(y, memory, tgt_mask=~causal_mask(5)[0, 0], tgt_key_padding_mask=TGT == 0,
                 memory_key_padding_mask=SRC == 0)
    torch.testing.assert_close(real_positions(ours, TGT), real_positions(theirs, TGT),
                               atol=TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_match_torch(dtype, norm_first):
    torch.manual_seed(2)
    enc = Encoder(3, D, H, FF, norm_first=norm_first).to(dtype).eval()
    dec = Decoder(2, D, H, FF, norm_first=norm_first).to(dtype).eval()
    randomise_norms(enc)
    randomise_norms(dec)
    final = (lambda: nn.LayerNorm(D, dtype=dtype)) if norm_first else (lambda: None)
    ref_enc = nn.TransformerEncoder(torch_encoder_layer(enc.layers[0], "relu", dtype), 3,
                                    norm=final(), enable_nested_tensor=False)
    ref_dec = nn.TransformerDecoder(torch_decoder_layer(dec.layers[0], "relu", dtype), 2, norm=final())
    for ours, ref in ((enc, ref_enc), (dec, ref_dec)):
        for i, layer in enumerate(ours.layers):
            if isinstance(layer, EncoderBlock):
                new = torch_encoder_layer(layer, "relu", dtype)
            else:
                new = torch_decoder_layer(layer, "relu", dtype)
            ref.layers[i].load_state_dict(new.state_dict())
        if norm_first:
            ref.norm.load_state_dict(ours.norm.state_dict())
        ref.eval()
    x, y = torch.randn(3, 7, D, dtype=dtype), torch.randn(3, 5, D, dtype=dtype)
    memory = enc(x, padding_mask(SRC))
    ref_memory = ref_enc(x, src_key_padding_mask=SRC == 0)
    torch.testing.assert_close(real_positions(memory, SRC), real_positions(ref_memory, SRC),
                               atol=TOL[dtype], rtol=0)
    out = dec(y, memory, causal_mask(5) & padding_mask(TGT), padding_mask(SRC))
    ref_out = ref_dec(y, memory, tgt_mask=~causal_mask(5)[0, 0], tgt_key_padding_mask=TGT == 0,
                      memory_key_padding_mask=SRC == 0)
    torch.testing.assert_close(real_positions(out, TGT), real_positions(ref_out, TGT),
                               atol=TOL[dtype], rtol=0)


def test_pre_ln_stack_has_final_norm_post_ln_has_none():
    assert isinstance(Encoder(2, D, H, FF, norm_first=True).norm, nn.LayerNorm)
    assert isinstance(Decoder(2, D, H, FF, norm_first=True).norm, nn.LayerNorm)
    assert isinstance(Encoder(2, D, H, FF).norm, nn.Identity)
    assert isinstance(Decoder(2, D, H, FF).norm, nn.Identity)


def test_public_attribute_names():
    block = DecoderBlock(D, H, FF)
    for name in ("self_attn", "cross_attn", "ffn", "norm1", "norm2", "norm3"):
        assert hasattr(block, name)
    for name in ("self_attn", "ffn", "norm1", "norm2"):
        assert hasattr(EncoderBlock(D, H, FF), name)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_no_future_leak_and_padding_invisible(norm_first):
    torch.manual_seed(3)
    dec = Decoder(2, D, H, FF, norm_first=norm_first).eval()
    for trial in range(5):
        y, memory = torch.randn(3, 6, D), torch.randn(3, 7, D)
        out = dec(y, memory, causal_mask(6), padding_mask(SRC))
        t = trial % 5 + 1  # change positions t.. onwards
        y2 = y.clone()
        y2[:, t:] = torch.randn(3, 6 - t, D)
        out2 = dec(y2, memory, causal_mask(6), padding_mask(SRC))
        torch.testing.assert_close(out[:, :t], out2[:, :t], atol=1e-6, rtol=0)
        assert not torch.allclose(out[:, t:], out2[:, t:])
        memory2 = memory.masked_fill((SRC == 0)[..., None], 1e3)  # garbage under the padding
        out3 = dec(y, memory2, causal_mask(6), padding_mask(SRC))
        torch.testing.assert_close(out, out3, atol=1e-6, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_fully_masked_rows_give_no_nan(norm_first):
    torch.manual_seed(4)
    enc = Encoder(2, D, H, FF, norm_first=norm_first).eval()
    dec = Decoder(2, D, H, FF, norm_first=norm_first).eval()
    nothing = torch.zeros(2, 1, 1, 4, dtype=torch.bool)
    memory = enc(torch.randn(2, 4, D), nothing)
    out = dec(torch.randn(2, 3, D), memory, causal_mask(3), nothing)
    assert torch.isfinite(memory).all() and torch.isfinite(out).all()


def test_post_ln_output_is_normalised():
    torch.manual_seed(5)
    out = EncoderBlock(D, H, FF).eval()(torch.randn(2, 5, D) * 7 + 3)
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.std(-1, unbiased=False), torch.ones(2, 5), atol=1e-3, rtol=0)


def test_dropout_active_only_in_training():
    torch.manual_seed(6)
    block = EncoderBlock(D, H, FF, dropout=0.5)
    x = torch.randn(2, 5, D)
    assert not torch.allclose(block.train()(x), block(x))
    block.eval()
    torch.testing.assert_close(block(x), block(x))


def test_bad_inputs():
    with pytest.raises(ValueError, match="num_heads"):
        EncoderBlock(10, 3, 20)
    with pytest.raises(ValueError, match="num_heads"):
        DecoderBlock(10, 4, 20)
    with pytest.raises(ValueError, match="num_layers"):
        Encoder(0, D, H, FF)
    with pytest.raises(ValueError, match="num_layers"):
        Decoder(-1, D, H, FF)
    block = DecoderBlock(D, H, FF)
    with pytest.raises(ValueError, match="batch size"):
        block(torch.randn(2, 3, D), torch.randn(3, 4, D))
    with pytest.raises(ValueError, match=r"memory must have shape \[batch, len, d_model=16\]"):
        block(torch.randn(2, 3, D), torch.randn(2, 4, D + 1))
    with pytest.raises(ValueError, match=r"x must have shape \[batch, len, d_model=16\]"):
        EncoderBlock(D, H, FF)(torch.randn(3, D))
    with pytest.raises(ValueError, match="caches"):
        Decoder(2, D, H, FF)(torch.randn(1, 3, D), torch.randn(1, 4, D), caches=[{}])


def test_each_layer_fills_its_own_caches():
    """The chapter-10 hook: each layer's dict holds the caches of its two attention
    sublayers, and a layer whose dict lacks one is refused by name."""
    dec = Decoder(2, D, H, FF).eval()
    caches = [{"self": KVCache(4), "cross": StaticKVCache()} for _ in range(2)]
    dec(torch.randn(1, 1, D), torch.randn(1, 4, D), caches=caches)
    for cache in caches:
        assert cache["self"]["k"].shape == (1, H, 1, D // H)
        assert cache["cross"]["k"].shape == (1, H, 4, D // H)
    with pytest.raises(ValueError, match=r"cache must be a dict with the keys \('self', 'cross'\)"):
        dec(torch.randn(1, 1, D), torch.randn(1, 4, D), caches=[{"self": KVCache(4)}] * 2)


def test_incremental_decoding_matches_full():
    """Feeding the target one token at a time through the cache gives the full pass's outputs."""
    torch.manual_seed(7)
    dec = Decoder(2, D, H, FF).eval()
    y, memory = torch.randn(2, 5, D), torch.randn(2, 7, D)
    full = dec(y, memory, causal_mask(5), padding_mask(SRC[:2]))
    caches = [{"self": KVCache(5), "cross": StaticKVCache()} for _ in dec.layers]
    steps = [dec(y[:, t:t + 1], memory, None, padding_mask(SRC[:2]), caches=caches)
             for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


# --- the block without cross-attention (chapter 11's decoder-only language model) -------

@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_without_cross_attention_is_a_causal_encoder_block(norm_first):
    """cross_attention=False leaves self-attention and FFN: an EncoderBlock under a causal mask."""
    torch.manual_seed(3)
    block = DecoderBlock(D, H, FF, dropout=0.0, norm_first=norm_first, cross_attention=False).eval()
    randomise_norms(block)
    assert block.cross_attn is None and block.norm2 is None and block.dropout2 is None
    assert not any(name.startswith(("cross_attn", "norm2")) for name, _ in block.named_parameters())
    reference = EncoderBlock(D, H, FF, dropout=0.0, norm_first=norm_first).eval()
    with torch.no_grad():
        reference.self_attn.load_state_dict(block.self_attn.state_dict())
        reference.ffn.load_state_dict(block.ffn.state_dict())
        reference.norm1.load_state_dict(block.norm1.state_dict())
        reference.norm2.load_state_dict(block.norm3.state_dict())  # the FFN's norm
    x = torch.randn(3, 6, D)
    torch.testing.assert_close(block(x, None, causal_mask(6)), reference(x, causal_mask(6)))


def test_decoder_without_cross_attention_caches_self_attention_only():
    torch.manual_seed(4)
    dec = Decoder(2, D, H, FF, dropout=0.0, norm_first=True, cross_attention=False).eval()
    y = torch.randn(2, 5, D)
    full = dec(y, None, causal_mask(5))
    caches = [{"self": KVCache(5)} for _ in dec.layers]  # no cross-attention: no cache for it
    steps = [dec(y[:, t:t + 1], None, None, caches=caches) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert all(cache["self"]["k"].shape == (2, H, 5, D // H) for cache in caches)
    # No future leak: changing position 3 leaves positions 0..2 alone.
    y2 = y.clone()
    y2[:, 3] += 1.0
    torch.testing.assert_close(dec(y2, None, causal_mask(5))[:, :3], full[:, :3])


def test_memory_and_cross_attention_must_agree():
    without = DecoderBlock(D, H, FF, cross_attention=False)
    with pytest.raises(ValueError, match="no cross-attention"):
        without(torch.randn(1, 2, D), torch.randn(1, 3, D))
    with pytest.raises(ValueError, match="no cross-attention"):
        without(torch.randn(1, 2, D), None, memory_mask=torch.ones(1, 1, 1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="memory is None"):
        DecoderBlock(D, H, FF)(torch.randn(1, 2, D), None)
    with pytest.raises(ValueError, match="cross_attention"):
        DecoderBlock(D, H, FF, cross_attention=1)
    assert sum(p.numel() for p in without.parameters()) == sum(
        p.numel() for p in DecoderBlock(D, H, FF).parameters()) - (4 * D * D + 4 * D) - 2 * D
