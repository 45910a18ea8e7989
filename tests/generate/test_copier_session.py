"""copier's own words, which generate/copier_session.py turns into one-line messages, pinned.

If a copier release rewords them, these tests fail here rather than users seeing raw copier
errors.
"""

from __future__ import annotations

import warnings

import copier
import pytest

from hermes_envgen.errors import UsageError
from hermes_envgen.generate.copier_session import _VALIDATION_ERROR, answer_error, copier_session
from hermes_envgen.generate.git import one_line

from .envgen_helpers import REPO


def _render(target, **data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a dirty working tree is what we mean to render
        copier.run_copy(str(REPO), str(target), data=data, defaults=True, quiet=True)


def test_copier_words_a_failed_validator_as_we_parse_it(tmp_path):
    with pytest.raises(ValueError) as raised:
        _render(tmp_path / "x", project_name="Not A Name")
    assert _VALIDATION_ERROR.match(one_line(str(raised.value))), str(raised.value)
    message = str(answer_error(raised.value, {"project_name": "Not A Name"}))
    assert message.startswith("invalid project_name 'Not A Name': must start with a letter")


def test_a_bad_answer_becomes_a_usage_error_naming_the_question(tmp_path):
    data = {"project_name": "x", "group_size": 1}
    expected = r"^invalid group_size 1: must be between 2 and 256$"
    with (
        pytest.raises(UsageError, match=expected),
        copier_session(data, prompts=False, git_env={}),
    ):
        _render(tmp_path / "x", **data)
