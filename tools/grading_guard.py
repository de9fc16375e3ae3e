"""Grading guard: every check runs on the real torch, numpy, math and builtins.

Loaded into the kernel when it starts, before any notebook code, by the book's grader
(`python -m tools.exercises grade` and `check`, and `verify`) and by nbgrader (the course's
`nbgrader_config.py` passes `kernel_arguments()` to the kernel). It is not loaded when
a reader runs a chapter.

A solution cell runs in the same kernel as the checks, so it can rebind what a check
relies on: `torch.allclose = lambda *a, **k: True` makes every `assert
torch.allclose(...)` after it pass. The guard takes a snapshot, when the kernel starts, of
the library modules that checks use (MODULES), of the book's own package `transformer`
(every module, and every class in it: the checks' references), of the classes of torch
and of CLASSES, and of the IPython machinery that runs a cell. Then:

- after every cell, the IPython machinery is put back: the input transformers
  (`input_transformers_post`, `input_transformers_cleanup`, the static transforms), the
  AST transformers, the custom exception handler (`set_custom_exc`), methods set on the
  shell or the kernel, event callbacks defined in the notebook; and the guard's own
  hooks are registered again where they were removed (tools/grading_shell.py, which
  the guard loads from its file, as it loads the barrier);
- before each cell whose first line is `#| check NAME`, every snapshotted attribute that
  was replaced or deleted is put back (with a note on stdout that names it), as are
  their `sys.modules` entries and the trace and profile functions (`sys.settrace`);
- a check fails if, while it runs, one of them is replaced again (a student's function
  that patches `torch.allclose` or installs an exception handler when the check calls it);
- a check fails, naming the name, if a global name it reads shadows a builtin
  (`abs = lambda x: 0`), or held a module or a library object and now holds something
  else (`torch = FakeTorch()`, `causal_mask = my_mask`), or if `__builtins__` was swapped.

With `protect=[...]` the kernel also gets the grading barrier (tools/grading_barrier.py):
the folders named (the teacher's repository, the returned notebooks, an nbgrader course)
cannot be read from the notebook.

It does not defend against code written to defeat it (unregistering its hooks from a
thread, editing its snapshot, patching through `vars(module)` or C internals, replacing
the kernel's message handlers), nor against answers that detect they are being checked.
Those are cheating by design, for a teacher to read; the guard stops the shortcuts a
student finds by accident or in a forum post. book/teachers.md lists what remains.

Only the standard library is needed to load this file; torch and numpy are snapshotted
if they can be imported.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import json
import os
import re
import sys
import threading
import types

MODULES = (
    "builtins", "math", "cmath", "operator", "functools", "itertools", "random", "statistics",
    "numpy", "numpy.testing", "numpy.linalg", "numpy.random",
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.testing",
    "torch.linalg", "torch.special", "torch.fft", "torch.autograd", "torch.overrides",
    "torch.nn.utils",
)
CLASSES = ("torch.Tensor", "torch._C.TensorBase", "torch.nn.Module", "torch.nn.Parameter",
           "torch.nn.Linear", "torch.nn.Embedding", "torch.nn.LayerNorm", "torch.Generator",
           "torch.overrides.TorchFunctionMode")
# The machinery that runs a cell: a method replaced on one of these classes (or set on the
# shell or the kernel object) could skip or rewrite the checks.
SHELL_CLASSES = ("IPython.core.interactiveshell.InteractiveShell",
                 "ipykernel.zmqshell.ZMQInteractiveShell", "ipykernel.ipkernel.IPythonKernel",
                 "ipykernel.kernelbase.Kernel", "IPython.core.events.EventManager",
                 "IPython.core.inputtransformer2.TransformerManager",
                 "IPython.core.interactiveshell.ExecutionResult")
PACKAGE = "transformer"  # the book's package: its functions and classes are the checks' references
# Classes held by a snapshotted module are snapshotted too when they come from these.
CLASS_SOURCES = ("torch", PACKAGE)
# Attributes that torch itself rewraps when a submodule is first imported (importing
# torch._dynamo wraps torch.manual_seed); a wrapper of the original is accepted there.
LIBRARY_REWRAPS = {("torch", "manual_seed")}
# Builtins that the kernel itself swaps in and out around each cell.
KERNEL_MANAGED = {"input", "raw_input", "getpass", "get_ipython", "display", "__IPYTHON__", "_"}
CHECK_LINE = re.compile(r"^\s*#\|\s*check\b")
REGISTRY_KEY = "_transformer_book_grading_guard"
EVENTS = ("pre_execute", "post_run_cell")  # the guard's hooks, each re-registers the other


def _resolve(dotted: str):
    """The module or class named `dotted`, or None where it does not import."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # noqa: BLE001 - a missing optional library is no error here
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def names_read(source: str) -> set[str]:
    """Global names a check reads and does not bind itself (also for
    tools/exercise_proof.py: which of them the proof asks the guard about)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    loaded, stored = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else stored).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, ast.alias):
            stored.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            stored.add(node.arg)
    return loaded - stored


class Guard:
    """The snapshot and the hooks; one per kernel."""

    def __init__(self, shell) -> None:
        self.shell = shell
        self.cell_machinery = load_sibling("grading_shell.py", "_transformer_book_grading_shell")
        self.builtins = dict(vars(builtins))
        self.snapshot: list[tuple[object, str, object, bool]] = []  # owner, name, value, is class
        self.modules: dict[str, types.ModuleType] = {}
        try:
            importlib.import_module(PACKAGE)
        except Exception:  # noqa: BLE001 - grading a notebook outside the book still works
            pass
        modules = [(name, _resolve(name)) for name in MODULES]
        modules += [(name, module) for name, module in sorted(sys.modules.items())
                    if name == PACKAGE or name.startswith(PACKAGE + ".")]
        modules = [(name, module) for name, module in modules
                   if isinstance(module, types.ModuleType)]
        classes = [_resolve(name) for name in CLASSES + SHELL_CLASSES]
        classes = [c for c in classes if isinstance(c, type)]
        for _, module in modules:  # every torch or package class a module holds
            for value in list(vars(module).values()):
                if isinstance(value, type) and str(getattr(value, "__module__", "")).split(
                        ".")[0] in CLASS_SOURCES:
                    classes.append(value)
        classes = list({id(c): c for c in classes}.values())
        for name, module in modules:
            self.modules[name] = module
            for attr, value in list(vars(module).items()):
                if name == "builtins" and attr in KERNEL_MANAGED:
                    continue
                if not attr.startswith("_"):  # modules: their public names
                    self.snapshot.append((module, attr, value, False))
        for owner in classes:  # classes: everything in their own dict (`Tensor.__eq__`)
            for attr, value in list(vars(owner).items()):
                self.snapshot.append((owner, attr, value, True))
        self.class_keys = {id(owner): set(vars(owner)) for owner in classes}
        # What a trusted global may hold: the modules, functions and classes snapshotted
        # (not plain values such as None, which a rebinding could also produce).
        self.library = {id(value) for _, _, value, _ in self.snapshot
                        if callable(value) or isinstance(value, types.ModuleType)}
        self.library.update(id(c) for c in classes)
        self.trusted: dict[str, object] = {}  # global name -> the library object it held
        self.checking = False
        self.trace = (sys.gettrace(), sys.getprofile())
        shell.input_transformers_post.append(self.transform)
        for event in EVENTS:
            shell.events.register(event, getattr(self, event))
        self.machinery = self.shell_state()

    # --- the snapshot ---------------------------------------------------------------

    def label(self, owner, attr: str) -> str:
        return f"{getattr(owner, '__name__', type(owner).__name__)}.{attr}"

    def changed(self) -> list[tuple[object, str, object, bool]]:
        """Snapshotted attributes that no longer hold their original value."""
        missing = object()
        found = []
        for index, (owner, attr, value, is_class) in enumerate(self.snapshot):
            current = vars(owner).get(attr, missing)
            if current is value:
                continue
            if (getattr(owner, "__name__", None), attr) in LIBRARY_REWRAPS \
                    and getattr(current, "__wrapped__", None) is value:
                self.snapshot[index] = (owner, attr, current, is_class)  # torch's own rewrap
                self.library.add(id(current))
                continue
            found.append((owner, attr, value, is_class))
        return found

    def added_to_classes(self) -> list[tuple[object, str]]:
        """Attributes added to a snapshotted class that shadow a base class's.

        (Additions that shadow nothing, such as the `__slotnames__` cache that copying
        a tensor adds, cannot change what a check sees.)
        """
        added, seen = [], set()
        for owner, _, _, is_class in self.snapshot:
            if is_class and id(owner) not in seen:
                seen.add(id(owner))
                for attr in sorted(set(vars(owner)) - self.class_keys[id(owner)]):
                    if any(attr in vars(base) for base in owner.__mro__[1:]):
                        added.append((owner, attr))
        return added

    def restore(self) -> list[str]:
        """Put every snapshotted attribute back; names of those that had changed."""
        restored = []
        for owner, attr, value, _ in self.changed():
            try:
                setattr(owner, attr, value)
            except (AttributeError, TypeError):
                continue
            restored.append(self.label(owner, attr))
        for owner, attr in self.added_to_classes():
            try:
                delattr(owner, attr)
            except (AttributeError, TypeError):
                continue
            restored.append(self.label(owner, attr))
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                sys.modules[name] = module
                restored.append(f"sys.modules[{name!r}]")
        if (sys.gettrace(), sys.getprofile()) != self.trace:
            sys.settrace(self.trace[0])
            sys.setprofile(self.trace[1])
            restored.append("sys.settrace/sys.setprofile")
        if getattr(threading, "_trace_hook", None) or getattr(threading, "_profile_hook", None):
            threading.settrace(None)
            threading.setprofile(None)
            restored.append("threading.settrace/threading.setprofile")
        return restored

    # --- the machinery that runs a cell (tools/grading_shell.py) ----------------------

    def shell_state(self) -> dict:
        """What IPython and the kernel run a cell with, as the guard installed it."""
        return self.cell_machinery.shell_state(self.shell)

    def restore_shell(self) -> list[str]:
        """Put the cell-running machinery back as the guard installed it, the guard's hooks
        included; what had changed."""
        return self.cell_machinery.restore_shell(
            self.shell, self.machinery, {event: getattr(self, event) for event in EVENTS})

    # --- global names ---------------------------------------------------------------

    def global_problems(self, source: str) -> list[str]:
        namespace = self.shell.user_ns
        problems = []
        if namespace.get("__builtins__", builtins) not in (builtins, vars(builtins)):
            problems.append("`__builtins__` was replaced")
        for name in sorted(names_read(source)):
            if name not in namespace:
                continue
            value = namespace[name]
            if name in self.builtins and value is not self.builtins[name]:
                problems.append(f"the notebook rebinds `{name}`, a Python builtin that this "
                                "check uses: give it another name")
            elif name in self.trusted and value is not self.trusted[name]:
                problems.append(f"the notebook rebinds `{name}` (it held "
                                f"{self._describe(self.trusted[name])}), which this check "
                                "compares against: leave it as the chapter defines it")
        return problems

    @staticmethod
    def _describe(value) -> str:
        if isinstance(value, types.ModuleType):
            return f"the module `{value.__name__}`"
        module = getattr(value, "__module__", None)
        name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
        return f"`{module}.{name}`" if module and name else "a library object"

    def remember_globals(self) -> None:
        for name, value in list(self.shell.user_ns.items()):
            if isinstance(value, types.ModuleType) or id(value) in self.library:
                self.trusted[name] = value

    def untrusted(self, names) -> list[str]:
        """Of `names`, the globals that hold neither a module nor a library object (for
        `exercises.py verify`: a check may compare only against what the guard restores)."""
        namespace = self.shell.user_ns
        return sorted(n for n in names if n in namespace and n not in self.builtins
                      and not isinstance(namespace[n], types.ModuleType)
                      and id(namespace[n]) not in self.library)

    # --- IPython hooks --------------------------------------------------------------

    def transform(self, lines: list[str]) -> list[str]:
        """Runs on every cell just before it executes; acts on check cells only."""
        if not lines or not CHECK_LINE.match(lines[0]):
            return lines
        self.checking = True
        restored = self.restore() + self.restore_shell()
        if restored:  # on stdout: nbgrader fails a check cell that writes to stderr
            print("grading guard: put back " + ", ".join(restored) + " (replaced by the "
                  "notebook) before this check")
        problems = self.global_problems("".join(lines))
        if problems:
            message = "this check cannot trust the notebook: " + "; ".join(problems)
            return [lines[0], f"raise AssertionError({message!r})\n"]
        return lines

    def pre_execute(self) -> None:
        """Before every cell: the guard's hooks are in place (a cell may have removed one)."""
        for event in EVENTS:
            if getattr(self, event) not in self.shell.events.callbacks[event]:
                self.shell.events.register(event, getattr(self, event))

    def post_run_cell(self, result) -> None:
        if self.checking:
            self.checking = False
            replaced = [self.label(owner, attr) for owner, attr, _, _ in self.changed()]
            replaced += [self.label(owner, attr) for owner, attr in self.added_to_classes()]
            replaced += self.restore_shell()
            if (sys.gettrace(), sys.getprofile()) != self.trace:
                replaced.append("sys.settrace/sys.setprofile")
            self.restore()
            if replaced and result is not None and result.success:
                error = AssertionError(
                    "this check cannot be trusted: " + ", ".join(replaced)
                    + " changed while it ran (code called by the check replaced it)")
                result.error_in_exec = error
                self.shell.showtraceback((AssertionError, error, None))
        else:
            restored = self.restore_shell()
            if restored:
                print("grading guard: put back " + ", ".join(restored) + " (changed by "
                      "this cell); checks run on IPython as it was")
        self.remember_globals()


def install(shell=None, protect: list[str] = (), allow: list[str] = ()) -> Guard:
    """Install the guard in this IPython kernel (once), and the grading barrier over the
    folders in `protect` (except those in `allow`, the Python environment and the
    kernel's working folder); return the guard."""
    registry = sys.modules.get(REGISTRY_KEY)
    if registry is not None:
        return registry.guard
    shell = shell or get_ipython()  # noqa: F821 - defined inside IPython
    guard = Guard(shell)
    holder = types.ModuleType(REGISTRY_KEY)
    holder.guard = guard
    sys.modules[REGISTRY_KEY] = holder
    if protect:  # last: the guard has read everything it needs
        barrier = load_sibling("grading_barrier.py", "_transformer_book_barrier_module")
        barrier.install(list(protect), [*allow, sys.prefix, os.getcwd()])
    return guard


def load_sibling(filename: str, name: str) -> types.ModuleType:
    """A module of this file's folder, loaded from its file under `name` (a graded
    kernel cannot import tools/): tools/grading_shell.py, tools/grading_barrier.py."""
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(os.path.dirname(os.path.abspath(__file__)), filename))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_arguments(path: str | None = None, protect: list[str] = (),
                     allow: list[str] = ()) -> list[str]:
    """Arguments that make an IPython kernel load this guard at start.

    For nbclient's and nbgrader's `extra_arguments` (`c.Execute.extra_arguments`).
    `protect`: folders the notebook may not read (the grading barrier), but `allow`.
    """
    path = path or __file__
    options = json.dumps({"protect": [str(p) for p in protect], "allow": [str(a) for a in allow]})
    line = (f"__import__('runpy').run_path({str(path)!r})['install']("
            f"**__import__('json').loads({options!r})); globals().pop('_', None)")
    return [f"--IPKernelApp.exec_lines={line}"]
