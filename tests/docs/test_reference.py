"""The reference pages' generator (docs/_hooks/reference.py) covers everything it documents."""

from __future__ import annotations

import pytest
from helpers.reference_names import reference


def test_every_setting_command_and_error_is_in_the_generated_pages():
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from hermes_envgen.runtime import HermesAgentEnvConfig

    settings = reference.expand("<!-- generated: settings -->")
    for name, field in HermesAgentEnvConfig.model_fields.items():
        assert f"| `--env.{name}` |" in settings
        if field.description:
            assert reference.cell(field.description) in settings
    assert all(f"| `--openai.{name}` |" in settings for name in APIServerConfig.model_fields)

    cli = reference.expand("<!-- generated: cli -->")
    for command, options in reference.cli_options().items():
        assert f"## `hermes-envgen {command}`" in cli
        assert all(f"`{option}`" in cli for option in options - {"--help"})

    errors = reference.expand("<!-- generated: errors -->")
    for error in reference.error_classes():
        assert f"`{error.__module__}.{error.__name__}` | {error.exit_code} |" in errors


def test_a_marker_with_no_generator_fails_the_build():
    with pytest.raises(ValueError, match="no such generator"):
        reference.expand("<!-- generated: setings -->")
