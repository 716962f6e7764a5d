"""Optional parts of the install: which extra a command needs, and one line saying so when it is missing.

`pip install edgeagent` is the lean node install (agent, controller, client commands). The simulator and
the demo need the `sim` extra; kubeconfigs with exec / auth-provider users or a proxy-url need the `exec`
extra (kubernetes_asyncio). Without them a user should get the pip command to run, not an ImportError
traceback from deep inside a request.
"""

from __future__ import annotations

import importlib.util

# The modules each extra brings, as pyproject.toml's [project.optional-dependencies] lists their packages.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "sim": ("kubernetes_asyncio", "celpy", "lightkube"),
    "exec": ("kubernetes_asyncio",),
}


class MissingExtra(Exception):
    """An optional part of edgeagent is not installed; the message is the one line to show."""


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here."""
    missing = []
    for name in EXTRA_MODULES[extra]:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a module set to None in sys.modules, or a broken package
            found = False
        if not found:
            missing.append(name)
    return missing


def require(extra: str, what: str) -> None:
    """Raise MissingExtra naming the pip command if `what` (e.g. "edgeagent sim") cannot run here."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtra(f"{what} needs the {extra} extra: pip install 'edgeagent[{extra}]' "
                           f"(missing: {', '.join(missing)})")
