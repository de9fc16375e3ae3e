"""The IPython machinery that runs a cell, for the grading guard (tools/grading_guard.py).

What IPython and the kernel run a cell with when the guard is installed (`shell_state`),
and putting it back after a cell changed it (`restore_shell`): the input transformers
(`input_transformers_post`, `input_transformers_cleanup`, the static transforms), the
AST transformers, the custom exception handler (`set_custom_exc`), methods set on the
shell or the kernel, the kernel's message handlers, event callbacks defined in the
notebook, and the guard's own hooks, registered again where they were removed.

The guard loads this file by its path, in the kernel it guards, before the grading
barrier is installed (a graded kernel cannot import tools/), so it imports only the
standard library.
"""

from __future__ import annotations

import types


def shell_state(shell) -> dict:
    """What IPython and the kernel run a cell with, as the guard installed it."""
    kernel = getattr(shell, "kernel", None)
    manager = shell.input_transformer_manager
    return {
        "manager": manager,
        "transforms": {attr: list(getattr(manager, attr, [])) for attr in
                       ("cleanup_transforms", "line_transforms", "token_transformers")},
        "post": list(shell.input_transformers_post),
        "ast": list(shell.ast_transformers),
        "custom_exc": (shell.custom_exceptions, shell.CustomTB),
        "shell_keys": set(vars(shell)),
        "kernel_keys": set(vars(kernel)) if kernel is not None else set(),
        "handlers": dict(getattr(kernel, "shell_handlers", {}) or {}),
    }


def restore_shell(shell, state: dict, hooks: dict) -> list[str]:
    """Put the cell-running machinery back as `state` (shell_state) holds it, and register
    again each of the guard's `hooks` ({event: callback}) that was removed; what had changed."""
    return (restore_transformers(shell, state) + restore_methods(shell, state)
            + restore_callbacks(shell, hooks))


def restore_transformers(shell, state: dict) -> list[str]:
    """The input and AST transformers and the custom exception handler, put back."""
    restored = []
    if shell.input_transformer_manager is not state["manager"]:
        shell.input_transformer_manager = state["manager"]
        restored.append("input_transformer_manager")
    for attr, original in state["transforms"].items():
        if list(getattr(state["manager"], attr, [])) != original:
            setattr(state["manager"], attr, list(original))
            restored.append(f"input_transformer_manager.{attr}")
    if list(shell.input_transformers_post) != state["post"]:
        shell.input_transformers_post = list(state["post"])
        restored.append("input_transformers_post")
    if list(shell.ast_transformers) != state["ast"]:
        shell.ast_transformers = list(state["ast"])
        restored.append("ast_transformers")
    if (shell.custom_exceptions, shell.CustomTB) != state["custom_exc"]:
        shell.custom_exceptions, shell.CustomTB = state["custom_exc"]
        restored.append("the custom exception handler (set_custom_exc)")
    return restored


def restore_methods(shell, state: dict) -> list[str]:
    """Instance attributes hiding a method of the shell or the kernel removed, and the
    kernel's message handlers put back."""
    kernel = getattr(shell, "kernel", None)
    restored = []
    for obj, keys in ((shell, state["shell_keys"]), (kernel, state["kernel_keys"])):
        if obj is None:
            continue
        for attr in sorted(set(vars(obj)) - keys):
            if any(isinstance(vars(klass).get(attr), (types.FunctionType, classmethod,
                                                      staticmethod))
                   for klass in type(obj).__mro__):
                delattr(obj, attr)  # an instance attribute hiding one of its methods
                restored.append(f"{type(obj).__name__}.{attr}")
    handlers = getattr(kernel, "shell_handlers", None)
    if isinstance(handlers, dict) and handlers != state["handlers"]:
        handlers.clear()
        handlers.update(state["handlers"])
        restored.append("the kernel's message handlers")
    return restored


def restore_callbacks(shell, hooks: dict) -> list[str]:
    """Event callbacks defined in the notebook removed; the guard's `hooks` registered
    again where they were removed."""
    restored = []
    cells = set(getattr(getattr(shell, "compile", None), "_filename_map", {}) or {})
    for event, callbacks in shell.events.callbacks.items():
        for callback in list(callbacks):
            code = getattr(getattr(callback, "__func__", callback), "__code__", None)
            if code is not None and code.co_filename in cells:  # defined in the notebook
                callbacks.remove(callback)
                restored.append(f"a {event} callback defined in the notebook")
    for event, hook in hooks.items():
        if hook not in shell.events.callbacks[event]:
            shell.events.register(event, hook)
            restored.append(f"the grading guard's {event} hook")
    return restored
