"""Hatch build hook: ship the git bundle of the template's releases inside the package.

The bundle lets ``hermes-envgen new``/``update`` render from the public template URL, pinned to
the tag ``v{version}`` (or, built from an untagged commit, the label naming it), with no network
(see ``src/hermes_envgen/generate/bundle.py``). A shallow clone is refused: its bundle would
lack the earlier releases.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

BUNDLE_IN_PACKAGE = "hermes_envgen/_template/template.bundle"
BUNDLE_IN_SOURCE = f"src/{BUNDLE_IN_PACKAGE}"


def _bundle_module(root: Path) -> ModuleType:
    """``hermes_envgen.generate.bundle`` from the source tree: the package is not installed here.

    It needs only the standard library, ``packaging`` (which hatchling brings) and git.
    """
    source = str(root / "src")
    if source not in sys.path:
        sys.path.insert(0, source)
    return importlib.import_module("hermes_envgen.generate.bundle")


class TemplateBundleHook(BuildHookInterface):
    """Build ``template.bundle`` and add it to the wheel (and to the sdist, for its wheel)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Build the bundle, or reuse the one an sdist carries, and include it."""
        if self.target_name == "wheel" and version == "editable":
            return  # a source checkout bundles its working tree on the fly, at run time
        root = Path(self.root)
        bundle_module = _bundle_module(root)
        prebuilt = root / BUNDLE_IN_SOURCE
        if prebuilt.is_file() and bundle_module.source_git_dir(root) is None:
            # An unpacked sdist: its bundle was built where the release tags could be seen,
            # and the wheel takes it in with the package's other files.
            if self.target_name == "sdist":
                build_data["force_include"][str(prebuilt)] = BUNDLE_IN_SOURCE
            return
        bundle_module.check_full_history(root)
        self._tmp = tempfile.TemporaryDirectory(prefix="hermes-envgen-build.")
        bundle = bundle_module.build_bundle(
            root, self.metadata.version, Path(self._tmp.name) / "template.bundle"
        )
        inside = BUNDLE_IN_PACKAGE if self.target_name == "wheel" else BUNDLE_IN_SOURCE
        build_data["force_include"][str(bundle)] = inside

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """Remove the temporary bundle once the artifact is written."""
        if tmp := getattr(self, "_tmp", None):
            tmp.cleanup()
