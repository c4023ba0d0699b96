#!/usr/bin/env bash
# Regenerates crates/acpx-runtime/tests/fixtures/node-0.19.1/: Node acpx 0.19.1 homes written
# by the real Node CLI (from npm) driving acpx's scripted test agent, one home per scenario.
# The import tests read these committed files, so CI needs neither npm nor Node.
#
#   scripts/make-node-fixtures.sh            # needs node, npm and network access to npmjs
#
# Paths that depend on this machine (the temp home, the acpx binary) are replaced by fixed
# ones afterwards, so regenerating on another machine gives comparable files.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/crates/acpx-runtime/tests/fixtures/node-0.19.1"
work=$(mktemp -d /tmp/acpx-node-fixtures.XXXXXX)
trap 'rm -rf "$work"' EXIT

(cd "$repo" && CARGO_INCREMENTAL=0 cargo build -q -p acpx-cli)
acpx_bin="$repo/target/debug/acpx"
# NODE_ACPX_CLI: an already installed acpx@0.19.1 `dist/cli.js` (skips the npm install).
if [ -n "${NODE_ACPX_CLI:-}" ]; then
    node_cli=$NODE_ACPX_CLI
else
    (cd "$work" && npm install --silent --no-audit --no-fund acpx@0.19.1 >/dev/null 2>&1)
    node_cli="$work/node_modules/acpx/dist/cli.js"
fi

# Runs Node acpx in scenario home $1 with the test agent (extra agent flags in $AGENT_FLAGS).
nacpx() {
    local home=$1
    shift
    (cd "$home/work" && HOME="$home" timeout 60 node "$node_cli" \
        --agent "$acpx_bin __test-agent --load ${AGENT_FLAGS:-}" --approve-all --ttl "${TTL:-20}" "$@") \
        >>"$home/log.txt" 2>&1 || true
}

# Waits until the queue owner is gone (with TTL=1), so the next command starts a new agent
# process. Elsewhere the owner lives 20 s, so no prompt meets an owner shutting down.
settle() { sleep 3; }

scenario() {
    local name=$1
    local home="$work/$name"
    mkdir -p "$home/work"
    echo "# readme" >"$home/work/README.md"
    echo "$home"
}

# 1. lifecycle: new, a reply, tool calls, token usage, a title, close.
h=$(scenario lifecycle)
nacpx "$h" sessions new
nacpx "$h" prompt "echo hello world"
nacpx "$h" prompt "tools"
nacpx "$h" prompt "usage"
nacpx "$h" prompt "title Greeting session"
nacpx "$h" sessions close

# 2. load -> new fallback: the agent keeps no sessions, so every new agent process falls
#    back to a fresh ACP session; the journal spans several ACP sessions.
h=$(scenario fallback)
export TTL=1
nacpx "$h" sessions new
nacpx "$h" prompt "echo first turn"
settle
nacpx "$h" prompt "echo second turn"
settle
nacpx "$h" prompt "think"
settle
unset TTL

# 3. queue: two prompts submitted while the first one runs.
h=$(scenario queue)
nacpx "$h" sessions new
nacpx "$h" prompt "slow 30" &
sleep 0.5
nacpx "$h" prompt "echo queued one" &
sleep 0.2
nacpx "$h" prompt "echo queued two"
wait

# 4. rotation: a small segment limit (Node reads it from the record) rotates the journal.
h=$(scenario rotation)
nacpx "$h" sessions new
for f in "$h"/.acpx/sessions/*.json; do
    sed -i 's/"max_segment_bytes": *[0-9]*/"max_segment_bytes": 1500/' "$f"
done
for i in 1 2 3 4 5 6; do
    nacpx "$h" prompt "echo rotation turn $i"
done

# 5. crash: the agent dies mid-turn.
h=$(scenario crash)
nacpx "$h" sessions new
nacpx "$h" prompt "echo before the crash"
nacpx "$h" prompt "die"
settle

# 6. malformed: files Node would not load next to a good session, and a torn journal tail.
h=$(scenario malformed)
nacpx "$h" sessions new
nacpx "$h" prompt "echo good session"
nacpx "$h" sessions close
settle
s="$h/.acpx/sessions"
good=$(ls "$s"/*.json | head -n 1)
echo '{"schema": "acpx.session.v1", "acpx_record_id": "broken' >"$s/not-json.json"
sed 's/"schema": *"acpx.session.v1"/"schema": "acpx.session.v0"/' "$good" >"$s/wrong-schema.json"
cp "$good" "$s/renamed-copy.json"
# The torn tail: the last line of the good session's journal loses its end and newline.
journal="${good%.json}.stream.ndjson"
head -c -20 "$journal" >"$journal.tmp" && mv "$journal.tmp" "$journal"

# 7. export: Node's own portable archive of a session.
h=$(scenario export)
nacpx "$h" sessions new
nacpx "$h" prompt "echo exported"
nacpx "$h" prompt "tools"
nacpx "$h" sessions close
settle
nacpx "$h" sessions export --output "$h/archive.json"

# Let every queue owner reach its TTL and write its last checkpoint.
sleep 22
rm -rf "$out"
mkdir -p "$out"
for d in "$work"/*/; do
    name=$(basename "$d")
    [ -d "$d/.acpx/sessions" ] || continue
    mkdir -p "$out/$name"
    cp "$d"/.acpx/sessions/*.json "$d"/.acpx/sessions/*.ndjson "$out/$name/" 2>/dev/null || true
    [ -f "$d/archive.json" ] && cp "$d/archive.json" "$out/$name.archive.json"
done
# Machine-specific paths -> fixed ones.
grep -rl "$work" "$out" | xargs -r sed -i "s#$work#/home/user#g"
grep -rl "$acpx_bin" "$out" | xargs -r sed -i "s#$acpx_bin#/opt/acpx/bin/acpx#g"
echo "fixtures written to $out"
