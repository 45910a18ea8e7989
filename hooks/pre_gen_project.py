"""Pre-generation hook: check answers given up front (``--data KEY=VALUE``) before rendering.

Copier validates each answer against its question; this catches what it would let through or
cast silently: unknown keys, ``int("abc")``, ``bool("maybe")``, and lists written ``a,b``.
``hermes-envgen new`` and ``update`` run it; by hand (a plain ``copier copy`` user checking the
answers they are about to pass):

    python hooks/pre_gen_project.py copier.yml provider=openrouter toolsets=terminal,file

prints the checked answers as JSON, or one line saying what is wrong (exit code 2).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from hermes_envgen.errors import UsageError, report

BOOL_WORDS = frozenset({"y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0"})


def question_type(spec: Mapping[str, Any]) -> str:
    """A question's type as copier infers it: declared, else from its default's Python type."""
    if "type" in spec:
        return str(spec["type"])
    inferred = {bool: "bool", int: "int", float: "float", str: "str"}
    return inferred.get(type(spec.get("default")), "yaml")


def parse_list(key: str, value: str) -> list[Any]:
    """A multiple-choice answer: a YAML list (``[a, b]``) or the shell-friendly ``a,b``."""
    if not value.lstrip().startswith("["):
        return [item.strip() for item in value.split(",") if item.strip()]
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        parsed = None
    if not isinstance(parsed, list):
        raise UsageError(f"invalid {key} {value!r}: expected a list such as [a, b] or a,b")
    return parsed


def check_scalar(key: str, value: str, kind: str) -> None:
    """Refuse a raw value copier would cast badly (int("abc")) or silently (bool("maybe"))."""
    expected = {"int": "a whole number", "float": "a number", "bool": "true or false"}
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
        elif kind == "bool" and value.strip().lower() not in BOOL_WORDS:
            raise ValueError(value)
    except ValueError:
        raise UsageError(f"invalid {key} {value!r}: expected {expected[kind]}") from None


def is_derived(spec: Mapping[str, Any]) -> bool:
    """A value the template computes from other answers (``when: false``), never asked."""
    return spec.get("when") is False


def check_answers(
    data: Mapping[str, Any], questions: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Refuse unknown keys and ill-typed values; turn ``a,b`` into a list for multiselects."""
    derived = sorted(key for key in data if key in questions and is_derived(questions[key]))
    if derived:
        raise UsageError(
            f"{', '.join(derived)} cannot be given in --data: derived from the project name "
            "(choose the project name instead)"
        )
    unknown = sorted(set(data) - set(questions))
    if unknown:
        valid = [key for key, spec in questions.items() if not is_derived(spec)]
        raise UsageError(
            f"unknown question {', '.join(unknown)} in --data; valid keys: {', '.join(valid)}"
        )
    checked = dict(data)
    for key, value in data.items():
        if not isinstance(value, str):
            continue  # typed by a Python caller already
        spec = questions[key]
        if spec.get("multiselect"):
            checked[key] = parse_list(key, value)
        elif (kind := question_type(spec)) in {"int", "float", "bool"}:
            check_scalar(key, value, kind)
    return checked


def parse_questions(copier_yml: str) -> dict[str, dict[str, Any]]:
    """The questions of a ``copier.yml`` text, by name (settings starting with ``_`` left out)."""
    config = yaml.safe_load(copier_yml) or {}
    return {
        name: spec if isinstance(spec, dict) else {"default": spec}
        for name, spec in config.items()
        if not name.startswith("_")
    }


def main(argv: list[str]) -> int:
    """``pre_gen_project.py COPIER_YML KEY=VALUE...``: the checked answers as JSON."""
    if not argv:
        print("usage: pre_gen_project.py COPIER_YML [KEY=VALUE ...]", file=sys.stderr)
        return 2
    pairs = dict(pair.partition("=")[::2] for pair in argv[1:])
    try:
        print(json.dumps(check_answers(pairs, parse_questions(Path(argv[0]).read_text()))))
    except UsageError as exc:
        return report(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
