"""What tests share and conftest.py files do not hold (fixtures stay there): servers, rigs,
scripts, and the data the tests of several folders use. No test module imports another test
module; they import from here (tests/test_architecture.py checks it)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
FIXTURES = TESTS / "fixtures"  # data: chat templates, parsers' templates, an earlier release's env
CHAT_TEMPLATES = FIXTURES / "chat_templates"
HELPERS = TESTS / "helpers"
