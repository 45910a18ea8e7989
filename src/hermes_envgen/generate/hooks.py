"""The generation hooks of ``hooks/`` (pre: answer checks; post: format, first commit), loaded.

The hooks are plain scripts at the top of the repository, where a Copier/Cookiecutter reader
looks for them; the wheel ships them as ``hermes_envgen/_hooks``. They are loaded as modules,
in this process: no interpreter start per project.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType

from hermes_envgen.errors import TemplateSourceError

PACKAGE_DIR = Path(__file__).resolve().parent.parent
SHIPPED_HOOKS = PACKAGE_DIR / "_hooks"
SOURCE_HOOKS = PACKAGE_DIR.parents[1] / "hooks"  # a source checkout (editable install)


def hooks_dir() -> Path:
    """Where the hook scripts are: inside the installed package, or in the source checkout."""
    for candidate in (SHIPPED_HOOKS, SOURCE_HOOKS):
        if (candidate / "post_gen_project.py").is_file():
            return candidate
    raise TemplateSourceError(
        f"this hermes-envgen installation has no generation hooks ({SHIPPED_HOOKS}); "
        "reinstall it from a wheel"
    )


@cache
def load(name: str) -> ModuleType:
    """The hook script ``hooks/NAME.py`` as a module."""
    path = hooks_dir() / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"hermes_envgen._hooks.{name}", path)
    if spec is None or spec.loader is None:
        raise TemplateSourceError(f"cannot load the generation hook {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
