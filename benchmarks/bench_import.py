"""What ``import agentkit`` costs, beside its honest floor (one command:
``python benchmarks/bench_import.py``).

Each figure is the best and the median of several fresh interpreters: a bare one, one that
imports pydantic and builds one model (the floor: agentkit's types are pydantic models), and one
that imports agentkit. Printed: agentkit above the bare interpreter (target <= 200 ms),
the floor above the bare interpreter, agentkit above the floor (what agentkit itself adds, timed
inside one process after the floor's imports), and the modules agentkit adds to the floor's.

The package's bytecode is compiled first: with ``PYTHONDONTWRITEBYTECODE`` set (some shells and
containers set it) every import would otherwise recompile agentkit's sources, which no installed
copy does.
"""

from __future__ import annotations

import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = 11
FLOOR = "import pydantic\nclass M(pydantic.BaseModel):\n    x: int = 0\nM(x=1)\n"
ABOVE_FLOOR = (
    FLOOR + "import sys, time\nbefore = set(sys.modules)\nt = time.perf_counter()\n"
    "import agentkit\nprint(time.perf_counter() - t)\n"
    "print(' '.join(sorted(set(sys.modules) - before)))\n"
)


def _run(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env
    ).stdout


def _wall(code: str) -> list[float]:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        _run(code)
        times.append(time.perf_counter() - start)
    return times


def _ms(times: list[float]) -> str:
    return f"best {min(times) * 1000:6.1f} ms, median {statistics.median(times) * 1000:6.1f} ms"


def main() -> None:
    compileall.compile_dir(ROOT / "agentkit", quiet=1)
    bare = min(_wall("pass"))
    floor = [t - bare for t in _wall(FLOOR)]
    agentkit = [t - bare for t in _wall("import agentkit")]
    inside = [_run(ABOVE_FLOOR).splitlines() for _ in range(RUNS)]
    above = [float(lines[0]) for lines in inside]
    added = inside[0][1].split()
    print("import agentkit, fresh interpreters (the bare interpreter's best subtracted):")
    print(f"  agentkit above bare:            {_ms(agentkit)}   (target <= 200 ms)")
    print(f"  pydantic + one model (floor):   {_ms(floor)}")
    print(f"  agentkit above the floor:       {_ms(above)}")
    ours = [m for m in added if m.split(".")[0] == "agentkit"]
    print(f"  modules added to the floor's: {len(added)} ({len(ours)} of agentkit); others:")
    print("   ", " ".join(m for m in added if m not in ours))


if __name__ == "__main__":
    main()
