"""Drives an agora node's A2A front with the official A2A Python SDK's client (a2a-sdk).

Usage: python a2a_client.py BASE_URL

Resolves the agent card, then with a non-streaming client sends a text message, continues the
task, reads it with GetTask, cancels it and asks for it again (TaskNotFound); with a streaming
client sends one more message. Prints one JSON object with what it saw; the Rust test
(`a2a_interop_python_sdk_client`) checks it. Exits non-zero on any unexpected error.
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
)


def text_message(text, task_id=None):
    message = Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)]
    )
    if task_id:
        message.task_id = task_id
    return SendMessageRequest(message=message)


async def collect(client, request):
    events = []
    async for event in client.send_message(request):
        events.append(MessageToDict(event))
    return events


async def main(base_url):
    seen = {}
    async with httpx.AsyncClient(timeout=60) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        seen["card"] = MessageToDict(card)

        plain = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        events = await collect(plain, text_message("Will it rain in Oslo?"))
        seen["send"] = events
        task_id = events[-1]["task"]["id"]

        events = await collect(plain, text_message("And in Bergen?", task_id))
        seen["continue"] = events

        task = await plain.get_task(GetTaskRequest(id=task_id))
        seen["get"] = MessageToDict(task)

        task = await plain.cancel_task(CancelTaskRequest(id=task_id))
        seen["cancel"] = MessageToDict(task)

        try:
            await plain.get_task(GetTaskRequest(id=task_id))
            seen["get_after_cancel"] = "found"
        except Exception as error:  # the SDK's TaskNotFoundError
            seen["get_after_cancel"] = type(error).__name__

        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        seen["stream"] = await collect(streaming, text_message("Fog in London?"))
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
