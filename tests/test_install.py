"""tools/install.py: uv installs with pip's settings, so that a machine's local index of
CPU builds of PyTorch (find-links, extra indexes, constraints) is used as pip uses it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tools import install

ROOT = Path(__file__).resolve().parent.parent

CONFIG = """\
:env:.find-links='/opt/wheels'
:env:.default-timeout='180'
global.find-links='/elsewhere'
global.extra-index-url='file:///opt/pypi/simple file:///opt/more/simple'
global.constraint='/etc/xdg/pip/constraints.txt'
global.no-index='false'
user.unknown='ignored'
"""


def test_pip_settings_read_files_and_environment_and_the_environment_wins(monkeypatch):
    monkeypatch.setattr(install, "pip", lambda *args, check=True: subprocess.CompletedProcess(
        args, 0, stdout=CONFIG, stderr=""))
    settings = install.pip_settings()
    assert settings == {"find-links": "/opt/wheels", "default-timeout": "180",
                        "extra-index-url": "file:///opt/pypi/simple file:///opt/more/simple",
                        "constraint": "/etc/xdg/pip/constraints.txt", "no-index": "false"}


def test_uv_gets_pips_indexes_and_a_uv_variable_the_user_set_wins(monkeypatch):
    monkeypatch.delenv("UV_FIND_LINKS", raising=False)
    monkeypatch.setenv("UV_CONSTRAINT", "/mine.txt")
    monkeypatch.delenv("UV_INDEX_STRATEGY", raising=False)
    env = install.uv_environment({"find-links": "/opt/wheels", "constraint": "/etc/c.txt",
                                  "extra-index-url": "file:///a  file:///b", "no-index": "false",
                                  "default-timeout": "180", "progress-bar": "off"})
    assert env["UV_FIND_LINKS"] == "/opt/wheels"
    assert env["UV_EXTRA_INDEX_URL"] == "file:///a file:///b"
    assert env["UV_CONSTRAINT"] == "/mine.txt"
    assert env["UV_HTTP_TIMEOUT"] == "180"
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match"  # every index at once, as pip does
    assert "UV_NO_INDEX" not in env
    assert install.uv_environment({"no-index": "yes"})["UV_NO_INDEX"] == "1"


def test_the_environment_make_install_built_holds_the_pinned_torch_build():
    """uv picked the build pip's settings point at: the pinned version, and its CPU build
    where a find-links folder of pip's offers one for this Python (PyPI's is a CUDA build)."""
    import torch

    pinned = next(line.split("==")[1].strip() for line in
                  (ROOT / "requirements-dev.txt").read_text().splitlines() if line.startswith("torch=="))
    assert torch.__version__.split("+")[0] == pinned
    folders = [Path(f) for f in install.pip_settings().get("find-links", "").split() if Path(f).is_dir()]
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    if any(any(folder.glob(f"torch-{pinned}+cpu-{tag}-*.whl")) for folder in folders):
        assert torch.__version__.endswith("+cpu"), torch.__version__


def test_uv_alone_gets_the_overrides(monkeypatch):
    """`--uv-override FILE` reaches uv as `--override FILE`; pip, which has no such option,
    gets the other arguments alone when uv fails."""
    assert install.split_overrides(["--uv-override", "o.txt", "-r", "r.txt"]) == (
        ["--override", "o.txt"], ["-r", "r.txt"])
    commands = []
    monkeypatch.setattr(install, "pip", lambda *args, check=True: subprocess.CompletedProcess(args, 0, "", ""))
    monkeypatch.setattr(install.subprocess, "run",
                        lambda command, **kwargs: commands.append(command) or subprocess.CompletedProcess(command, 1))
    assert install.main(["--uv-override", "o.txt", "-r", "r.txt"]) == 1  # uv failed, then pip did
    uv, pip = commands
    assert uv[:4] == [sys.executable, "-m", "uv", "pip"] and uv[-4:] == ["--override", "o.txt", "-r", "r.txt"]
    assert pip[:3] == [sys.executable, "-m", "pip"] and pip[-2:] == ["-r", "r.txt"]
    assert not {"--override", "--uv-override", "o.txt"} & set(pip)


def test_reading_a_notebook_does_not_build_an_iri_parser():
    """requirements-overrides.txt leaves rfc3987-syntax out of the environment uv builds: with
    it, importing nbformat (every nbgrader, nbclient and jupytext process) took 1.4 s instead
    of 0.2. pip's fallback installs it (no overrides); uv is in the environment only when
    make install used it."""
    import importlib.util

    code = "import sys, nbformat; print('rfc3987_syntax' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    if importlib.util.find_spec("uv") is not None:  # uv built this environment
        assert loaded.stdout.strip() == "False", "rfc3987-syntax is installed: see requirements-overrides.txt"
    assert "rfc3987-syntax" in (ROOT / "requirements-overrides.txt").read_text()
    assert "rfc3987-syntax==" not in (ROOT / "requirements-dev.txt").read_text()
