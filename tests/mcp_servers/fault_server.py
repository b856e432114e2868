"""A misbehaving MCP stdio server for agentkit's fault tests, written by hand (no SDK).

It speaks the handshake-era protocol (``initialize``, ``tools/list``, ``tools/call``) as
newline-delimited JSON-RPC on stdin/stdout, one request at a time on a thread each, and writes
its faults straight onto the wire, which the SDK's own server would not let a tool do:

    python fault_server.py [--start FAULT]

``--start garbage`` prints a non-JSON line before its first answer, ``--start bad-utf8`` a line
that is not UTF-8. Its tools: ``echo`` (text back), ``garbage`` and ``bad_utf8`` (the same faults
mid-session, then an answer), ``slow`` (an answer after ``seconds``), ``crash`` (the process
exits without answering), ``pid``, ``ask_badly`` (sends its client a request that is no valid
JSON-RPC, an id with a numeric method, and answers with the error code it got back, or "no
answer" after 20 s).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

WIRE = sys.stdout.buffer
write_lock = threading.Lock()  # one line at a time on stdout

TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
EMPTY: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS = [
    {"name": "echo", "description": "Echo the text.", "inputSchema": TEXT},
    {"name": "garbage", "description": "Print a non-JSON line, then answer.", "inputSchema": EMPTY},
    {"name": "bad_utf8", "description": "Print a non-UTF-8 line, then answer.", "inputSchema": EMPTY},
    {
        "name": "slow",
        "description": "Answer after some seconds.",
        "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
    },
    {"name": "crash", "description": "Exit without answering.", "inputSchema": EMPTY},
    {"name": "pid", "description": "The process id.", "inputSchema": EMPTY},
    {"name": "ask_badly", "description": "Send the client a bad request.", "inputSchema": EMPTY},
]
replies: dict[Any, dict[str, Any]] = {}  # the client's answers to our requests, by id
replied = threading.Condition()  # guards replies
FAULTS = {"garbage": b"a stray print, not JSON\n", "bad-utf8": b"\xff\xfe not utf-8 \xc3\x28\n"}


def send_raw(data: bytes) -> None:
    with write_lock:
        WIRE.write(data)
        WIRE.flush()


def send(message: dict[str, Any]) -> None:
    send_raw(json.dumps(message).encode() + b"\n")


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if name == "echo":
        return text_result(str(arguments.get("text", "")))
    if name == "garbage":
        send_raw(FAULTS["garbage"])
        return text_result("printed garbage")
    if name == "bad_utf8":
        send_raw(FAULTS["bad-utf8"])
        return text_result("printed bad utf-8")
    if name == "slow":
        time.sleep(float(arguments.get("seconds", 1)))
        return text_result("slept")
    if name == "crash":
        os._exit(1)
    if name == "pid":
        return text_result(str(os.getpid()))
    if name == "ask_badly":
        send({"jsonrpc": "2.0", "id": "server-1", "method": 5})
        with replied:
            replied.wait_for(lambda: "server-1" in replies, timeout=20)
            reply = replies.get("server-1")
        return text_result(str(reply["error"]["code"]) if reply else "no answer")
    return {"content": [{"type": "text", "text": f"no tool {name}"}], "isError": True}


def answer(request: dict[str, Any]) -> None:
    method, rid, params = request.get("method"), request.get("id"), request.get("params") or {}
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fault-server", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        result = call(params.get("name", ""), params.get("arguments") or {})
    elif method == "ping":
        result = {}
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}})
        return
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def main() -> None:
    start_fault = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--start" else None
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if "id" in request and "method" not in request:  # the client answers us
            with replied:
                replies[request["id"]] = request
                replied.notify_all()
            continue
        if "id" not in request or "method" not in request:
            continue  # notifications (initialized, cancelled) need no answer
        if start_fault is not None:
            send_raw(FAULTS[start_fault])
            start_fault = None
        threading.Thread(target=answer, args=(request,), daemon=True).start()


if __name__ == "__main__":
    main()
