"""copier's own words, which generate/copier_session.py turns into one-line messages, pinned.

If a copier release rewords them, these tests fail here rather than users seeing raw copier
errors.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import copier
import pytest
from copier.errors import InvalidTypeError
from helpers.envgen import REPO

from hermes_envgen.errors import UsageError
from hermes_envgen.generate import hooks
from hermes_envgen.generate.copier_session import _VALIDATION_ERROR, answer_error, copier_session
from hermes_envgen.generate.git import one_line
from hermes_envgen.generate.new import new_project


def _render(target, vcs_ref=None, **data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a dirty working tree is what we mean to render
        copier.run_copy(
            str(REPO), str(target), data=data, defaults=True, quiet=True, vcs_ref=vcs_ref
        )


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


# -- only user mistakes become UsageError (exit 2): copier raises plain ValueErrors (pydantic's
# ValidationError among them) and InvalidTypeError for a template's bugs too, which must
# surface as bugs.


def _template(tmp_path: Path, questions: str) -> Path:
    template = tmp_path / "template"
    template.mkdir()
    (template / "copier.yml").write_text(questions)
    (template / "README.md.jinja").write_text("made\n")
    return template


def _copy(template: Path, target: Path, **data) -> None:
    with copier_session(data, prompts=False, git_env={}):
        copier.run_copy(str(template), str(target), data=data, defaults=True, quiet=True)


def test_a_template_bug_worded_as_a_value_error_surfaces_as_itself(tmp_path):
    template = _template(tmp_path, "token:\n  type: str\n  secret: true\n")  # no default
    with pytest.raises(ValueError, match="Secret question requires a default value"):
        _copy(template, tmp_path / "out")


def test_a_question_of_a_type_copier_lacks_surfaces_as_a_type_error(tmp_path):
    template = _template(tmp_path, "q:\n  type: nosuch\n  default: x\n")
    with pytest.raises(InvalidTypeError, match='Unsupported type "nosuch"'):
        _copy(template, tmp_path / "out")


def test_an_answer_of_the_wrong_type_is_the_users_mistake(tmp_path):
    template = _template(tmp_path, "name:\n  type: str\n  default: x\n")
    with pytest.raises(UsageError, match=r'^Invalid answer "None" .* to question "name"'):
        _copy(template, tmp_path / "out", name=None)


def test_a_value_error_raised_inside_the_session_is_not_a_usage_error():
    with pytest.raises(ValueError, match=r"^a bug$"), copier_session({}, prompts=False, git_env={}):
        raise ValueError("a bug")


# -- a version the template does not hold: source.py refuses unknown *release tags* before
# copier runs, but any other ref (a branch, a commit) reaches copier, which words it two ways.


def test_an_unknown_ref_of_a_template_directory_is_copiers_unknown_revision(tmp_path):
    with (
        pytest.raises(UsageError, match=r"^template version not found: Unknown revision: 'nope'$"),
        copier_session({}, prompts=False, git_env={}),
    ):
        _render(tmp_path / "x", vcs_ref="nope", project_name="x")


def test_an_unknown_ref_of_a_cloned_template_is_gits_invalid_reference(
    tmp_path, cli_env, monkeypatch
):
    # `new` clones the public URL (from the bundle): copier's `git worktree add` fails.
    monkeypatch.setenv("HERMES_ENVGEN_CACHE_DIR", cli_env["HERMES_ENVGEN_CACHE_DIR"])
    expected = r"^template version not found: fatal: invalid reference: nope$"
    with pytest.raises(UsageError, match=expected):
        new_project("x", tmp_path, vcs_ref="nope", defaults=True, interactive=False)
    assert not (tmp_path / "x").exists()


# -- the pre hook's reading of raw --data values, against copier's own casting


def _copier_question(**spec):
    from copier._user_data import AnswersMap, Question, SandboxedEnvironment

    environment = SandboxedEnvironment()
    return Question(var_name="q", answers=AnswersMap(), context={}, jinja_env=environment, **spec)


SPECS = [{"default": True}, {"default": 3}, {"default": 1.5}, {"default": "x"}, {"default": None}]
SPECS += [{"default": [1]}, {}, {"type": "int", "default": "3"}, {"type": "yaml"}]


def test_question_types_are_inferred_as_copier_infers_them():
    pre = hooks.load("pre_gen_project")
    questions = pre.parse_questions((REPO / "copier.yml").read_text())
    for spec in [*SPECS, *questions.values()]:
        fields = {k: v for k, v in spec.items() if k in {"type", "default", "multiselect"}}
        assert pre.question_type(spec) == _copier_question(**fields).get_type_name(), spec


# Raw values copier casts to a bool that the pre hook refuses on purpose: a number other than
# 0/1, an empty or null answer is a mistake far more often than a meant true/false, and
# anything else copier would cast with Python's bool() (so "maybe" is True).
REFUSED_ON_PURPOSE = ["2", "0.5", "-1", "", "~", "null", "none", "maybe"]


def test_bool_words_mean_to_us_what_they_mean_to_copier():
    from copier._tools import cast_to_bool

    pre = hooks.load("pre_gen_project")
    true_words = {"y", "yes", "t", "true", "on", "1"}
    for word in pre.BOOL_WORDS:
        assert cast_to_bool(word) is (word in true_words), word
        assert cast_to_bool(word.upper()) is (word in true_words), word
        pre.check_scalar("ci", word.upper(), "bool")
    for word in REFUSED_ON_PURPOSE:
        cast_to_bool(word)  # copier takes it without a word
        with pytest.raises(UsageError, match="expected true or false"):
            pre.check_scalar("ci", word, "bool")
