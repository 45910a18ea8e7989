"""The generator of the docs' reference pages (docs/_hooks/reference.py), loaded as a module."""

from __future__ import annotations

import importlib
import importlib.util

from helpers.markdown_blocks import DOCS

spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "_hooks" / "reference.py")


reference = importlib.util.module_from_spec(spec)
