"""The package as a user gets it: the wheel, installed WITH its declared dependencies into an
empty virtual environment, saves, loads, translates, trains and generates there.

The development environment (.venv) holds every dependency of the book, so a package that
forgets to declare one (numpy, which safetensors needs to save and does not declare) works
there and fails for a user. This test builds the wheel, creates a virtual environment with
nothing in it, lets pip resolve the wheel's own dependencies (torch pinned to the tested
2.13.0, the CPU build on this machine's disk: an unpinned torch would bring gigabytes of
CUDA), and runs the user's steps from a folder outside the repository.

Cost: about 45 s in make test (pip unpacks torch; --no-compile skips byte-compiling its 15,000 files,
and the new environment gets no pip of its own: this one installs into it).
TRANSFORMER_CLEAN_INSTALL_TORCH=2.14.1 runs the same steps on another torch release.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TORCH = os.environ.get("TRANSFORMER_CLEAN_INSTALL_TORCH", "2.13.0")

# What a user does after `pip install`: every step prints one line that the test checks.
USER_SCRIPT = textwrap.dedent('''
    import subprocess, sys, tempfile
    import torch
    import transformer
    from transformer import LanguageModel, Transformer, translate

    print("file", transformer.__file__)
    print("torch", torch.__version__)
    torch.manual_seed(0)
    model = Transformer(src_vocab_size=20, tgt_vocab_size=20, d_model=16, num_heads=2,
                        num_encoder_layers=1, num_decoder_layers=1, d_ff=32).eval()
    src = torch.randint(3, 20, (2, 5))
    with tempfile.TemporaryDirectory() as directory:
        model.save_pretrained(directory, metadata={"note": "clean install"})
        loaded = Transformer.from_pretrained(directory)
    same = torch.equal(loaded(src, src), model(src, src))
    print("saved and loaded", same)
    tokens = loaded.generate(src, max_new_tokens=5, ignore_eos=True)
    lm = LanguageModel(vocab_size=20, d_model=16, num_heads=2, num_layers=1, max_len=16)
    prompts = torch.tensor([[0, 1, 5], [1, 6, 7]])
    continued = lm.generate(prompts, 4, attention_mask=(prompts != 0).long(), ignore_eos=True)
    print("generated", tuple(tokens.shape), tuple(continued.shape))
    print("translated", translate("I love apples"))
''')

TRAIN_CONFIG = textwrap.dedent('''
    [model]
    d_model = 16
    num_heads = 2
    num_encoder_layers = 1
    num_decoder_layers = 1
    d_ff = 32
    [data]
    corpus_size = 300
    valid_size = 20
    [train]
    steps = 3
    batch_size = 16
    warmup = 2
    checkpoint_every = 2
    log_every = 1
''')


def run(args, **kwargs):
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(map(str, args))} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result.stdout


@pytest.fixture(scope="module")
def clean_env(tmp_path_factory):
    """A virtual environment holding the wheel and what it declares, nothing else."""
    tmp = tmp_path_factory.mktemp("clean")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp / "dist"), str(ROOT)], env=env)
    (wheel,) = (tmp / "dist").glob("*.whl")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=env)
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-compile",
         f"torch=={TORCH}", str(wheel)], env=env)
    return python, tmp, env


def test_the_wheel_declares_what_it_needs(clean_env):
    python, tmp, env = clean_env
    # Nothing of the book's development environment leaked in: only the package's own
    # dependencies (and theirs) are there.
    listed = run([sys.executable, "-m", "pip", "--python", str(python), "list", "--format=freeze"], env=env)
    names = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert "transformer-book" in names and "torch" in names
    assert not names & {"jupyterlab", "pytest", "matplotlib", "nbval", "sacrebleu"}, names


def test_save_load_generate_translate_in_a_clean_install(clean_env):
    python, tmp, env = clean_env
    out = run([str(python), "-c", USER_SCRIPT], cwd=tmp, env=env).splitlines()
    assert out[0].startswith("file " + str(tmp / "venv")), out[0]  # the installed copy, not the repository
    assert out[1].startswith("torch " + TORCH)
    assert out[2:] == ["saved and loaded True", "generated (2, 6) (2, 7)", "translated 我 喜欢 苹果"]


def test_commands_in_a_clean_install(clean_env):
    python, tmp, env = clean_env
    assert run([str(python), "-m", "transformer", "translate", "I love apples"], cwd=tmp, env=env) == "我 喜欢 苹果\n"
    example = run([str(python), "-m", "transformer", "train", "--example", "book"], cwd=tmp, env=env)
    assert example.startswith("# The book's small translator") and "[train]" in example  # shipped in the wheel
    (tmp / "tiny.toml").write_text(TRAIN_CONFIG)
    log = run([str(python), "-m", "transformer", "train", "tiny.toml", "--out", "run", "--no-progress"],
              cwd=tmp, env=env)
    assert "done: step 3" in log, log
    assert (tmp / "run" / "checkpoints").is_dir() and (tmp / "run" / "model" / "model.safetensors").is_file()
    # The trained model loads with the translate command (its output is whatever 3 steps learnt).
    run([str(python), "-m", "transformer", "translate", "--checkpoint", "run/model", "I love apples"],
        cwd=tmp, env=env)
    # pip put the entry point of pyproject.toml's [project.scripts] beside the venv's python.
    command = python.parent / "transformer"
    assert run([str(command), "translate", "I love apples"], cwd=tmp, env=env) == "我 喜欢 苹果\n"
    assert run([str(command), "-h"], cwd=tmp, env=env).startswith("usage: python -m transformer {translate,poem,train}")
    # The shipped language model is in the wheel: the poet writes from it.
    poem = run([str(command), "poem", "白日依山尽，黄河入海流。", "--seed", "0"], cwd=tmp, env=env)
    assert poem.startswith("白日依山尽，黄河入海流。\n") and len(poem.splitlines()) >= 2, poem
