# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jupytext
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 12 · Training beyond one process: DDP, mixed precision, accumulation and resuming after a crash
#
# Chapter 09 trained the book's translator in one process, on one batch at a time, in
# float32, from the first step to the last without stopping. This chapter keeps that
# training step and runs it the way large models are trained:
#
# - on **several processes at once** (`torch.distributed`, `DistributedDataParallel`,
#   launched by `torchrun`), each with its share of every batch, on CPUs (backend gloo)
#   or GPUs (nccl), on one machine or several;
# - with **gradient accumulation** and **mixed precision** (bfloat16 autocast; float16
#   with a gradient scaler on GPUs);
# - from a **config file**: `torchrun --nproc_per_node=N train.py book.toml runs/book`
#   starts N processes of a three-line program, for the translator or for chapter 11's
#   language model (the package ships both configs);
# - with **checkpoints that survive a crash**: a run killed mid-way resumes from its
#   last checkpoint and ends with exactly the weights of a run that never stopped.

# %%
#| default_exp distributed

# %%
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from safetensors.torch import load_file

_ = torch.manual_seed(0)
torch.set_num_threads(1)  # one thread per process: the runs below reproduce exactly
WORK = Path(tempfile.mkdtemp(prefix="chapter12-"))  # every run of this chapter writes here
_ = atexit.register(shutil.rmtree, WORK, ignore_errors=True)  # and it goes when the kernel stops

# %% [markdown]
# ## 1 · The pressure: one process is too slow for the paper's model
#
# The paper trained its base model for 100,000 steps, each on a batch of about 25,000
# target tokens (and as many source tokens). A training step costs about 6 floating
# point operations per parameter per token (2 for the forward pass's multiply-adds, 4 for
# the backward pass's two products), so with 65 million parameters (chapter 08):

# %%
params, tokens_per_step, steps = 65e6, 25_000, 100_000
flops_per_step = 6 * params * tokens_per_step
# What a training step achieves here: we assume 59.5 GFLOP per second of one core, of the
# order of what appendix 14 (section 5) measures for a training step; this machine has 2 cores.
cpu_flops = 2 * 59.5e9
print(f"one step: {flops_per_step:.2e} FLOPs; at {cpu_flops / 1e9:.0f} GFLOP/s: "
      f"{flops_per_step / cpu_flops / 60:.1f} minutes")
print(f"100,000 steps: {steps * flops_per_step / cpu_flops / 86400 / 365:.2f} years")

# %% [markdown]
# About three months with both cores of this machine busy. The paper took 12 hours, on 8 GPUs. Two things are needed:
# more arithmetic per second (GPUs, and several of them), and a training loop that uses
# them all on one model. And once a run takes hours or days, a third: a machine that
# crashes or is taken away must not cost the run.
#
# ## 2 · The idea: data parallelism
#
# Our loss is a mean over the $N$ target tokens of a batch. Cut the batch into $W$
# shards, one per process, with $N_r$ tokens in shard $r$:
#
# $$L = \frac{1}{N}\sum_{r=1}^{W} \sum_{t \in \text{shard } r} \ell_t, \qquad
# \nabla L = \frac{1}{N}\sum_{r=1}^{W} \underbrace{\nabla \sum_{t \in \text{shard } r} \ell_t}_{g_r
# \text{, computed by process } r}, \qquad N = \sum_r N_r.$$
#
# So each of $W$ processes holds a **replica** of the model (the same weights) and of
# the optimizer, runs forward and backward on its own shard, and then the gradients are
# **all-reduced**: summed over the processes, so that every process ends up with the
# same sum $\sum_r g_r$. Dividing by the total token count $N$ (itself all-reduced) gives
# exactly the gradient of the whole batch, and since every replica then takes the same
# optimizer step from the same weights, the replicas stay identical without ever sending
# a weight.
#
# Why does one usually read that DDP *averages* the gradients? Its default divides the
# sum by $W$: when each process computes a mean loss over a shard of the same size,
# $\frac{1}{W}\sum_r \frac{g_r}{N/W} = \frac{1}{N}\sum_r g_r$, the same thing. Our shards
# are cut by sentences, and sentences have different lengths, so the $N_r$ differ: we
# sum instead (a *communication hook*), and the step divides by $N$.
#
# **Overlap.** The gradients are ready layer by layer during backward, last layer
# first. DDP groups them into buckets (25 MB by default) and starts the all-reduce of a
# bucket as soon as its last gradient is computed, while backward goes on through the
# earlier layers. The communication hides behind computation, and the step costs little
# more than the backward pass itself.
#
# **Accumulation** is the same sum taken in time instead of space: cut a process's
# shard into micro-batches, add their gradients up, divide by the token count once. Under
# DDP only the last micro-batch needs the all-reduce: the others run under
# `model.no_sync()`. Section 3's `accumulated_train_step` does both: chapter 09's
# `train_step` with the micro-batches, `no_sync`, and an `all_reduce` that sums the loss
# and the token count over the processes.
#
# **Mixed precision.** Matrix multiplies in bfloat16 (7 stored bits of mantissa, 8 with the
# implicit leading one, against float32's 23) run faster on
# hardware that has bfloat16 units and halve the memory traffic; `torch.autocast` runs
# the multiplies in bfloat16 and keeps the weights, the gradients, the optimizer and the
# softmax of the loss in float32. float16 has more mantissa but a narrower range: small
# gradients underflow to zero, so the loss is multiplied by a large factor before
# backward and the gradients divided by it after (a *gradient scaler*, which also skips a
# step whose gradients overflowed).
#
# **Resuming.** To continue a run exactly, a checkpoint must hold everything the next
# step depends on: the weights, the optimizer's moments, the schedule's position, the
# step count, the position in the data (epoch and batch), and every random generator
# (each process's dropout masks come from its own).
#
# ## 3 · The code
#
# A run is described by a config file with three sections, `[model]`, `[data]` and
# `[train]`; every key has a default (the book's small translator), and a key that is
# unknown or a value out of range is an error that names it. TOML needs no new
# dependency: Python 3.11 reads it (`tomllib`). The configs have a module of their own,
# `transformer.config`.

# %%
#| export config
import json
import tomllib
from pathlib import Path

from transformer.validation import _check_float, _check_int
from transformer.lm import LanguageModel
from transformer.model import PAPER_CONFIGS

# Every key a training config may hold, with its default. A config file (TOML or JSON)
# gives some of them; the rest keep these values (the book's small translator, chapter 09).
CONFIG_DEFAULTS: dict[str, dict] = {
    "model": {"task": "translation", "paper": None, "d_model": 64, "num_heads": 4, "num_encoder_layers": 2,
              "num_decoder_layers": 2, "num_layers": 2, "d_ff": 128, "dropout": 0.1, "max_len": 32,
              "positions": "sinusoidal", "norm": "layer", "activation": "gelu", "num_kv_heads": None},
    "data": {"pairs": None, "corpus_size": 30_000, "valid_size": 1000, "seed": 0,
             "corpus": None, "min_count": 2, "seq_len": 32},
    "train": {"steps": 800, "batch_size": 128, "micro_batches": 1, "warmup": 300, "factor": 1.0,
              "lr": None, "weight_decay": 0.1, "eps": 0.1, "clip": 1.0, "seed": 0, "precision": "fp32",
              "device": "auto", "checkpoint_every": 100, "keep": 2, "log_every": 50, "eval_every": 0,
              "save_dtype": "float32"},
}
# What a config trains: chapter 09's translator (pairs of sentences) or chapter 11's language
# model (a stream of text). Keys of the other task are ignored: for "lm", model.num_layers
# (not the encoder's and decoder's), data.corpus, min_count and seq_len (not pairs,
# corpus_size, valid_size), and train.eps (label smoothing) does not apply. The language
# model's parts are named as LanguageModel names them (model.positions, norm, activation,
# num_kv_heads; chapter 13's ModernLanguageModel knows more names); the translator is the
# 2017 model and ignores them.
TASKS = ("translation", "lm")
PRECISIONS = ("fp32", "bf16", "fp16")  # fp16 needs a GPU (and a gradient scaler)
DEVICES = ("auto", "cpu", "cuda")  # auto: the process's GPU if there is one, else the CPU
SAVE_DTYPES = ("float32", "float16", "bfloat16")  # the final model's weights; half precision halves the file


def _read_config_file(path: Path) -> dict:
    """The dict in a .toml or .json file, or a ValueError that names the file."""
    if path.suffix not in (".toml", ".json"):
        raise ValueError(f"config must be a .toml or .json file, got {str(path)!r}")
    try:
        text = path.read_text(encoding="utf-8")
        document = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except OSError as err:
        raise ValueError(f"config {str(path)!r} cannot be read: {err.strerror or err}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"config {str(path)!r} is not valid {path.suffix[1:].upper()}: {err}") from None
    if not isinstance(document, dict):
        raise ValueError(f"config {str(path)!r} must hold a table of sections, got {type(document).__name__}")
    return document


def _check_choice(name: str, value: object, choices: tuple) -> object:
    """value if it is one of choices, else a ValueError naming the key."""
    if value not in choices or isinstance(value, bool):
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def load_config(config: str | Path | dict, model_class: type[LanguageModel] = LanguageModel) -> dict:
    """Read and check a training config: sections model, data and train (see CONFIG_DEFAULTS).

    `model.paper = "base"` (or "big") takes the paper's sizes from PAPER_CONFIGS; keys
    given next to it override them. Missing keys keep their defaults.

    Args:
        config: a .toml or .json file, or the same content as a dict.
        model_class: the language model that the names of model.positions, norm and
            activation must be known to (default chapter 11's LanguageModel).

    Returns:
        {"model": {...}, "data": {...}, "train": {...}} with every key, checked.

    Raises:
        ValueError: the file cannot be read or parsed, a section or key is unknown, or a
            value has the wrong type or range; the message names the key (e.g. train.steps).
    """
    document = _read_config_file(Path(config)) if isinstance(config, (str, Path)) else config
    if not isinstance(document, dict):
        raise ValueError(f"config must be a file name or a dict, got {type(document).__name__}")
    for section, keys in document.items():
        if section not in CONFIG_DEFAULTS:
            raise ValueError(f"config section {section!r} is not known; the sections are "
                             f"{', '.join(CONFIG_DEFAULTS)}")
        if not isinstance(keys, dict):
            raise ValueError(f"config section {section!r} must be a table of keys, got {type(keys).__name__}")
        for key in keys:
            if key not in CONFIG_DEFAULTS[section]:
                raise ValueError(f"config key {section}.{key} is not known; the keys of [{section}] are "
                                 f"{', '.join(CONFIG_DEFAULTS[section])}")
    model = {**CONFIG_DEFAULTS["model"], **document.get("model", {})}
    if model["paper"] is not None:
        _check_choice("model.paper", model["paper"], tuple(PAPER_CONFIGS))
        model = {**model, **PAPER_CONFIGS[model["paper"]], **document.get("model", {})}
    data = {**CONFIG_DEFAULTS["data"], **document.get("data", {})}
    train = {**CONFIG_DEFAULTS["train"], **document.get("train", {})}
    _check_choice("model.task", model["task"], TASKS)
    for key in ("d_model", "num_heads", "num_encoder_layers", "num_decoder_layers", "num_layers", "d_ff", "max_len"):
        _check_int(f"model.{key}", model[key])
    _check_float("model.dropout", model["dropout"], 0.0, 1.0)
    if model["d_model"] % model["num_heads"]:
        raise ValueError(f"model.d_model ({model['d_model']}) must be divisible by model.num_heads "
                         f"({model['num_heads']})")
    for key, names in (("positions", model_class.POSITIONS), ("norm", model_class.NORMS),
                       ("activation", model_class.FEED_FORWARDS)):
        _check_choice(f"model.{key}", model[key], tuple(names))
    if model["num_kv_heads"] is not None:
        _check_int("model.num_kv_heads", model["num_kv_heads"])
        if "grouped-query" not in model_class.ATTENTIONS:
            raise ValueError(f"model.num_kv_heads needs grouped-query attention, which {model_class.__name__} "
                             "does not have (chapter 13's ModernLanguageModel has it)")
        if model["num_heads"] % model["num_kv_heads"]:
            raise ValueError(f"model.num_heads ({model['num_heads']}) must be divisible by model.num_kv_heads "
                             f"({model['num_kv_heads']})")
    if data["pairs"] is not None and not isinstance(data["pairs"], str):
        raise ValueError(f"data.pairs must be a file name (a string), got {data['pairs']!r}")
    _check_int("data.corpus_size", data["corpus_size"])
    _check_int("data.valid_size", data["valid_size"], 0)
    _check_int("data.seed", data["seed"], 0)
    if data["corpus"] is not None and not isinstance(data["corpus"], str):
        raise ValueError(f"data.corpus must be a file name (a string), got {data['corpus']!r}")
    _check_int("data.min_count", data["min_count"])
    _check_int("data.seq_len", data["seq_len"])
    if model["task"] == "lm" and data["seq_len"] > model["max_len"]:
        raise ValueError(f"data.seq_len ({data['seq_len']}) must not exceed model.max_len ({model['max_len']})")
    for key in ("steps", "batch_size", "micro_batches", "warmup", "checkpoint_every", "keep", "log_every"):
        _check_int(f"train.{key}", train[key])
    _check_int("train.eval_every", train["eval_every"], 0)
    if train["lr"] is not None:
        _check_float("train.lr", train["lr"], 0.0, low_closed=False)
    _check_float("train.weight_decay", train["weight_decay"], 0.0)
    _check_choice("train.save_dtype", train["save_dtype"], SAVE_DTYPES)
    _check_int("train.seed", train["seed"], 0)
    _check_float("train.factor", train["factor"], 0.0, low_closed=False)
    _check_float("train.eps", train["eps"], 0.0, 1.0)
    if train["clip"] is not None:
        _check_float("train.clip", train["clip"], 0.0, low_closed=False)
    _check_choice("train.precision", train["precision"], PRECISIONS)
    _check_choice("train.device", train["device"], DEVICES)
    if train["micro_batches"] > train["batch_size"]:
        raise ValueError(f"train.micro_batches ({train['micro_batches']}) must not exceed "
                         f"train.batch_size ({train['batch_size']})")
    return {"model": model, "data": data, "train": train}

# %%
import transformer

CONFIGS = Path(transformer.__file__).resolve().parent / "configs"  # shipped in the package
print((CONFIGS / "book.toml").read_text().split("\n[model]")[0])
for name in ["book", "base", "big", "lm"]:
    print(f"{name:5s}", load_config(CONFIGS / f"{name}.toml")["model"])
for bad in [{"train": {"stpes": 10}}, {"train": {"steps": 0}}, {"train": {"micro_batches": True}},
            {"model": {"paper": "huge"}}, {"model": {"positions": "alibi"}}, {"train": {"precision": "fp8"}},
            {"train": {"factor": float("nan")}}]:
    try:
        load_config(bad)
    except ValueError as err:
        print(f"{bad}: {err}")

# %% [markdown]
# The data: without a `pairs` file, chapter 09's toy corpus. The real WMT data of the
# paper is not shipped with the book (it is large, and has its own licence): a reader
# who has it tokenizes it into a file with one `source<TAB>target` pair a line and names
# it in `[data] pairs`. Every process reads the same pairs and shuffles them the same
# way (the seed plus the epoch), so that all processes agree on each **global batch**;
# each then takes its own block of rows.

# %%
#| export
import random
from pathlib import Path

from torch import Tensor

from transformer.data import Vocab, make_batches
from transformer.grammar import generate_corpus, split_corpus


def load_pairs(data: dict) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The training and validation sentence pairs that a config's data section names.

    Without `pairs`, the toy corpus of chapter 09 (corpus_size pairs from seed). With
    `pairs`, a UTF-8 text file with one pair a line, `source<TAB>target`, words separated
    by spaces (tokenize your own data first); its lines are shuffled with seed and the
    last valid_size become the validation set.

    Args:
        data: the checked data section of `load_config`.

    Returns:
        (train pairs, valid pairs): lists of (source, target) strings.

    Raises:
        ValueError: the pairs file cannot be read, a line is not two tab-separated
            non-empty texts (the message gives the line), or no training pair is left.
    """
    if data["pairs"] is None:
        split = split_corpus(generate_corpus(data["corpus_size"], seed=data["seed"]),
                             valid_size=data["valid_size"], test_size=0, held_out_size=0, seed=data["seed"])
        return list(split.train), list(split.valid)
    path = Path(data["pairs"])
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"data.pairs {str(path)!r} cannot be read: {err}") from None
    pairs = []
    for number, line in enumerate(lines, 1):
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise ValueError(f"data.pairs {str(path)!r}, line {number}: expected `source<TAB>target`, "
                             f"got {line[:60]!r}")
        pairs.append((parts[0].strip(), parts[1].strip()))
    random.Random(data["seed"]).shuffle(pairs)
    cut = len(pairs) - data["valid_size"]
    if cut < 1:
        raise ValueError(f"data.pairs {str(path)!r} has {len(pairs)} pairs: not enough for "
                         f"data.valid_size = {data['valid_size']} and at least one to train on")
    return pairs[:cut], pairs[cut:]


def epoch_batches(pairs: list[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab, *, batch_size: int,
                  seed: int, max_len: int, world_size: int) -> list[tuple[Tensor, Tensor]]:
    """One epoch's global batches, the same on every process: shuffled with seed.

    A last batch with fewer sentences than processes is dropped (some process would get
    none).

    Args:
        pairs: (source, target) pairs.
        src_vocab, tgt_vocab: the vocabularies.
        batch_size: sentences per global batch (all processes together).
        seed: the epoch's shuffle seed (the config's seed + the epoch).
        max_len: the model's max_len.
        world_size: the number of processes.

    Returns:
        A list of (src [B, S], tgt [B, T]) batches.
    """
    batches = make_batches(pairs, src_vocab, tgt_vocab, batch_size=batch_size, shuffle=True, seed=seed,
                           max_len=max_len)
    return [b for b in batches if b[0].size(0) >= world_size]


def shard(batch: tuple[Tensor, ...], rank: int, world_size: int) -> tuple[Tensor, ...]:
    """This process's rows of a global batch: the rank-th of world_size near-equal blocks.

    Args:
        batch: tensors sharing their first (batch) axis, e.g. (src [B, S], tgt [B, T]).
        rank: this process's number, in [0, world_size).
        world_size: the number of processes, <= B.

    Returns:
        The same tensors, cut to rows [rank * B / world_size, (rank + 1) * B / world_size).
    """
    return tuple(t.tensor_split(world_size)[rank] for t in batch)

# %% [markdown]
# The processes. `torchrun` starts them and tells each, in environment variables, its
# `RANK` (0 to `WORLD_SIZE - 1`), its `LOCAL_RANK` on its machine, and where to meet
# (`MASTER_ADDR`, `MASTER_PORT`); `init_process_group` connects them. Then
# `DistributedDataParallel` wraps the model, with our summing communication hook.

# %%
#| export
import os
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class Processes(NamedTuple):
    """Where this process stands among the processes that torchrun started.

    Attributes:
        rank: this process's number, 0 to world_size - 1 (0 logs and saves).
        world_size: how many processes train together (1 without torchrun).
        local_rank: its number on this machine (it picks the GPU).
        device: the device it trains on.
    """

    rank: int
    world_size: int
    local_rank: int
    device: torch.device


def start_processes(device: str = "auto") -> Processes:
    """Join the process group that torchrun describes in the environment (or stay alone).

    torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for each
    process it starts; without them this is one process and nothing is initialised.
    The backend is nccl for GPUs, gloo for CPUs.

    Args:
        device: "auto" (this machine's GPU number local_rank if there is a GPU, else
            the CPU), "cpu" or "cuda" (default "auto").

    Returns:
        The Processes(rank, world_size, local_rank, device) of this process.

    Raises:
        ValueError: device is "cuda" but no GPU is available.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("train.device is 'cuda' but torch sees no GPU")
    use_gpu = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    where = torch.device("cuda", local_rank) if use_gpu else torch.device("cpu")
    if use_gpu:
        torch.cuda.set_device(where)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if use_gpu else "gloo")
    return Processes(rank, world_size, local_rank, where)


def sum_gradients(process_group: dist.ProcessGroup | None, bucket: dist.GradBucket
                  ) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: add the gradients up over the processes (no averaging).

    DDP's default divides the sum by the number of processes. accumulated_train_step divides by
    the whole batch's token count itself, so it needs the plain sum.
    """
    work = dist.all_reduce(bucket.buffer(), group=process_group, async_op=True)
    return work.get_future().then(lambda future: future.value()[0])


def replicate(model: torch.nn.Module, procs: Processes) -> torch.nn.Module:
    """The model to run forward and backward through: DDP around it on several processes.

    DDP copies rank 0's weights to every process at the start, and during backward
    all-reduces (sums) each bucket of gradients as soon as it is ready, overlapping the
    communication with the rest of the backward pass.

    Args:
        model: the model, already on procs.device.
        procs: from `start_processes`.

    Returns:
        model itself for one process, else a DistributedDataParallel around it.
    """
    if procs.world_size == 1:
        return model
    replica = DistributedDataParallel(model, device_ids=[procs.device] if procs.device.type == "cuda" else None)
    replica.register_comm_hook(None, sum_gradients)
    return replica


def all_reduce_sum(tensor: Tensor) -> Tensor:
    """The sum of a tensor over every process (a copy; itself for one process).

    Args:
        tensor: any tensor (on the CPU for gloo, on the GPU for nccl).

    Returns:
        A tensor of the same shape: the element-wise sum over the processes.
    """
    if not dist.is_initialized():
        return tensor
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    total = tensor.to(device, copy=True)  # nccl adds up GPU tensors only
    dist.all_reduce(total)
    return total.to(tensor.device)

# %% [markdown]
# The checkpoint. A tensor goes into safetensors, everything else (numbers, the
# optimizer's settings, a Python generator's state) into JSON, stored in the same file's
# metadata: nothing is pickled, so loading a checkpoint never runs code. Two details make
# it safe against a crash *during* the save:
#
# - a file is never written in place: the bytes go to a temporary file in the same
#   directory, are forced to the disk (`fsync`), and the file is renamed over the target
#   with `os.replace`, which is atomic: a reader sees the old file or the new one, never
#   half of one;
# - the pointer `latest` is rewritten last, only once the new checkpoint is complete.
#
# These checkpoints have a module of their own, `transformer.resume`.

# %%
#| export resume
import json
import os
from pathlib import Path
from typing import cast

from safetensors import safe_open
from safetensors.torch import save as safetensors_bytes
from torch import Tensor

from transformer.validation import _check_int

LATEST = "latest"  # the pointer file: names the newest complete checkpoint


def _to_json(value: object, tensors: dict[str, Tensor], path: str) -> object:
    """value with its tensors moved into `tensors` (by path) and tuples/int keys marked."""
    if isinstance(value, Tensor):
        tensors[path] = value.detach().cpu().clone()  # clone: tied weights share memory
        return {"__tensor__": path}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _to_json(v, tensors, f"{path}.{k}") for k, v in value.items()}
        return {"__items__": [[k, _to_json(v, tensors, f"{path}.{k}")] for k, v in value.items()]}
    if isinstance(value, (tuple, list)):
        items = [_to_json(v, tensors, f"{path}.{i}") for i, v in enumerate(value)]
        return {"__tuple__": items} if isinstance(value, tuple) else items
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"{path}: a {type(value).__name__} cannot be saved without pickle")


def _from_json(value: object, tensors: dict[str, Tensor]) -> object:
    """The inverse of _to_json."""
    if isinstance(value, list):
        return [_from_json(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tensor__" in value:
        return tensors[value["__tensor__"]]
    if "__tuple__" in value:
        return tuple(_from_json(v, tensors) for v in value["__tuple__"])
    if "__items__" in value:
        return {k: _from_json(v, tensors) for k, v in value["__items__"]}
    return {k: _from_json(v, tensors) for k, v in value.items()}


def _write_file(path: Path, data: bytes) -> None:
    """Write data to path and force it to the disk (fsync)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_atomically(path: Path, data: bytes) -> None:
    """Write data to path so that path holds either its old content or all of data.

    The bytes go to a temporary file in the same directory, are flushed to the disk
    (fsync), and the file is renamed over path (os.replace is atomic); the directory is
    fsynced so that the rename survives a power cut too.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    _write_file(tmp, data)
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def save_resume_checkpoint(directory: str | Path, state: dict, *, keep: int = 2) -> Path:
    """Save everything needed to resume, atomically, without pickle; keep the newest `keep`.

    The tensors of `state` (weights, optimizer moments, RNG states) go into a safetensors
    file, everything else into JSON in that file's metadata: `step-NNNNNNNN.safetensors`.
    Then the pointer file `latest` is rewritten to name it. Both writes are atomic, and
    the pointer is written last: a crash at any moment leaves `latest` naming a complete
    checkpoint (the new one or the previous one).

    Args:
        directory: the checkpoint directory (created if absent).
        state: a dict with an int "step" and tensors, numbers, strings, None, lists,
            tuples and dicts (string or int keys).
        keep: how many checkpoints to keep, >= 1 (default 2); older ones are deleted.

    Returns:
        The path of the new checkpoint file.

    Raises:
        ValueError: state holds something that needs pickle, or keep is not positive.
    """
    _check_int("keep", keep)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, Tensor] = {}
    document = json.dumps(_to_json(state, tensors, "state"))
    path = directory / f"step-{_check_int('step', state['step'], 0):08d}.safetensors"
    _write_atomically(path, safetensors_bytes(tensors, metadata={"state": document}))
    _write_atomically(directory / LATEST, json.dumps({"checkpoint": path.name}).encode())
    for old in sorted(directory.glob("step-*.safetensors"))[:-keep]:
        old.unlink()
    return path


def load_resume_checkpoint(directory: str | Path) -> dict | None:
    """The state that `latest` names in a checkpoint directory, or None if there is none.

    Args:
        directory: a directory written by `save_resume_checkpoint` (it may not exist).

    Returns:
        The saved state (tensors on the CPU), or None when there is no `latest` yet.

    Raises:
        ValueError: `latest` or the checkpoint it names cannot be read (the message
            names the file).
    """
    pointer = Path(directory) / LATEST
    if not pointer.exists():
        return None
    try:
        path = pointer.parent / json.loads(pointer.read_text(encoding="utf-8"))["checkpoint"]
        with safe_open(str(path), framework="pt") as f:
            tensors = {name: f.get_tensor(name) for name in f.keys()}
            document = json.loads(f.metadata()["state"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"cannot resume from {str(pointer.parent)!r}: {type(err).__name__}: {err}") from None
    except Exception as err:  # safetensors reports a corrupt file with its own error type
        raise ValueError(f"cannot resume from {str(path)!r}: {err}") from None
    return cast(dict, _from_json(document, tensors))

# %% [markdown]
# The step. Chapter 09's `train_step` is forward, loss, backward and `take_step` (clip,
# update, schedule). On several processes, in pieces and in float16 the middle grows, as
# section 2 described: the batch is cut into micro-batches that go forward and backward
# one after the other, those before the last under `no_sync`; each piece's loss is
# weighted by its tokens, the loss and the token count are summed over the processes
# (`all_reduce`), and the summed gradients are divided by the whole batch's tokens. With
# float16, a gradient scaler multiplies the loss before backward, divides the gradients
# after, and its own step skips an update whose gradients overflowed; `ScaledTrainState`
# is chapter 09's `TrainState` with the scaler in it, so that a checkpoint resumes the
# loss scale too. The step goes into `transformer.accumulation`.

# %%
#| export accumulation
import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from transformer.validation import _check_float, _check_int
from transformer.training import LossFn, StepResult, TrainState, check_loss, take_step


@dataclass
class ScaledTrainState(TrainState):
    """Chapter 09's TrainState with a gradient scaler for float16 mixed precision.

    Args:
        model, optimizer, scheduler, step: as in TrainState.
        scaler: a torch.amp.GradScaler, or None (no scaling; default).
    """

    scaler: torch.amp.GradScaler | None = None

    def state_dict(self) -> dict:
        """TrainState's, with "scaler": the scaler's state dict, or None without one."""
        return {**super().state_dict(), "scaler": None if self.scaler is None else self.scaler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict()` returned (the scaler's state when both have one)."""
        super().load_state_dict(state)
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])


def split_batch(batch: Any, parts: int) -> list:
    """Cut a batch (a tensor, or a tuple, list or dict of tensors) into <= parts pieces along axis 0.

    Raises:
        ValueError: a batch of another kind, or tensors whose first axes differ.
    """
    if parts == 1:
        return [batch]
    if isinstance(batch, Tensor):
        tensors = [batch]
    else:
        tensors = list(batch.values() if isinstance(batch, dict) else batch
                       if isinstance(batch, (tuple, list)) else [])
    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        raise ValueError("micro_batches > 1 needs a batch that is a tensor, or a tuple, list or "
                         f"dict of tensors, got {type(batch).__name__}")
    sizes = {t.size(0) for t in tensors}
    if len(sizes) != 1:
        raise ValueError(f"the tensors of a batch must share their first (batch) axis, got sizes {sorted(sizes)}")
    size = math.ceil(sizes.pop() / parts)  # rows per micro-batch
    if isinstance(batch, Tensor):
        return list(batch.split(size))
    if isinstance(batch, dict):
        return [dict(zip(batch, pieces, strict=True)) for pieces in zip(*(t.split(size) for t in tensors), strict=True)]
    return [type(batch)(pieces) for pieces in zip(*(t.split(size) for t in tensors), strict=True)]


def accumulated_train_step(state: TrainState, batch: Any, loss_fn: LossFn, *, clip: float | None = 1.0,
                           micro_batches: int = 1,
                           no_sync: Callable[[], AbstractContextManager] | None = None,
                           all_reduce: Callable[[Tensor], Tensor] | None = None) -> StepResult:
    """Chapter 09's train_step for data parallelism, gradient accumulation and float16.

    Args:
        state: the TrainState to update; a ScaledTrainState with a scaler scales the loss
            for backward and skips an update whose gradients overflowed.
        batch, loss_fn, clip: as in train_step.
        micro_batches: pieces to cut the batch into along its first axis, forward and
            backward one at a time (default 1). The update is the whole batch's: each
            piece is weighted by its tokens.
        no_sync: a function returning a context manager under which the micro-batches
            before the last go forward and backward without exchanging gradients
            (DistributedDataParallel.no_sync); default None.
        all_reduce: a function that returns the sum of a tensor over all processes; the
            loss and the token count are summed with it, so that every process divides the
            summed gradients by the whole batch's tokens (default None: one process).

    Returns:
        A StepResult(loss, tokens, grad_norm, lr); with all_reduce, loss and tokens are the
        whole batch's, over all processes.

    Raises:
        ValueError: an argument is out of range, or the batch holds no token.
        FloatingPointError: the loss is NaN or infinite (the model is left unchanged).
    """
    _check_int("micro_batches", micro_batches)
    if clip is not None:
        _check_float("clip", clip, 0.0, low_closed=False)
    scaler = getattr(state, "scaler", None)
    state.optimizer.zero_grad(set_to_none=True)
    total, tokens = 0.0, 0
    pieces = split_batch(batch, micro_batches)
    for i, piece in enumerate(pieces):
        with no_sync() if no_sync is not None and i < len(pieces) - 1 else nullcontext():
            loss, n = loss_fn(state.model, piece)
            (loss * n if scaler is None else scaler.scale(loss * n)).backward()  # summed; divided below
        total, tokens = total + loss.item() * n, tokens + n
    if all_reduce is not None:  # sums over the processes: the whole batch's loss and tokens
        total, tokens = all_reduce(torch.tensor([total, tokens], dtype=torch.float64)).tolist()
        tokens = int(tokens)
    check_loss(total / max(tokens, 1), tokens, state.step)
    if scaler is not None:
        scaler.unscale_(state.optimizer)  # back to true gradients; notes any overflow
    for p in state.model.parameters():
        if p.grad is not None:
            p.grad.div_(tokens)  # the sum of weighted piece losses -> the batch's mean loss
    update = None if scaler is None else lambda: (scaler.step(state.optimizer), scaler.update())
    grad_norm, lr = take_step(state, clip, update)
    return StepResult(total / tokens, tokens, grad_norm, lr)


# %% [markdown]
# The loop. It is `accumulated_train_step`, called on this process's shard of each
# global batch, through the DDP replica, under autocast. Around it: rank 0 logs, shows
# the progress bar and saves; every process notes a SIGTERM (what a cluster's scheduler
# sends before taking the machine back) and all stop together after the step, once a
# checkpoint is saved. A run started again in the same directory resumes.
#
# First, what a config trains, a **task**: the model, its batches, its loss, its
# validation and how to save it, one function per task (`transformer.tasks`); the loop
# is the same for both.

# %%
#| export tasks
import math
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from transformer.data import PAD_ID, Vocab, make_batches
from transformer.distributed import Processes, epoch_batches, load_pairs
from transformer.lm import LanguageModel, lm_loss, perplexity, save_language_model
from transformer.model import Transformer
from transformer.corpus import CORPUS_FILE, read_corpus, split_documents
from transformer.text import CharVocab, encode_stream, sequential_windows
from transformer.saving import save_checkpoint
from transformer.training import evaluate_loss, translation_loss


class Task(NamedTuple):
    """What a config trains, in the form the loop needs; the loop itself is the same for both.

    Attributes:
        model: the model, on this process's device, the same initial weights everywhere.
        batches: epoch -> that epoch's global batches (the same on every process).
        loss_fn: (forward, batch) -> (mean loss, token count), as chapter 09's train_step takes it.
        valid_loss: model -> its mean loss on the validation set (None without one).
        save: (directory, metrics) -> writes the task's model, trained, where a user loads it.
        describe: one line for the log: the data and the size of a batch.
    """

    model: Transformer | LanguageModel
    batches: Callable[[int], list]
    loss_fn: Callable
    valid_loss: Callable[[torch.nn.Module], float | None]
    save: Callable[[Path, dict], None]
    describe: str


def translation_task(cfg: dict, procs: Processes) -> Task:
    """Chapter 09's translator on the config's sentence pairs (batches of batch_size sentences)."""
    model_cfg, train_cfg = cfg["model"], cfg["train"]
    train_pairs, valid_pairs = load_pairs(cfg["data"])
    src_vocab = Vocab.build(en for en, _ in train_pairs)
    tgt_vocab = Vocab.build(zh for _, zh in train_pairs)
    sizes = {k: model_cfg[k] for k in ("d_model", "num_heads", "num_encoder_layers", "num_decoder_layers",
                                       "d_ff", "dropout", "max_len")}
    model = Transformer(len(src_vocab), len(tgt_vocab), **sizes, pad_id=PAD_ID).to(procs.device)

    def batches(epoch: int) -> list:
        return epoch_batches(train_pairs, src_vocab, tgt_vocab, batch_size=train_cfg["batch_size"],
                             seed=train_cfg["seed"] + epoch, max_len=model.max_len, world_size=procs.world_size)

    def valid_loss(trained: torch.nn.Module) -> float | None:
        if not valid_pairs:
            return None
        valid = make_batches(valid_pairs, src_vocab, tgt_vocab, batch_size=500, max_len=model.max_len)
        return evaluate_loss(trained, valid, partial(translation_loss, eps=train_cfg["eps"]))

    def save(directory: Path, metrics: dict) -> None:
        save_checkpoint(directory, model, src_vocab, tgt_vocab, metrics=metrics)

    return Task(model, batches, lambda forward, batch: translation_loss(forward, batch, train_cfg["eps"]),
                valid_loss, save, f"{len(train_pairs):,} sentence pairs, batch {train_cfg['batch_size']} sentences")


def lm_epoch_batches(stream: Tensor, *, batch_size: int, seq_len: int, seed: int,
                     world_size: int) -> list[tuple[Tensor, Tensor]]:
    """One epoch of a language model's global batches: every window of the stream once, shuffled.

    The stream is cut into consecutive windows of seq_len (chapter 11's sequential_windows)
    from a random offset below seq_len, so that each epoch cuts the text at other places;
    the windows are shuffled and grouped by batch_size, the last incomplete batch dropped.
    The same seed gives the same batches on every process.

    Args:
        stream: the training ids [N] (chapter 11's encode_stream).
        batch_size: windows per global batch, >= world_size.
        seq_len: the window length T.
        seed: the epoch's seed (the config's seed + the epoch).
        world_size: the number of processes.

    Returns:
        A list of (inputs [batch_size, T], labels [batch_size, T]).
    """
    offset = random.Random(seed).randrange(seq_len)
    inputs, labels = sequential_windows(stream[offset:], seq_len)  # [W, T] each
    order = torch.randperm(len(inputs), generator=torch.Generator().manual_seed(seed))
    return [(inputs[rows], labels[rows]) for rows in order.split(batch_size)
            if len(rows) == batch_size >= world_size]


def language_model_task(cfg: dict, procs: Processes, model_class: type[LanguageModel] = LanguageModel) -> Task:
    """Chapter 11's language model (or model_class, a subclass) on a corpus (default the shipped
    Tang poems), split and encoded as chapter 11 does (batches of batch_size windows of
    seq_len characters)."""
    model_cfg, data_cfg, train_cfg = cfg["model"], cfg["data"], cfg["train"]
    documents = read_corpus(data_cfg["corpus"] or CORPUS_FILE)
    split = split_documents(documents, seed=data_cfg["seed"])
    vocab = CharVocab.build((d.text for d in split.train), min_count=data_cfg["min_count"])
    train_stream = encode_stream([d.text for d in split.train], vocab)  # [N]
    valid_stream = encode_stream([d.text for d in split.valid], vocab)
    model = model_class(len(vocab), model_cfg["d_model"], model_cfg["num_heads"], model_cfg["num_layers"],
                        model_cfg["d_ff"], model_cfg["dropout"], model_cfg["max_len"],
                        **{key: model_cfg[key] for key in ("positions", "norm", "activation", "num_kv_heads")}
                        ).to(procs.device)
    seq_len = data_cfg["seq_len"]

    def batches(epoch: int) -> list:
        return lm_epoch_batches(train_stream, batch_size=train_cfg["batch_size"], seq_len=seq_len,
                                seed=train_cfg["seed"] + epoch, world_size=procs.world_size)

    def valid_loss(trained: torch.nn.Module) -> float:
        return math.log(perplexity(trained, valid_stream.to(procs.device), seq_len))

    def save(directory: Path, metrics: dict) -> None:
        save_language_model(directory, model, vocab, metrics=metrics, dtype=getattr(torch, train_cfg["save_dtype"]))

    return Task(model, batches, lm_loss, valid_loss, save,
                f"{len(split.train):,} documents ({len(train_stream):,} ids, {len(vocab):,} tokens), "
                f"batch {train_cfg['batch_size']} x {seq_len}")


def make_adamw(model: torch.nn.Module, lr: float, warmup: int, steps: int, weight_decay: float = 0.1
               ) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW (betas 0.9, 0.95) with a linear warm-up to lr and a cosine decay to lr / 10 at
    `steps`: GPT-3's recipe (Brown et al. 2020), which many language models have kept
    (chapter 09's Adam and schedule are the paper's).

    Weight decay applies to the matrices (embeddings and projections), not to biases and norms.

    Args:
        model: the model to train.
        lr: the peak learning rate, > 0.
        warmup: warm-up updates, > 0.
        steps: the run's updates, > 0 (the end of the decay).
        weight_decay: AdamW's decoupled decay of the matrices, >= 0 (default 0.1).

    Returns:
        (optimizer, scheduler); call scheduler.step() after each optimizer.step().
    """
    matrices = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    others = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": weight_decay},
                                   {"params": others, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))

    def factor(i: int) -> float:  # update i + 1's rate / lr
        progress = min(i, steps) / steps
        return min(1.0, (i + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# %% [markdown]
# Around the step, the loop: the replica's forward pass under autocast, the random
# generators a checkpoint must restore, the stop on SIGTERM, and `train_from_config`
# itself, in `transformer.trainer`.

# %%
#| export trainer
import math
import random
import signal
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import cast

import torch
import torch.distributed as dist
from torch import Tensor
from tqdm import tqdm

from transformer.accumulation import ScaledTrainState, accumulated_train_step
from transformer.config import CONFIG_DEFAULTS, PRECISIONS, _check_choice, load_config
from transformer.distributed import Processes, all_reduce_sum, replicate, shard, start_processes
from transformer.lm import LanguageModel
from transformer.model import count_parameters
from transformer.resume import load_resume_checkpoint, save_resume_checkpoint
from transformer.tasks import language_model_task, make_adamw, translation_task
from transformer.schedule import make_optimizer


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """The context to run the forward pass in: nothing for fp32, autocast for bf16/fp16.

    Under autocast, matrix multiplies run in the low precision while the weights, the
    gradients and the optimizer stay float32.

    Args:
        precision: "fp32", "bf16" (CPU or GPU) or "fp16" (GPU only).
        device: where the model runs.

    Returns:
        A context manager.

    Raises:
        ValueError: precision is unknown, or fp16 on a CPU.
    """
    _check_choice("precision", precision, PRECISIONS)
    if precision == "fp32":
        return nullcontext()
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("precision 'fp16' needs a GPU; on a CPU use 'bf16'")
    return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


class _Forward:
    """What the loss function calls as its model: the (DDP) replica, under autocast.

    The logits come back in float32, so that the softmax and the loss are computed in
    full precision whatever the forward pass ran in. pad_id is the model's (the
    translation loss reads it).
    """

    def __init__(self, replica: torch.nn.Module, pad_id: int, precision: str, device: torch.device):
        self.replica, self.pad_id, self.precision, self.device = replica, pad_id, precision, device

    def __call__(self, *inputs: Tensor) -> Tensor:
        with autocast(self.precision, self.device):
            return self.replica(*inputs).float()  # [B, T, V] float32


def rng_state() -> dict:
    """Every random generator of this process: torch's CPU one (dropout), CUDA's, Python's."""
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(state: dict) -> None:
    """Restore what `rng_state()` returned."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])


def _gather(value: object, procs: Processes) -> list:
    """value from every process, in rank order (on every process)."""
    if procs.world_size == 1:
        return [value]
    values = [None] * procs.world_size
    dist.all_gather_object(values, value)
    return values


class _StopRequest:
    """Notes a SIGTERM (a scheduler taking the machine back), to save and stop after the step."""

    def __init__(self):
        self.requested = False
        self._previous = signal.signal(signal.SIGTERM, self._note)

    def _note(self, signum, frame) -> None:
        self.requested = True

    def restore(self) -> None:
        signal.signal(signal.SIGTERM, self._previous)

    def agreed(self, procs: Processes) -> bool:
        """True on every process if any process was asked to stop (they stop together)."""
        flag = torch.tensor([float(self.requested)], device=procs.device)
        return bool(all_reduce_sum(flag).item() > 0)


def _check_same_config(saved: dict | None, cfg: dict, out_dir: Path) -> None:
    """A ValueError naming the keys whose values differ from the checkpoint's config, if any.

    The model's sizes and the data decide what the checkpoint's tensors and position mean;
    train.steps may grow (to train further), and logging and saving may change.
    """
    if saved is None:  # a checkpoint written before configs were stored: load_state_dict decides
        return
    may_change = {"steps", "checkpoint_every", "keep", "log_every", "device"}

    def was(section: str, key: str) -> object:  # a key older versions did not write had its default
        return saved[section].get(key, CONFIG_DEFAULTS[section][key])

    changed = [f"{section}.{key} ({was(section, key)!r} -> {value!r})"
               for section in ("model", "data", "train") for key, value in cfg[section].items()
               if not (section == "train" and key in may_change) and was(section, key) != value]
    if changed:
        raise ValueError(f"the checkpoint in {str(out_dir)!r} was written with another config: "
                         f"{', '.join(changed)}; resume with the config that wrote it, or pass another --out")


def train_from_config(config: str | Path | dict, out_dir: str | Path, *, progress: bool = True,
                      verbose: bool = True, model_class: type[LanguageModel] = LanguageModel) -> dict:
    """Train what the config says (a translator or a language model), on this process and the
    others torchrun started.

    Every process builds the same model (same seed) and walks the same shuffled global
    batches, taking its own rows of each (`shard`). DDP sums the gradients; accumulated_train_step
    divides them by the whole batch's tokens. Rank 0 alone logs, shows the progress bar
    and writes checkpoints: every checkpoint_every steps and on SIGTERM, a resume
    checkpoint into out_dir/checkpoints (model, optimizer, schedule, step, epoch and
    position in the data, every process's random generators); at the end the model into
    out_dir/model (a translator in chapter 09's format, which `translate --checkpoint`
    loads; a language model in chapter 11's, which `load_language_model` loads). If
    out_dir/checkpoints holds a checkpoint, training resumes from it.

    Args:
        config: a config file or dict, as `load_config` takes it.
        out_dir: the run's directory.
        progress: show a progress bar on rank 0 (default True).
        verbose: print what happens (start, loss every log_every steps, end) on rank 0
            (default True).
        model_class: the language model class a task "lm" builds (default chapter 11's
            LanguageModel; chapter 13 passes its ModernLanguageModel).

    Returns:
        {"step": [...], "loss": [...], "grad_norm": [...]} of the updates this call made
        (of the whole global batch), "tokens" (their target tokens, all processes), "seconds" and
        "cpu_seconds" (wall and this process's CPU time of the loop), "stopped" (True if
        stopped by SIGTERM), "valid_loss" (rank 0, at the end, else None), "valid_curve"
        (rank 0: [step, validation loss] every eval_every steps), "world_size".
        Rank 0 also stores them in out_dir/model/config.json's metrics.

    Raises:
        ValueError: a bad config, or a checkpoint from a different number of processes.
    """
    cfg = load_config(config, model_class)
    train_cfg = cfg["train"]
    out_dir = Path(out_dir)
    procs = start_processes(train_cfg["device"])
    if train_cfg["precision"] == "fp16" and procs.device.type != "cuda":
        raise ValueError("train.precision 'fp16' needs a GPU (and its gradient scaler); on a CPU use 'bf16'")
    torch.manual_seed(train_cfg["seed"])  # the same initial weights on every process
    task = (translation_task(cfg, procs) if cfg["model"]["task"] == "translation"
            else language_model_task(cfg, procs, model_class))
    model = task.model
    scaler = torch.amp.GradScaler("cuda") if train_cfg["precision"] == "fp16" else None
    if train_cfg["lr"] is None:  # chapter 09's Adam and the paper's schedule
        optimizer = make_optimizer(model, train_cfg["warmup"], train_cfg["factor"], d_model=cfg["model"]["d_model"])
    else:
        optimizer = make_adamw(model, train_cfg["lr"], train_cfg["warmup"], train_cfg["steps"],
                               train_cfg["weight_decay"])
    state = ScaledTrainState(model, *optimizer, scaler=scaler)
    torch.manual_seed(train_cfg["seed"] + 1 + procs.rank)  # dropout: each process its own masks
    random.seed(train_cfg["seed"] + procs.rank)
    epoch, position = 0, 0
    saved = load_resume_checkpoint(out_dir / "checkpoints")
    if saved is not None:
        if saved["world_size"] != procs.world_size:
            raise ValueError(f"the checkpoint in {str(out_dir)!r} was written by {saved['world_size']} "
                             f"processes; resume it with as many (got {procs.world_size})")
        _check_same_config(saved.get("config"), cfg, out_dir)
        try:
            state.load_state_dict(saved["train_state"])
        except (RuntimeError, KeyError, ValueError) as err:  # a checkpoint of another model
            raise ValueError(f"the checkpoint in {str(out_dir)!r} does not fit this config's model "
                             f"({str(err).splitlines()[0]}); resume it with the config that wrote it, "
                             "or pass another --out") from None
        epoch, position = saved["epoch"], saved["position"]
        set_rng_state(saved["rng"][procs.rank])
    replica = replicate(model, procs)
    forward = _Forward(replica, model.pad_id, train_cfg["precision"], procs.device)
    loss_fn = lambda _model, batch: task.loss_fn(cast(torch.nn.Module, forward), batch)  # noqa: E731
    step_args = dict(clip=train_cfg["clip"], micro_batches=train_cfg["micro_batches"],
                     no_sync=getattr(replica, "no_sync", None),
                     all_reduce=all_reduce_sum if procs.world_size > 1 else None)
    rank0 = procs.rank == 0
    history: dict = {"step": [], "loss": [], "grad_norm": [], "tokens": 0, "stopped": False, "valid_loss": None,
                     "valid_curve": [] if saved is None else saved.get("valid_curve", []),
                     "world_size": procs.world_size}

    def save() -> None:
        rngs = _gather(rng_state(), procs)  # every process's generators, to rank 0
        if rank0:
            save_resume_checkpoint(out_dir / "checkpoints", {
                "step": state.step, "epoch": epoch, "position": position, "world_size": procs.world_size,
                "config": cfg, "train_state": state.state_dict(), "rng": rngs,
                "valid_curve": history["valid_curve"]}, keep=train_cfg["keep"])

    log = tqdm(total=train_cfg["steps"], initial=state.step, disable=not (progress and rank0),
               mininterval=5.0, unit="step", file=sys.stdout)
    say = log.write if verbose and rank0 else (lambda text: None)  # prints above the bar
    say(f"rank 0 of {procs.world_size} on {procs.device}: {cfg['model']['task']}, {count_parameters(model):,} "
        f"parameters, {task.describe}, {train_cfg['precision']}, "
        f"{'resuming at' if saved else 'starting at'} step {state.step}")
    stop = _StopRequest()
    model.train()
    start_wall, start_cpu = time.perf_counter(), time.process_time()  # this process's CPU time
    try:
        while state.step < train_cfg["steps"] and not history["stopped"]:
            batches = task.batches(epoch)
            while position < len(batches) and state.step < train_cfg["steps"]:
                mine = shard(batches[position], procs.rank, procs.world_size)
                result = accumulated_train_step(state, tuple(t.to(procs.device) for t in mine), loss_fn, **step_args)
                position += 1
                history["step"].append(state.step)
                history["loss"].append(result.loss)
                history["grad_norm"].append(result.grad_norm)
                history["tokens"] += result.tokens  # the whole global batch's target tokens
                log.update(1)
                if state.step % train_cfg["log_every"] == 0:
                    say(f"step {state.step}: loss {result.loss:.4f}, lr {result.lr:.2e}")
                if rank0 and train_cfg["eval_every"] and state.step % train_cfg["eval_every"] == 0:
                    history["valid_curve"].append([state.step, task.valid_loss(model)])  # eval mode inside
                    model.train()
                    say(f"step {state.step}: validation loss {history['valid_curve'][-1][1]:.4f}")
                history["stopped"] = stop.agreed(procs) if procs.world_size > 1 else stop.requested
                if state.step % train_cfg["checkpoint_every"] == 0 or history["stopped"]:
                    save()
                if history["stopped"]:
                    break
            if position >= len(batches):  # this epoch is done: the next one, reshuffled
                epoch, position = epoch + 1, 0
        history["seconds"] = time.perf_counter() - start_wall
        history["cpu_seconds"] = time.process_time() - start_cpu
        if not history["stopped"]:
            if state.step % train_cfg["checkpoint_every"]:
                save()
            if rank0:
                history["valid_loss"] = task.valid_loss(model)
                task.save(out_dir / "model", {
                    "config": cfg, **{k: v for k, v in history.items() if k not in ("step", "loss", "grad_norm")},
                    "step": state.step, "losses": history["loss"], "grad_norms": history["grad_norm"]})
        say(f"stopped by SIGTERM at step {state.step}; checkpoint saved: run the same command to resume"
            if history["stopped"] else f"done: step {state.step}, validation loss {history['valid_loss'] or math.nan:.4f}; "
            f"model saved in {out_dir / 'model'}")
        if dist.is_initialized():
            dist.barrier()  # nobody leaves before rank 0 has saved
    finally:
        stop.restore()
        log.close()
        if dist.is_initialized():
            dist.destroy_process_group()
    return history

# %% [markdown]
# The program. `torchrun` starts N copies of one Python program and tells each, in
# environment variables, which one it is; `train_from_config` reads them
# (`start_processes`), so the program every process runs needs three lines. (Appendix 15
# makes it a command of the package, `python -m transformer train CONFIG`, with options
# and with one line on standard error for a user's mistake.)

# %%
TRAIN = WORK / "train.py"  # torchrun ... train.py CONFIG OUT
TRAIN.write_text("""import sys

from transformer.trainer import train_from_config

train_from_config(sys.argv[1], sys.argv[2], progress=False)
""")
print(TRAIN.read_text())

# %% [markdown]
# ## 4 · A shape trace
#
# A global batch of 16 sentence pairs from the toy corpus, cut for 2 processes, and
# one process's shard cut again into 2 micro-batches (as `accumulated_train_step` does). The rows
# split evenly; the tokens do not, which is why the gradients are summed and divided by
# the whole batch's token count.

# %%

TINY = {"model": {"d_model": 16, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1,
                  "d_ff": 32, "dropout": 0.0},
        "data": {"corpus_size": 600, "valid_size": 50},
        "train": {"steps": 6, "batch_size": 16, "warmup": 10, "checkpoint_every": 2, "log_every": 2}}
train_pairs, valid_pairs = load_pairs(load_config(TINY)["data"])
src_vocab, tgt_vocab = Vocab.build(en for en, _ in train_pairs), Vocab.build(zh for _, zh in train_pairs)
batch = epoch_batches(train_pairs, src_vocab, tgt_vocab, batch_size=16, seed=0, max_len=32, world_size=2)[0]
print(f"global batch: src {tuple(batch[0].shape)}, tgt {tuple(batch[1].shape)}, "
      f"{int((batch[1][:, 1:] != PAD_ID).sum())} target tokens")
for rank in range(2):
    src, tgt = shard(batch, rank, 2)
    pieces = split_batch((src, tgt), 2)
    print(f"rank {rank}: src {tuple(src.shape)}, tgt {tuple(tgt.shape)}, {int((tgt[:, 1:] != PAD_ID).sum())} "
          f"tokens; micro-batches {[tuple(p[0].shape) for p in pieces]}")

# %% [markdown]
# ## 5 · Checks: the equivalences
#
# Each run below trains the tiny model above (dropout off, so that one process and two
# draw no different masks) for 6 steps and writes its weights. We compare weights, and
# leave out one kind of parameter: the biases of the attention keys. Adding the same
# vector to every key adds the same number to every score of a query row, which the
# softmax ignores, so the true gradient of a key bias is exactly zero; computed, it is
# rounding noise (the cell below shows its size on the batch above), and Adam, which
# divides each gradient by its own running size, turns any noise into steps of the size
# of the learning rate. Those weights therefore differ between any two runs that add in
# a different order, and never change a prediction. (Every other weight must agree.)

# %%
# NBVAL_IGNORE_OUTPUT
from transformer.training import translation_loss

torch.manual_seed(0)
probe = Transformer(len(src_vocab), len(tgt_vocab), **TINY["model"], pad_id=PAD_ID)
translation_loss(probe, batch)[0].backward()
key_bias = max(p.grad.abs().max().item() for n, p in probe.named_parameters() if "k_proj.bias" in n)
others = max(p.grad.abs().max().item() for n, p in probe.named_parameters() if "k_proj.bias" not in n)
print(f"largest gradient of a key bias: {key_bias:.1e}; of any other weight: {others:.1e}")

# %%
assert key_bias < 1e-5 * others  # zero up to rounding

# %% [markdown]
# **Accumulation:** one process, 2 micro-batches of 8 against one batch of 16.

# %%
def weights(run: Path) -> dict[str, torch.Tensor]:
    """The final weights of a run (its out_dir/model)."""
    return load_file(run / "model" / "model.safetensors")


def max_difference(a: Path, b: Path, *, key_biases: bool = False) -> float:
    """The largest absolute weight difference between two runs (key biases left out unless asked)."""
    wa, wb = weights(a), weights(b)
    return max((wa[k] - wb[k]).abs().max().item() for k in wa if key_biases or "k_proj.bias" not in k)


def tiny(**train) -> dict:
    """The tiny config with some train keys changed."""
    return {**TINY, "train": {**TINY["train"], **train}}


# %%
# NBVAL_IGNORE_OUTPUT
whole = train_from_config(tiny(), WORK / "one", progress=False, verbose=False)
accumulated = train_from_config(tiny(micro_batches=2), WORK / "accumulated", progress=False, verbose=False)
gap = max_difference(WORK / "one", WORK / "accumulated")
print(f"largest weight difference after 6 steps: {gap:.1e} "
      f"(key biases: {max_difference(WORK / 'one', WORK / 'accumulated', key_biases=True):.0e})")
assert gap < 1e-5

# %% [markdown]
# **DDP:** the same config launched by `torchrun` on 2 local processes (gloo), each with
# 8 sentences of every batch of 16. The notebook starts the command as a shell would;
# `--standalone` lets torchrun find a free port on this machine.

# %%
def torchrun(config: dict, out: Path, processes: int = 2, script: Path = TRAIN) -> subprocess.CompletedProcess:
    """Run `torchrun --standalone --nproc_per_node=N SCRIPT CONFIG OUT` (SCRIPT: train.py above)."""
    path = out.with_suffix(".json")
    path.write_text(json.dumps(config))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
               str(script), str(path), str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


# %%
# NBVAL_IGNORE_OUTPUT
two = torchrun(tiny(), WORK / "two")
print("\n".join(line for line in two.stdout.splitlines() if not line.startswith("done")))
assert two.returncode == 0, two.stderr[-2000:]
gap = max_difference(WORK / "one", WORK / "two")
print(f"1 process x 16 against 2 processes x 8: largest weight difference {gap:.1e}")
assert gap < 1e-5

# %% [markdown]
# **Crash and resume:** the same 2-process run, but process 1 dies (SIGKILL: no chance
# to clean up) right after step 5. The last checkpoint is step 4. To make it die there,
# torchrun runs another short program instead of `train.py`: a *test double* that
# wraps the training step with one that kills the process after step 5, then trains as
# `train.py` does (nothing in the package knows about crashes). torchrun sees a worker
# die, stops the other one and fails. Then we start the very same `train.py` command
# again: it finds the checkpoint and resumes.

# %%
DIE_AFTER_STEP_5 = WORK / "die_after_step_5.py"
DIE_AFTER_STEP_5.write_text("""
import os, signal, sys
import transformer.trainer as trainer

real_step = trainer.accumulated_train_step

def step_then_die(state, *args, **kwargs):  # process 1 dies right after its 5th update
    result = real_step(state, *args, **kwargs)
    if os.environ["RANK"] == "1" and state.step == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return result

trainer.accumulated_train_step = step_then_die
trainer.train_from_config(sys.argv[1], sys.argv[2], progress=False)
""")
crashed = torchrun(tiny(), WORK / "crashed", script=DIE_AFTER_STEP_5)
print("exit status:", crashed.returncode, "| latest:", (WORK / "crashed" / "checkpoints" / "latest").read_text())
assert crashed.returncode != 0 and not (WORK / "crashed" / "model").exists()
resumed = torchrun(tiny(), WORK / "crashed")
print("\n".join(line for line in resumed.stdout.splitlines() if not line.startswith("done")))
assert resumed.returncode == 0, resumed.stderr[-2000:]
gap = max_difference(WORK / "two", WORK / "crashed", key_biases=True)
print(f"crashed and resumed against uninterrupted: largest weight difference {gap}")
assert gap == 0.0

# %% [markdown]
# Bit for bit the same, key biases included: the resumed run did exactly the
# arithmetic of the uninterrupted one. (The tests in `tests/test_distributed.py` do
# the same with dropout on, so that the restored random generators matter, and stop a
# run with SIGTERM.)
#
# **A crash while saving.** We save a checkpoint at step 4, then let the save of step 6
# die at each point where a real crash could: half-way through writing a file, and after
# writing it but before renaming it, for the checkpoint file and then for the pointer
# `latest` (which is written second, after the checkpoint's rename). Test
# doubles stand in for the two operations that die: `_write_file`, replaced by one that
# writes half the bytes and raises, and `os.replace`, replaced by one that raises; the
# package's own code runs unchanged around them. Each time, the checkpoint that `latest`
# names loads.

# %%
from unittest import mock

import transformer.resume as resume


class Crash(Exception):
    """Stands for the process dying at that point."""


def dies_writing_half_of(name: str):
    """A double of resume._write_file that dies half-way through the temporary file of `name`."""
    real = resume._write_file

    def write(path: Path, data: bytes) -> None:
        if path.name != f".{name}.tmp":
            return real(path, data)
        real(path, data[: len(data) // 2])
        raise Crash(f"{name}: half written")
    return mock.patch.object(resume, "_write_file", write)


def dies_renaming(name: str):
    """A double of os.replace that dies before renaming the temporary file of `name`."""
    real = os.replace

    def rename(source: Path, target: Path) -> None:
        if Path(target).name == name:
            raise Crash(f"{name}: written, not renamed")
        real(source, target)
    return mock.patch.object(resume.os, "replace", rename)


state = {"step": 4, "weights": torch.arange(6.0).reshape(2, 3), "betas": (0.9, 0.98), "note": "step 4"}
for name in ["step-00000006.safetensors", "latest"]:
    for dies in (dies_writing_half_of, dies_renaming):
        directory = WORK / "faults" / f"{name}-{dies.__name__}"
        save_resume_checkpoint(directory, state)
        stage = None
        try:
            with dies(name):
                save_resume_checkpoint(directory, {**state, "step": 6, "note": "step 6"})
        except Crash as crash:
            stage = str(crash)
        assert stage is not None, "the double did not fire"
        loaded = load_resume_checkpoint(directory)
        print(f"crash at {stage!r:50s} -> latest is step {loaded['step']} ({loaded['note']})")
        assert torch.equal(loaded["weights"], state["weights"]) and loaded["betas"] == (0.9, 0.98)

# %% [markdown]
# ## 6 · Figures: bfloat16 against float32, and what 2 processes buy here
#
# The book's task, a small model (d_model 32, one layer each side), 60 steps of 64
# sentences, once in float32 and once under bfloat16 autocast, from the same weights
# and batches.

# %%
SMALL = {"model": {"d_model": 32, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1,
                   "d_ff": 64, "dropout": 0.1},
         "data": {"corpus_size": 3000, "valid_size": 200},
         "train": {"steps": 60, "batch_size": 64, "warmup": 30, "checkpoint_every": 1000, "log_every": 1000}}
curves = {}
for precision in ["fp32", "bf16"]:
    config = {**SMALL, "train": {**SMALL["train"], "precision": precision}}
    curves[precision] = train_from_config(config, WORK / precision, progress=False, verbose=False)

# %%
# NBVAL_IGNORE_OUTPUT
fp32, bf16 = curves["fp32"], curves["bf16"]
step_gap = max(abs(a - b) for a, b in zip(fp32["loss"], bf16["loss"], strict=True))
valid_gap = abs(fp32["valid_loss"] - bf16["valid_loss"])
print(f"training loss: step 1 {fp32['loss'][0]:.4f} (fp32) / {bf16['loss'][0]:.4f} (bf16), "
      f"step 60 {fp32['loss'][-1]:.4f} / {bf16['loss'][-1]:.4f}; largest gap at any step {step_gap:.4f}")
print(f"validation loss: {fp32['valid_loss']:.4f} / {bf16['valid_loss']:.4f} (gap {valid_gap:.4f})")
print(f"seconds: {fp32['seconds']:.1f} (fp32) / {bf16['seconds']:.1f} (bf16)")
assert valid_gap < 0.1 * fp32["valid_loss"] and step_gap < 0.2  # a few percent of a falling loss

# %%
#| fig-cap: The same 60 training steps of the book's task, once in float32 and once under
#|   bfloat16 autocast, from the same weights and batches: the two loss curves nearly
#|   coincide.
#| fig-alt: Two training-loss curves over 60 steps, fp32 in blue and bf16 in orange, both
#|   falling from about 4.6 to below 2 and lying almost on top of each other; the legend
#|   gives each run's validation loss.
fig, ax = plt.subplots(figsize=(7, 3.2))
for name, run in curves.items():
    ax.plot(run["step"], run["loss"], label=f"{name} (validation {run['valid_loss']:.2f})")
ax.set_xlabel("step")
ax.set_ylabel("training loss")
ax.set_title("The same 60 steps in float32 and under bfloat16 autocast")
ax.legend()
plt.show()

# %% [markdown]
# The curves nearly lie on each other. bfloat16's short mantissa rounds every product,
# but the weights, their updates and the loss stay float32. While the loss fell from 4.6
# to below 2, the two curves stayed close (the check asks for less than 0.2 apart at every
# step) and so did the validation losses, computed in float32 from each run's weights
# (less than a tenth of the loss apart). The gaps are printed above, and each rerun prints
# slightly different ones: the two runs took slightly different paths down a steep slope.
# On this CPU bfloat16 was slower, not faster (the seconds above: autocast converts the
# weights at every step, and the CPU has no bfloat16 matrix units); on a GPU with tensor
# cores it is several times faster. What to take from this cell is the loss, not the time.
#
# **Throughput of 2 processes on 2 cores.** The same 40 steps of the small model with
# batches of 128, by one process (one thread) and by two (one thread each), both under
# torchrun. We count the tokens per second of wall time, and the CPU time.

# %%
# NBVAL_IGNORE_OUTPUT
speed = {**SMALL, "train": {**SMALL["train"], "steps": 40, "batch_size": 128}}
runs = {}
for processes in [1, 2]:
    out = WORK / f"speed{processes}"
    result = torchrun(speed, out, processes=processes)
    assert result.returncode == 0, result.stderr[-2000:]
    runs[processes] = json.loads((out / "model" / "config.json").read_text())["metadata"]["metrics"]
load = os.getloadavg()[0]
for processes, m in runs.items():
    print(f"{processes} process{'es' if processes > 1 else ''}: {m['tokens'] / m['seconds']:,.0f} tokens/s "
          f"({m['seconds']:.1f} s wall; rank 0 used {m['cpu_seconds']:.1f} CPU s)")
print(f"speed-up {runs[1]['seconds'] / runs[2]['seconds']:.2f}x; load average {load:.1f} on {os.cpu_count()} cores")
assert all(m["tokens"] == runs[1]["tokens"] for m in runs.values())  # the same work, only split

# %% [markdown]
# What it shows: two processes on two cores add the second core's arithmetic, but each
# process also pays for the all-reduce of every gradient (through gloo, over the
# loopback network) and the two processes share one memory bus and, on a shared machine,
# the cores with everyone else. With a model this small the all-reduce is a large part
# of a step, so the speed-up stays well below 2, and on a busy machine it can vanish.
# On GPUs the balance is different: each GPU computes far faster than it exchanges data,
# the all-reduce runs over NVLink or InfiniBand at tens to hundreds of GB/s, and DDP
# hides it behind the backward pass.
#
# **A back-of-envelope for GPUs, from the paper.** Base model: 100,000 steps in 12 hours
# on 8 P100 GPUs, batches of about 25,000 target tokens.

# %%
seconds = 12 * 3600
tokens_per_second = steps * tokens_per_step / seconds
achieved = flops_per_step * steps / seconds / 8  # per GPU
p100 = 9.3e12  # a P100's float32 peak, FLOP/s
print(f"{seconds / steps:.2f} s per step; {tokens_per_second:,.0f} target tokens/s "
      f"({tokens_per_second / 8:,.0f} per GPU)")
print(f"{achieved / 1e12:.1f} TFLOP/s per GPU achieved: {achieved / p100:.0%} of a P100's float32 peak")
allreduce = 2 * params * 4 * 7 / 8  # ring all-reduce: each GPU sends 2 (W-1)/W of the gradients
print(f"all-reduce per step: {allreduce / 1e6:.0f} MB sent per GPU; at 10 GB/s: "
      f"{allreduce / 10e9 * 1000:.0f} ms of the {seconds / steps * 1000:.0f} ms step")

# %% [markdown]
# So: about 58,000 target tokens per second for the machine, about 30% of the
# GPUs' peak arithmetic (typical for a model of 2017 in float32), and an all-reduce of
# about 0.5 GB per step that takes a tenth of the step time even without any overlap.
# Eight GPUs are nearly eight times one, and a modern GPU in bfloat16 is one to two
# orders of magnitude faster than a P100: the base model is now a matter of hours on
# one machine.
#
# **The commands**, with `train.py` from section 3 (appendix 15's
# `python -m transformer train base.toml --out runs/base` takes the same place). On one
# GPU (the config's `device = "auto"` takes it; no torchrun needed, though it works too):
#
# ```
# python train.py base.toml runs/base
# ```
#
# On one machine with 8 GPUs (one process per GPU, backend nccl):
#
# ```
# torchrun --standalone --nproc_per_node=8 train.py base.toml runs/base
# ```
#
# On 2 machines with 8 GPUs each: run this on both, with `--node_rank=0` on one and
# `--node_rank=1` on the other, HOST being the first machine's address, reachable from
# the second, and PORT a free port there; `--out` must be a directory both machines see
# (a shared file system), since every process reads the checkpoint to resume:
#
# ```
# torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --rdzv_id=base --rdzv_backend=c10d \
#     --rdzv_endpoint=HOST:PORT train.py base.toml /shared/runs/base
# ```
#
# To resume after a crash or a SIGTERM, run the same command again. A checkpoint must
# be resumed by as many processes as wrote it (each has its own random generators and
# its own rows of every batch).
#
# ### The language model, under the same command
#
# Nothing in the loop above is particular to translation: a step is
# `accumulated_train_step` on a shard of a global batch, whatever the batch holds. The config's
# `[model] task` says what to build around it. With `task = "lm"` the command builds
# chapter 11's `LanguageModel` on chapter 11's corpus, split and vocabulary
# (`language_model_task`); its global batches are windows of `seq_len` characters, every
# window of the training stream once per epoch, shuffled (`lm_epoch_batches`), so that
# the epoch and the position in it resume exactly as for the translator; and the
# optimizer is AdamW with warm-up and cosine decay (`train.lr`), as in chapter 11. The
# finished model is saved with its vocabulary in chapter 11's format.
#
# `transformer/configs/lm.toml` is the recipe of the model that ships with the package and that
# chapter 11 loads: `make checkpoint MODEL=lm` runs
# `python -m transformer train transformer/configs/lm.toml` (about 14 minutes on 2 quiet cores) and copies the
# result into the package. Here, a small version of it on 2 processes for 40 steps:

# %%
LM_SMALL = load_config(CONFIGS / "lm.toml")
print({section: LM_SMALL[section] for section in ("model", "data")})
lm_small = {"model": {**{k: LM_SMALL["model"][k] for k in ("task", "num_heads", "max_len")},
                      "d_model": 64, "num_layers": 2, "d_ff": 256, "dropout": 0.0},
            "data": LM_SMALL["data"],
            "train": {**{k: LM_SMALL["train"][k] for k in ("batch_size", "lr", "weight_decay", "save_dtype")},
                      "steps": 40, "warmup": 10, "checkpoint_every": 20, "log_every": 20, "eval_every": 0}}

# %%
# NBVAL_IGNORE_OUTPUT
lm_run = torchrun(lm_small, WORK / "lm")
print("\n".join(line for line in lm_run.stdout.splitlines() if line.startswith(("rank", "step", "done"))))
assert lm_run.returncode == 0, lm_run.stderr[-2000:]

# %%
from transformer.lm import load_language_model

lm, lm_vocab, lm_metrics = load_language_model(WORK / "lm" / "model")
print(f"{type(lm).__name__}: {lm_vocab.__class__.__name__} of {len(lm_vocab):,} tokens, "
      f"{lm_metrics['world_size']} processes, {lm_metrics['step']} steps, "
      f"validation perplexity {math.exp(lm_metrics['valid_loss']):.0f}")
assert lm_metrics["world_size"] == 2 and lm_metrics["step"] == 40
assert math.exp(lm_metrics["valid_loss"]) < 0.5 * len(lm_vocab)  # it learned: far below a uniform guess

# %% [markdown]
# Forty updates of a small model only check that the path works: its validation
# perplexity (846 in the run above) is far below a uniform guess over the 6,177 tokens a
# model may write, and far above chapter 11's bigram (219.5 on the validation split).
# The real run is the one `transformer/configs/lm.toml` describes.
#
# ## 7 · What we can do now, and what is still missing
#
# We can train any configuration of the translator or of chapter 11's language model
# on one process or many, on CPUs or
# GPUs, on one machine or several, in float32 or mixed precision, with accumulation;
# the same weights come out as from one process with the whole batch, and a run that
# crashes resumes where it stopped. What is still missing for the paper's results: the
# data (WMT 2014, with a shared subword vocabulary of 37,000 tokens, which the toy
# corpus does not need), batching by token count instead of by sentence count, checkpoint
# averaging, and, for models too large for one GPU, sharding the weights and optimizer
# themselves (PyTorch's FSDP) instead of replicating them.
#
# Chapter 11's language model lacks something of another kind: more processes train
# it faster, but its parts are still those of 2017. Chapter 13 gives it the parts that
# later models use (rotary positions, RMSNorm, a gated feed-forward network,
# grouped-query attention) and measures what each one changes.
#
# ## Exercises
#
# When your notebook is graded, each check also tries cases you do not see (other shard
# sizes, model sizes, world sizes): write what the text asks for, not what fits the
# messages.

# %%
import torch.nn.functional as F
from torch import nn

# %% [markdown]
# ### Exercise 1 · The loss of the whole batch
# Each of $W$ processes reports the mean loss per token of its shard and its token
# count. Write `global_mean_loss(losses, tokens)` (two lists of equal length) that
# returns the mean loss per token of the whole batch, as one process with the whole
# batch would compute it. The check uses shards with different token counts.

# %%
def global_mean_loss(losses: list[float], tokens: list[int]) -> float:
    """Per-process (mean loss, token count) -> the whole batch's mean loss per token."""
    ### BEGIN SOLUTION
    return sum(loss * n for loss, n in zip(losses, tokens, strict=True)) / sum(tokens)
    ### END SOLUTION


# %%
#| check ex1-global-loss
def _check_global_loss(cases):
    for losses, tokens, want in cases:
        got = global_mean_loss(list(losses), list(tokens))
        assert isinstance(got, float) and abs(got - want) < 1e-9 * max(1.0, abs(want)), (
            f"losses {losses} over {tokens} tokens: the whole batch's mean is {want:.6g} "
            f"(weight each loss by its tokens, divide by all tokens), got {got!r}")


_check_global_loss([([2.0, 4.0], [30, 10], 2.5), ([1.0, 1.0, 4.0], [10, 10, 20], 2.5),
                    ([3.0], [7], 3.0), ([1.5, 1.5], [5, 15], 1.5)])
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(12)
for _w in (2, 5, 8):
    _losses = (torch.rand(_w, generator=_g, dtype=torch.float64) * 5).tolist()
    _tokens = torch.randint(1, 500, (_w,), generator=_g).tolist()
    _want = sum(loss * n for loss, n in zip(_losses, _tokens, strict=True)) / sum(_tokens)
    _check_global_loss([(_losses, _tokens, _want)])
### END HIDDEN TESTS
print("ex1 passed")

# %% [markdown]
# ### Exercise 2 · How much does an all-reduce send?
# In a ring all-reduce of $P$ values over $W$ processes, each process sends
# $2 (W - 1) / W \cdot P$ values: $(W-1)/W \cdot P$ while the partial sums go round the
# ring (reduce-scatter), as many again while the finished sums go round (all-gather).
# Write `ring_allreduce_bytes(num_params, world_size, bytes_per_value=4)`: the bytes
# one process sends per step (as an int). One process sends nothing. It is a formula:
# every torch function raises while the check runs it.

# %%
def ring_allreduce_bytes(num_params: int, world_size: int, bytes_per_value: int = 4) -> int:
    """Bytes each process sends to all-reduce num_params gradients over world_size processes."""
    ### BEGIN SOLUTION
    return 2 * (world_size - 1) * num_params * bytes_per_value // world_size
    ### END SOLUTION


# %%
#| check ex2-allreduce-bytes
class _NoTorch(torch.overrides.TorchFunctionMode):
    """While your function runs, every torch function raises: the answer is a formula."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        raise AssertionError(f"exercise 2 asks for a formula; your function called "
                             f"{getattr(func, '__name__', func)}")


def _check_bytes(cases):
    for args, want in cases:
        with _NoTorch():
            got = ring_allreduce_bytes(*args)
        assert isinstance(got, int) and got == want, (
            f"ring_allreduce_bytes{args}: each process sends 2 (W-1)/W of the values, "
            f"{want:,} bytes; got {got!r}")


_check_bytes([((1000, 2, 4), 4000), ((1000, 8, 4), 7000), ((65_000_000, 8, 2), 227_500_000),
              ((500, 1, 4), 0), ((1000, 4, 4), 6000)])
### BEGIN HIDDEN TESTS
_check_bytes([((213_000_000, 16, 2), 798_750_000), ((3_000, 3, 1), 4_000), ((7, 7, 8), 96),
              ((10**17 + 3, 3, 1), (4 * 10**17 + 12) // 3)])  # past a float's 53 bits: integers only
### END HIDDEN TESTS
print("ex2 passed")

# %% [markdown]
# ### Exercise 3 · Where to resume
# A run with a fixed number of batches per epoch saved a checkpoint after `step`
# updates, counted from the start. Write `resume_position(step, batches_per_epoch)`
# returning `(epoch, position)`: the epoch (from 0) and the index in it of the next
# batch to train on. (After 10 steps of epochs of 4 batches: epoch 2, position 2.)

# %%
def resume_position(step: int, batches_per_epoch: int) -> tuple[int, int]:
    """Updates done so far -> (epoch, index of the next batch in it)."""
    ### BEGIN SOLUTION
    return divmod(step, batches_per_epoch)
    ### END SOLUTION


# %%
#| check ex3-resume-position
def _check_resume(cases):
    for step, per, want in cases:
        got = resume_position(step, per)
        assert isinstance(got, tuple) and got == want, (
            f"after {step} steps with {per} batches per epoch, the next batch is number {want[1]} "
            f"of epoch {want[0]} (counting from 0): expected the tuple {want}, got {got!r}")


_check_resume([(10, 4, (2, 2)), (0, 4, (0, 0)), (4, 4, (1, 0)), (3, 4, (0, 3)), (7, 1, (7, 0)),
               (13, 5, (2, 3))])
### BEGIN HIDDEN TESTS
_check_resume([(99_999, 1000, (99, 999)), (6, 7, (0, 6)), (49, 7, (7, 0))])
### END HIDDEN TESTS
print("ex3 passed")

# %% [markdown]
# ### Exercise 4 · Find the bug: accumulated gradients
# With `micro_batches=k` the train command accumulates gradients over $k$ pieces of a
# batch before one update. The function below does it the way many first attempts do:
# it adds up each piece's mean loss divided by $k$. Its gradient is right only when every
# piece holds as many tokens. Write `accumulate(model, pieces)`, a corrected version:
# after it, the gradients in `model`'s parameters are those of the **whole batch's**
# mean loss per token, whatever the pieces' sizes (start from zero gradients; each piece
# is `(inputs [n, d], targets [n])`, and a target of `-100` is padding, as in
# `F.cross_entropy`). The check compares with one backward pass on the whole batch.

# %%
def accumulate_with_a_bug(model: nn.Module, pieces: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Gradients of the mean of the pieces' mean losses: right for pieces of equal size only."""
    model.zero_grad()
    for inputs, targets in pieces:
        (F.cross_entropy(model(inputs), targets) / len(pieces)).backward()


# %%
def accumulate(model: nn.Module, pieces: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Leave in model's parameters the gradient of the whole batch's mean loss per token."""
    ### BEGIN SOLUTION
    model.zero_grad()
    total = sum(int((targets != -100).sum()) for _, targets in pieces)
    for inputs, targets in pieces:
        (F.cross_entropy(model(inputs), targets, reduction="sum") / total).backward()
    ### END SOLUTION


# %%
#| check ex4-accumulate points=2
def _check_accumulate(sizes, d, classes, padding, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(d, 8), nn.Tanh(), nn.Linear(8, classes))
    pieces = []
    for n in sizes:
        targets = torch.randint(0, classes, (n,), generator=g)
        targets[torch.rand(n, generator=g) < padding] = -100  # padding, as in a padded batch
        pieces.append((torch.randn(n, d, generator=g), targets))
    model.zero_grad()
    F.cross_entropy(model(torch.cat([p[0] for p in pieces])), torch.cat([p[1] for p in pieces])).backward()
    want = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():  # leftovers that a right answer must clear first
        p.grad = torch.randn_like(p)
    accumulate(model, pieces)
    for (name, p), w in zip(model.named_parameters(), want, strict=True):
        assert p.grad is not None, f"{name} has no gradient after accumulate"
        gap = (p.grad - w).abs().max().item()
        assert gap < 1e-6, (
            f"pieces of {sizes} items ({sum(int((t != -100).sum()) for _, t in pieces)} real "
            f"tokens): the gradient of {name} differs from the whole batch's by up to {gap:.3g}. "
            "Each piece's loss must count as many times as it has real tokens: sum the token "
            "losses and divide by the whole batch's tokens (and start from zero gradients)")


_check_accumulate([6, 2, 9], d=4, classes=5, padding=0.0, seed=4)
### BEGIN HIDDEN TESTS
_check_accumulate([5, 5, 5, 5], d=3, classes=7, padding=0.3, seed=41)  # equal sizes, uneven padding
_check_accumulate([12], d=6, classes=2, padding=0.0, seed=42)  # one piece
### END HIDDEN TESTS
print("ex4 passed")

# %% [markdown]
# With Adam, forgetting the division by $k$ altogether (adding up the pieces' mean
# losses) barely changes training, while with plain SGD it multiplies the step by $k$.
# Why? And name one part of our training step on which the size of the gradient still
# matters with Adam. Answer in a few sentences.

# %% [markdown]
# <!-- #| answer ex4-why points=1 -->
# Adam divides each update by a running estimate of the gradient's root mean square, so
# multiplying every gradient by the same $k$ multiplies numerator and denominator alike
# and the step stays the same (apart from $\epsilon$); SGD's step is the learning rate
# times the gradient itself, so it grows $k$ times. The size still matters where the raw
# gradient is used: gradient clipping compares the global norm with a fixed `max_norm`
# (the norm would be $k$ times larger, so clipping kicks in when it should not), the
# logged gradient norm, and $\epsilon$'s share when gradients are tiny.

# %% [markdown]
# ## Summary
#
# - **Data parallelism**: every process holds a replica of the model and optimizer,
#   computes the gradient of its shard of the batch, and the gradients are
#   **all-reduced**; all replicas then take the same step. Summed gradients divided by the
#   whole batch's token count give exactly the one-process gradient (DDP's default
#   average is the same thing only when every shard has as many tokens).
# - `DistributedDataParallel` starts each bucket's all-reduce during backward, so
#   communication **overlaps** computation; `no_sync()` skips it for all but the last
#   micro-batch of **gradient accumulation**.
# - The config says what to train (`[model] task`): chapter 09's translator, or chapter
#   11's language model, whose windows of text are batched, sharded and resumed the same
#   way; `transformer/configs/lm.toml` is the recipe of the language model the package ships
#   (`make checkpoint MODEL=lm`).
# - `python train.py CONFIG OUT` runs one process; `torchrun --nproc_per_node=N`
#   (and `--nnodes`, `--node_rank`, `--rdzv_endpoint` across machines) runs N, with gloo on
#   CPUs and nccl on GPUs. Rank 0 alone logs and saves.
# - Measured here: 1 process × 16 sentences and 2 processes × 8 agree to about
#   $10^{-6}$ after 6 steps (the differences are printed above), as do 2 micro-batches and one
#   batch (the attention key biases, whose true gradient is zero, excepted); a run killed
#   and resumed ends **bit for bit** like one that never stopped.
# - A **resume checkpoint** holds the weights, the optimizer, the schedule, the step,
#   the epoch and position in the data, and every process's random generators, in
#   safetensors + JSON (no pickle); it is written to a temporary file, fsynced and
#   renamed, and the `latest` pointer is updated last, so a crash while saving leaves the
#   previous checkpoint loadable.
# - **bfloat16 autocast** gives the same loss curve as float32 here (slower on this CPU,
#   faster on GPUs); float16 needs a gradient scaler (`ScaledTrainState.scaler`).
# - `accumulated_train_step` is chapter 09's `train_step` with micro-batches, `no_sync`,
#   an `all_reduce` of the loss and token count, and the scaler; it ends with the same
#   `take_step`.
