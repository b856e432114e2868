"""Tool search's ranking beside ``rank-bm25``'s: the same tokens and documents, our BM25
(:class:`agentkit.context.Bm25Index`, Lucene's idf) against ``rank_bm25.BM25Okapi`` and
``BM25Plus``; top-1 and top-5 hits on task-like queries over the 200-tool catalog of
``tests/mcp_servers/catalog_server.py``, tiny catalogs (1 and 2 tools), time to index and to
search 1,000 tools, and what importing each adds to a process that imported agentkit and a provider (as any run has).

``rank-bm25`` is not a dependency: install it somewhere of its own and name it::

    pip install --target /tmp/bm25cmp rank-bm25==0.2.2
    python benchmarks/bench_tool_ranking.py --with /tmp/bm25cmp --out benchmarks/results/context/tool-ranking.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentkit.context.search import Bm25Index, tokens, tool_document  # noqa: E402
from agentkit.types import Tool  # noqa: E402
from tests.mcp_servers.catalog_server import catalog  # noqa: E402

QUERIES = [
    ("How many units of SKU-4411 are in stock?", "inventory_get_stock_level"),
    ("what's the weather going to be tomorrow", "weather_get_forecast"),
    ("find support tickets about login failures", "tickets_search_ticket"),
    ("remove the customer record 42", "crm_delete_customer"),
    ("send me a CSV of all invoices", "billing_export_invoice"),
    ("how many employees match the filter department=sales", "hr_count_employee"),
    ("schedule a new calendar event", "calendar_create_event"),
    ("show the latest commits", "git_list_commit"),
    ("update the DNS record of www", "dns_update_record"),
    ("archive last year's marketing campaign", "marketing_archive_campaign"),
    ("look up parcel 1Z999 shipment", "shipping_get_parcel"),
    ("list open security alerts", "security_list_alert"),
    ("sync the wiki with upstream", "wiki_sync_page"),
    ("search documents mentioning budget", "files_search_document"),
    ("create a travel booking to Lyon", "travel_create_booking"),
    ("count database tables", "sql_count_table"),
    ("delete the chat channel random", "chat_delete_channel"),
    ("get payslip 2026-11", "payroll_get_payslip"),
    ("export the usage report", "analytics_export_report"),
    ("list e-mail messages, newest first", "mail_list_message"),
]


def hits(rank: Any, names: list[str]) -> dict[str, float]:
    top1 = top5 = 0
    for query, target in QUERIES:
        scores = rank(tokens(query))
        order = sorted(range(len(names)), key=lambda i: -scores[i])
        top1 += bool(names[order[0]] == target and scores[order[0]] > 0)
        top5 += target in [names[i] for i in order[:5] if scores[i] > 0]
    return {"top1": top1 / len(QUERIES), "top5": top5 / len(QUERIES)}


def tiny(make: Any) -> dict[str, bool]:
    """Whether a search for a tool's own words finds it in a catalog of one and of two tools."""
    one = [tool_document(Tool(name="send_invoice", description="Send an invoice by mail."))]
    two = one + [tool_document(Tool(name="read_mail", description="Read e-mail."))]
    return {
        "one_tool_found": bool(make(one)(tokens("invoice"))[0] > 0),
        "two_tools_found": bool((lambda s: s[0] > s[1])(make(two)(tokens("send invoice")))),
    }


def timing(make: Any, docs: list[list[str]]) -> dict[str, float]:
    started = time.perf_counter()
    rank = make(docs)
    built = time.perf_counter() - started
    started = time.perf_counter()
    for query, _ in QUERIES:
        rank(tokens(query))
    searched = (time.perf_counter() - started) / len(QUERIES)
    return {"index_ms": round(built * 1000, 2), "search_ms": round(searched * 1000, 3)}


def import_ms(module: str, path: str | None) -> float:
    """What importing ``module`` adds to a process that has imported agentkit already."""
    code = (f"import agentkit, agentkit.providers.anthropic, time; t=time.perf_counter(); import {module}; "
            "print(time.perf_counter()-t)")  # fmt: skip
    env_path = [path] if path else []
    done = subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0]={env_path!r}; {code}"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return round(float(done.stdout) * 1000, 1)


def _rank_bm25(cls: Any, docs: list[list[str]]) -> Any:
    ranker = cls(docs)
    return lambda query: list(ranker.get_scores(query))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--with", dest="path", help="where rank-bm25 is installed")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    specs = catalog(200)
    names = [s["name"] for s in specs]
    docs = [tool_document(Tool(**s)) for s in specs]
    big = [tool_document(Tool(**s)) for s in catalog(1000)]
    ours = lambda d: Bm25Index(d).scores  # noqa: E731
    report: dict[str, Any] = {"queries": len(QUERIES), "catalog": len(names), "rankers": {}}
    report["rankers"]["agentkit Bm25Index"] = {
        **hits(ours(docs), names), **tiny(ours), **timing(ours, big),
        "import_ms": import_ms("agentkit.context.search", str(ROOT)),
    }  # fmt: skip
    if args.path:
        sys.path.insert(0, args.path)
        import rank_bm25

        for cls in (rank_bm25.BM25Okapi, rank_bm25.BM25Plus):
            make = partial(_rank_bm25, cls)
            report["rankers"][f"rank_bm25.{cls.__name__}"] = {
                **hits(make(docs), names), **tiny(make), **timing(make, big),
                "import_ms": import_ms("rank_bm25", args.path),
            }  # fmt: skip
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
