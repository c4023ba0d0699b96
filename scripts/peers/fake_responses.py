"""A small fake OpenAI *Responses* API server for acpx's interoperability tests with codex-acp
(crates/acpx-cli/tests/it/interop_codex.rs). Python stdlib only; no key, no network: it listens
on 127.0.0.1 and answers from a script, never from a model.

    python3 fake_responses.py [--port N] [--log FILE]

It prints `PORT <n>` on stdout once it listens (`--port 0`, the default, picks a free port),
then serves until killed. With `--log FILE` every request is appended to FILE as one JSON line
(`{"method": …, "path": …, "body": …}`), so a test can see what the agent sent.

`POST …/responses` answers as the Responses API streams (codex always asks for a stream):
server-sent events `response.created`, `response.output_item.added`,
`response.output_text.delta`…, `response.output_item.done` and `response.completed` (with
usage), the event types codex-rs parses (codex-api/src/sse/responses.rs). What it answers
depends on the request's `input` (the whole conversation, as codex resends it every turn):

- the last item is a tool's output (`function_call_output`, `custom_tool_call_output`): the
  text `done: <the output>`;
- the last user text contains `p: write-file <absolute path> <content…>`: a call of codex's
  `apply_patch` tool adding that file (a custom tool call when the request offers `apply_patch`
  as a custom (freeform) tool, a function call with `{"input": <patch>}` otherwise), then, once
  the result comes back, the text above;
- the last user text contains `p: slow`: `tick 1 … tick 600`, one delta every 0.1 s (a turn to
  cancel; the stream stops when the client goes away);
- anything else with a `p:` text: `turns=<n>; heard=<texts>; model=<the request's model>`,
  where n counts the user messages of the conversation that carry a prompt of the test (lines
  starting with `p:`) and texts are those prompts joined by ` | `: a reply that shows whether
  the agent sent the earlier turns, and which model it asked for.

Requests with no `p:` text in their last user message (an agent's side query) get `ok`.
`GET …/models` lists one model, `fake-model`.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"
_lock = threading.Lock()
_counter = {"n": 0}


def _next_id(prefix: str) -> str:
    with _lock:
        _counter["n"] += 1
        return f"{prefix}{_counter['n']}"


def _texts(content) -> list[str]:
    """The text parts of an input message's content (a string or a list of parts)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    return [p.get("text", "") for p in content if isinstance(p, dict) and "text" in p]


def _user_prompts(items) -> list[list[str]]:
    """For each user message of the conversation, the test's prompts (`p:` lines) in it."""
    out = []
    for item in items:
        if item.get("type", "message") != "message" or item.get("role") != "user":
            continue
        lines = [line.strip() for t in _texts(item.get("content")) for line in t.splitlines()]
        out.append([line[2:].strip() for line in lines if line.startswith("p:")])
    return out


def _patch_tool(tools) -> str | None:
    """How the request offers `apply_patch`: "custom", "function", or None."""
    for tool in tools or []:
        if tool.get("name") == "apply_patch":
            return "custom" if tool.get("type") == "custom" else "function"
    return None


def plan(body: dict) -> dict:
    """What to answer: {"text": str}, {"call": item} or {"slow": int}."""
    items = body.get("input") or []
    last = items[-1] if items else {}
    if last.get("type") in ("function_call_output", "custom_tool_call_output"):
        output = last.get("output")
        if isinstance(output, dict):
            output = output.get("content") or json.dumps(output)
        elif isinstance(output, list):
            output = " ".join(_texts(output))
        return {"text": f"done: {str(output).strip()[:200]}"}
    prompts = _user_prompts(items)
    if not prompts or not prompts[-1]:
        return {"text": "ok"}
    current = prompts[-1][-1]
    heard = [p[-1] for p in prompts if p]
    m = re.search(r"write-file\s+(\S+)\s+(.*)", current, re.S)
    if m:
        path, content = m.group(1), m.group(2)
        patch = f"*** Begin Patch\n*** Add File: {path}\n+{content}\n*** End Patch\n"
        call_id = _next_id("call_")
        if _patch_tool(body.get("tools")) == "custom":
            item = {"type": "custom_tool_call", "id": _next_id("ctc_"), "status": "completed",
                    "call_id": call_id, "name": "apply_patch", "input": patch}
        else:
            item = {"type": "function_call", "id": _next_id("fc_"), "status": "completed",
                    "call_id": call_id, "name": "apply_patch",
                    "arguments": json.dumps({"input": patch})}
        return {"call": item}
    if current == "slow":
        return {"slow": 600}
    return {"text": f"turns={len(heard)}; heard={' | '.join(heard)}; model={body.get('model')}"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-responses/1"

    def log_message(self, fmt, *args):  # quiet: stderr belongs to the test
        pass

    def _log(self, body) -> None:
        log = self.server.log_path  # type: ignore[attr-defined]
        if log:
            with _lock, open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"method": self.command, "path": self.path, "body": body}) + "\n")

    def _json(self, code: int, doc) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._log(None)
        if self.path.split("?")[0].rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "fake"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._log(None)
            self._json(400, {"error": {"message": "body is not JSON (compressed?)", "type": "invalid_request_error"}})
            return
        self._log(body)
        if not self.path.split("?")[0].rstrip("/").endswith("/responses"):
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        self._stream(body, plan(body))

    def _stream(self, body: dict, what: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        rid = _next_id("resp_")
        model = body.get("model") or MODEL

        def event(kind: str, **fields) -> None:
            doc = {"type": kind, **fields}
            self.wfile.write(f"event: {kind}\ndata: {json.dumps(doc)}\n\n".encode())
            self.wfile.flush()

        try:
            event("response.created", response={"id": rid, "object": "response", "model": model,
                                                 "status": "in_progress", "output": []})
            if "call" in what:
                item = what["call"]
                event("response.output_item.added", output_index=0, item=item)
                event("response.output_item.done", output_index=0, item=item)
            else:
                mid = _next_id("msg_")
                event("response.output_item.added", output_index=0, item={
                    "type": "message", "id": mid, "role": "assistant", "status": "in_progress",
                    "content": []})
                if "slow" in what:
                    pieces = [f"tick {i} " for i in range(1, what["slow"] + 1)]
                else:
                    text = what["text"]
                    step = max(1, len(text) // 3)
                    pieces = [text[i:i + step] for i in range(0, len(text), step)]
                for piece in pieces:
                    event("response.output_text.delta", item_id=mid, output_index=0,
                          content_index=0, delta=piece)
                    if "slow" in what:
                        time.sleep(0.1)
                event("response.output_item.done", output_index=0, item={
                    "type": "message", "id": mid, "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "".join(pieces),
                                 "annotations": []}]})
            event("response.completed", response={
                "id": rid, "object": "response", "model": model, "status": "completed",
                "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": 15}})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a cancelled turn)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", default=None)
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.log_path = args.log  # type: ignore[attr-defined]
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
