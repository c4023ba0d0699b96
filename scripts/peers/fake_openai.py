"""A small fake OpenAI-compatible chat-completions server for acpx's interoperability tests with
real coding agents (qwen-code: crates/acpx-cli/tests/it/interop_qwen.rs). Python stdlib only; no
key, no network: it listens on 127.0.0.1 and answers from a script, never from a model.

    python3 fake_openai.py [--port N] [--log FILE]

It prints `PORT <n>` on stdout once it listens (`--port 0`, the default, picks a free port),
then serves until killed. With `--log FILE` every request body is appended to FILE as one JSON
line (`{"path": …, "body": …}`), so a test can see what the agent sent.

`POST …/chat/completions` (any prefix, e.g. `/v1/chat/completions`) answers as OpenAI does:
server-sent events of `chat.completion.chunk` objects ending in `data: [DONE]` when the request
has `"stream": true`, one `chat.completion` object otherwise. What it answers depends on the
conversation of the request:

- the last message is a tool result (`role: tool`): the text `done: <the tool's output>`;
- the last user text contains `write-file <absolute path> <content…>`: a call of the agent's
  `write_file` tool with `{"file_path": <path>, "content": <content>}` (streamed in pieces, as
  OpenAI does), then, once the result comes back, the text above;
- the last user text contains `slow`: `tick 1 … tick 600`, one chunk every 0.1 s (a turn to
  cancel; the stream stops when the client goes away);
- anything else: `turns=<n>; heard=<texts>`, where n counts the user messages of the
  conversation that carry a prompt of the test (texts starting with `p:`) and texts are those
  prompts joined by ` | `: a reply that shows whether the agent sent the earlier turns.

Requests that are not a conversation turn of the test (an agent's side query, e.g. a title or
a next-speaker check, none of whose user texts starts with `p:`) get `ok`.
`GET …/models` lists one model, `fake-model`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"
_log_lock = threading.Lock()
_counter = {"n": 0}


def _texts(content) -> list[str]:
    """The text parts of a message's content (a string or a list of parts)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    out = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            out.append(part.get("text", ""))
        elif isinstance(part, str):
            out.append(part)
    return out


def _prompts(messages) -> list[str]:
    """The test's prompts (`p:…`) in the user messages, in order, one per user message."""
    prompts = []
    for m in messages:
        if m.get("role") != "user":
            continue
        # By line: an agent may join a prompt's text blocks into one text (a fork's first
        # prompt has the copied conversation in a block before the test's own).
        lines = [line.strip() for t in _texts(m.get("content")) for line in t.splitlines()]
        found = [line for line in lines if line.startswith("p:")]
        if found:
            prompts.append(found[-1][2:].strip())
    return prompts


def _next_id(prefix: str) -> str:
    with _log_lock:
        _counter["n"] += 1
        return f"{prefix}{_counter['n']}"


def plan(body: dict) -> dict:
    """What to answer: {"text": str} or {"tool": (name, args)} or {"slow": int}."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        output = " ".join(_texts(last.get("content"))).strip()
        return {"text": f"done: {output[:200]}"}
    prompts = _prompts(messages)
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    last_texts = " ".join(_texts(last_user.get("content"))) if last_user else ""
    if not prompts or "p:" not in last_texts:
        return {"text": "ok"}
    current = prompts[-1]
    m = re.search(r"write-file\s+(\S+)\s+(.*)", current, re.S)
    if m:
        return {"tool": ("write_file", {"file_path": m.group(1), "content": m.group(2)})}
    if "slow" in current:
        return {"slow": 600}
    return {"text": f"turns={len(prompts)}; heard={' | '.join(prompts)}"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-openai/1"

    def log_message(self, fmt, *args):  # quiet: stderr belongs to the test
        pass

    def _json(self, code: int, doc) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
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
            self._json(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        log = self.server.log_path  # type: ignore[attr-defined]
        if log:
            with _log_lock, open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"path": self.path, "body": body}) + "\n")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        what = plan(body)
        if body.get("stream"):
            self._stream(body, what)
        else:
            self._whole(what)

    # --- non-streaming -------------------------------------------------------------------

    def _whole(self, what: dict) -> None:
        message: dict = {"role": "assistant", "content": None}
        finish = "stop"
        if "tool" in what:
            name, args = what["tool"]
            message["tool_calls"] = [{"id": _next_id("call_"), "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(args)}}]
            finish = "tool_calls"
        elif "slow" in what:
            message["content"] = " ".join(f"tick {i}" for i in range(1, what["slow"] + 1))
        else:
            message["content"] = what["text"]
        self._json(200, {
            "id": _next_id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()),
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })

    # --- streaming (server-sent events) --------------------------------------------------

    def _stream(self, body: dict, what: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        cid = _next_id("chatcmpl-")
        created = int(time.time())

        def chunk(delta: dict, finish=None) -> None:
            doc = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": MODEL,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
            self.wfile.flush()

        try:
            chunk({"role": "assistant", "content": ""})
            if "tool" in what:
                name, args = what["tool"]
                encoded = json.dumps(args)
                chunk({"tool_calls": [{"index": 0, "id": _next_id("call_"), "type": "function",
                                       "function": {"name": name, "arguments": ""}}]})
                step = max(1, len(encoded) // 3)
                for i in range(0, len(encoded), step):
                    chunk({"tool_calls": [{"index": 0, "function": {"arguments": encoded[i:i + step]}}]})
                chunk({}, "tool_calls")
            elif "slow" in what:
                for i in range(1, what["slow"] + 1):
                    chunk({"content": f"tick {i} "})
                    time.sleep(0.1)
                chunk({}, "stop")
            else:
                text = what["text"]
                step = max(1, len(text) // 3)
                for i in range(0, len(text), step):
                    chunk({"content": text[i:i + step]})
                chunk({}, "stop")
            if (body.get("stream_options") or {}).get("include_usage"):
                doc = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": MODEL,
                       "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                                "total_tokens": 15}}
                self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
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
