"""`pip install .` gives an importable package without the book around it."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_holds_the_package_and_not_the_book(tmp_path):
    # -v shows setuptools' warnings; PYTHONDONTWRITEBYTECODE would add two of the environment's own
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path / "dist"), str(ROOT)],
        check=True, capture_output=True, text=True, env=env,
    )
    log = build.stdout + build.stderr
    warnings = [line for line in log.splitlines()
                if "warning" in line.lower() and "is ignored" not in line]  # pip's index notes
    assert not warnings, "packaging warnings:\n" + "\n".join(warnings)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # Every module but appendix 14's measuring helpers, which stay in the repository (setup.py).
    measuring = {"benchmarks.py", "benchmark_peers.py"}
    modules = sorted(p.name for p in (ROOT / "transformer").glob("*.py") if p.name not in measuring)
    assert sorted(n.split("/")[-1] for n in names if n.startswith("transformer/")
                  and n.endswith(".py")) == modules
    assert not {f"transformer/{m}" for m in measuring} & set(names)
    shipped = [p.relative_to(ROOT).as_posix() for p in (ROOT / "transformer" / "checkpoints").rglob("*")
               if p.is_file()]
    assert sorted(s.split("/", 2)[2] for s in shipped) == sorted([
        "translator/config.json", "translator/model.safetensors", "translator/src_vocab.json",
        "translator/tgt_vocab.json", "tang_poems/config.json", "tang_poems/model.safetensors",
        "tang_poems/vocab.json", "refinements.json"]), \
        f"the shipped translator, language model and chapter 13's comparison: {shipped}"
    assert all(s in names for s in shipped), "every shipped checkpoint file must be in the wheel"
    assert "transformer/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License-Expression: MIT\n" in metadata  # the code, and chapter 11's corpus
    corpus = [p.relative_to(ROOT).as_posix() for p in (ROOT / "transformer" / "corpora").iterdir()]
    assert "transformer/corpora/tang_poems.txt.xz" in corpus and all(c in names for c in corpus), (
        "the corpus, its README and its licence must be in the wheel")
    assert not any(n.startswith(("chapters/", "tests/", "tools/")) for n in names)

    # Installed on its own (no repository on the path), it imports and works.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), str(wheel)], check=True, capture_output=True)
    code = ("import transformer, torch; from transformer import TokenEmbedding; "
            "print(transformer.__file__); "
            "print(TokenEmbedding(10, 4)(torch.tensor([[1, 2]])).shape)")
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert out[0].startswith(str(target))
    assert out[1] == "torch.Size([1, 2, 4])"
