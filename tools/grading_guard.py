"""Grading guard: every check runs on the real torch, numpy, math and builtins.

Loaded into the kernel when it starts, before any notebook code, by the book's grader
(`tools/exercises.py grade` and `check`, and `verify`) and by nbgrader (the course's
`nbgrader_config.py` passes `kernel_arguments()` to the kernel). It is not loaded when
a reader runs a chapter.

A solution cell runs in the same kernel as the checks, so it can rebind what a check
relies on: `torch.allclose = lambda *a, **k: True` makes every `assert
torch.allclose(...)` after it pass. The guard takes a snapshot of the library modules
and classes that checks use (see MODULES, CLASSES, and every module of the book's own
package `transformer`) when the kernel starts. Then, for each cell whose first line is
`#| check NAME`:

- before it runs, every snapshotted attribute that was replaced or deleted is put back
  (with a note on stdout that names it), as are their `sys.modules` entries;
- a check fails if, while it runs, one of them is replaced again (a student's function
  that patches `torch.allclose` when the check calls it);
- a check fails, naming the name, if a global name it reads shadows a builtin
  (`abs = lambda x: 0`), or held a module or a library object and now holds something
  else (`torch = FakeTorch()`, `causal_mask = my_mask`), or if `__builtins__` was swapped.

It does not defend against code written to defeat it (unregistering its hooks, editing
its snapshot, patching through `vars(module)`, C-level tricks), nor against answers
that detect they are being checked. Those are cheating by design, for a teacher to
read; the guard stops the shortcuts a student finds by accident or in a forum post.

Only the standard library is needed to load this file; torch and numpy are snapshotted
if they can be imported.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
import sys
import types

MODULES = (
    "builtins", "math", "cmath", "operator", "functools", "itertools", "random", "statistics",
    "numpy", "numpy.testing", "numpy.linalg", "numpy.random",
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.testing",
    "torch.linalg", "torch.special", "torch.fft", "torch.autograd",
)
CLASSES = ("torch.Tensor", "torch._C.TensorBase", "torch.nn.Module", "torch.nn.Parameter",
           "torch.nn.Linear", "torch.nn.Embedding", "torch.nn.LayerNorm", "torch.Generator")
PACKAGE = "transformer"  # the book's package: its functions are the checks' references
# Attributes that torch itself rewraps when a submodule is first imported (importing
# torch._dynamo wraps torch.manual_seed); a wrapper of the original is accepted there.
LIBRARY_REWRAPS = {("torch", "manual_seed")}
# Builtins that the kernel itself swaps in and out around each cell.
KERNEL_MANAGED = {"input", "raw_input", "getpass", "get_ipython", "display", "__IPYTHON__", "_"}
CHECK_LINE = re.compile(r"^\s*#\|\s*check\b")
REGISTRY_KEY = "_transformer_book_grading_guard"


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


def _names_read(source: str) -> set[str]:
    """Global names a check reads and does not bind itself."""
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
        self.builtins = dict(vars(builtins))
        self.snapshot: list[tuple[object, str, object, bool]] = []  # owner, name, value, is class
        self.modules: dict[str, types.ModuleType] = {}
        owners = [(name, _resolve(name), False) for name in MODULES]
        try:
            importlib.import_module(PACKAGE)
        except Exception:  # noqa: BLE001 - grading a notebook outside the book still works
            pass
        owners += [(name, module, False) for name, module in sorted(sys.modules.items())
                   if name == PACKAGE or name.startswith(PACKAGE + ".")]
        owners += [(name, _resolve(name), True) for name in CLASSES]
        for name, owner, is_class in owners:
            if owner is None:
                continue
            if not is_class:
                self.modules[name] = owner
            for attr, value in list(vars(owner).items()):
                # Modules: their public names. Classes: everything in their own dict,
                # dunders included (`torch.Tensor.__eq__`).
                if name == "builtins" and attr in KERNEL_MANAGED:
                    continue
                if is_class or not attr.startswith("_"):
                    self.snapshot.append((owner, attr, value, is_class))
        self.class_keys = {id(owner): set(vars(owner)) for _, owner, is_class in owners
                           if is_class and owner is not None}
        # What a trusted global may hold: the modules, functions and classes snapshotted
        # (not plain values such as None, which a rebinding could also produce).
        self.library = {id(value) for _, _, value, _ in self.snapshot
                        if callable(value) or isinstance(value, types.ModuleType)}
        self.trusted: dict[str, object] = {}  # global name -> the library object it held
        self.pending: list[str] = []  # problems found before the check now running
        self.checking = False
        shell.input_transformers_post.append(self.transform)
        shell.events.register("post_run_cell", self.post_run_cell)

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
        return restored

    # --- global names ---------------------------------------------------------------

    def global_problems(self, source: str) -> list[str]:
        namespace = self.shell.user_ns
        problems = []
        if namespace.get("__builtins__", builtins) not in (builtins, vars(builtins)):
            problems.append("`__builtins__` was replaced")
        for name in sorted(_names_read(source)):
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

    # --- IPython hooks --------------------------------------------------------------

    def transform(self, lines: list[str]) -> list[str]:
        """Runs on every cell just before it executes; acts on check cells only."""
        if not lines or not CHECK_LINE.match(lines[0]):
            return lines
        self.checking = True
        restored = self.restore()
        if restored:  # on stdout: nbgrader fails a check cell that writes to stderr
            print("grading guard: put back " + ", ".join(restored) + " (replaced by the "
                  "notebook) before this check")
        problems = self.global_problems("".join(lines))
        if problems:
            message = "this check cannot trust the notebook: " + "; ".join(problems)
            return [lines[0], f"raise AssertionError({message!r})\n"]
        return lines

    def post_run_cell(self, result) -> None:
        if self.checking:
            self.checking = False
            replaced = [self.label(owner, attr) for owner, attr, _, _ in self.changed()]
            replaced += [self.label(owner, attr) for owner, attr in self.added_to_classes()]
            self.restore()
            if replaced and result is not None and result.success:
                error = AssertionError(
                    "this check cannot be trusted: " + ", ".join(replaced)
                    + " changed while it ran (code called by the check replaced it)")
                result.error_in_exec = error
                self.shell.showtraceback((AssertionError, error, None))
        self.remember_globals()


def install(shell=None) -> Guard:
    """Install the guard in this IPython kernel (once); return it."""
    registry = sys.modules.get(REGISTRY_KEY)
    if registry is not None:
        return registry.guard
    shell = shell or get_ipython()  # noqa: F821 - defined inside IPython
    guard = Guard(shell)
    holder = types.ModuleType(REGISTRY_KEY)
    holder.guard = guard
    sys.modules[REGISTRY_KEY] = holder
    return guard


def kernel_arguments(path: str | None = None) -> list[str]:
    """Arguments that make an IPython kernel load this guard at start.

    For nbclient's and nbgrader's `extra_arguments` (`c.Execute.extra_arguments`).
    """
    path = path or __file__
    line = (f"__import__('runpy').run_path({str(path)!r})['install'](); "
            "globals().pop('_', None)")
    return [f"--IPKernelApp.exec_lines={line}"]
