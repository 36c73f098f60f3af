#!/usr/bin/env python3
"""The Python reference library's Receiver (agora-protocol 0.2.0) served for an agora sender.

Run with the interop venv's python ($AGORA_PYTHON_INTEROP):

    interop_receiver.py --port N --llm-url URL/v1 --storage DIR

Builds `Receiver.make_default(LangChainToolformer(ChatOpenAI(base_url=--llm-url, ...)))` with one
tool, `weather_forecast(location, date)` (a fixed forecast), and serves it with the library's
`ReceiverServer` (Flask) on 127.0.0.1:N until killed. The Receiver's LLM is whatever answers at
--llm-url (the tests use scripts/python/openai_stub.py).
"""

import argparse
import os


def weather_forecast(location: str, date: str) -> dict:
    """Get the weather forecast for a location on a date.

    Args:
        location: The place, city and country, e.g. "London, UK".
        date: The day of the forecast, formatted YYYY-MM-DD.

    Returns:
        dict: The forecast: temperature (degrees Celsius), precipitation (mm) and weatherCondition.
    """
    return {"temperature": 11.0, "precipitation": 12.0, "weatherCondition": "rainy"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--llm-url", required=True, help="OpenAI-compatible base URL (…/v1) for the Receiver's LLM")
    ap.add_argument("--storage", required=True, help="folder for the Receiver's JSON storage")
    args = ap.parse_args()

    from langchain_openai import ChatOpenAI

    from agora.common.toolformers.langchain import LangChainToolformer
    from agora.receiver.core import Receiver
    from agora.receiver.server import ReceiverServer

    model = ChatOpenAI(base_url=args.llm_url, api_key="x", model="stub", temperature=0, max_retries=0, timeout=30)
    os.makedirs(args.storage, exist_ok=True)
    receiver = Receiver.make_default(
        LangChainToolformer(model),
        tools=[weather_forecast],
        storage_path=os.path.join(args.storage, "receiver.json"),
    )
    ReceiverServer(receiver).run(host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
