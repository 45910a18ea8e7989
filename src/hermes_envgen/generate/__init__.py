"""Generating env projects from the copier template (``new``) and updating them (``update``).

Public API: ``new_project`` (``project_location``: NAME or a path as ``new`` takes it),
``update_project``, ``parse_data_pairs`` and their results. Names
are loaded on first use: the wheel's build hook imports ``generate.bundle`` with no copier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_envgen._lazy import lazy_exports

_EXPORTS = {
    "NewProject": "new",
    "new_project": "new",
    "project_location": "new",
    "UpdateResult": "update",
    "update_project": "update",
    "parse_data_pairs": "answers",
}

__all__ = [
    "NewProject",
    "UpdateResult",
    "new_project",
    "parse_data_pairs",
    "project_location",
    "update_project",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from hermes_envgen.generate.answers import parse_data_pairs
    from hermes_envgen.generate.new import NewProject, new_project, project_location
    from hermes_envgen.generate.update import UpdateResult, update_project
