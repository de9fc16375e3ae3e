"""Near-miss answers to chapter 08's exercises: mistakes students really make.

`python -m tools.exercises verify` proves that each exercise's check fails on each
answer below (as it fails on the stub) and passes on the solution. Each answer is
the whole source of the exercise's solution cell, as a student would return it.
"""

NEAR_MISSES = {
    "ex1-shift": {
        "input and labels swapped": '''
def shift_for_teacher_forcing(tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tgt [B, T] -> (decoder_input [B, T-1], labels [B, T-1])."""
    return tgt[:, 1:], tgt[:, :-1]
''',
        "labels not shifted: both drop the last token": '''
def shift_for_teacher_forcing(tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tgt [B, T] -> (decoder_input [B, T-1], labels [B, T-1])."""
    return tgt[:, :-1], tgt[:, :-1]
''',
        "shifts along the batch axis instead of time": '''
def shift_for_teacher_forcing(tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tgt [B, T] -> (decoder_input [B, T-1], labels [B, T-1])."""
    return tgt[:-1], tgt[1:]
''',
        "hard-codes the running example's length 5": '''
def shift_for_teacher_forcing(tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tgt [B, T] -> (decoder_input [B, T-1], labels [B, T-1])."""
    return tgt[:, 0:4], tgt[:, 1:5]
''',
        "removes each sentence's <eos> from the input instead of the last column": '''
def shift_for_teacher_forcing(tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tgt [B, T] -> (decoder_input [B, T-1], labels [B, T-1])."""
    decoder_input = tgt.masked_fill(tgt == 2, 0)[:, :-1]  # the decoder never reads <eos>
    return decoder_input, tgt[:, 1:]
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
