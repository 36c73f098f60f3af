#!/usr/bin/env python3
"""The Python reference library's Sender (agora-protocol 0.2.0) as a client of an agora node.

Run with the interop venv's python ($AGORA_PYTHON_INTEROP):

    interop_sender.py --target URL --llm-url URL/v1 --mode nl|protocol|negotiate [--pd FILE]
                      --storage DIR [--wire-log FILE]

Builds `Sender.make_default(LangChainToolformer(ChatOpenAI(base_url=--llm-url, ...)))` with one
task, `weather_forecast(location, date)`, calls it once for London, UK on 2024-09-27 against
--target and prints the task's result as one JSON line, `{"result": ...}`, exit 0; on an
exception `{"error": "..."}`, exit 1.

- nl: the Sender knows no protocol, so it talks natural language (a multiround conversation that
  it DELETEs at the end). The task returns a str: the answer in words.
- protocol: the protocol document --pd is registered beforehand in the Sender's memory (its own
  storage, under --storage) as adequate for the task, with no sources; the library's normal task
  path then sends `protocolHash` (base64 SHA-1) with `protocolSources: [data-URI]`. The task
  returns an object {temperature, precipitation, weatherCondition}.
- negotiate: the Sender knows no protocol and negotiates one at once (negotiation_threshold=0):
  the library's SenderNegotiator talks over the `negotiation` channel until its LLM writes
  <FINALPROTOCOL>, then the task runs under the agreed protocol as in `protocol` mode.

The Sender's LLM is whatever answers at --llm-url (the tests use scripts/python/openai_stub.py).
--wire-log appends one JSON line per HTTP exchange between the Sender and --target (method, url,
request JSON, response status and text). It only observes: `requests.post`/`requests.delete`, the
functions the library's transporter calls, are wrapped to record and then call the originals.
"""


import argparse
import json
import os
import sys
import traceback

LOCATION = "London, UK"
DATE = "2024-09-27"


def install_wire_log(path: str, target: str) -> None:
    """Records every exchange with `target` made through requests.post / requests.delete."""
    import requests

    def wrap(method: str, original):
        def recorded(url, *args, **kwargs):
            response = original(url, *args, **kwargs)
            if str(url).startswith(target):
                entry = {
                    "method": method,
                    "url": str(url),
                    "request": kwargs.get("json"),
                    "status": response.status_code,
                    "response": response.text,
                }
                with open(path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
            return response

        return recorded

    requests.post = wrap("POST", requests.post)
    requests.delete = wrap("DELETE", requests.delete)


# The tasks. The library reads a task's source (inspect.getsource) and its Google-style docstring
# to build the task schema, so they are plain module-level functions. The decorator is applied in
# main(), once the Sender exists.


def weather_forecast_text(location: str, date: str) -> str:
    """Get the weather forecast for a location on a date, in words.

    Args:
        location: The place, city and country, e.g. "London, UK".
        date: The day of the forecast, formatted YYYY-MM-DD.

    Returns:
        str: The forecast in words: the sky condition, the temperature and the precipitation.
    """


def weather_forecast(location: str, date: str) -> dict:
    """Get the weather forecast for a location on a date.

    Args:
        location: The place, city and country, e.g. "London, UK".
        date: The day of the forecast, formatted YYYY-MM-DD.

    Returns:
        dict: The forecast: temperature, precipitation and weatherCondition.
    """


FORECAST_OUTPUT_SCHEMA = {
    "type": "object",
    "description": "The forecast.",
    "properties": {
        "temperature": {"type": "number", "description": "Degrees Celsius."},
        "precipitation": {"type": "number", "description": "Millimetres."},
        "weatherCondition": {"type": "string", "description": "sunny, cloudy, rainy or snowy."},
    },
    "required": ["temperature", "precipitation", "weatherCondition"],
}


def register_protocol(sender, task_id: str, target: str, document: str) -> str:
    """Makes the Sender know `document` as an adequate protocol for `task_id`, without sources.

    Uses the library's own memory API, as its negotiation does after agreeing on a protocol
    (sender/core.py `_negotiate_protocol`), so the task path then picks the protocol from memory.
    """
    from agora.common.core import Suitability
    from agora.utils import compute_hash, extract_metadata

    protocol_hash = compute_hash(document)
    memory = sender.memory
    if not memory.is_known(protocol_hash):
        memory.register_new_protocol(protocol_hash, document, [], extract_metadata(document))
    memory.set_default_suitability(protocol_hash, task_id, Suitability.ADEQUATE)
    memory.set_suitability_override(protocol_hash, task_id, target, Suitability.ADEQUATE)
    return protocol_hash


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="the agora node's base URL")
    ap.add_argument("--llm-url", required=True, help="OpenAI-compatible base URL (…/v1) for the Sender's LLM")
    ap.add_argument("--mode", required=True, choices=["nl", "protocol", "negotiate"])
    ap.add_argument("--pd", help="protocol document file (protocol mode)")
    ap.add_argument("--storage", required=True, help="folder for the Sender's JSON storage")
    ap.add_argument("--wire-log", help="append one JSON line per HTTP exchange with --target")
    args = ap.parse_args(argv)

    try:
        if args.mode == "protocol" and not args.pd:
            raise ValueError("--mode protocol needs --pd")
        if args.wire_log:
            install_wire_log(args.wire_log, args.target)

        from langchain_openai import ChatOpenAI

        from agora.common.toolformers.langchain import LangChainToolformer
        from agora.sender.core import Sender

        model = ChatOpenAI(base_url=args.llm_url, api_key="x", model="stub", temperature=0, max_retries=0, timeout=30)
        toolformer = LangChainToolformer(model)
        os.makedirs(args.storage, exist_ok=True)
        negotiation_threshold = 0 if args.mode == "negotiate" else 10
        sender = Sender.make_default(
            toolformer,
            storage_path=os.path.join(args.storage, "sender.json"),
            negotiation_threshold=negotiation_threshold,
        )

        if args.mode == "nl":
            task = sender.task()(weather_forecast_text)
        elif args.mode == "negotiate":
            task = sender.task(output_schema=FORECAST_OUTPUT_SCHEMA)(weather_forecast)
        else:
            task = sender.task(output_schema=FORECAST_OUTPUT_SCHEMA)(weather_forecast)
            with open(args.pd, encoding="utf-8") as f:
                document = f.read()
            register_protocol(sender, "weather_forecast", args.target, document)

        result = task(location=LOCATION, date=DATE, target=args.target)
    except Exception as e:  # noqa: BLE001 - report any failure as one JSON line
        traceback.print_exc(file=sys.stderr)
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1

    print(json.dumps({"result": result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
