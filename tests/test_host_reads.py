"""Host reads stay at the boundary: reading a tensor's value on the host (`.item()`, `bool(t)`,
`int(t)`, `nonzero`) makes the host wait for the device, so the package reads values only
where it checks its inputs, a fixed number of times per call, and decoding reads one value per
generated token (whether to stop). Counted on the CPU with a TorchDispatchMode, which sees the
operators that a GPU would stall on (aten._local_scalar_dense, nonzero, ...)."""

from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from transformer import LanguageModel, Transformer

READS = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2"}


class CountReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.reads = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if name in READS:
            self.reads[name] += 1
        return func(*args, **(kwargs or {}))


def reads(fn) -> int:
    with torch.no_grad(), CountReads() as counter:
        fn()
    return sum(counter.reads.values())


def translator(layers: int) -> Transformer:
    torch.manual_seed(0)
    return Transformer(50, 50, d_model=16, num_heads=2, num_encoder_layers=layers,
                       num_decoder_layers=layers, d_ff=32).eval()


def language_model(layers: int) -> LanguageModel:
    torch.manual_seed(0)
    return LanguageModel(vocab_size=50, d_model=16, num_heads=2, num_layers=layers, d_ff=32).eval()


SRC = torch.randint(4, 50, (3, 7))
PROMPTS = torch.randint(4, 50, (3, 5))


def test_a_forward_pass_reads_as_often_whatever_the_depth():
    shallow, deep = translator(1), translator(4)
    tgt = torch.randint(4, 50, (3, 6))
    # each id tensor is read once, where it is checked (its minimum and maximum): src and tgt
    # by the model, not again by the embeddings
    assert reads(lambda: shallow(SRC, tgt)) == reads(lambda: deep(SRC, tgt)) == 4
    assert reads(lambda: deep.encode(SRC)) == 2
    lm1, lm4 = language_model(1), language_model(4)
    assert reads(lambda: lm1(PROMPTS)) == reads(lambda: lm4(PROMPTS)) == 2


# Every strategy at two budgets and two depths. Each must run its whole budget: the output
# layer's bias rules out <eos> (beam search needs an eos_id, so ignore_eos is not enough).
STRATEGIES = {
    "greedy": {},
    "sampling": dict(do_sample=True, top_k=10),
    "beam": dict(num_beams=3),
}


def never_ends(model):
    with torch.no_grad():
        model.generator.bias[2] = -1e4  # <eos> is id 2
    return model


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("kind", ["translator", "language model"])
def test_decoding_reads_one_value_per_generated_token(kind, strategy):
    counts = {}
    for layers in (1, 3):
        model = never_ends(translator(layers) if kind == "translator" else language_model(layers))
        inputs = SRC if kind == "translator" else PROMPTS
        for new in (6, 18):
            options = dict(STRATEGIES[strategy])
            if strategy == "sampling":
                options["generator"] = torch.Generator().manual_seed(0)
            out = []

            def run(model=model, inputs=inputs, new=new, options=options, out=out):
                out.append(model.generate(inputs, max_new_tokens=new, **options))

            counts[layers, new] = reads(run)
            assert out[0].size(1) >= new and not (out[0] == 2).any()  # the whole budget was generated
    per_token = {layers: (counts[layers, 18] - counts[layers, 6]) / 12 for layers in (1, 3)}
    assert per_token[1] == per_token[3] <= 1, f"host reads per generated token: {per_token} ({counts})"
    assert counts[1, 6] == counts[3, 6], f"reads grew with depth: {counts}"


# --- the layers' own checks: not again inside a model that has checked its inputs ---------

class CountingChecks:
    """Stands in for validation's context variable: counts the tensor checks that run (each
    asks it whether its caller has checked, and runs when told no)."""

    def __init__(self, real):
        self.real, self.ran = real, 0

    def get(self):
        checked = self.real.get()
        self.ran += not checked
        return checked

    def set(self, value):
        return self.real.set(value)

    def reset(self, token):
        self.real.reset(token)


def checks_run(monkeypatch, fn) -> int:
    import transformer.validation as validation
    counter = CountingChecks(validation._INPUTS_CHECKED)
    monkeypatch.setattr(validation, "_INPUTS_CHECKED", counter)
    with torch.no_grad():
        fn()
    return counter.ran


def test_the_layers_do_not_check_again_inside_a_model(monkeypatch):
    shallow, deep = translator(1), translator(4)
    tgt = torch.randint(4, 50, (3, 6))
    runs = [checks_run(monkeypatch, lambda m=m: m(SRC, tgt)) for m in (shallow, deep)]
    assert runs[0] == runs[1] > 0, f"tensor checks run at depth 1 and 4: {runs}"
    runs = [checks_run(monkeypatch, lambda m=m: m(PROMPTS)) for m in (language_model(1), language_model(4))]
    assert runs[0] == runs[1] > 0, f"tensor checks run at depth 1 and 4: {runs}"
    # a layer called alone still checks its input
    assert checks_run(monkeypatch, lambda: deep.encoder.layers[0](torch.randn(3, 7, 16))) > 0


def test_generation_checks_the_prompt_not_each_token(monkeypatch):
    model = never_ends(language_model(2))
    runs = [checks_run(monkeypatch, lambda n=n: model.generate(PROMPTS, max_new_tokens=n)) for n in (4, 12)]
    assert runs[0] == runs[1], f"tensor checks run for 4 and for 12 new tokens: {runs}"


def test_a_callback_during_generation_is_still_checked():
    from transformer import padding_mask
    model = language_model(1)

    def stop_on_float_ids(ids, logits):  # a mistake inside the user's own function
        return padding_mask(ids.float())[:, 0, 0, -1]

    with pytest.raises(TypeError, match="ids must be an integer tensor"):
        model.generate(PROMPTS, max_new_tokens=3, stopping_criteria=stop_on_float_ids)
