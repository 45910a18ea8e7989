"""verifiers, checked before the taskset imports it: one line naming what to install."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

SUPPORTED = ((0, 4), (0, 5))  # the verifiers releases the taskset was tested with: [0.4, 0.5)
INSTALL = (
    "pip install 'verifiers>=0.4,<0.5' 'hermes-envgen' --no-deps in an environment of its "
    "own (plus httpx): verifiers pins mcp 2.0, which the env's environment cannot share"
)


def missing() -> str | None:
    """Why the installed verifiers cannot be used (one line), or None."""
    try:
        found = version("verifiers")
    except PackageNotFoundError:
        return f"verifiers is not installed: {INSTALL}"
    release = tuple(int(p) for p in found.split(".")[:2] if p.isdigit())
    if not SUPPORTED[0] <= release < SUPPORTED[1]:
        return f"verifiers {found} is not supported (>=0.4,<0.5): {INSTALL}"
    return None


def require_verifiers() -> ModuleType:
    """``verifiers.v1``; or the one line naming what to install, and exit 2."""
    problem = missing()
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    import verifiers.v1 as vf

    return vf
