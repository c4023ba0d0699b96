#!/usr/bin/env bash
# Installs the third-party ACP peers of the interoperability tests (PyPI and npm):
#   - the echo agent shipped in the source distribution of agent-client-protocol 0.12.1 (the
#     wheel has no examples);
#   - pydantic-acp 1.10.0 serving a pydantic-ai agent with a scripted FunctionModel
#     (scripts/peers/pydantic_peer.py: no LLM, no key);
#   - qwen-code 0.24.4 (npm @qwen-code/qwen-code, run as `qwen --acp`), which the tests point
#     at a fake OpenAI-compatible server (scripts/peers/fake_openai.py: no LLM, no key).
#   - the TypeScript ACP SDK 1.9.0 (npm @agentclientprotocol/sdk; 1.x is the line with
#     ClientSideConnection), the client of scripts/peers/ts_client_serve_agent.mjs, which
#     checks `acpx serve-agent` from outside.
#   - codex-acp 0.16.0 (npm @zed-industries/codex-acp, Zed's ACP adapter of OpenAI's codex, a
#     binary in its platform package), which the tests point at a fake Responses API server
#     (scripts/peers/fake_responses.py: no LLM, no key);
#   - fast-agent 0.10.48 (PyPI fast-agent-mcp, run as `fast-agent-acp --model passthrough`: no
#     LLM, no key), in a virtualenv of its own since it needs Python >= 3.12;
#   - the checkers of `sessions export --as atif|otlp` (scripts/peers/check_interchange.py):
#     harbor 0.26.0 (Harbor's ATIF models and validator) and opentelemetry-proto 1.45.2, in
#     .venv-acp/ too.
# Creates, in the repository root, all gitignored:
#   .venv-acp/   a virtualenv with agent-client-protocol==0.12.1 and pydantic-acp==1.10.0
#   peers/       the unpacked sdist; the agent is peers/agent_client_protocol-0.12.1/examples/echo_agent.py
#   peers/node/  an npm prefix with qwen-code; the agent is peers/node/node_modules/.bin/qwen
#   peers/codex/ an npm prefix with codex-acp (its own: qwen-code's install omits optional
#                packages, and codex-acp's binary is one); the agent is
#                peers/codex/node_modules/.bin/codex-acp
#   .venv-fast-agent/  a virtualenv (Python >= 3.12) with fast-agent-mcp; the agent is
#                .venv-fast-agent/bin/fast-agent-acp
# Idempotent: installs only what is missing. Needs python3 (>= 3.10) and PyPI, node and npm
# and the npm registry.
set -euo pipefail
cd "$(dirname "$0")/.."

QWEN_CODE=0.24.4
NODE_PREFIX=peers/node
QWEN_PKG="$NODE_PREFIX/node_modules/@qwen-code/qwen-code/package.json"
QWEN_BIN="$NODE_PREFIX/node_modules/.bin/qwen"

qwen_installed() {
  [ -x "$QWEN_BIN" ] && [ -f "$QWEN_PKG" ] \
    && [ "$(node -p "require('./$QWEN_PKG').version" 2>/dev/null)" = "$QWEN_CODE" ]
}

install_qwen() {
  if qwen_installed; then
    echo "interop peer already installed: $QWEN_BIN --acp"
    return 0
  fi
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "error: node and npm not found; install Node.js to run the qwen-code interoperability test" >&2
    exit 1
  fi
  mkdir -p "$NODE_PREFIX"
  # Quiet (errors only), exact version, no optional native packages (clipboard, pty, image
  # and audio helpers that ACP mode does not use), no audit or funding calls; retried, since a
  # registry hiccup should not fail CI.
  local attempt
  for attempt in 1 2 3; do
    if npm install --prefix "$NODE_PREFIX" --save-exact --omit=optional --no-audit --no-fund \
         --no-update-notifier --loglevel=error "@qwen-code/qwen-code@$QWEN_CODE" >/dev/null; then
      break
    fi
    if [ "$attempt" = 3 ]; then
      echo "error: npm could not install @qwen-code/qwen-code@$QWEN_CODE" >&2
      exit 1
    fi
    echo "npm install failed (attempt $attempt); retrying" >&2
    sleep $((attempt * 5))
  done
  qwen_installed
  echo "interop peer installed: $QWEN_BIN --acp"
}

TS_SDK=1.9.0
TS_SDK_PKG="$NODE_PREFIX/node_modules/@agentclientprotocol/sdk/package.json"

install_ts_sdk() {
  if [ -f "$TS_SDK_PKG" ] \
     && [ "$(node -p "require('./$TS_SDK_PKG').version" 2>/dev/null)" = "$TS_SDK" ]; then
    echo "interop peer already installed: @agentclientprotocol/sdk $TS_SDK"
    return 0
  fi
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "error: node and npm not found; install Node.js to run the serve-agent client test" >&2
    exit 1
  fi
  mkdir -p "$NODE_PREFIX"
  local attempt
  for attempt in 1 2 3; do
    if npm install --prefix "$NODE_PREFIX" --save-exact --no-audit --no-fund \
         --no-update-notifier --loglevel=error "@agentclientprotocol/sdk@$TS_SDK" >/dev/null; then
      break
    fi
    if [ "$attempt" = 3 ]; then
      echo "error: npm could not install @agentclientprotocol/sdk@$TS_SDK" >&2
      exit 1
    fi
    echo "npm install failed (attempt $attempt); retrying" >&2
    sleep $((attempt * 5))
  done
  echo "interop peer installed: @agentclientprotocol/sdk $TS_SDK"
}

# Installs `$2@$3` into the npm prefix `$1` (exact version, quiet, retried: a registry hiccup
# should not fail CI).
npm_install() {
  local prefix=$1 pkg=$2 version=$3 attempt
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "error: node and npm not found; install Node.js to run the $pkg interoperability test" >&2
    exit 1
  fi
  mkdir -p "$prefix"
  for attempt in 1 2 3; do
    if npm install --prefix "$prefix" --save-exact --no-audit --no-fund \
         --no-update-notifier --loglevel=error "$pkg@$version" >/dev/null; then
      return 0
    fi
    if [ "$attempt" = 3 ]; then
      echo "error: npm could not install $pkg@$version" >&2
      exit 1
    fi
    echo "npm install failed (attempt $attempt); retrying" >&2
    sleep $((attempt * 5))
  done
}

CODEX_ACP=0.16.0
CODEX_PREFIX=peers/codex
CODEX_PKG="$CODEX_PREFIX/node_modules/@zed-industries/codex-acp/package.json"
CODEX_BIN="$CODEX_PREFIX/node_modules/.bin/codex-acp"

install_codex() {
  if [ -x "$CODEX_BIN" ] && [ -f "$CODEX_PKG" ] \
     && [ "$(node -p "require('./$CODEX_PKG').version" 2>/dev/null)" = "$CODEX_ACP" ] \
     && "$CODEX_BIN" --help >/dev/null 2>&1; then
    echo "interop peer already installed: $CODEX_BIN"
    return 0
  fi
  npm_install "$CODEX_PREFIX" @zed-industries/codex-acp "$CODEX_ACP"
  "$CODEX_BIN" --help >/dev/null
  echo "interop peer installed: $CODEX_BIN"
}

# fast-agent needs Python >= 3.12: the first of python3.14 … python3.12 on PATH, else the
# newest such version pyenv has (the machines here carry 3.12 and 3.13 under pyenv beside the
# default 3.11).
FAST_AGENT=0.10.48
FAST_VENV=.venv-fast-agent
FAST_BIN="$FAST_VENV/bin/fast-agent-acp"

python_for_fast_agent() {
  # A candidate counts only if it runs and is >= 3.12 (pyenv's shims are on PATH for every
  # version it has, and fail for one that is not selected).
  local candidate root
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  for candidate in python3.14 python3.13 python3.12 \
      $(ls -d "$root"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -V -r); do
    if "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1
    then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

install_fast_agent() {
  if [ -x "$FAST_BIN" ] && "$FAST_VENV/bin/python" - "$FAST_AGENT" >/dev/null 2>&1 <<'PY'
import sys, importlib.metadata as m
sys.exit(m.version("fast-agent-mcp") != sys.argv[1])
PY
  then
    echo "interop peer already installed: $FAST_BIN"
    return 0
  fi
  local python
  if ! python=$(python_for_fast_agent); then
    echo "error: fast-agent needs Python >= 3.12 and none was found (python3.12+ on PATH or" \
      "under pyenv)" >&2
    exit 1
  fi
  if [ ! -x "$FAST_VENV/bin/python" ]; then
    "$python" -m venv "$FAST_VENV"
  fi
  "$FAST_VENV/bin/pip" install --quiet --disable-pip-version-check "fast-agent-mcp==$FAST_AGENT"
  test -x "$FAST_BIN"
  echo "interop peer installed: $FAST_BIN"
}

# The checkers of acpx's interchange exports (`sessions export --as atif|otlp`,
# scripts/peers/check_interchange.py), in the same virtualenv: Harbor's own ATIF models and
# validator (harbor 0.26.0) and the OpenTelemetry protobuf schema (opentelemetry-proto).
# harbor declares Python >= 3.12 and depends on its whole evaluation stack (litellm, fastapi,
# supabase, …); its trajectory models and validator import pydantic only (installed above with
# pydantic-acp), and import on the Python 3.11 of the machines here, so its wheel goes in
# without its dependencies and without the Python check.
HARBOR=0.26.0
OTEL_PROTO=1.45.2
PROTOBUF=7.36.2

install_interchange_checkers() {
  if "$VENV/bin/python" - "$HARBOR" >/dev/null 2>&1 <<'PY'
import sys, importlib.metadata as m
import harbor.utils.trajectory_validator
import opentelemetry.proto.collector.trace.v1.trace_service_pb2
sys.exit(m.version("harbor") != sys.argv[1])
PY
  then
    echo "interchange checkers already installed: harbor $HARBOR, opentelemetry-proto"
    return 0
  fi
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "opentelemetry-proto==$OTEL_PROTO" "protobuf==$PROTOBUF"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --ignore-requires-python \
    "harbor==$HARBOR"
  "$VENV/bin/python" -c "from harbor.utils.trajectory_validator import TrajectoryValidator; \
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest"
  echo "interchange checkers installed: harbor $HARBOR, opentelemetry-proto $OTEL_PROTO"
}

VERSION=0.12.1
PYDANTIC_ACP=1.10.0
PYDANTIC_AI_SLIM=2.52.0
VENV=.venv-acp
PEERS=peers
SDIST_DIR="$PEERS/agent_client_protocol-$VERSION"
AGENT="$SDIST_DIR/examples/echo_agent.py"
PYTHON="${PYTHON:-python3}"

if [ -x "$VENV/bin/python" ] && [ -f "$AGENT" ] \
   && "$VENV/bin/python" -c "import acp, pydantic_acp" >/dev/null 2>&1; then
  echo "interop peer already installed: $AGENT"
  install_interchange_checkers
  install_qwen
  install_ts_sdk
  install_codex
  install_fast_agent
  exit 0
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "error: $PYTHON not found; install Python 3.10+ to run the interoperability test" >&2
  exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check "agent-client-protocol==$VERSION" \
  "pydantic-acp==$PYDANTIC_ACP" "pydantic-ai-slim==$PYDANTIC_AI_SLIM"

mkdir -p "$PEERS"
if [ ! -f "$AGENT" ]; then
  "$VENV/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    -d "$PEERS" "agent-client-protocol==$VERSION"
  tar -xzf "$PEERS/agent_client_protocol-$VERSION.tar.gz" -C "$PEERS"
fi

test -f "$AGENT"
"$VENV/bin/python" -c "import acp, pydantic_acp"
echo "interop peers installed: $VENV/bin/python $AGENT; $VENV/bin/python scripts/peers/pydantic_peer.py"
install_interchange_checkers
install_qwen
install_ts_sdk
install_codex
install_fast_agent
