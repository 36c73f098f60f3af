"""Drives an MCP server with the official Python SDK's client (PyPI `mcp`), for agora's tests.

Usage:
  mcp_client.py --stdio PROGRAM [ARG...] -- CALLS_JSON
  mcp_client.py --http URL [--token TOKEN] -- CALLS_JSON

CALLS_JSON is a JSON list of calls: {"list": true} lists the tools; {"tool": NAME, "arguments":
{...}} calls one ({"progress": true} asks for progress notifications with a progress token; {"meta": {...}} is
sent as the request's `_meta`).
One JSON line is printed per call:
  {"tools": [{"name", "description", "inputSchema"}...]}
  {"isError": bool, "structured": ..., "text": "...", "progress": [...]}   (a tool result; the
      progress notifications it got before the result, when asked for)
  {"rpcError": {"code": int, "message": str}}           (a JSON-RPC error)
Anything else (a transport failure) exits non-zero with the error on stderr.
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession, MCPError
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


async def run_calls(session: ClientSession, calls: list) -> None:
    await session.initialize()
    for call in calls:
        if call.get("list"):
            listed = await session.list_tools()
            print(json.dumps({"tools": [
                {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                for t in listed.tools
            ]}), flush=True)
            continue
        progress = []

        async def on_progress(value, total, message):
            progress.append({"progress": value, "message": message})

        try:
            result = await session.call_tool(
                call["tool"],
                call.get("arguments", {}),
                progress_callback=on_progress if call.get("progress") else None,
                meta=call.get("meta"),
            )
        except MCPError as error:
            print(json.dumps({"rpcError": {"code": error.code,
                                           "message": error.message}}), flush=True)
            continue
        text = " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")
        print(json.dumps({"isError": bool(result.is_error),
                          "structured": result.structured_content,
                          "text": text,
                          "progress": progress}), flush=True)


async def main(argv: list) -> None:
    if "--" not in argv:
        sys.exit(__doc__)
    split = argv.index("--")
    options, calls = argv[:split], json.loads(argv[split + 1])
    if options[0] == "--stdio":
        params = StdioServerParameters(command=options[1], args=options[2:])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await run_calls(session, calls)
    elif options[0] == "--http":
        url = options[1]
        headers = {}
        if len(options) > 3 and options[2] == "--token":
            headers["Authorization"] = f"Bearer {options[3]}"
        async with httpx2.AsyncClient(headers=headers, timeout=120) as client:
            async with streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    await run_calls(session, calls)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
