"""An A2A agent built with the official A2A Python SDK (a2a-sdk), as in the SDK's helloworld
sample: it answers every message with a Message "Hello World" (and echoes what it was asked, so
a test can see its words arrived).

Usage: python a2a_helloworld.py PORT

Serves on 127.0.0.1:PORT: the card at /.well-known/agent-card.json, JSON-RPC at /. Prints
"ready" on stdout once it listens. For agora's A2A sender test (`a2a_interop_*`).
"""

import asyncio
import sys

import uvicorn
from starlette.applications import Starlette

from a2a.helpers.proto_helpers import get_message_text, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill


class HelloWorldExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        asked = get_message_text(context.message) if context.message else ""
        await event_queue.enqueue_event(
            new_text_message(f"Hello World (you said: {asked})")
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise RuntimeError("cancel not supported")


def main(port: int) -> None:
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="Hello World Agent",
        description="Just a hello world agent",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="hello_world",
                name="Returns hello world",
                description="just returns hello world",
                tags=["hello world"],
            )
        ],
    )
    handler = DefaultRequestHandler(
        agent_executor=HelloWorldExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(
        routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/")
    )
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.05)
        print("ready", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main(int(sys.argv[1]))
