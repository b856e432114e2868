"""What the web samples share: the demo tool and model, the command line and the demo page
(events go out as server-sent events through :func:`agentkit.sse_response.sse_response`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from _support import last_text, model_spec, real_model, rule_model, sample_parser

from agentkit import Model, tool
from agentkit.loop import StreamFn
from agentkit.testing import SCRIPTED_MODEL, Reply, reply, tool_call


@tool
def current_time() -> str:
    """The server's local date and time."""
    return datetime.now().strftime("%Y-%m-%d %H:%M")


def demo_answer(messages: list[Any]) -> Reply | str:
    """The offline demo model: look up the time after a question, then answer with it."""
    last = messages[-1]
    if last.role == "tool_result":
        return f"It is {last_text([last])} here. Anything else?"
    return reply("Let me look at the clock.", tool_call("current_time", {}))


def web_model(
    stream_fn: StreamFn | None,
    model: Model | None,
    answer: Callable[[list[Any]], Reply | str] = demo_answer,
    delay: float = 0.02,
) -> tuple[Model, StreamFn | None]:
    """The app's model: the one given; else the real model ``AGENTKIT_MODEL`` names; else the
    offline demo model answering with ``answer`` after ``delay`` seconds (it answers every
    request, for any number of runs)."""
    if stream_fn is None and model is None:
        spec = model_spec()
        if spec:
            model, stream_fn = real_model(spec)
        else:
            stream_fn = rule_model(answer, delay=delay)
    return model or SCRIPTED_MODEL, stream_fn


def web_command_line(
    argv: Sequence[str] | None, description: str | None, default_port: int
) -> tuple[int, Model | None, StreamFn | None]:
    """A web sample's command line, ``[--model PROVIDER:MODEL_ID] [--port N]``: the port, and
    the model and stream function to build the app with (both ``None`` without ``--model``)."""
    parser = sample_parser(description)
    parser.add_argument("--port", type=int, default=default_port)
    args = parser.parse_args(argv)
    if args.model:
        model, stream_fn = real_model(args.model)
        return args.port, model, stream_fn
    return args.port, None, None


def index_page(title: str, stop_script: str) -> str:
    """The demo page: ask a question and watch the run stream in. ``stop_script`` is the
    JavaScript behind the Stop button; it sees ``source`` (the EventSource) and ``runId``."""
    return _PAGE.replace("{title}", title) + stop_script + "</script>\n"


_PAGE = """<!doctype html>
<meta charset="utf-8"><title>{title}</title>
<form id="ask"><input id="prompt" size="60" value="What time is it?"> <button>Ask</button>
<button type="button" id="stop">Stop</button></form>
<pre id="out"></pre>
<script>
let source = null, runId = null;
const out = document.getElementById("out");
document.getElementById("ask").onsubmit = (e) => {
  e.preventDefault();
  if (source) source.close();
  out.textContent = "";
  const prompt = document.getElementById("prompt").value;
  source = new EventSource("/runs/stream?prompt=" + encodeURIComponent(prompt));
  source.addEventListener("run", (m) => { runId = JSON.parse(m.data).id; });
  source.addEventListener("message_update", (m) => { out.textContent += JSON.parse(m.data).delta; });
  source.addEventListener("tool_execution_start", (m) => {
    out.textContent += "\\n[" + JSON.parse(m.data).tool_name + "]\\n";
  });
  source.addEventListener("done", (m) => {
    out.textContent += "\\n(" + JSON.parse(m.data).stop_reason + ")"; source.close();
  });
};
"""
