#!/usr/bin/env python3
"""bench_stream.py PORT REQUESTS TOKENS PAUSE_S OUT [MAX_S]: the token times a user
of llama-server sees. Sends REQUESTS streamed completions of TOKENS tokens each,
PAUSE_S seconds apart (someone reading), none after MAX_S seconds (where a slow
guest would take minutes), and writes to OUT the times between two streamed tokens
(the first of each reply is left out: it includes the prompt) with their p50, p90
and p99."""
import http.client
import json
import sys
import time


def stream_one(port, tokens, seed):
    """The arrival times of one reply's tokens."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": f"Once upon a time, {seed}", "n_predict": tokens, "stream": True,
                       "ignore_eos": True, "cache_prompt": False, "temperature": 0})
    conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise SystemExit(f"llama-server answered {response.status}: {response.read()[:200]!r}")
    arrivals = []
    for line in response:
        if not line.startswith(b"data: "):
            continue
        now = time.monotonic()
        if json.loads(line[6:]).get("stop"):
            break
        arrivals.append(now)
    conn.close()
    return arrivals


def quantile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main():
    port, requests, tokens, pause, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), \
        float(sys.argv[4]), sys.argv[5]
    deadline = time.monotonic() + (float(sys.argv[6]) if len(sys.argv) > 6 else float("inf"))
    gaps = []
    for request in range(requests):
        if request > 0 and time.monotonic() > deadline:
            break
        arrivals = stream_one(port, tokens, request)
        gaps += [(b - a) * 1e3 for a, b in zip(arrivals, arrivals[1:])]
        time.sleep(pause)
    if not gaps:
        raise SystemExit("no tokens streamed")
    ordered = sorted(gaps)
    json.dump({"tokens": len(gaps), "p50_ms": quantile(ordered, 0.5), "p90_ms": quantile(ordered, 0.9),
               "p99_ms": quantile(ordered, 0.99), "max_ms": ordered[-1], "gaps_ms": gaps}, open(out, "w"))


if __name__ == "__main__":
    main()
