"""Chapter 13's comparison, trained ahead of time: six variants of the language model, 14 runs.

    make refinements                                  # every run (see the README for the time)
    python -m tools.refinement_runs --steps 20 --seeds 0 --out /tmp/try.json   # a quick try
    python -m tools.refinement_runs --corpus my_poems.txt --out /tmp/mine.json  # another corpus

A run is chapter 12's `train_from_config` with
transformer/configs/refinements.toml, the variant's model keys (`variants()`: chapter 13's
refinements by the names ModernLanguageModel gives them) and the seed (train.seed: the
initial weights and the batch order): seeds 0, 1 and 2 for the 2017 and the all-four
models, 0 and 1 for each single refinement. Every finished model is scored as chapter 13 scores
its own: perplexity on the first VALID_IDS ids of the validation stream, read in windows
of data.seq_len (the training context) and of four times it. The results go to
transformer/checkpoints/refinements.json, which chapter 13 reads; each run keeps its
config, its training-loss and validation curves and its seconds.

Runs go JOBS at a time (default: the machine's cores), each on one thread, so that
every run gets the same share of the machine; CPU seconds are each run's own.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "transformer" / "configs" / "refinements.toml"
OUT = ROOT / "transformer" / "checkpoints" / "refinements.json"
SEEDS = (0, 1, 2)  # the 2017 and all-four models: the spread the chapter reads its verdicts against
SINGLE_SEEDS = SEEDS[:2]  # each single refinement (the CPU time of eighteen runs was more than we had)
SPREAD = ("2017", "all four")
VALID_IDS = 16_384  # chapter 11's validation sample: quick to score, the same for every run
LONG = 4  # the second context, in multiples of the training one


def variants(d_ff: int) -> dict[str, dict]:
    """Chapter 13's six variants: name -> the model keys that differ from the 2017 model.

    SwiGLU's hidden width keeps the 2017 network's parameters (chapter 13's swiglu_width).
    """
    from transformer.refinements import swiglu_width

    swiglu_d_ff = swiglu_width(d_ff)
    return {
        "2017": {},
        "RoPE": {"positions": "rotary"},
        "RMSNorm": {"norm": "rms"},
        f"SwiGLU (d_ff {swiglu_d_ff})": {"activation": "swiglu", "d_ff": swiglu_d_ff},
        "GQA (2 KV heads)": {"num_kv_heads": 2},
        "all four": {"positions": "rotary", "norm": "rms", "activation": "swiglu", "d_ff": swiglu_d_ff,
                     "num_kv_heads": 2},
    }


def run_one(base: dict, name: str, options: dict, seed: int) -> dict:
    """Train one variant with one seed on one thread; its scores, curves and seconds."""
    import torch

    from transformer.config import load_config
    from transformer.corpus import CORPUS_FILE, read_corpus, split_documents
    from transformer.lm import load_language_model, perplexity
    from transformer.refinements import ModernLanguageModel
    from transformer.text import encode_stream
    from transformer.trainer import train_from_config

    torch.set_num_threads(1)
    cfg = load_config({"model": {**base["model"], **options}, "data": base["data"],
                       "train": {**base["train"], "seed": seed}}, ModernLanguageModel)
    with tempfile.TemporaryDirectory() as out:
        start = time.process_time()
        history = train_from_config(cfg, out, progress=False, model_class=ModernLanguageModel)
        seconds = time.process_time() - start
        model, vocab, _ = load_language_model(Path(out) / "model", model_class=ModernLanguageModel)
    split = split_documents(read_corpus(cfg["data"]["corpus"] or CORPUS_FILE), seed=cfg["data"]["seed"])
    valid = encode_stream([d.text for d in split.valid], vocab)[:VALID_IDS]
    seq_len = cfg["data"]["seq_len"]
    return {"variant": name, "seed": seed, "options": options,
            "short": perplexity(model, valid, seq_len), "long": perplexity(model, valid, LONG * seq_len),
            "cpu_seconds": round(seconds, 1), "wall_seconds": round(history["seconds"], 1),
            "losses": [round(loss, 4) for loss in history["loss"]],
            "valid_curve": [[step, round(math.exp(loss), 2)] for step, loss in history["valid_curve"]]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="updates per run (default: the config's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help=f"for every variant (default: {list(SEEDS)} for {' and '.join(SPREAD)}, "
                        f"{list(SINGLE_SEEDS)} for the others)")
    parser.add_argument("--variants", nargs="+", default=None,
                        help="names of variants(), e.g. 2017 RoPE (default: all six, in their order)")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS") or os.cpu_count() or 1))
    parser.add_argument("--corpus", type=Path, default=None,
                        help="a corpus file in the shipped one's format (transformer.text.read_corpus; "
                        "default: the shipped Tang poems)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    from transformer.config import _read_config_file, load_config

    base = _read_config_file(CONFIG)
    if args.steps is not None:
        base["train"] = {**base["train"], "steps": args.steps}
    if args.corpus is not None:
        if not args.corpus.is_file():
            parser.error(f"--corpus: no file at {args.corpus}")
        base["data"] = {**base["data"], "corpus": str(args.corpus.resolve())}
    cfg = load_config(base)
    every = variants(cfg["model"]["d_ff"])
    chosen = args.variants or list(every)
    unknown = [name for name in chosen if name not in every]
    if unknown:
        parser.error(f"--variants: {unknown} not in {list(every)}")
    # Seed 0 of every variant first, then the other seeds of the 2017 and all-four models (the
    # spread the chapter reads its verdicts against), then the rest: a run stopped early
    # still leaves a usable file, which is rewritten after every run.
    seeds = {name: args.seeds or (SEEDS if name in SPREAD else SINGLE_SEEDS) for name in chosen}
    first = [(name, seeds[name][0]) for name in chosen]
    spread = [(name, seed) for name in chosen if name in SPREAD for seed in seeds[name][1:]]
    rest = [(name, seed) for name in chosen if name not in SPREAD for seed in seeds[name][1:]]
    jobs = first + sorted(spread, key=lambda job: job[1]) + sorted(rest, key=lambda job: job[1])
    import torch

    result = {"config": cfg, "valid_ids": VALID_IDS, "long_factor": LONG, "variants": chosen,
              "torch": torch.__version__, "jobs": args.jobs, "wall_seconds": 0, "runs": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_one, base, name, every[name], seed): (name, seed) for name, seed in jobs}
        for future in as_completed(futures):
            run = future.result()
            result["runs"] = sorted(result["runs"] + [run], key=lambda r: (chosen.index(r["variant"]), r["seed"]))
            result["wall_seconds"] = round(time.perf_counter() - start)
            args.out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            print(f"{run['variant']:20s} seed {run['seed']}: perplexity {run['short']:.1f} (context "
                  f"{cfg['data']['seq_len']}), {run['long']:.1f} ({LONG}x), {run['cpu_seconds']:.0f} s of CPU; "
                  f"curve {run['valid_curve']}", flush=True)
    print(f"{len(result['runs'])} runs in {result['wall_seconds']} s, {args.jobs} at a time: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
