"""Near-miss answers to chapter 08's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-prefixes": {
        "keeps the first position of each run, not the last": '''
def logits_prefix_by_prefix(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """src [B, S], tgt [B, T] -> logits [B, T, V], position t computed from tgt[:, :t + 1] alone."""
    steps = [model(src, tgt[:, : t + 1])[:, 0] for t in range(tgt.size(1))]
    return torch.stack(steps, dim=1)
''',
        "off by one: the prefixes tgt[:, :t] for t = 1 .. T-1, the whole target left out": '''
def logits_prefix_by_prefix(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """src [B, S], tgt [B, T] -> logits [B, T, V], position t computed from tgt[:, :t + 1] alone."""
    steps = [model(src, tgt[:, :t])[:, -1] for t in range(1, tgt.size(1))]
    return torch.stack(steps, dim=1)
''',
        "stacks along the batch axis: [T, B, V]": '''
def logits_prefix_by_prefix(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """src [B, S], tgt [B, T] -> logits [B, T, V], position t computed from tgt[:, :t + 1] alone."""
    steps = [model(src, tgt[:, : t + 1])[:, -1] for t in range(tgt.size(1))]
    return torch.stack(steps)
''',
        "encodes once, then decodes each prefix without the source padding mask": '''
def logits_prefix_by_prefix(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """src [B, S], tgt [B, T] -> logits [B, T, V], position t computed from tgt[:, :t + 1] alone."""
    memory = model.encode(src)  # the source is the same for every prefix
    steps = [model.decode(tgt[:, : t + 1], memory)[:, -1] for t in range(tgt.size(1))]
    return torch.stack(steps, dim=1)
''',
        "squeeze() to drop the length axis, which also drops a batch of one": '''
def logits_prefix_by_prefix(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """src [B, S], tgt [B, T] -> logits [B, T, V], position t computed from tgt[:, :t + 1] alone."""
    steps = [model(src, tgt[:, : t + 1])[:, -1:].squeeze() for t in range(tgt.size(1))]
    return torch.stack(steps, dim=1)
''',
        "one pass on the whole target, which the exercise compares with": '''
def logits_prefix_by_prefix(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """src [B, S], tgt [B, T] -> logits [B, T, V], position t computed from tgt[:, :t + 1] alone."""
    return model(src, tgt)  # the causal mask makes each position see its prefix only
''',
        "each prefix padded back to length T: every run is a full-length pass": '''
def logits_prefix_by_prefix(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """src [B, S], tgt [B, T] -> logits [B, T, V], position t computed from tgt[:, :t + 1] alone."""
    steps = []
    for t in range(tgt.size(1)):
        prefix = tgt.clone()
        prefix[:, t + 1:] = model.pad_id  # hide the rest as padding
        steps.append(model(src, prefix)[:, t])
    return torch.stack(steps, dim=1)
''',
    },
    "ex2-target-mask": {
        "triu: keys in the future instead of the past": '''
def target_mask(tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """tgt [B, T] -> bool [B, 1, T, T]: causal AND not padding."""
    t = tgt.size(1)
    causal = torch.ones(t, t, dtype=torch.bool).triu()  # [T, T]
    keep = tgt != pad_id  # [B, T]
    return (causal[None, :, :] & keep[:, None, :])[:, None]  # [B, 1, T, T]
''',
        "strict lower triangle: a position may not attend to itself": '''
def target_mask(tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """tgt [B, T] -> bool [B, 1, T, T]: causal AND not padding."""
    t = tgt.size(1)
    causal = torch.ones(t, t, dtype=torch.bool).tril(-1)  # [T, T]
    keep = tgt != pad_id  # [B, T]
    return (causal[None, :, :] & keep[:, None, :])[:, None]  # [B, 1, T, T]
''',
        "padding hides query rows instead of key columns": '''
def target_mask(tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """tgt [B, T] -> bool [B, 1, T, T]: causal AND not padding."""
    t = tgt.size(1)
    causal = torch.ones(t, t, dtype=torch.bool).tril()  # [T, T]
    keep = tgt != pad_id  # [B, T]
    return (causal[None, :, :] & keep[:, :, None])[:, None]  # [B, 1, T, T]
''',
        "compares with 0 instead of pad_id": '''
def target_mask(tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """tgt [B, T] -> bool [B, 1, T, T]: causal AND not padding."""
    t = tgt.size(1)
    causal = torch.ones(t, t, dtype=torch.bool).tril()  # [T, T]
    keep = tgt != 0  # [B, T]
    return (causal[None, :, :] & keep[:, None, :])[:, None]  # [B, 1, T, T]
''',
        "no head axis: [B, T, T]": '''
def target_mask(tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """tgt [B, T] -> bool [B, 1, T, T]: causal AND not padding."""
    t = tgt.size(1)
    causal = torch.ones(t, t, dtype=torch.bool).tril()  # [T, T]
    keep = tgt != pad_id  # [B, T]
    return causal[None, :, :] & keep[:, None, :]  # [B, T, T]
''',
        "nn.MultiheadAttention's convention: True where blocked": '''
def target_mask(tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """tgt [B, T] -> bool [B, 1, T, T]: causal AND not padding."""
    t = tgt.size(1)
    future = torch.ones(t, t, dtype=torch.bool).triu(1)  # [T, T]
    pad = tgt == pad_id  # [B, T]
    return (future[None, :, :] | pad[:, None, :])[:, None]  # [B, 1, T, T]
''',
        "combine_masks(causal_mask, padding_mask), which the exercise forbids": '''
def target_mask(tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """tgt [B, T] -> bool [B, 1, T, T]: causal AND not padding."""
    return combine_masks(causal_mask(tgt.size(1)), padding_mask(tgt, pad_id))
''',
        "pad_id 3, as in the visible test": '''
def target_mask(tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """tgt [B, T] -> bool [B, 1, T, T]: causal AND not padding."""
    t = tgt.size(1)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    return (causal[None, :, :] & (tgt != 3)[:, None, :])[:, None]
''',
    },
    "ex3-param-formula": {
        "three tables: ignores sharing and tying": '''
def transformer_params(vocab: int, d_model: int, d_ff: int, num_layers: int) -> int:
    """Parameters of the shared, tied Post-LN Transformer with num_layers + num_layers layers."""
    attention = 4 * (d_model * d_model + d_model)
    ffn = 2 * d_model * d_ff + d_ff + d_model
    norm = 2 * d_model
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return 3 * vocab * d_model + num_layers * (encoder_layer + decoder_layer) + vocab
''',
        "forgets the output layer's bias": '''
def transformer_params(vocab: int, d_model: int, d_ff: int, num_layers: int) -> int:
    """Parameters of the shared, tied Post-LN Transformer with num_layers + num_layers layers."""
    attention = 4 * (d_model * d_model + d_model)
    ffn = 2 * d_model * d_ff + d_ff + d_model
    norm = 2 * d_model
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return vocab * d_model + num_layers * (encoder_layer + decoder_layer)
''',
        "decoder layer built like an encoder layer plus cross-attention, with two LayerNorms": '''
def transformer_params(vocab: int, d_model: int, d_ff: int, num_layers: int) -> int:
    """Parameters of the shared, tied Post-LN Transformer with num_layers + num_layers layers."""
    attention = 4 * (d_model * d_model + d_model)
    ffn = 2 * d_model * d_ff + d_ff + d_model
    norm = 2 * d_model
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 2 * norm
    return vocab * d_model + num_layers * (encoder_layer + decoder_layer) + vocab
''',
        "counts the positional table (max_len 512 x d_model) as parameters": '''
def transformer_params(vocab: int, d_model: int, d_ff: int, num_layers: int) -> int:
    """Parameters of the shared, tied Post-LN Transformer with num_layers + num_layers layers."""
    attention = 4 * (d_model * d_model + d_model)
    ffn = 2 * d_model * d_ff + d_ff + d_model
    norm = 2 * d_model
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    positions = 512 * d_model
    return vocab * d_model + positions + num_layers * (encoder_layer + decoder_layer) + vocab
''',
        "builds the model and counts, which the exercise forbids": '''
def transformer_params(vocab: int, d_model: int, d_ff: int, num_layers: int) -> int:
    """Parameters of the shared, tied Post-LN Transformer with num_layers + num_layers layers."""
    model = Transformer(vocab, vocab, d_model, 1, num_layers, num_layers, d_ff=d_ff,
                        share_embeddings=True, tie_output=True)
    return count_parameters(model)
''',
    },
    "ex4-tie": {
        "the function with the bug, unchanged": '''
def tie_output_layer(model: Transformer) -> Transformer:
    """Make the output layer's weight the target embedding table itself; return the model."""
    return tie_output_layer_with_a_bug(model)
''',
        "a new Parameter holding a copy of the table": '''
def tie_output_layer(model: Transformer) -> Transformer:
    """Make the output layer's weight the target embedding table itself; return the model."""
    model.generator.weight = nn.Parameter(model.tgt_embed.embedding.weight.detach().clone())
    return model
''',
        "a new Parameter around the same memory: two parameters, updated twice": '''
def tie_output_layer(model: Transformer) -> Transformer:
    """Make the output layer's weight the target embedding table itself; return the model."""
    model.generator.weight = nn.Parameter(model.tgt_embed.embedding.weight.data)
    return model
''',
        "ties the source table instead of the target one": '''
def tie_output_layer(model: Transformer) -> Transformer:
    """Make the output layer's weight the target embedding table itself; return the model."""
    model.generator.weight = model.src_embed.embedding.weight
    return model
''',
    },
}
