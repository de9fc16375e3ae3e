"""`make install`'s installer: uv, configured as pip is configured on this machine.

    python -m tools.install [--uv-override FILE] ARGS...     (with the environment's Python)

installs ARGS (what `pip install` would take: `-r requirements-dev.txt`, `--no-deps -e .`)
into the environment of the Python that runs this file; uv also gets `--override FILE`
(requirements-overrides.txt: a dependency left out), which pip has no option for. It
uses uv (pinned below, installed into the environment by pip first), which installs the
pinned set in about 50 s where pip takes about 95 s on 2 cores. It compiles every module
to bytecode as pip does: where PYTHONDONTWRITEBYTECODE is set (as on the machines that run
make test), Python would otherwise compile torch's modules again in every process that
imports them, and make test starts hundreds (it took pytest from 954 to 1702 s of CPU).

uv does not read pip's configuration files, so this passes pip's settings on to it: the
indexes, find-links, constraint files, certificates and timeout that `pip config list`
shows (files and PIP_* variables both). Without that, uv would ignore a local index of CPU
builds of PyTorch and fetch the CUDA build from PyPI. Like pip, uv then takes the best
version from all indexes together (pip has no notion of a first index).

If uv cannot be installed or fails, pip installs ARGS instead (a message says so): slower,
never wrong.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

UV = "uv==0.13.9"

# pip's setting -> uv's environment variable (values are space-separated lists in both)
PIP_TO_UV = {
    "index-url": "UV_DEFAULT_INDEX",
    "extra-index-url": "UV_EXTRA_INDEX_URL",
    "find-links": "UV_FIND_LINKS",
    "constraint": "UV_CONSTRAINT",
    "no-index": "UV_NO_INDEX",
    "trusted-host": "UV_INSECURE_HOST",
    "cert": "SSL_CERT_FILE",
    "default-timeout": "UV_HTTP_TIMEOUT",
    "timeout": "UV_HTTP_TIMEOUT",
}


def pip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          check=check, capture_output=True, text=True)


def pip_settings() -> dict[str, str]:
    """pip's effective settings, {name: value}, from `pip config list`.

    Its lines read `global.find-links='/opt/wheels'` or `:env:.find-links='...'` (a PIP_*
    variable); the environment overrides the files, as it does for pip itself.
    """
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in pip("config", "list").stdout.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        section, _, name = key.rpartition(".")
        if section not in (":env:", "global", "install"):
            continue
        (env if section == ":env:" else files)[name] = ast.literal_eval(value)
    return {**files, **env}


def uv_environment(settings: dict[str, str]) -> dict[str, str]:
    """The environment for uv that carries pip's settings."""
    env = {"UV_INDEX_STRATEGY": "unsafe-best-match", **os.environ}  # pip's behaviour, unless set
    for name, value in settings.items():
        variable = PIP_TO_UV.get(name)
        if variable is None or variable in os.environ:  # a UV_* the user set wins
            continue
        if name == "no-index":
            value = "1" if str(value).lower() in ("1", "true", "yes", "on") else ""
            if not value:
                continue
        env[variable] = " ".join(str(value).split())
    return env


def split_overrides(args: list[str]) -> tuple[list[str], list[str]]:
    """(uv's --override options, the rest) from ARGS: `--uv-override FILE` becomes
    `--override FILE`, for uv alone."""
    overrides, rest = [], list(args)
    while "--uv-override" in rest:
        at = rest.index("--uv-override")
        if at + 1 == len(rest):
            raise SystemExit("tools/install.py: --uv-override needs a file")
        overrides += ["--override", rest[at + 1]]
        del rest[at:at + 2]
    return overrides, rest


def main(args: list[str]) -> int:
    overrides, args = split_overrides(args)
    if not args:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    if pip("install", "--quiet", UV, check=False).returncode == 0:
        uv = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--compile-bytecode",
              "--python", sys.executable, *overrides]
        if subprocess.run([*uv, *args], env=uv_environment(pip_settings())).returncode == 0:
            return 0
        print("tools/install.py: uv failed (above); installing with pip instead", file=sys.stderr)
    else:
        print(f"tools/install.py: could not install {UV}; installing with pip instead", file=sys.stderr)
    return subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", *args]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
