"""A real MCP server (stdio) with a large generated tool catalog, for tool search's tests and
benchmark: ``python catalog_server.py [COUNT]`` (default 200).

The tools are named ``<area>_<verb>_<thing>`` over twenty business areas, with a one-sentence
description and one or two parameters each, as an MCP server of a company's systems would offer.
One of them, ``inventory_get_stock_level`` (always present), answers with a fact a task can ask
about: SKU-4411 has 37 units in warehouse B. Every other tool answers that it did its work.
"""

from __future__ import annotations

import sys
from typing import Any

AREAS = [
    ("crm", "customer", "customer records"), ("billing", "invoice", "invoices and payments"),
    ("calendar", "event", "calendar events"), ("files", "document", "shared documents"),
    ("mail", "message", "e-mail messages"), ("weather", "forecast", "weather forecasts"),
    ("tickets", "ticket", "support tickets"), ("git", "commit", "source repositories"),
    ("sql", "table", "database tables"), ("dns", "record", "DNS zones"),
    ("hr", "employee", "employee records"), ("payroll", "payslip", "payroll runs"),
    ("shipping", "parcel", "parcel shipments"), ("inventory", "item", "warehouse items"),
    ("marketing", "campaign", "marketing campaigns"), ("analytics", "report", "usage reports"),
    ("security", "alert", "security alerts"), ("travel", "booking", "travel bookings"),
    ("chat", "channel", "team chat channels"), ("wiki", "page", "wiki pages"),
]  # fmt: skip
VERBS = [
    ("get", "Get one {thing} of the {what} by its id."),
    ("list", "List the {thing}s of the {what}, newest first."),
    ("create", "Create a new {thing} in the {what}."),
    ("update", "Update fields of an existing {thing} in the {what}."),
    ("delete", "Delete a {thing} from the {what}."),
    ("search", "Search the {what} for {thing}s matching a text query."),
    ("export", "Export {thing}s of the {what} as a CSV file."),
    ("archive", "Archive an old {thing} of the {what}."),
    ("count", "Count the {thing}s of the {what} that match a filter."),
    ("sync", "Synchronise the {what} with its upstream source."),
]
TARGET = "inventory_get_stock_level"
TARGET_ANSWER = "SKU-4411: 37 units in stock, in warehouse B (Rotterdam)."


def catalog(count: int) -> list[dict[str, Any]]:
    """``count`` tool specs (name, description, JSON Schema), the target tool among them."""
    specs = [{
        "name": TARGET,
        "description": "Get the stock level (units on hand) of an item of the warehouse by SKU.",
        "parameters": {
            "type": "object",
            "properties": {"sku": {"type": "string", "description": "The item's SKU."}},
            "required": ["sku"],
        },
    }]  # fmt: skip
    i = 0
    while len(specs) < count:
        area, thing, what = AREAS[i % len(AREAS)]
        verb, text = VERBS[(i // len(AREAS)) % len(VERBS)]
        round_ = i // (len(AREAS) * len(VERBS))
        name = f"{area}_{verb}_{thing}" + (f"_{round_ + 1}" if round_ else "")
        key = "id" if verb in ("get", "update", "delete", "archive") else "query"
        specs.append({
            "name": name,
            "description": text.format(thing=thing, what=what),
            "parameters": {
                "type": "object",
                "properties": {key: {"type": "string", "description": f"The {thing} {key}."}},
                "required": [key],
            },
        })  # fmt: skip
        i += 1
    return specs[:count]


def tools(count: int) -> list[Any]:
    """The catalog as agentkit tools (what the server offers)."""
    from agentkit.types import AgentTool, AgentToolResult

    def execute(name: str, call_id: str, params: dict[str, Any], signal: Any, on_update: Any) -> Any:
        if name == TARGET:
            sku = str(params.get("sku", "")).upper()
            text = TARGET_ANSWER if "4411" in sku else f"{sku or '(no SKU)'}: unknown SKU."
            return AgentToolResult(content=text)
        return AgentToolResult(content=f"{name}: done.")

    def bind(name: str) -> Any:
        return lambda *args: execute(name, *args)

    return [
        AgentTool(name=s["name"], description=s["description"], parameters=s["parameters"],
                  execute=bind(s["name"]))  # fmt: skip
        for s in catalog(count)
    ]


if __name__ == "__main__":
    from agentkit.integrations.mcp_server import serve

    serve(tools(int(sys.argv[1]) if len(sys.argv) > 1 else 200), transport="stdio")
