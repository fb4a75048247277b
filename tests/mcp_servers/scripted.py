"""A small stdio MCP server for norma's tests, speaking raw JSON-RPC (no SDK: it starts in
milliseconds, and it can misbehave on purpose).

Its tools come from the JSON file named by ``$SCRIPTED_TOOLS`` (a list of tool definitions),
re-read at every ``tools/list``, so a test can change a definition between two listings.
``$SCRIPTED_PAGE`` (an integer) splits the listing into pages chained by ``nextCursor``.
``$SCRIPTED_MARK`` names a file that gets one line per start of the server.
Behaviour by tool name:

* ``env``            — the server's whole environment, as JSON text
* ``fail``           — an ``isError`` result
* ``protocol_error`` — a JSON-RPC error instead of a result
* ``sleep``          — sleeps ``seconds``, then answers
* ``crash``          — the process exits without answering
* ``mutate``         — replaces the tool file with ``tools`` and sends
                       ``notifications/tools/list_changed``
* anything else      — echoes its arguments as text
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

_out = threading.Lock()


def send(message: dict) -> None:
    with _out:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def tools() -> list[dict]:
    with open(os.environ["SCRIPTED_TOOLS"], encoding="utf-8") as f:
        return json.load(f)


def text(value: str, *, error: bool = False) -> dict:
    return {"content": [{"type": "text", "text": value}], "isError": error}


def call(name: str, args: dict) -> dict:
    if name == "env":
        return text(json.dumps(dict(os.environ), sort_keys=True))
    if name == "fail":
        return text("this tool always fails", error=True)
    if name == "crash":
        os._exit(3)
    if name == "sleep":
        time.sleep(float(args.get("seconds", 1)))
        return text("slept")
    if name == "mutate":
        with open(os.environ["SCRIPTED_TOOLS"], "w", encoding="utf-8") as f:
            json.dump(args["tools"], f)
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text("mutated")
    return text(json.dumps(args, sort_keys=True))


def answer(request: dict) -> dict | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "scripted", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        listing = tools()
        page = int(os.environ.get("SCRIPTED_PAGE") or 0) or len(listing) or 1
        start = int(params.get("cursor") or 0)
        result: dict = {"tools": listing[start : start + page]}
        if start + page < len(listing):
            result["nextCursor"] = str(start + page)
        return result
    if method == "tools/call":
        if params["name"] == "protocol_error":
            raise LookupError("protocol_error always answers with a JSON-RPC error")
        return call(params["name"], params.get("arguments") or {})
    raise KeyError(method)


def main() -> None:
    if os.environ.get("SCRIPTED_MARK"):
        with open(os.environ["SCRIPTED_MARK"], "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "id" in request:  # not a notification (initialized, cancelled)
            # each request on a thread of its own: a sleeping tool does not hold up the others
            threading.Thread(target=respond, args=(request,), daemon=True).start()


def respond(request: dict) -> None:
    try:
        send({"jsonrpc": "2.0", "id": request["id"], "result": answer(request)})
    except KeyError as exc:
        send(
            {
                "jsonrpc": "2.0",
                "id": request["id"],
                "error": {"code": -32601, "message": f"no method {exc}"},
            }
        )
    except LookupError as exc:
        send(
            {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32000, "message": str(exc)}}
        )


if __name__ == "__main__":
    main()
