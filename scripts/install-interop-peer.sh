#!/usr/bin/env bash
# Installs the third-party ACP peers of the interoperability tests (PyPI only):
#   - the echo agent shipped in the source distribution of agent-client-protocol 0.12.1 (the
#     wheel has no examples);
#   - pydantic-acp 1.10.0 serving a pydantic-ai agent with a scripted FunctionModel
#     (scripts/peers/pydantic_peer.py: no LLM, no key).
# Creates, in the repository root, both gitignored:
#   .venv-acp/   a virtualenv with agent-client-protocol==0.12.1 and pydantic-acp==1.10.0
#   peers/       the unpacked sdist; the agent is peers/agent_client_protocol-0.12.1/examples/echo_agent.py
# Idempotent: does nothing when both are already in place. Needs python3 (>= 3.10) and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

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
