"""Tests for saving and loading models (chapter 08): config, save_pretrained, from_pretrained,
and loading into a model built on the meta device."""

import json
import pickle

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from transformer.model import Transformer
from transformer.pretrained import CONFIG_FILE, WEIGHTS_FILE, read_pretrained_config

SMALL = dict(src_vocab_size=23, tgt_vocab_size=23, d_model=16, num_heads=2, num_encoder_layers=2,
             num_decoder_layers=1, d_ff=24, max_len=12)
VARIANTS = {
    "plain": {},
    "shared": dict(share_embeddings=True),
    "tied": dict(tie_output=True),
    "shared+tied": dict(share_embeddings=True, tie_output=True),
    "pre-ln gelu": dict(norm_first=True, activation="gelu", pad_id=3, tgt_vocab_size=31),
}


def make(**overrides) -> Transformer:
    torch.manual_seed(0)
    return Transformer(**{**SMALL, **overrides}).eval()


def batch(model: Transformer) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, model.config["src_vocab_size"], (3, 7), generator=g)
    tgt = torch.randint(4, model.config["tgt_vocab_size"], (3, 5), generator=g)
    src[0, 5:] = model.pad_id
    return src, tgt


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def assert_ties(model: Transformer, overrides: dict) -> None:
    emb_src, emb_tgt = model.src_embed.embedding.weight, model.tgt_embed.embedding.weight
    assert (emb_src is emb_tgt) == bool(overrides.get("share_embeddings"))
    assert (model.generator.weight is emb_tgt) == bool(overrides.get("tie_output"))


# --- config -------------------------------------------------------------------------

def test_config_rebuilds_the_model_and_is_a_copy():
    model = make(tie_output=True)
    config = model.config
    assert json.loads(json.dumps(config)) == config  # plain JSON
    assert config == {**SMALL, "dropout": 0.1, "pad_id": 0, "activation": "relu",
                      "norm_first": False, "share_embeddings": False, "tie_output": True,
                      "bos_id": 1, "eos_id": 2}
    torch.manual_seed(0)
    again = Transformer(**config).eval()
    assert list(again.state_dict()) == list(model.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values(), strict=True))
    config["d_model"] = 99  # changing the copy changes nothing
    assert model.config["d_model"] == 16


# --- round trip ----------------------------------------------------------------------

@pytest.mark.parametrize("name", VARIANTS)
def test_round_trip_is_bit_exact_and_keeps_ties(tmp_path, name):
    overrides = VARIANTS[name]
    model = make(**overrides)
    with torch.no_grad():
        for p in model.parameters():  # not the initial values: every tensor distinct
            p.add_(torch.randn_like(p) * 0.01)
    out = model.save_pretrained(tmp_path / "m", metadata={"bleu": 12.5, "note": "x"})
    assert out == tmp_path / "m"
    assert sorted(p.name for p in out.iterdir()) == [CONFIG_FILE, WEIGHTS_FILE]
    loaded = Transformer.from_pretrained(out)
    assert type(loaded) is Transformer and not loaded.training
    assert loaded.config == model.config
    want, got = model.state_dict(), loaded.state_dict()
    assert list(got) == list(want)
    assert all(same_bits(got[k], want[k]) for k in want)
    assert_ties(loaded, overrides)
    src, tgt = batch(model)
    with torch.no_grad():
        assert same_bits(loaded(src, tgt), model(src, tgt))
    assert torch.equal(loaded.positional.pe, model.positional.pe)
    assert read_pretrained_config(out)["metadata"] == {"bleu": 12.5, "note": "x"}


def test_a_tied_table_is_stored_once(tmp_path):
    model = make(share_embeddings=True, tie_output=True)
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / WEIGHTS_FILE, framework="pt") as f:
        names = set(f.keys())
    tables = {"src_embed.embedding.weight", "tgt_embed.embedding.weight", "generator.weight"}
    assert len(names & tables) == 1
    assert len(names) == len(model.state_dict()) - 2


def test_float64_model_round_trips_in_float64(tmp_path):
    model = make().double()
    model.save_pretrained(tmp_path)
    assert read_pretrained_config(tmp_path)["dtype"] == "float64"
    loaded = Transformer.from_pretrained(tmp_path)
    assert all(p.dtype == torch.float64 for p in loaded.parameters())
    src, tgt = batch(model)
    with torch.no_grad():
        assert same_bits(loaded(src, tgt), model(src, tgt))


def test_loading_never_unpickles(tmp_path, monkeypatch):
    make(tie_output=True).save_pretrained(tmp_path)

    def refuse(*args, **kwargs):
        raise AssertionError("something was unpickled")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    Transformer.from_pretrained(tmp_path)


def test_loading_does_not_touch_the_global_random_state(tmp_path):
    make().save_pretrained(tmp_path)
    torch.manual_seed(5)
    Transformer.from_pretrained(tmp_path)
    after = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(3))


def test_metadata_defaults_to_empty_and_must_be_json(tmp_path):
    model = make()
    model.save_pretrained(tmp_path / "a")
    assert read_pretrained_config(tmp_path / "a")["metadata"] == {}
    for bad in ({"loss": float("nan")}, {"tensor": torch.zeros(1)}, ["not", "a", "dict"]):
        with pytest.raises(ValueError, match="metadata"):
            model.save_pretrained(tmp_path / "b", metadata=bad)
    assert not (tmp_path / "b").exists()  # refused before anything was written


# --- bad directories and files -----------------------------------------------------------

@pytest.fixture
def saved(tmp_path):
    model = make(tie_output=True)
    return model.save_pretrained(tmp_path / "saved")


def rewrite_config(directory, change):
    path = directory / CONFIG_FILE
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


def load_error(directory, error=ValueError) -> str:
    with pytest.raises(error) as info:
        Transformer.from_pretrained(directory)
    message = str(info.value)
    assert "weights_only" not in message and "pickle" not in message.lower()
    return message


def test_missing_directory_and_files(tmp_path, saved):
    assert "no such directory" in load_error(tmp_path / "nowhere", FileNotFoundError)
    (saved / WEIGHTS_FILE).unlink()
    assert f"{saved / WEIGHTS_FILE}: missing" in load_error(saved, FileNotFoundError)
    (saved / CONFIG_FILE).unlink()
    assert f"{saved / CONFIG_FILE}: missing" in load_error(saved, FileNotFoundError)
    with pytest.raises(FileNotFoundError, match="config.json: missing"):
        read_pretrained_config(saved)


@pytest.mark.parametrize("text, expected", [
    ("{not json", "not valid JSON"),
    ('{"format_version": 1, "model_class": "Transformer", "config": {"d_ff": NaN}}', "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"format_version": 1, "config": {}}', "lacks ['model_class']"),
    ('{"format_version": 2, "model_class": "Transformer", "config": {}}', "format_version 2"),
    ('{"format_version": true, "model_class": "Transformer", "config": {}}', "format_version True"),
    ('{"format_version": 1, "model_class": "Transformer", "config": [1]}', "'config' must be a JSON object"),
    ('{"format_version": 1, "model_class": "Transformer", "config": {}, "metadata": 3}',
     "'metadata' must be a JSON object"),
])
def test_malformed_config_json(saved, text, expected):
    (saved / CONFIG_FILE).write_text(text)
    message = load_error(saved)
    assert message.startswith(f"{saved / CONFIG_FILE}: ") and expected in message


def test_config_of_another_class_or_with_unknown_or_bad_keys(saved):
    rewrite_config(saved, lambda d: d.update(model_class="DecoderOnly"))
    assert "holds a DecoderOnly, not a Transformer" in load_error(saved)
    rewrite_config(saved, lambda d: d.update(model_class="Transformer"))
    rewrite_config(saved, lambda d: d["config"].update(n_layers=3, width=4))
    assert "config keys ['n_layers', 'width'] are not arguments of Transformer" in load_error(saved)
    rewrite_config(saved, lambda d: [d["config"].pop(k) for k in ("n_layers", "width")])
    rewrite_config(saved, lambda d: d["config"].update(d_model=15))
    message = load_error(saved)
    assert message.startswith(f"{saved / CONFIG_FILE}: its config does not build a Transformer")
    assert "d_model" in message
    rewrite_config(saved, lambda d: d["config"].pop("src_vocab_size"))
    assert "src_vocab_size" in load_error(saved)
    rewrite_config(saved, lambda d: d.update(dtype="int64"))
    assert "dtype 'int64'" in load_error(saved)


def test_weights_that_do_not_match_the_config(saved):
    rewrite_config(saved, lambda d: d["config"].update(d_ff=32))
    message = load_error(saved)
    assert message.startswith(f"{saved / WEIGHTS_FILE}: tensor ") and "[24, 16]" in message
    assert "[32, 16]" in message
    rewrite_config(saved, lambda d: d["config"].update(d_ff=24, num_encoder_layers=1))
    assert "does not have: ['encoder.layers.1." in load_error(saved)
    rewrite_config(saved, lambda d: d["config"].update(num_encoder_layers=3))
    assert "lacks the tensor 'encoder.layers.2." in load_error(saved)


def test_weights_of_another_dtype_or_names(saved):
    model = make(tie_output=True)
    state = {k: v.double() for k, v in model.state_dict().items() if k != "generator.weight"}
    save_file(state, saved / WEIGHTS_FILE)
    assert "torch.float64, the model expects [23, 16] torch.float32" in load_error(saved)
    state = {k.replace("encoder.", "enc."): v for k, v in model.state_dict().items()
             if k != "generator.weight"}
    save_file(state, saved / WEIGHTS_FILE)
    assert "does not have: ['enc." in load_error(saved)


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "pickle"])
def test_damaged_weights_file(saved, damage):
    path = saved / WEIGHTS_FILE
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"",
                      "garbage": b"\x00" * 64 + b"not a tensor file",
                      "pickle": pickle.dumps({"weights": [1, 2, 3]})}[damage])
    message = load_error(saved)
    assert message.startswith(f"{path}: not a readable safetensors file")


def test_bad_map_location(saved):
    with pytest.raises(ValueError, match="map_location must name a device"):
        Transformer.from_pretrained(saved, map_location="gpu please")


# --- meta device, to_empty, assign (issue 11, item 3) ------------------------------------------

@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("assign", [False, True])
def test_meta_device_construction_then_loading_gives_identical_outputs(name, assign):
    overrides = VARIANTS[name]
    model = make(**overrides)
    with torch.device("meta"):
        shell = Transformer(**model.config).eval()
    if not assign:
        shell.to_empty(device="cpu")
        with torch.no_grad():
            shell.positional.pe.fill_(7.0)  # what to_empty may leave there
    shell.load_state_dict(model.state_dict(), assign=assign)
    assert shell.positional.pe.device.type == "cpu"
    assert torch.equal(shell.positional.pe, model.positional.pe)
    assert_ties(shell, overrides)
    src, tgt = batch(model)
    with torch.no_grad():
        assert torch.equal(shell(src, tgt), model(src, tgt))


def test_loading_a_parent_module_also_restores_the_model():
    model = make(tie_output=True)
    parent = torch.nn.Sequential()
    with torch.device("meta"):
        parent.add_module("translator", Transformer(**model.config).eval())
    parent.to_empty(device="cpu")
    parent.load_state_dict({f"translator.{k}": v for k, v in model.state_dict().items()})
    shell = parent.translator
    assert shell.generator.weight is shell.tgt_embed.embedding.weight
    src, tgt = batch(model)
    with torch.no_grad():
        assert torch.equal(shell(src, tgt), model(src, tgt))
