"""``hermes-envgen reach``: can this host reach every service a worker needs?

Run it on a worker node before a run spread over machines: each model server URL, run-api and
the Docker engine(s) get one short request from here, with a few seconds' timeout each, and
the answer is one checklist row per service (PASS, or FAIL with what came back).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import urllib.error
import urllib.request

from hermes_envgen.devtools.check import FAIL, PASS, CheckResult
from hermes_envgen.errors import CheckError

TIMEOUT = 5.0  # seconds per request: a dark address fails in seconds, not minutes


def reach_from_flags(
    base_url: str | None,
    rollout_server_url: str | None,
    docker_host: list[str] | None,
    *,
    asked_by: str = "reach",
) -> list[CheckResult]:
    """``reach_checks`` of the command line's flags: model URLs comma-separated, Docker engines
    repeated or comma-separated (a pool, as sandbox_docker_hosts), the key from OPENAI_API_KEY;
    CheckError when none is given (``asked_by``: the command that says so)."""
    urls = _split([base_url] if base_url else [])
    engines = _split(docker_host or [])
    if not (urls or rollout_server_url or engines):
        raise CheckError(f"{asked_by} needs --base-url, --rollout-server-url or --docker-host")
    return reach_checks(urls, rollout_server_url, engines, api_key=os.environ.get("OPENAI_API_KEY"))


def _split(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def reach_checks(
    base_urls: list[str],
    rollout_server_url: str | None = None,
    docker_hosts: list[str] | None = None,
    api_key: str | None = None,
) -> list[CheckResult]:
    """One row per model URL, run-api and Docker engine, asked from this host."""
    rows = [_model_row(url.rstrip("/"), api_key) for url in base_urls]
    if rollout_server_url:
        rows.append(_rollout_row(rollout_server_url))
    rows += [_docker_row(host) for host in docker_hosts or []]
    return rows


def _model_row(base_url: str, api_key: str | None) -> CheckResult:
    name = f"model {base_url}"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        models = _get_json(f"{base_url}/models", headers)
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            return CheckResult(name, FAIL, f"HTTP {exc.code} from {base_url}/models{_from()}")
        root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
        try:  # Atropos's vLLM API server: /generate and /health, no OpenAI API
            request = urllib.request.Request(f"{root}/health", headers=headers)
            with urllib.request.urlopen(request, timeout=TIMEOUT):  # any 200: vLLM's is empty
                pass
        except (OSError, ValueError) as inner:
            return CheckResult(name, FAIL, f"{_reason(inner)}{_from()}")
        return CheckResult(name, PASS, "answers /health (no /v1/models)")
    except (OSError, ValueError) as exc:
        return CheckResult(name, FAIL, f"{_reason(exc)}{_from()}")
    served = [m.get("id", "?") for m in models.get("data", []) if isinstance(m, dict)]
    return CheckResult(name, PASS, f"serves {', '.join(served) or 'no model listed'}")


def _rollout_row(url: str) -> CheckResult:
    from hermes_envgen.runtime.env.delivery import check_rollout_server
    from hermes_envgen.runtime.errors import RolloutServerError

    name = f"run-api {url}"
    try:
        asyncio.run(check_rollout_server(url, wait=0, timeout=TIMEOUT))
    except RolloutServerError as exc:
        return CheckResult(name, FAIL, str(exc))
    return CheckResult(name, PASS, "answers")


def _docker_row(host: str) -> CheckResult:
    """``docker version`` against the engine at ``host`` (TLS settings from the environment)."""
    import subprocess

    name = f"docker {host}"
    env = {**os.environ, "DOCKER_HOST": host}
    try:
        done = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True, text=True, env=env, timeout=TIMEOUT * 3, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except FileNotFoundError:
        return CheckResult(name, FAIL, "no docker client on this host")
    except subprocess.TimeoutExpired:
        return CheckResult(name, FAIL, f"no answer within {TIMEOUT * 3:g} s{_from()}")
    if done.returncode != 0:
        lines = (done.stderr.strip() or "docker version failed").splitlines()
        said = lines[-1]
        if "dial-stdio" in done.stderr and "stderr=" in done.stderr:
            # ssh:// failed: ssh's own words (after "stderr=", on the first line) say why
            ssh_said = done.stderr.partition("stderr=")[2].strip().splitlines() or ["?"]
            said = f"ssh to the engine fails: {ssh_said[0]}"
        return CheckResult(name, FAIL, f"{said[:200]}{_from()}")
    return CheckResult(name, PASS, f"engine {done.stdout.strip()}")


def _get_json(url: str, headers: dict[str, str]) -> dict:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        return json.loads(response.read())


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, socket.gaierror):
        return "the host name does not resolve"
    if isinstance(reason, socket.timeout | TimeoutError):
        return f"no answer within {TIMEOUT:g} s"
    if isinstance(reason, OSError) and reason.errno:
        return os.strerror(reason.errno).lower()
    if isinstance(exc, ValueError):
        return "the answer is not JSON: is that a model server?"
    return str(reason)


def _from() -> str:
    return f" (from {socket.gethostname()})"
