#!/usr/bin/env python3
"""Aggregates make bench's runs: `record` turns one llama-bench JSON into a line
of raw.jsonl; `report` prints the side-by-side table and writes results.json."""
import json
import math
import statistics
import sys


def record(model, transport, rep, load_s):
    runs = json.load(sys.stdin)
    out = {"model": model, "transport": transport, "rep": int(rep),
           "load_s": float(load_s) if load_s not in ("", "nan") else None}
    for run in runs:
        key = "pp_tps" if run.get("n_prompt", 0) > 0 else "tg_tps"
        out[key] = run["avg_ts"]
    print(json.dumps(out))


def spread(values):
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return None, None, None
    return statistics.median(values), min(values), max(values)


def fmt(stats, digits=1):
    median, low, high = stats
    if median is None:
        return "-"
    return f"{median:.{digits}f} [{low:.{digits}f}-{high:.{digits}f}]"


def ratio(stats, base):
    if stats[0] is None or base[0] in (None, 0):
        return "-"
    return f"{stats[0] / base[0]:.2f}x"


def report(path):
    rows = [json.loads(line) for line in sys.stdin if line.strip()]
    models = list(dict.fromkeys(r["model"] for r in rows))
    transports = list(dict.fromkeys(r["transport"] for r in rows))
    results = []
    header = (f"| {'model':<6} | {'transport':<9} | {'pp t/s median [min-max]':<26} | {'x local':>7} | "
              f"{'tg t/s median [min-max]':<26} | {'x local':>7} | {'load s median [min-max]':<24} | {'x local':>7} |")
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for model in models:
        base = {}
        for transport in transports:
            runs = [r for r in rows if r["model"] == model and r["transport"] == transport]
            if not runs:
                continue
            stats = {k: spread([r.get(k) for r in runs]) for k in ("pp_tps", "tg_tps", "load_s")}
            if transport == "local":
                base = stats
            print(f"| {model:<6} | {transport:<9} | {fmt(stats['pp_tps']):<26} | {ratio(stats['pp_tps'], base.get('pp_tps', (None,)*3)):>7} | "
                  f"{fmt(stats['tg_tps']):<26} | {ratio(stats['tg_tps'], base.get('tg_tps', (None,)*3)):>7} | "
                  f"{fmt(stats['load_s'], 3):<24} | {ratio(stats['load_s'], base.get('load_s', (None,)*3)):>7} |")
            for r in runs:
                results.append({"model": model, "transport": transport, "rep": r["rep"],
                                "pp_tps": r.get("pp_tps"), "tg_tps": r.get("tg_tps"), "load_s": r.get("load_s")})
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nper-run records: {path}")


if __name__ == "__main__":
    if sys.argv[1] == "record":
        record(*sys.argv[2:6])
    else:
        report(sys.argv[2])
