#!/usr/bin/env bash
# Set up, then run the whole test suite offline (no GPU, no API key, no network).
set -euo pipefail
cd "$(dirname "$0")/.."

# The suite runs on every core (pytest-xdist; tests/conftest.py groups those that cannot share
# the machine and orders the work, which --no-loadscope-reorder keeps) and ends with its 20
# slowest tests.
PYTEST=(.venv/bin/python -m pytest -n auto --dist loadgroup --no-loadscope-reorder --durations=20)

# The tests that install a generated project do it offline (UV_OFFLINE), as a user's uv does
# after an install: resolving needs the package index's pages in uv's cache, which set-up's
# `uv sync` of uv.lock never reads. Fetch them now (a few seconds; nothing is installed).
prime_index_cache() {
    .venv/bin/uv pip compile --quiet --python .venv/bin/python -c template/constraints.txt \
        --extra dev pyproject.toml -o /dev/null ||
        echo "warning: uv could not read the package index; tests that install a generated project offline will fail" >&2
}

# --fast: the development loop (under 3 minutes on 2 cores): no slow, docker or model-server
# tests, so neither an engine nor a model server is started.
if [ "${1:-}" = --fast ]; then
    shift
    bash scripts/setup.sh
    bash scripts/install-torch-cpu.sh  # into .venv-torch/, once: for the GRPO trainer tests
    bash scripts/install-trainers.sh  # into .venv-trl/, once: TRL for the doors' tests
    bash scripts/install-verifiers.sh  # into .venv-vf/, once: verifiers, in a venv of its own
    prime_index_cache
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
    .venv/bin/ruff check src hooks tests examples benchmarks docs/_hooks
    .venv/bin/ruff format --check src hooks tests examples benchmarks docs/_hooks
    .venv/bin/mypy  # [tool.mypy] in pyproject.toml: strict over the runtime's declared API
    # The docs site, --strict (a broken link or a warning fails); the full run builds it in
    # tests/docs/test_site.py and opens it in Chromium.
    docs_site=$(mktemp -d)
    bash scripts/docs.sh build "$docs_site" 2>&1 | { grep -v '^INFO' || true; }  # pipefail: its code
    rm -rf "$docs_site"
    exec "${PYTEST[@]}" -m "not slow and not docker and not llama_server and not vllm_server" "$@"
fi

# Whatever this script started is stopped when it exits, however the tests ended.
vllm_group=""
docker_started=""
cleanup() {
    if [ -n "$docker_started" ]; then bash scripts/docker-engine.sh down || true; fi
    # --- vLLM (scripts/vllm-server.sh): the preparation's group, then the server's own.
    if [ -n "$vllm_group" ]; then kill -- -"$vllm_group" 2>/dev/null || true; fi
    if [ -n "${vllm_state:-}" ]; then bash scripts/vllm-server.sh stop "$vllm_state" || true; fi
    rm -rf "${vllm_state:-}"
    # --- end vLLM
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- vLLM: a stock vLLM (the prebuilt CPU wheel) for the end-to-end tests of the vllm provider
# (tests/runtime/inference/test_vllm_server.py): installed on the first run only (a few minutes, cached under
# ~/.cache/hermes-envgen/vllm/) and started now, beside setup and the suite; its tests wait for
# it and run after the slow tests. The preparation runs in a process group of its own and the
# server in another (its pid file in the state directory): both are stopped when the tests end.
# llama.cpp's server (scripts/llama-server.sh, an 18-60 minute build) is not started here any
# more; its test is opt-in: HERMES_ENVGEN_LLAMA=1 with a state directory from that script.
vllm_state=$(mktemp -d)
setsid bash scripts/vllm-server.sh start "$vllm_state" >"$vllm_state/start.log" 2>&1 &
vllm_group=$!
export HERMES_ENVGEN_VLLM_STATE="$vllm_state"
# --- end vLLM

bash scripts/setup.sh
bash scripts/install-torch-cpu.sh  # for the tests of atroposlib's GRPO trainer on served groups
bash scripts/install-trainers.sh  # TRL, for the doors' tests (a real GRPOTrainer step)
bash scripts/install-verifiers.sh  # verifiers (its own venv: it pins mcp 2.0), for its door
prime_index_cache
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
.venv/bin/ruff check src hooks tests examples benchmarks docs/_hooks
.venv/bin/ruff format --check src hooks tests examples benchmarks docs/_hooks
.venv/bin/mypy

# The docker backend's tests need an engine and an image: use the engine that answers, or start
# a private one (root, Debian), stopped when this script exits. Without one they skip, saying
# why. With both, they must run: HERMES_ENVGEN_REQUIRE_DOCKER makes a skip a failure. As root
# the image can always be built (debootstrap), so failing to is an error, not a skip.
if engine="$(bash scripts/docker-engine.sh up)"; then
    docker_started=1
    eval "$engine"
    if image="$(bash scripts/docker-test-image.sh)"; then
        export HERMES_ENVGEN_TEST_DOCKER_IMAGE="$image" HERMES_ENVGEN_REQUIRE_DOCKER=1
    elif [ "$(id -u)" -eq 0 ]; then
        echo "error: scripts/docker-test-image.sh failed (see above)" >&2
        exit 1
    else
        echo "warning: no docker test image (building it needs root); the docker backend's tests will be skipped" >&2
    fi
else
    echo "warning: no Docker engine; the docker backend's tests will be skipped" >&2
fi
"${PYTEST[@]}" "$@"
