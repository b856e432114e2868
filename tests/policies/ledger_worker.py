"""One process of a fleet spending under one cap through a shared ledger, for the ledger's
multi-process tests: one agent after another prompts the local server until a run ends on the
cap (or ``RUNS`` runs); prints the runs' stop reasons as one JSON object. With ``--stall`` it
prints ``sent`` and waits for the answer (of a server that never gives it) until it is killed.

``python tests/policies/ledger_worker.py BASE_URL STORE_URL KEY CAP_USD RUNS [--stall]``
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from agentkit import Agent
from agentkit.ledger import Cap, Ledger, SpendPolicy
from agentkit.types import Model, ModelCost

PRICES = ModelCost(input=10.0, output=40.0, cache_read=1.0, cache_write=12.5)
"""Must match tests/test_ledger.py."""


def main(argv: list[str]) -> None:
    base_url, store_url, key, cap, runs = argv[:5]
    model = Model(
        id="gpt-4o-mini", api="openai-completions", provider="openai", base_url=base_url,
        cost=PRICES, max_tokens=100,
    )  # fmt: skip
    hold = 5.0 if "--stall" in argv else 1.0  # long enough to be seen held on a busy machine
    ledger = Ledger(store_url, [Cap(key, "total", usd=float(cap))], hold=hold)
    policy = SpendPolicy(ledger, [key], by_model=False)
    if "--stall" in argv:
        agent = Agent(model=model, api_key="k", policies=[policy], timeout=(5, 600))
        run = agent.start("Hello")
        print("sent", flush=True)
        run.wait()
        return
    reasons: Counter[str] = Counter()
    for _ in range(int(runs)):
        agent = Agent(model=model, api_key="k", policies=[policy], timeout=(10, 30))
        result = agent.prompt("Hello")
        reasons[str(result.stop_reason)] += 1
        if result.stop_reason != "stop":
            break
    ledger.close()
    print(json.dumps(dict(reasons)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
