"""Tool search: a large tool set shown to the model as a short catalog and a search tool.

An agent with an MCP server or two easily has 50-200 tools; their declarations can take more of
a small model's window than the conversation does, and a model choosing among 200 tools chooses
worse. :class:`ToolSearch` is a run policy: above a number of tools (or a share of the model's
window taken by their declarations), the model is told the tools' names with one line each (a
``tool_catalog`` section of the system prompt), and is given one tool, ``search_tools``, that
loads the full declarations of the tools it asks for. Every tool stays executable; only what
the model is *told* changes.

- **Where it is kept.** The catalog is a system message with a ``tool_catalog`` section; each
  load is a system message whose ``tools_added`` holds the loaded declarations, the spec's own
  tool-change message, so a session (and the web page) shows what the model was given and a
  later run of the same conversation starts with what was loaded before.
- **Local ranking** (any model): each request declares the tools the model was told about,
  less the deferred ones not loaded yet. The search ranks the catalog with BM25 over names,
  descriptions and parameter names (:class:`Bm25Index`; why not ``rank-bm25`` or ``bm25s`` is
  in ``docs/tool-search.md``).
- **Native deferral** (Anthropic Messages): every tool is declared, the deferred ones with
  ``defer_loading``, so the declared tools stay one cacheable prefix; a search's result reaches
  the API as ``tool_reference`` blocks, which the API expands into the declarations (the
  provider's :func:`~agentkit.providers.anthropic.defer_tools` writes that).
- **Native search** (OpenAI Responses): every tool is declared, the deferred ones with
  ``defer_loading`` (the model sees their names and descriptions, so the catalog section is
  left out of these requests), and the search tool as the API's client-executed
  ``tool_search``: the model's search arrives as a ``tool_search_call`` (a call of the search
  tool in the transcript), the search still runs here, and its result goes back as a
  ``tool_search_output`` holding the loaded declarations
  (:func:`~agentkit.providers.openai_responses.search_natively` writes that).
- **A deferred tool called before it was loaded** is refused (the model never saw its
  parameters) and loaded: the model reads why, and has the declaration on its next request.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from ..abort import AbortSignal
from ..policy import (
    BatchHandler,
    BatchOutcome,
    ModelRequest,
    RequestHandler,
    RunPolicy,
    RunScope,
    ToolBatchRun,
)
from ..providers.anthropic import API as ANTHROPIC_API
from ..providers.anthropic import TOOL_SEARCH_BETA, defer_tools, with_beta
from ..providers.openai_responses import API as RESPONSES_API
from ..providers.openai_responses import search_natively, supports_tool_search
from ..transcript import (
    as_system_message,
    get_current_system_message,
    get_current_tools,
    render_system_prompt,
    system_messages,
)
from ..types import (
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    Context,
    OpenAIOptions,
    SystemMessage,
    TextContent,
    Tool,
    ToolResultMessage,
    on_payload_before,
    role_of,
    to_tool_declaration,
)

logger = logging.getLogger("agentkit.context")

SEARCH_TOOL = "search_tools"
"""The search tool's default name."""
CATALOG_SECTION = "tool_catalog"
"""The system prompt section that holds the catalog."""
DEFAULT_MAX_TOOLS = 20
"""Tool search starts above this many tools (the model's choice degrades past a few dozen)."""
DEFAULT_MAX_SHARE = 0.25
"""... or when the declarations take more than this share of the model's window."""
DEFAULT_LIMIT = 5
"""How many tools one search loads at most."""
LINE_CHARS = 100
"""A catalog line's description is cut to this many characters."""
MIN_LINE_CHARS = 20
"""A description cut shorter than this is left out (the catalog lists the name alone)."""
DEFAULT_CATALOG_SHARE = 0.25
"""The share of the model's window the catalog may take before its descriptions are cut."""
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
"""A name the catalog can list: one that cannot be read as anything but a name."""
CHARS_PER_TOKEN = 4
"""The estimate of a declaration's tokens: its JSON's length over this."""

CATALOG_TEXT = (
    "More tools are available than are declared to you. Their names, with what each does, are "
    "listed below. To use one, first call `{search}` with its name or with words for what you "
    "need: it loads the full declarations of the matching tools, and you can call them from "
    "your next reply.\n{lines}"
)


# --- ranking ------------------------------------------------------------------------------------


def tokens(text: str) -> list[str]:
    """Lower-case word pieces of ``text``: ``getWeatherNow`` and ``get_weather_now`` both give
    ``get weather now``."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return [word for word in re.split(r"[^a-z0-9]+", spaced.lower()) if word]


class Bm25Index:
    """BM25 over a few hundred short documents (one per tool), in plain Python.

    The weight of a word is Lucene's ``log(1 + (N - n + 0.5) / (n + 0.5))``, which is never
    negative: Okapi's original (``rank_bm25.BM25Okapi``) gives a word found in more than half
    of the documents a weight of zero or below, so in a catalog of one or two tools a search
    for the tool's own name can match nothing. ``k1`` and ``b`` are the usual 1.5 and 0.75."""

    def __init__(self, documents: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.counts = [Counter(doc) for doc in documents]
        self.lengths = [len(doc) for doc in documents]
        self.average = (sum(self.lengths) / len(documents)) if documents else 0.0
        frequency: Counter[str] = Counter()
        for counts in self.counts:
            frequency.update(counts.keys())
        total = len(documents)
        self.idf = {
            word: math.log(1 + (total - found + 0.5) / (found + 0.5))
            for word, found in frequency.items()
        }

    def scores(self, query: Sequence[str]) -> list[float]:
        """Each document's score for ``query`` (0 for a document that has none of its words)."""
        k1, b, average = self.k1, self.b, self.average or 1.0
        result = []
        for counts, length in zip(self.counts, self.lengths, strict=True):
            score = 0.0
            for word in query:
                found = counts.get(word)
                if found:
                    norm = found + k1 * (1 - b + b * length / average)
                    score += self.idf[word] * found * (k1 + 1) / norm
            result.append(score)
        return result


def tool_document(tool: Tool) -> list[str]:
    """What a search matches a tool by: its name (twice: a name says most), its description,
    and its parameters' names and descriptions."""
    words = tokens(tool.name) * 2 + tokens(tool.description)
    properties = tool.parameters.get("properties") if isinstance(tool.parameters, dict) else None
    if isinstance(properties, dict):
        for name, spec in properties.items():
            words += tokens(str(name))
            if isinstance(spec, dict) and isinstance(spec.get("description"), str):
                words += tokens(spec["description"])
    return words


class Catalog:
    """The deferred tools of a run: their catalog text and a search over them."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        listed: dict[str, Tool] = {}
        self.left_out: set[str] = set()  # deferred, not listed: never declared, never loaded
        for tool in tools:
            if not TOOL_NAME.match(tool.name):
                self.left_out.add(tool.name)
                logger.warning("tool search: tool %r left out of the catalog (not a plain name)",
                               tool.name[:80])  # fmt: skip
                continue
            listed.setdefault(tool.name, tool)
        self.tools = listed
        self.index = Bm25Index([tool_document(t) for t in listed.values()])

    def text(self, search_tool: str, budget: int | None = None) -> str:
        """The catalog section: the instructions, then one line per tool, its description cut
        so that the section keeps within ``budget`` characters where it can (names only, at
        worst: a name is never cut)."""
        width = LINE_CHARS
        if budget is not None and self.tools:
            names = sum(len(name) + 5 for name in self.tools) + len(CATALOG_TEXT)
            width = min(LINE_CHARS, (budget - names) // len(self.tools))
        if width < MIN_LINE_CHARS:
            lines = "\n".join(f"- {name}" for name in self.tools)
        else:
            lines = "\n".join(
                f"- {name}: {one_line(t.description, width)}" for name, t in self.tools.items()
            )
        return CATALOG_TEXT.format(search=search_tool, lines=lines)

    def search(self, query: str, limit: int) -> list[str]:
        """The names of up to ``limit`` tools for ``query``: names given exactly first (a model
        that read the catalog often asks by name), then the best BM25 matches."""
        named = [word for word in re.split(r"[\s,]+", query.strip()) if word in self.tools]
        found = list(dict.fromkeys(named))[:limit]
        if len(found) < limit:
            scores = self.index.scores(tokens(query))
            ranked = sorted(
                ((score, i) for i, score in enumerate(scores) if score > 0), key=lambda p: -p[0]
            )
            names = list(self.tools)
            for _, index in ranked:
                if len(found) >= limit:
                    break
                if names[index] not in found:
                    found.append(names[index])
        return found


def one_line(text: str, width: int = LINE_CHARS) -> str:
    """``text`` as one catalog line: whitespace (newlines included) folded to single spaces and
    cut to ``width`` characters, so no description can start a line of its own."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1].rstrip() + "…"


# --- what the transcript says ------------------------------------------------------------------


def _catalog_start(messages: Sequence[Any]) -> int | None:
    """The index of the first system message that set the catalog section, or ``None``."""
    for index, message in enumerate(messages):
        if role_of(message) == "system":
            sections = _field(message, "sections")
            if isinstance(sections, dict) and sections.get(CATALOG_SECTION):
                return index
    return None


def _field(message: Any, name: str) -> Any:
    return message.get(name) if isinstance(message, dict) else getattr(message, name, None)


def loaded_names(messages: Sequence[Any]) -> list[str]:
    """The tools declared to the model since the catalog was first given, in the order they
    were first declared: those loaded by a search, a refused call or a tool-set change
    (``tools_removed``, then ``tools_added``, message by message, as the spec replays them)."""
    start = _catalog_start(messages)
    if start is None:
        return []
    loaded: dict[str, None] = {}
    for message in system_messages(messages[start + 1 :]):
        _declare(loaded, message)
    return list(loaded)


def _declare(declared: dict[str, None], message: SystemMessage) -> None:
    """Change ``declared`` as the tool-change ``message`` does: its removals, then its
    additions."""
    for ref in message.tools_removed or []:
        declared.pop(ref.name, None)
    declared.update(dict.fromkeys(decl.name for decl in message.tools_added or []))


def undeclared_loads(messages: Sequence[Any], catalog: Catalog, search_tool: str) -> list[str]:
    """The tools the transcript says were loaded (by a search's result, or by a call of a
    catalog tool made before it was loaded, which was refused) and no tool-change message
    declared yet: what the next request must be given. Read from the transcript alone, so a
    run that ended right after such a batch (a budget, an abort, a kill) leaves them to the next
    run of the conversation."""
    start = _catalog_start(messages)
    if start is None:
        return []
    declared: dict[str, None] = {}
    wanted: dict[str, None] = {}
    for message in messages[start + 1 :]:
        if isinstance(message, ToolResultMessage):
            if message.tool_name == search_tool:
                wanted.update(dict.fromkeys(_searched(message)))
            elif message.is_error and message.tool_name not in declared:
                wanted[message.tool_name] = None  # called before it was loaded: refused
        elif role_of(message) == "system":
            _declare(declared, as_system_message(message))
    return [name for name in wanted if name in catalog.tools and name not in declared]


def search_loads(messages: Sequence[Any], search_tool: str) -> dict[str, list[str]]:
    """The tools each successful search loaded, by its tool call's id."""
    loads: dict[str, list[str]] = {}
    for message in messages:
        if isinstance(message, ToolResultMessage) and message.tool_name == search_tool:
            names = _searched(message)
            if names:
                loads[message.tool_call_id] = names
    return loads


def _searched(result: ToolResultMessage) -> list[str]:
    """The tools a search's result says it loaded (none for a failed search)."""
    names = result.details.get("loaded") if isinstance(result.details, dict) else None
    return [str(n) for n in names] if not result.is_error and isinstance(names, list) else []


# --- the policy -------------------------------------------------------------------------------


class ToolSearch(RunPolicy):
    """Show a large tool set as a catalog and a search tool (see the module).

    ``max_tools``: defer when the run has more tools than this; ``max_share``: or when their
    declarations would take more than this share of the model's window (``None``: count
    only). ``keep``: names always declared in full. ``limit``: tools one search loads at most.
    ``native``: use the API's own deferred loading where agentkit knows one (Anthropic
    Messages; OpenAI Responses on a model that takes ``tool_search``); ``False`` ranks and
    declares locally on every API. ``search_tool``: the search tool's name.
    ``catalog_share``: the share of the window the catalog may take before its descriptions
    are cut (to names alone, at worst). ``preload``: load this many tools at the
    start of each run, the best matches of the user's latest message (a small model given the
    right tool at once need not search; 0: none). ``first_call``: when the preload loaded
    something, the run's first request must call a tool (``tool_choice="required"``): a small
    model asked a task its catalog answers otherwise writes the call as prose now and then."""

    name = "tool_search"

    def __init__(
        self,
        *,
        max_tools: int = DEFAULT_MAX_TOOLS,
        max_share: float | None = DEFAULT_MAX_SHARE,
        keep: Sequence[str] = (),
        limit: int = DEFAULT_LIMIT,
        native: bool = True,
        search_tool: str = SEARCH_TOOL,
        catalog_share: float = DEFAULT_CATALOG_SHARE,
        preload: int = 0,
        first_call: bool = False,
    ) -> None:
        if max_tools < 0:
            raise ValueError(f"max_tools must be 0 or more, got {max_tools}")
        if max_share is not None and not 0 < max_share <= 1:
            raise ValueError(f"max_share must be above 0 and at most 1, got {max_share}")
        if not 0 < catalog_share <= 1:
            raise ValueError(f"catalog_share must be above 0 and at most 1, got {catalog_share}")
        if preload < 0:
            raise ValueError(f"preload must be 0 or more, got {preload}")
        if limit < 1:
            raise ValueError(f"limit must be 1 or more, got {limit}")
        if not TOOL_NAME.match(search_tool):
            raise ValueError(f"search_tool must be a plain tool name, got {search_tool!r}")
        self.max_tools, self.max_share, self.keep = max_tools, max_share, frozenset(keep)
        self.limit, self.native, self.search_tool = limit, native, search_tool
        self.catalog_share, self.preload, self.first_call = catalog_share, preload, first_call
        self.preloaded = False  # this run's preload loaded something: its first request calls
        self.catalog: Catalog | None = None  # set for a run that defers

    def for_run(self, run: RunScope) -> ToolSearch:
        mine = copy.copy(self)  # per run: the catalog and the preload, fresh
        mine.catalog, mine.preloaded = None, False
        return mine

    # --- start: decide, give the catalog and the search tool ---

    def start(self, run: RunScope) -> None:
        tools = run.context.tools
        if not self._defers(tools, run):
            self._drop_catalog(run)
            return
        if any(t.name == self.search_tool for t in tools):
            raise ValueError(
                f"tool search: the agent has a tool named {self.search_tool!r} of its own; give "
                f"the search tool another name (ToolSearch(search_tool=...))"
            )
        deferred = [to_tool_declaration(t) for t in tools if t.name not in self.keep]
        self.catalog = Catalog(deferred)
        window = run.model.context_window
        budget = int(self.catalog_share * window * CHARS_PER_TOKEN) if window > 0 else None
        text = self.catalog.text(self.search_tool, budget)
        current = get_current_system_message(run.context.messages)
        if current is None or (current.sections or {}).get(CATALOG_SECTION) != text:
            run.append([SystemMessage(sections={CATALOG_SECTION: text})])
        self._declare_loads(run)  # loaded by the conversation's last run, not yet declared
        self._preload(run, self.catalog)
        # the loop declares the change before the first request, as any change of tools
        run.context.tools = [*run.context.tools, self._search_agent_tool(self.catalog)]

    def _preload(self, run: RunScope, catalog: Catalog) -> None:
        """Load the best matches of the latest user message (``preload`` of them)."""
        prompt = next((m for m in reversed(run.context.messages) if role_of(m) == "user"), None)
        if not self.preload or prompt is None:
            return
        content = _field(prompt, "content")
        text = content if isinstance(content, str) else " ".join(
            str(_field(block, "text") or "") for block in content or []
        )
        loaded = loaded_names(run.context.messages)
        names = [n for n in catalog.search(text, self.preload) if n not in loaded]
        if names:
            run.append([SystemMessage(tools_added=[catalog.tools[n] for n in names])])
            self.preloaded = self.first_call

    def _defers(self, tools: Sequence[AgentTool], run: RunScope) -> bool:
        """Whether this run's tools are too many (or too large) to declare in full."""
        if len(tools) > self.max_tools:
            return True
        window = run.model.context_window
        if self.max_share is None or not tools or window <= 0:
            return False
        size = sum(len(json.dumps(to_tool_declaration(t).model_dump(mode="json"))) for t in tools)
        return size / CHARS_PER_TOKEN > self.max_share * window

    def _drop_catalog(self, run: RunScope) -> None:
        """A conversation that deferred before and no longer does: the catalog section goes."""
        current = get_current_system_message(run.context.messages)
        if current is not None and (current.sections or {}).get(CATALOG_SECTION):
            run.append([SystemMessage(sections={CATALOG_SECTION: None})])

    def _search_agent_tool(self, catalog: Catalog) -> AgentTool:
        description = (
            f"Load the full declarations of tools from the tool catalog (up to {self.limit}), "
            "by their names or by words for what you need; call the loaded tools afterwards."
        )
        parameters = {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Tool names from the catalog, or words for what you need.",
                }
            },
            "required": ["query"],
        }
        return AgentTool(
            name=self.search_tool,
            description=description,
            parameters=parameters,
            execute=partial(_run_search, catalog, self.limit),
            idempotent=True,
        )

    # --- the request: what the model is told ---

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        catalog = self.catalog
        if catalog is None or request.purpose != "turn":
            return call_next(request)
        if self.preloaded and request.options.tool_choice is None:
            self.preloaded = False  # the first request only
            options = request.options.model_copy(update={"tool_choice": "required"})
            request = dataclasses.replace(request, options=options)
        request = self._load_forced(run, request, catalog)
        loaded, model = loaded_names(request.context.messages), request.model
        if self.native and model.api == ANTHROPIC_API:
            return call_next(self._deferred_natively(request, catalog, loaded))
        if self.native and model.api == RESPONSES_API and supports_tool_search(model):
            return call_next(self._searched_natively(request, catalog, loaded))
        return call_next(_declared_locally(request, catalog, loaded))

    def _load_forced(self, run: RunScope, request: ModelRequest, catalog: Catalog) -> ModelRequest:
        """``request`` whose ``tool_choice`` names a deferred tool not loaded yet (another
        policy's, a harness sending back a call the model described): the tool is loaded
        first, as a search loads it, so the request declares the tool it must call."""
        choice = request.options.tool_choice
        name = choice.get("name") if isinstance(choice, dict) and len(choice) == 1 else None
        messages = request.context.messages
        if name not in catalog.tools or name in loaded_names(messages):
            return request
        load = SystemMessage(tools_added=[catalog.tools[name]])
        run.append([load])  # the transcript says so, for this request and the next ones
        context = request.context.model_copy(update={"messages": [*messages, load]})
        return dataclasses.replace(request, context=context)

    def _native_loads(
        self, request: ModelRequest, catalog: Catalog, loaded: list[str]
    ) -> tuple[set[str], dict[str, list[str]]]:
        """The tools to declare deferred, and what each search loaded (by its call's id), for
        an API that loads the declarations itself: every tool is declared (one cacheable
        prefix), those loaded another way (a refused call, a preload) in full."""
        loads = search_loads(request.context.messages, self.search_tool)
        searched = {name for names in loads.values() for name in names}
        deferred = (set(catalog.tools) | catalog.left_out) - (set(loaded) - searched)
        return deferred, loads

    def _deferred_natively(
        self, request: ModelRequest, catalog: Catalog, loaded: list[str]
    ) -> ModelRequest:
        """``request`` with every tool declared, the deferred ones for the API to load when a
        search's result references them (Anthropic's ``defer_loading``)."""
        deferred, references = self._native_loads(request, catalog, loaded)
        step = partial(defer_tools, deferred=deferred, references=references)
        options = request.options.model_copy(update={
            "on_payload": on_payload_before(request.options, step),
            "headers": with_beta(request.options.headers, TOOL_SEARCH_BETA),
        })  # fmt: skip
        return dataclasses.replace(request, options=options)

    def _searched_natively(
        self, request: ModelRequest, catalog: Catalog, loaded: list[str]
    ) -> ModelRequest:
        """``request`` with every tool declared, the deferred ones by name and description,
        and the search as the API's client-executed ``tool_search`` (OpenAI Responses): the
        model's searches arrive as ``tool_search_call`` items, their results go back as the
        loaded declarations. The declarations show the catalog's names and descriptions, so
        its system-prompt section is left out of this request (the transcript keeps it)."""
        deferred, loads = self._native_loads(request, catalog, loaded)
        step = partial(search_natively, search_tool=self.search_tool, deferred=deferred,
                       hidden=catalog.left_out, loads=loads)  # fmt: skip
        own = request.options.openai or OpenAIOptions()
        options = request.options.model_copy(update={
            "on_payload": on_payload_before(request.options, step),
            "openai": own.model_copy(update={"tool_search": self.search_tool}),
        })  # fmt: skip
        context = _without_catalog(request.context)
        return dataclasses.replace(request, options=options, context=context)

    # --- the batch: deferred tools called too early; what a search loaded ---

    def wrap_batch(
        self, run: RunScope, batch: ToolBatchRun, call_next: BatchHandler
    ) -> BatchOutcome:
        catalog = self.catalog
        if catalog is None:
            return call_next(batch)
        loaded = set(loaded_names(run.context.messages))
        early = [c for c in batch.calls if c.name in catalog.tools and c.name not in loaded]
        if not early:
            return call_next(batch)
        refused = {
            call.id: run.refuse_call(
                call,
                f"Tool {call.name} was not loaded, so its parameters were not known to you. "
                f"It is loaded now: read its declaration and call it again.",
            )
            for call in early
        }
        calls = batch.calls
        batch.calls = [c for c in calls if c.id not in refused]
        outcome = call_next(batch) if batch.calls else BatchOutcome([])
        ran = {m.tool_call_id: m for m in outcome.messages}
        ordered = [refused.get(c.id) or ran.get(c.id) for c in calls]
        return BatchOutcome([m for m in ordered if m is not None], outcome.terminate)

    def before_turn(self, run: RunScope, pending: list[Any]) -> None:
        """Declare what the last batch loaded: a tool-change message, as the spec has them."""
        self._declare_loads(run)

    def _declare_loads(self, run: RunScope) -> None:
        """Append the tool-change message of the loads the transcript has not declared yet."""
        catalog = self.catalog
        if catalog is None:
            return
        names = undeclared_loads(run.context.messages, catalog, self.search_tool)
        if names:
            run.append([SystemMessage(tools_added=[catalog.tools[name] for name in names])])


def _without_catalog(context: Context) -> Context:
    """``context`` whose system prompt leaves the catalog section out (a prompt set on the
    context itself is the caller's: kept as it is)."""
    current = get_current_system_message(context.messages)
    if context.system_prompt is not None or current is None:
        return context
    sections = dict(current.sections or {})
    if not sections.pop(CATALOG_SECTION, None):
        return context
    prompt = render_system_prompt(current.model_copy(update={"sections": sections or None}))
    return context.model_copy(update={"system_prompt": prompt})


def _declared_locally(request: ModelRequest, catalog: Catalog, loaded: list[str]) -> ModelRequest:
    """``request`` declaring the tools outside the catalog, then the loaded ones in the order
    they were loaded (a load adds to the end of the declarations, which keeps the cached prefix
    before it)."""
    declared = {t.name: t for t in get_current_tools(request.context.messages)}
    hidden = catalog.tools.keys() | catalog.left_out
    tools = [t for name, t in declared.items() if name not in hidden]
    tools += [declared[n] for n in loaded if n in catalog.tools and n in declared]
    context = request.context.model_copy(update={"tools": tools})
    return dataclasses.replace(request, context=context)


def _run_search(
    catalog: Catalog, limit: int, tool_call_id: str, params: dict[str, Any],
    signal: AbortSignal, on_update: Callable[[Any], None],
) -> AgentToolResult:  # fmt: skip
    """The search tool's execution: rank the catalog, say what was loaded."""
    query = str(params.get("query") or "")
    names = catalog.search(query, limit)
    if not names:
        return AgentToolResult(
            content=[TextContent(text=(
                f"No tool in the catalog matches {query!r}. Search again with other words, or "
                "with a name from the catalog."
            ))],
            details={"query": query, "loaded": []},
        )  # fmt: skip
    lines = "\n".join(f"- {name}: {one_line(catalog.tools[name].description)}" for name in names)
    text = (
        f"Loaded {len(names)} tool(s); their full declarations are yours from your next reply:"
        f"\n{lines}"
    )
    return AgentToolResult(
        content=[TextContent(text=text)], details={"query": query, "loaded": names}
    )
