#!/usr/bin/env python3
"""Scripted OpenAI-compatible chat server for interop tests (Python stdlib only).

Usage: openai_stub.py --port N --script script.json [--log requests.jsonl]

script.json is a JSON list of rules, tried in order; the first that matches wins:
  {"match": "substring", "reply": {"content": "text"}}
  {"match": "substring", "reply": {"tool_calls": [{"name": "fn", "arguments": {...}}]}}
optional keys:
  "when_last_role": "tool" | "user" | "assistant" | "system"  -- role of the request's last message
  "once": true                                                 -- the rule is used at most once
"match" is searched in the concatenated contents of all request messages (text parts of
multi-part contents included, tool-call arguments too); "" or a missing "match" matches anything.
A reply may hold both "content" and "tool_calls". No rule matched -> content
"STUB: no rule matched", and the request is logged to stderr.

Endpoints: POST /v1/chat/completions (also /chat/completions), GET /v1/models (also /models),
GET /health. Streaming requests ("stream": true) get the same reply as server-sent events.
Binds 127.0.0.1 only; prints "ready <port>" on stdout once listening (port 0 = pick a free one);
exits cleanly on SIGTERM/SIGINT. --log appends one JSON line per request.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NO_MATCH = "STUB: no rule matched"


def content_text(content) -> str:
    """Text of an OpenAI message content: a string, or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                out.append(str(part.get("text", "")))
            else:
                out.append(str(part))
        return "\n".join(out)
    return json.dumps(content)


def messages_text(messages) -> str:
    parts = []
    for m in messages or []:
        if not isinstance(m, dict):
            continue
        parts.append(content_text(m.get("content")))
        for tc in m.get("tool_calls") or []:
            fn = (tc or {}).get("function") or {}
            parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return "\n".join(parts)


def approx_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


class Script:
    def __init__(self, rules: list):
        if not isinstance(rules, list):
            raise ValueError("script must be a JSON list of rules")
        for i, r in enumerate(rules):
            if not isinstance(r, dict) or not isinstance(r.get("reply"), dict):
                raise ValueError(f"rule {i}: needs an object 'reply'")
            reply = r["reply"]
            if "content" not in reply and "tool_calls" not in reply:
                raise ValueError(f"rule {i}: reply needs 'content' or 'tool_calls'")
        self.rules = rules
        self.used: set[int] = set()
        self.lock = threading.Lock()

    def pick(self, messages) -> tuple[int | None, dict | None]:
        text = messages_text(messages)
        last_role = messages[-1].get("role") if messages and isinstance(messages[-1], dict) else None
        with self.lock:
            for i, r in enumerate(self.rules):
                if r.get("once") and i in self.used:
                    continue
                if r.get("when_last_role") and r["when_last_role"] != last_role:
                    continue
                if str(r.get("match", "")) not in text:
                    continue
                if r.get("once"):
                    self.used.add(i)
                return i, r["reply"]
        return None, None


def build_completion(req: dict, reply: dict | None, prompt_text: str) -> dict:
    model = req.get("model") or "stub"
    message: dict = {"role": "assistant", "content": None}
    finish = "stop"
    completion_text = ""
    if reply is None:
        message["content"] = NO_MATCH
        completion_text = NO_MATCH
    else:
        if reply.get("content") is not None:
            message["content"] = str(reply["content"])
            completion_text += message["content"]
        if reply.get("tool_calls"):
            calls = []
            for tc in reply["tool_calls"]:
                args = tc.get("arguments", {})
                args_json = args if isinstance(args, str) else json.dumps(args)
                calls.append({
                    "id": tc.get("id") or "call_" + uuid.uuid4().hex[:24],
                    "type": "function",
                    "function": {"name": tc["name"], "arguments": args_json},
                })
                completion_text += tc["name"] + args_json
            message["tool_calls"] = calls
            finish = "tool_calls"
        if message["content"] is None and not message.get("tool_calls"):
            message["content"] = ""
    pt, ct = approx_tokens(prompt_text), approx_tokens(completion_text)
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:24],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_agora_stub",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
    }


def stream_chunks(completion: dict, include_usage: bool):
    """The completion as chat.completion.chunk objects (role+content chunk, tool calls, finish)."""
    base = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    msg = choice["message"]
    delta = {"role": "assistant", "content": msg.get("content") or ""}
    yield dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])
    for i, tc in enumerate(msg.get("tool_calls") or []):
        d = {"tool_calls": [dict(tc, index=i)]}
        yield dict(base, choices=[{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}])
    yield dict(base, choices=[{"index": 0, "delta": {}, "logprobs": None,
                               "finish_reason": choice["finish_reason"]}])
    if include_usage:
        yield dict(base, choices=[], usage=completion["usage"])


class Handler(BaseHTTPRequestHandler):
    server_version = "agora-openai-stub/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # silence default per-request stderr lines
        pass

    # -- helpers
    def _send_json(self, status: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    # -- endpoints
    def do_GET(self):
        path = self._path()
        if path in ("/v1/models", "/models"):
            self._send_json(200, {"object": "list", "data": [
                {"id": "stub", "object": "model", "created": 0, "owned_by": "agora-stub"}]})
        elif path in ("/health", "/v1/health"):
            self._send_json(200, {"status": "ok"})
        else:
            self._send_json(404, {"error": {"message": f"no route GET {path}", "type": "not_found"}})

    def do_POST(self):
        path = self._path()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route POST {path}", "type": "not_found"}})
            return
        try:
            req = json.loads(raw or b"{}")
            messages = req.get("messages") or []
            if not isinstance(messages, list):
                raise ValueError("messages must be a list")
        except (ValueError, AttributeError) as e:
            self._send_json(400, {"error": {"message": f"bad request: {e}",
                                            "type": "invalid_request_error"}})
            return
        stub: Stub = self.server.stub  # type: ignore[attr-defined]
        rule, reply = stub.script.pick(messages)
        completion = build_completion(req, reply, messages_text(messages))
        stub.record(req, rule, completion)
        if req.get("stream"):
            include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in stream_chunks(completion, include_usage):
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True
        else:
            self._send_json(200, completion)


class Stub:
    def __init__(self, script: Script, log_path: str | None):
        self.script = script
        self.log_file = open(log_path, "a", encoding="utf-8") if log_path else None
        self.lock = threading.Lock()
        self.n = 0

    def record(self, req: dict, rule: int | None, completion: dict) -> None:
        with self.lock:
            self.n += 1
            entry = {
                "n": self.n,
                "time": time.time(),
                "rule": rule,
                "last_role": (req.get("messages") or [{}])[-1].get("role")
                if req.get("messages") else None,
                "request": req,
                "response": completion["choices"][0]["message"],
            }
            line = json.dumps(entry)
            if self.log_file:
                self.log_file.write(line + "\n")
                self.log_file.flush()
            if rule is None:
                print(f"openai_stub: no rule matched request #{self.n}: {line}",
                      file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.log_file:
            self.log_file.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True, help="port on 127.0.0.1 (0 = any free)")
    ap.add_argument("--script", required=True, help="JSON file with the list of rules")
    ap.add_argument("--log", help="append one JSON line per request to this file")
    args = ap.parse_args(argv)

    with open(args.script, encoding="utf-8") as f:
        script = Script(json.load(f))
    stub = Stub(script, args.log)
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    httpd.daemon_threads = True
    httpd.stub = stub  # type: ignore[attr-defined]

    def stop(signum, frame):
        # shutdown() blocks until serve_forever returns, so call it off the main thread.
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"ready {httpd.server_address[1]}", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        httpd.server_close()
        stub.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
