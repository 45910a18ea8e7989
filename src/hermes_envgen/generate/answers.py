"""Answers given on the command line (``--data KEY=VALUE``), before the template sees them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hermes_envgen.errors import UsageError
from hermes_envgen.generate import hooks, source


def parse_data_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` as a dict of raw strings (copier casts them per question type)."""
    data: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--data takes KEY=VALUE, got {pair!r}")
        data[key.strip()] = value
    return data


def check_answers(data: Mapping[str, Any], template: Path, ref: str) -> dict[str, Any]:
    """The answers checked against the questions of template release ``ref`` (the pre hook)."""
    questions = source.template_questions(template, ref)
    return hooks.load("pre_gen_project").check_answers(data, questions)
