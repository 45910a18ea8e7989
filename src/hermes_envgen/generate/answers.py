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


_EXPECTED = {"int": "a whole number", "float": "a number", "bool": "true or false"}


def check_recorded_answers(
    answers: Mapping[str, Any], questions: Mapping[str, Mapping[str, Any]], path: Path
) -> None:
    """Refuse an answer of ``path`` (a project's answers file) that copier cannot read back.

    ``update`` renders the project's own template version again from these answers before it
    merges: an ill-typed one (``group_size: abc``) or one outside its choices would stop copier
    half-way with a traceback. Checked up front, it is one line naming the answer and the file.
    """
    pre_hook = hooks.load("pre_gen_project")
    for key, value in answers.items():
        spec = questions.get(key)
        if key.startswith("_") or spec is None or pre_hook.is_derived(spec):
            continue
        problem = _answer_problem(value, spec, pre_hook)
        if problem:
            raise UsageError(
                f"invalid {key} {value!r} in {path}: {problem}; correct it there, commit, "
                "then update again"
            )


def _answer_problem(value: Any, spec: Mapping[str, Any], pre_hook: Any) -> str | None:
    """What is wrong with a recorded answer for its question, or None."""
    choices = spec.get("choices")
    values = list(choices.values() if isinstance(choices, dict) else choices or [])
    if any(isinstance(choice, str) and "{" in choice for choice in values):
        values = []  # choices the template computes: copier checks those itself
    if spec.get("multiselect"):
        if not isinstance(value, list):
            return "expected a list such as [a, b]"
        wrong = [item for item in value if values and item not in values]
        return f"{wrong[0]!r} is not one of {values}" if wrong else None
    kind = pre_hook.question_type(spec)
    if kind in _EXPECTED:
        # A number or a bool as YAML wrote it, or a string copier casts as a --data value.
        typed = {"int": (int,), "float": (int, float), "bool": (bool,)}[kind]
        if isinstance(value, str):
            try:
                pre_hook.check_scalar("", value, kind)
            except UsageError:
                return f"expected {_EXPECTED[kind]}"
        elif isinstance(value, bool) != (kind == "bool") or not isinstance(value, typed):
            return f"expected {_EXPECTED[kind]}"
    if values and value not in values:
        return f"expected one of {values}"
    return None
