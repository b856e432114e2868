#!/usr/bin/env bash
# Concurrency benchmark: N runs of the same agent task at once in one process, per framework.
# Starts server.py (its own process, loopback, free port), measures its capacity with
# loadgen.py, runs every driver of frameworks.tsv for every N, ROUNDS times, interleaved
# (round -> N -> driver, the raw floors first), each driver process under a timeout, stops the
# server, and writes results/<stamp>/{results.jsonl,capacity.jsonl,env.json,summary.md,...}.
#
#   ./run.sh --setup     create/refresh the venvs frameworks.tsv names, then exit
#   ./run.sh             the full matrix
#
# Environment knobs:
#   VENV_ROOT=~/.cache/agentkit-bench/venvs   where the venvs live
#   AGENTKIT_SRC=.            the agentkit checkout to install (default: where run.sh is called from)
#   NS="1 10 100 300 1000"    concurrent runs per driver process
#   ROUNDS=2                  repetitions of the whole (N x driver) set, interleaved
#   TURNS=3 TOOL_MS=50        the agent task: TURNS tool rounds of TOOL_MS each, then the answer
#   TTFT_MS=300 CHUNK_MS=0 CHUNKS=10   the fake model's latency and final-answer chunking
#   TOOLS=native              the tool every driver gets, one pass per word: native (each
#                             driver's usual: a plain function for the thread drivers and
#                             agentkit, an async def for the asyncio ones), sync (time.sleep
#                             everywhere: what blocking Django/ORM code brings), async
#                             (asyncio.sleep everywhere). TOOLS="native sync" runs both.
#   ONLY="agentkit_threads pydantic-ai"   subset of keys (raw_async and raw_threads always run)
#   DRIVER_TIMEOUT=300        seconds per driver process (its own deadline is 20 s less, so a
#                             slow batch still reports what finished)
#   WARMUP=1                  untimed runs alone in each process before the batch
#   PAUSE=1                   seconds between two driver processes
#   SKIP="capacity"           skip the server capacity check
#   OUT=results/NAME          output folder
#   PYTHON=python3            interpreter of the server, loadgen and summarize (stdlib only)
set -euo pipefail

CALLER="$(pwd)"
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE"
BENCH="$(cd .. && pwd)"
# This folder may be read-only: venvs and results go under the cache folder by default, and
# agentkit is installed from AGENTKIT_SRC (default: the folder run.sh was called from).
CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/agentkit-bench"
VENV_ROOT="${VENV_ROOT:-$CACHE_DIR/venvs}"
AGENTKIT_SRC="$(cd "${AGENTKIT_SRC:-$CALLER}" && pwd)"
# A second checkout to measure beside AGENTKIT_SRC (before/after in one run); unset: no base rows
AGENTKIT_BASE="${AGENTKIT_BASE:+$(cd "$AGENTKIT_BASE" && pwd)}"
NS="${NS:-1 10 100 300 1000}"
ROUNDS="${ROUNDS:-2}"
TURNS="${TURNS:-3}"
TOOL_MS="${TOOL_MS:-50}"
TTFT_MS="${TTFT_MS:-300}"
CHUNK_MS="${CHUNK_MS:-0}"
CHUNKS="${CHUNKS:-10}"
TOOLS="${TOOLS:-${TOOL:-native}}"
DRIVER_TIMEOUT="${DRIVER_TIMEOUT:-300}"
WARMUP="${WARMUP:-1}"
PAUSE="${PAUSE:-1}"
SKIP="${SKIP:-}"
PY="${PYTHON:-python3}"
FLOORS=(raw_async raw_threads)

# ---------------------------------------------------------------- frameworks.tsv
KEYS=()
declare -A DRIVER VENV ARGS PIP
while IFS=$'\t' read -r key driver venv args pip; do
  [[ -z "$key" || "$key" == \#* ]] && continue
  [[ -z "$AGENTKIT_BASE" && "$pip" == *@AGENTKIT_BASE@* ]] && continue
  KEYS+=("$key"); DRIVER[$key]="$driver"; VENV[$key]="$venv"; PIP[$key]="$pip"
  [[ "$args" == "-" ]] && args=""
  ARGS[$key]="$args"
done < frameworks.tsv
if [[ -n "${ONLY:-}" ]]; then
  sel=("${FLOORS[@]}")
  for k in $ONLY; do
    [[ -n "${DRIVER[$k]:-}" ]] || { echo "unknown key $k (see frameworks.tsv)" >&2; exit 2; }
    [[ " ${FLOORS[*]} " == *" $k "* ]] || sel+=("$k")
  done
  KEYS=("${sel[@]}")
fi

if [[ "${1:-}" == "--setup" ]]; then
  mkdir -p "$VENV_ROOT"
  declare -A DONE=()
  for key in "${KEYS[@]}"; do
    v="$VENV_ROOT/${VENV[$key]}"
    [[ -n "${DONE[$v]:-}" ]] && continue
    DONE[$v]=1
    echo "== $key -> ${VENV[$key]}: pip install ${PIP[$key]}"
    [[ -x "$v/bin/python" ]] || "$PY" -m venv "$v"
    "$v/bin/pip" install -q --upgrade pip
    # pip arguments are relative to the bench folder, as in ../frameworks.tsv
    # shellcheck disable=SC2086
    (cd "$BENCH" && "$v/bin/pip" install -q $(printf '%s' "${PIP[$key]}" | sed "s|@AGENTKIT_SRC@|$AGENTKIT_SRC|g; s|@AGENTKIT_BASE@|$AGENTKIT_BASE|g"))
  done
  echo "setup done"
  exit 0
fi

for key in "${KEYS[@]}"; do
  if [[ ! -x "$VENV_ROOT/${VENV[$key]}/bin/python" ]]; then
    echo "missing venv ${VENV[$key]} for $key: run run.sh --setup" >&2
    exit 2
  fi
done

STAMP="$(date +%Y%m%d-%H%M%S)"
OUT="${OUT:-$CACHE_DIR/results/$STAMP}"
mkdir -p "$OUT"
RES="$OUT/results.jsonl"
: > "$RES"
: > "$OUT/drivers.stderr"

# ---------------------------------------------------------------- server
PORT_FILE="$OUT/port"
rm -f "$PORT_FILE"
# --parent-pid: the server also stops by itself if this script dies without its trap
"$PY" server.py --port 0 --port-file "$PORT_FILE" --parent-pid $$ --turns "$TURNS" \
  --tool-ms "$TOOL_MS" --ttft-ms "$TTFT_MS" --chunk-ms "$CHUNK_MS" --chunks "$CHUNKS" \
  > "$OUT/server.log" 2>&1 &
SERVER_PID=$!
stop_server() {
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
}
trap stop_server EXIT
for _ in $(seq 1 100); do [[ -s "$PORT_FILE" ]] && break; sleep 0.1; done
[[ -s "$PORT_FILE" ]] || { echo "server did not start; see $OUT/server.log" >&2; exit 1; }
BASE_URL="http://127.0.0.1:$(cat "$PORT_FILE")/v1"
echo "server pid $SERVER_PID at $BASE_URL; results in $OUT"

skip() { [[ " $SKIP " == *" $1 "* ]]; }

"$PY" - "$OUT/env.json" "$("$PY" calibrate.py)" <<EOF
import json, os, platform, sys
loads = os.getloadavg()
json.dump({"stamp": "$STAMP", "cpus": os.cpu_count(), "load_before": [round(x, 2) for x in loads],
           "platform": platform.platform(), "python": sys.version.split()[0],
           "ns": "$NS".split(), "rounds": $ROUNDS, "turns": $TURNS, "tool_ms": $TOOL_MS,
           "ttft_ms": $TTFT_MS, "chunk_ms": $CHUNK_MS, "chunks": $CHUNKS, "tools": "$TOOLS".split(),
           "warmup": $WARMUP, "driver_timeout_s": $DRIVER_TIMEOUT,
           "keys": "${KEYS[*]}".split(),
           "calibration": json.loads(sys.argv[2])}, open(sys.argv[1], "w"), indent=1)
EOF

if ! skip capacity; then
  echo "server capacity (loadgen.py: trivial keep-alive client)"
  : > "$OUT/capacity.jsonl"
  "$PY" loadgen.py --base-url "$BASE_URL" --conns 64 --seconds 3 --ttft-ms 0 \
    --label "TTFT 0, 64 connections" | tee -a "$OUT/capacity.jsonl"
  "$PY" loadgen.py --base-url "$BASE_URL" --conns 1000 --seconds 3 \
    --label "TTFT ${TTFT_MS} ms, 1000 connections" | tee -a "$OUT/capacity.jsonl"
fi

# run_driver KEY N ROUND TOOL: one JSON line appended to results.jsonl
run_driver() {
  local key="$1" n="$2" r="$3" tool="$4"
  local py="$VENV_ROOT/${VENV[$key]}/bin/python" line
  echo "== $key n=$n round=$r tool=$tool $(date +%H:%M:%S)" >> "$OUT/drivers.stderr"
  # shellcheck disable=SC2086
  line="$(timeout -k 5 "$DRIVER_TIMEOUT" "$py" "drivers/${DRIVER[$key]}.py" --base-url "$BASE_URL" \
          --n "$n" --turns "$TURNS" --tool-ms "$TOOL_MS" --tool "$tool" --warmup "$WARMUP" \
          --deadline "$((DRIVER_TIMEOUT - 20))" --label "$key" --round "$r" ${ARGS[$key]} \
          2>>"$OUT/drivers.stderr" | tail -n 1 || true)"
  if [[ "$line" != \{* ]]; then
    line="{\"framework\": \"$key\", \"label\": \"$key\", \"n\": $n, \"round\": $r, \"tool_requested\": \"$tool\", \"correct\": false, \"fatal\": \"driver printed no JSON (timeout after ${DRIVER_TIMEOUT} s or crash; see drivers.stderr)\"}"
  fi
  printf '%s\n' "$line" >> "$RES"
  printf '  %-18s n=%-5s r%s %-6s %s\n' "$key" "$n" "$r" "$tool" "$(printf '%s' "$line" | "$PY" -c '
import json, sys
d = json.loads(sys.stdin.read())
s = d.get("server") or {}
parts = []
for k, fmt in (("wall_s", "wall={}s"), ("wall_over_ideal", "x{}ideal"), ("cpu_ms_per_turn", "cpu={}ms/turn"),
               ("peak_rss_mb", "rss={}MB"), ("peak_threads", "threads={}"), ("errors", "errors={}")):
    if k in d:
        parts.append(fmt.format(d[k]))
if s:
    parts.append("conns={} srv_cpu={}".format(s.get("connections"), s.get("cpu_util")))
parts.append("correct" if d.get("correct") else "NOT CORRECT: " + "; ".join(d.get("problems") or [d.get("fatal", "")])[:160])
print(" ".join(parts))')"
  sleep "$PAUSE"
}

for tool in $TOOLS; do
  for r in $(seq 1 "$ROUNDS"); do
    for n in $NS; do
      echo "tool=$tool round $r/$ROUNDS, N=$n"
      for key in "${KEYS[@]}"; do
        run_driver "$key" "$n" "$r" "$tool"
      done
    done
  done
done

stop_server
trap - EXIT
echo "server stopped: $(tail -n 1 "$OUT/server.log")"
"$PY" - "$OUT/env.json" <<'EOF'
import json, os, sys
d = json.load(open(sys.argv[1]))
d["load_after"] = [round(x, 2) for x in os.getloadavg()]
json.dump(d, open(sys.argv[1], "w"), indent=1)
EOF

"$PY" summarize.py "$OUT" > "$OUT/summary.md"
echo "summary: $OUT/summary.md"
cat "$OUT/summary.md"
