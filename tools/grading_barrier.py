"""Grading barrier: a graded notebook cannot read the teacher's files or other students' work.

Installed into a grading kernel by the grading guard (tools/grading_guard.py), before any
notebook code runs, with the folders to protect: the book's repository (its chapters hold
every solution; its .git, tests/ and _build/ hold them too), the folder of returned
notebooks being graded, and an nbgrader course (source/ holds the solutions, submitted/
the other students' work). Exceptions inside them stay readable: the package
`transformer` and its data (checkpoints, corpora, configs), the Python environment, and the notebook's own
working folder.

It is a Python audit hook (PEP 578), which cannot be removed once added. While it is in
place:

- opening, listing, creating, renaming or deleting a path inside a protected folder
  (after resolving symbolic links) raises PermissionError, whatever the route through
  Python: `open`, `pathlib`, `io`, `os.open`, `nbformat.read`, `json.load`, importing a
  chapter's `.py`, `shutil`, `glob`, `sqlite3`;
- a new program may only be a Python of the grading environment (`sys.executable`, or
  a script in its `bin/`, such as `torchrun`), started without the flags that skip the
  environment (`-I`, `-E`, `-S`) and with the barrier's environment variables intact:
  every such Python loads the barrier itself at start (the `sitecustomize.py` next to
  this file, found through PYTHONPATH); `os.system` and every other program are refused;
- `ctypes` may not look up functions in the C library or the interpreter itself
  (`ctypes.CDLL(None).open`, `ctypes.pythonapi.PyRun_SimpleString`), which would bypass
  the above. Loading them is allowed, since it exposes nothing until a function is
  looked up: `import ctypes` loads the interpreter (`ctypes.pythonapi`), and PyTorch's
  `torchrun` loads the C library at import, in every Python the kernel starts.

What it does not stop (and no in-process barrier can): code written against it, such as
file descriptors relative to a directory opened elsewhere, the C internals of
`subprocess` (`_posixsubprocess.fork_exec`), or a library that calls the C library
directly. For a hard boundary, grade in a container or account that cannot read the
teacher's files at all.

Only the standard library is used: it is loaded before anything else, in the kernel and
in every Python process the kernel starts.
"""

from __future__ import annotations

import json
import os
import sys

ENVIRONMENT = "TRANSFORMER_BOOK_BARRIER"  # JSON {"protect": [...], "allow": [...]}
SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grading_site")
REGISTRY_KEY = "_transformer_book_grading_barrier"

PATH_EVENTS = {  # event -> positions of the path arguments
    "open": (0,), "os.listdir": (0,), "os.scandir": (0,), "glob.glob": (0,),
    "os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,),
    "os.link": (0, 1), "os.symlink": (0, 1), "os.truncate": (0,), "os.chmod": (0,),
    "os.chown": (0,), "os.utime": (0,), "shutil.copyfile": (0, 1), "shutil.copytree": (0, 1),
    "shutil.move": (0, 1), "shutil.rmtree": (0,), "shutil.make_archive": (0, 2),
    "shutil.unpack_archive": (0, 1), "sqlite3.connect": (0,), "os.listxattr": (0,),
    "os.getxattr": (0,), "os.setxattr": (0,), "os.removexattr": (0,)
}
PROGRAM_EVENTS = {"subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn"}
# Flags that make a Python skip PYTHONPATH or site (and with them the barrier).
SKIPPING_FLAGS = set("IES")
# C functions that read files or start programs without telling the audit hook.
C_LIBRARIES = ("libc.", "libc-", "libpython", "msvcrt", "ucrtbase", "kernel32")


def _lookup(env, key: str) -> str | None:
    """env[key] for an environment with str or bytes keys (subprocess accepts both)."""
    for candidate in (key, key.encode()):
        try:
            value = env.get(candidate)
        except (TypeError, AttributeError):
            continue
        if value is not None:
            return os.fsdecode(value) if isinstance(value, bytes) else value
    return None


class Barrier:
    """The protected folders, the exceptions, and the audit hook that enforces them."""

    def __init__(self, protect: list[str], allow: list[str]) -> None:
        self.protect = [os.path.realpath(p) for p in protect if p]
        self.allow = [os.path.realpath(p) for p in allow if p]
        self.executables = {os.path.realpath(sys.executable), os.path.abspath(sys.executable)}
        self.bins = [os.path.join(os.path.abspath(sys.prefix), "bin"),
                     os.path.join(os.path.realpath(sys.prefix), "bin"),
                     os.path.join(os.path.abspath(sys.prefix), "Scripts")]
        self.environment = {ENVIRONMENT: json.dumps({"protect": self.protect,
                                                     "allow": self.allow}),
                            "PYTHONPATH": os.pathsep.join(
                                [SITE] + [p for p in os.environ.get("PYTHONPATH", "").split(
                                    os.pathsep) if p and p != SITE])}

    # --- paths -------------------------------------------------------------------

    @staticmethod
    def _inside(path: str, folder: str) -> bool:
        return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)

    def protected(self, path) -> bool:
        """Whether `path` (str, bytes or os.PathLike; an int is a descriptor) is off limits."""
        if isinstance(path, int) or path is None:
            return False
        try:
            path = os.fsdecode(os.fspath(path))
        except TypeError:
            return False
        real = os.path.realpath(path)
        return any(self._inside(real, f) for f in self.protect) and not any(
            self._inside(real, a) for a in self.allow)

    # --- programs ------------------------------------------------------------------

    def program_allowed(self, executable, args, env) -> str | None:
        """None if a new program may start, else why not."""
        try:
            program = os.fsdecode(os.fspath(executable if executable is not None else args[0]))
        except (TypeError, IndexError):
            return "an unknown program"
        if os.sep not in program:
            import shutil

            program = shutil.which(program) or program
        absolute, real = os.path.abspath(program), os.path.realpath(program)
        if not ({absolute, real} & self.executables
                or any(os.path.dirname(absolute) == b for b in self.bins)):
            return f"the program {program!r} (only this environment's Python may run)"
        for arg in list(args or [])[1:]:
            arg = os.fsdecode(arg) if isinstance(arg, (bytes, str)) else ""
            if not arg.startswith("-") or arg in ("-c", "-m") or arg.startswith("--"):
                break
            if SKIPPING_FLAGS & set(arg[1:].split("=")[0]):
                return f"a Python started with {arg} (it would skip the barrier)"
        effective = os.environ if env is None else env
        for key, value in self.environment.items():
            got = _lookup(effective, key)
            if got != value and not (key == "PYTHONPATH" and isinstance(got, str)
                                     and got.split(os.pathsep)[0] == SITE):
                return f"a program whose environment lost {key}"
        return None

    # --- the hook ----------------------------------------------------------------------

    def hook(self, event: str, args: tuple) -> None:
        positions = PATH_EVENTS.get(event)
        if positions is not None:
            for i in positions:
                if i < len(args) and self.protected(args[i]):
                    raise PermissionError(
                        f"grading: {event} of {args[i]!s} is not allowed while a notebook is "
                        "graded (the folder holds the teacher's solutions or other students' work)")
            return
        if event in PROGRAM_EVENTS:
            if event == "subprocess.Popen":
                executable, arguments, _, env = args
            elif event == "os.spawn":
                _, executable, arguments, env = args
            else:  # os.exec, os.posix_spawn: (path, argv, env)
                executable, arguments, env = args
            why = self.program_allowed(executable, arguments, env)
            if why is not None:
                raise PermissionError(f"grading: starting {why} is not allowed while a "
                                      "notebook is graded")
        elif event == "os.system":
            raise PermissionError("grading: os.system is not allowed while a notebook is graded")
        elif event == "ctypes.dlsym":
            name = getattr(args[0], "_name", None) if args else None
            if name is None or any(c in os.fsdecode(name) for c in C_LIBRARIES):
                raise PermissionError("grading: calling C library functions through ctypes "
                                      "is not allowed while a notebook is graded")


def install(protect: list[str], allow: list[str]) -> Barrier:
    """Add the audit hook (once per process) and export the barrier to child processes."""
    registry = sys.modules.get(REGISTRY_KEY)
    if registry is not None:
        return registry.barrier
    barrier = Barrier(list(protect), list(allow))
    os.environ.update(barrier.environment)
    sys.addaudithook(barrier.hook)
    import types

    holder = types.ModuleType(REGISTRY_KEY)
    holder.barrier = barrier
    sys.modules[REGISTRY_KEY] = holder
    return barrier


def install_from_environment() -> Barrier | None:
    """In a Python that a grading kernel started: the kernel's barrier, from the environment."""
    spec = os.environ.get(ENVIRONMENT)
    if not spec:
        return None
    data = json.loads(spec)
    return install(data["protect"], data["allow"])
