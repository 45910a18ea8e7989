"""The judge's client: the policy's own, or one of the judge's own endpoint."""

from __future__ import annotations

import os

from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.inference.client import ModelClient
from hermes_envgen.runtime.inference.endpoint import Endpoint
from hermes_envgen.runtime.urls import is_local


def judge_client(
    policy: ModelClient,
    base_url: str | None = None,
    model: str | None = None,
    api_key_env: str | None = None,
    *,
    timeout: float = 120.0,
) -> ModelClient:
    """The judge's client: its own endpoint when ``base_url`` is set, else the policy's server.

    The key is read from the environment variable ``api_key_env``; EnvConfigError (one line)
    when the endpoint is incomplete or a remote judge has no key.
    """
    if not base_url:
        return policy
    if not model:
        raise EnvConfigError(f"judge_base_url is {base_url}: set judge_model to its model name")
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    if not key and not is_local(base_url):
        where = f"${api_key_env} is empty" if api_key_env else "judge_api_key_env is not set"
        raise EnvConfigError(f"no API key for the judge at {base_url}: {where}")
    endpoint = Endpoint(base_url.rstrip("/"), model, key, timeout, "openai")
    return ModelClient([endpoint], api="chat", retries=policy.retries)
