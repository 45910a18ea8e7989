"""Shared by the tests: moved out of docs/test_names.py."""

from __future__ import annotations

import importlib
import importlib.util

from helpers.markdown_blocks import DOCS

spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "_hooks" / "reference.py")


reference = importlib.util.module_from_spec(spec)
