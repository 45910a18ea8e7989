"""Generating env projects from the copier template (``new``) and updating them (``update``).

Public API: ``new_project``, ``update_project``, ``parse_data_pairs`` and their results. Names
are loaded on first use: the wheel's build hook imports ``generate.bundle`` with no copier.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "NewProject": "new",
    "new_project": "new",
    "UpdateResult": "update",
    "update_project": "update",
    "parse_data_pairs": "answers",
}

__all__ = ["NewProject", "UpdateResult", "new_project", "parse_data_pairs", "update_project"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


if TYPE_CHECKING:
    from hermes_envgen.generate.answers import parse_data_pairs
    from hermes_envgen.generate.new import NewProject, new_project
    from hermes_envgen.generate.update import UpdateResult, update_project
