#!/usr/bin/env python3
"""Self-check of openai_stub.py against LangChain/LangGraph (run with the interop venv's python):

    $AGORA_PYTHON_INTEROP scripts/python/check_stub.py

Starts the stub on a free port, then checks: plain ChatOpenAI.invoke, bind_tools + tool_calls,
a LangGraph ReAct agent round trip (tool call -> tool result -> final answer, via
when_last_role/once), streaming, the no-match fallback, GET /v1/models, the request log, and a
clean exit on SIGTERM. Prints "N passed, 0 failed" and exits 0 on success.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

HERE = os.path.dirname(os.path.abspath(__file__))

RULES = [
    # ReAct round trip: first the call, then (after the tool answered) the final text.
    {"match": "weather in Paris", "when_last_role": "tool", "reply": {"content": "It is sunny in Paris."}},
    {"match": "weather in Paris", "when_last_role": "user", "once": True,
     "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}},
    {"match": "call the adder", "reply": {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}},
    {"match": "hi", "reply": {"content": "hello from the stub"}},
]

results: list[tuple[str, bool, str]] = []


def check(name: str, cond: bool, detail: object = "") -> None:
    results.append((name, bool(cond), str(detail)))
    print(f"{'ok  ' if cond else 'FAIL'} {name}" + ("" if cond else f": {detail}"), flush=True)


@tool
def get_weather(city: str) -> str:
    """Return the weather for a city."""
    return f"sunny in {city}"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main() -> int:
    tmp = tempfile.mkdtemp(prefix="agora-stub-check-")
    script_path = os.path.join(tmp, "script.json")
    log_path = os.path.join(tmp, "requests.jsonl")
    with open(script_path, "w") as f:
        json.dump(RULES, f)
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "openai_stub.py"), "--port", "0",
         "--script", script_path, "--log", log_path],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        if not line.startswith("ready "):
            print(f"stub did not start: {line!r} {proc.stderr.read()}", file=sys.stderr)
            return 1
        port = int(line.split()[1])
        base = f"http://127.0.0.1:{port}/v1"
        llm = ChatOpenAI(base_url=base, api_key="x", model="stub", temperature=0, max_retries=0,
                         timeout=10)

        # 1. plain text
        r = llm.invoke("hi")
        check("invoke returns scripted content", r.content == "hello from the stub", r.content)
        check("usage metadata present", (r.usage_metadata or {}).get("total_tokens", 0) > 0,
              r.usage_metadata)

        # 2. tool calls understood by bind_tools
        r = llm.bind_tools([add]).invoke("please call the adder")
        tc = r.tool_calls
        check("bind_tools gets tool_calls",
              len(tc) == 1 and tc[0]["name"] == "add" and tc[0]["args"] == {"a": 2, "b": 3}, tc)
        check("tool call has an id", bool(tc and tc[0].get("id")), tc)
        check("finish_reason tool_calls",
              r.response_metadata.get("finish_reason") == "tool_calls", r.response_metadata)

        # 3. manual tool round trip: last message role "tool" selects the final-answer rule
        msgs = [HumanMessage("what is the weather in Paris?"),
                AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"},
                                                   "id": "call_1"}]),
                ToolMessage("sunny in Paris", tool_call_id="call_1")]
        r = llm.bind_tools([get_weather]).invoke(msgs)
        check("when_last_role=tool rule", r.content == "It is sunny in Paris." and not r.tool_calls,
              r)

        # 4. LangGraph ReAct agent (what agora's LangChainToolformer uses)
        agent = create_react_agent(llm, [get_weather])
        out = agent.invoke({"messages": [HumanMessage("What is the weather in Paris today?")]})
        roles = [m.type for m in out["messages"]]
        tool_msgs = [m for m in out["messages"] if m.type == "tool"]
        check("react agent: human, ai(tool call), tool, ai",
              roles == ["human", "ai", "tool", "ai"], roles)
        check("react agent ran the tool", bool(tool_msgs) and tool_msgs[0].content == "sunny in Paris",
              tool_msgs)
        check("react agent final answer", out["messages"][-1].content == "It is sunny in Paris.",
              out["messages"][-1])

        # 5. once: the tool-call rule for Paris is spent, so a new user turn falls through
        r = llm.invoke("weather in Paris again")
        check("once rule not reused", r.content == "STUB: no rule matched", r.content)

        # 6. streaming
        chunks = list(ChatOpenAI(base_url=base, api_key="x", model="stub", streaming=True,
                                 max_retries=0, timeout=10).stream("hi"))
        text = "".join(c.content for c in chunks if isinstance(c.content, str))
        check("streaming content", text == "hello from the stub", text)
        stream_tc = None
        for c in ChatOpenAI(base_url=base, api_key="x", model="stub", max_retries=0,
                            timeout=10).bind_tools([add]).stream("call the adder"):
            stream_tc = c if stream_tc is None else stream_tc + c
        check("streaming tool_calls",
              stream_tc is not None and stream_tc.tool_calls
              and stream_tc.tool_calls[0]["args"] == {"a": 2, "b": 3},
              getattr(stream_tc, "tool_calls", None))

        # 7. no match
        r = llm.invoke("zzz unscripted")
        check("no match fallback", r.content == "STUB: no rule matched", r.content)

        # 8. /v1/models
        with urllib.request.urlopen(f"{base}/models", timeout=5) as resp:
            models = json.load(resp)
        check("GET /v1/models", models.get("object") == "list" and models["data"][0]["id"] == "stub",
              models)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "killed"
        stderr = proc.stderr.read()
    check("clean exit on SIGTERM", rc == 0, rc)
    check("no-match requests logged to stderr", stderr.count("no rule matched request") == 2, stderr)
    with open(log_path) as f:
        entries = [json.loads(x) for x in f]
    shutil.rmtree(tmp, ignore_errors=True)
    # invoke, bind_tools, manual, agent x2, once, stream x2, no-match = 9
    check("request log has one JSON line per request", len(entries) == 9, len(entries))
    passed = sum(ok for _, ok, _ in results)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
