#!/usr/bin/env python3
"""Aggregates make bench's runs: `record` turns one llama-bench JSON into a line
of raw.jsonl; `report` prints the side-by-side table and writes results.json."""
import json
import re
import math
import statistics
import sys


def record(model, transport, rep, load_s, kind="cpu"):
    """kind: cpu (the main table) or vulkan (the Vulkan section's)."""
    runs = json.load(sys.stdin)
    out = {"model": model, "transport": transport, "rep": int(rep),
           "load_s": float(load_s) if load_s not in ("", "nan") else None}
    if kind != "cpu":
        out["kind"] = kind
    for run in runs:
        key = "pp_tps" if run.get("n_prompt", 0) > 0 else "tg_tps"
        out[key] = run["avg_ts"]
    print(json.dumps(out))


def record_whisper(model, transport, rep):
    """One whisper-bench run: its timing lines become encode/decode/total figures."""
    out = {"model": model, "transport": transport, "rep": int(rep), "kind": "whisper"}
    for line in sys.stdin:
        m = re.search(r"(load|encode|decode|total) time =\s*([0-9.]+) ms(?: /\s*([0-9]+) runs)?", line)
        if not m:
            continue
        ms, runs = float(m[2]), int(m[3]) if m[3] else 1
        key = {"load": "load_s", "encode": "encode_ms", "decode": "decode_ms_per_run", "total": "total_ms"}[m[1]]
        out[key] = ms / 1000.0 if key == "load_s" else (ms / runs if key == "decode_ms_per_run" else ms)
    print(json.dumps(out))


def record_rtt(transport):
    """ggml-remote-rtt's output: the empty round trip and the 16 MiB rates."""
    out = {"kind": "rtt", "transport": transport}
    for line in sys.stdin:
        m = re.search(r"empty round trip: median ([0-9.]+) us, p99 ([0-9.]+) us", line)
        if m:
            out["rtt_median_us"], out["rtt_p99_us"] = float(m[1]), float(m[2])
        m = re.search(r"16 MiB (.+?): median ([0-9.]+) GB/s \(min ([0-9.]+), max ([0-9.]+)\)", line)
        if m:
            out[m[1]] = {"median_gbs": float(m[2]), "min_gbs": float(m[3]), "max_gbs": float(m[4])}
    print(json.dumps(out))


def record_accounting(model, transport, short_path, long_path):
    """GGML_REMOTE_STATS of a 32- and a 64-token run: the traffic of one more token."""
    def totals(path):
        line = open(path).read()
        fields = {}
        for key, pattern in (("commands", r"([0-9]+) commands"), ("round_trips", r"([0-9]+) round trips"),
                             ("bytes_sent", r"([0-9]+) bytes sent"), ("bytes_received", r"([0-9]+) bytes received")):
            m = re.search(pattern, line)
            if not m:
                raise SystemExit(f"no statistics in {path}: {line!r}")
            fields[key] = int(m[1])
        return fields
    short, long = totals(short_path), totals(long_path)
    out = {"kind": "accounting", "model": model, "transport": transport}
    for key in short:
        out[key + "_per_token"] = (long[key] - short[key]) / 32.0
    print(json.dumps(out))


def record_many_load(model, variant, rep, load_s, weight_store, sent_bytes="", model_bytes=""):
    """One load of the many-guests section (bench_many.sh); sent_bytes: what the
    guest sent (where measured), model_bytes: the model file's size."""
    out = {"kind": "many-load", "model": model, "variant": variant, "rep": int(rep),
           "load_s": float(load_s) if load_s not in ("", "nan") else None, "weight_store": weight_store == "1"}
    if sent_bytes:
        out["sent_bytes"] = int(sent_bytes)
        out["model_bytes"] = int(model_bytes)
    print(json.dumps(out))


def record_many_pss(model, server, guests, rep, idle_kb, store):
    """bench_pss.py's samples ("kB processes" lines) of one run: their peak. store:
    none (the server has no weight store), warm (it holds the model) or fresh."""
    samples = [tuple(map(int, line.split())) for line in sys.stdin if line.strip()]
    if not samples:
        raise SystemExit("no PSS samples")
    print(json.dumps({"kind": "many-pss", "model": model, "server": server, "guests": int(guests),
                      "rep": int(rep), "idle_mib": int(idle_kb) / 1024.0,
                      "peak_mib": max(kb for kb, _ in samples) / 1024.0,
                      "most_processes": max(n for _, n in samples), "samples": len(samples),
                      "store": store}))


def record_many_tg(model, variant, guests, rep, ended, *paths):
    """The llama-bench JSON of each guest of one run of guests started together, and
    when each ended (seconds after they were started, comma-separated)."""
    per_guest = []
    for path in paths:
        runs = json.load(open(path))
        per_guest.append(next(r["avg_ts"] for r in runs if r.get("n_prompt", 0) == 0))
    print(json.dumps({"kind": "many-tg", "model": model, "variant": variant, "guests": int(guests),
                      "rep": int(rep), "per_guest_tps": per_guest, "aggregate_tps": sum(per_guest),
                      "ended_s": [float(t) for t in ended.split(",")]}))


def record_many_latency(model, variant, rep, alone_path, busy_path):
    """bench_stream.py's figures for the interactive guest alone and beside 3 busy ones."""
    out = {"kind": "many-latency", "model": model, "variant": variant, "rep": int(rep)}
    for case, path in (("alone", alone_path), ("busy", busy_path)):
        figures = json.load(open(path))
        for key in ("tokens", "p50_ms", "p90_ms", "p99_ms", "max_ms"):
            out[f"{case}_{key}"] = figures[key]
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


def paired_ratio(runs, base_runs, key):
    """The median over rounds of each round's figure over the local figure of the same
    round: the machine's drift (minutes long on a shared VM) moves both alike."""
    base = {r["rep"]: r.get(key) for r in base_runs}
    ratios = [r[key] / base[r["rep"]] for r in runs
              if r.get(key) is not None and not math.isnan(r[key]) and base.get(r["rep"]) not in (None, 0)
              and not math.isnan(base[r["rep"]])]
    return f"{statistics.median(ratios):.2f}x" if ratios else "-"


def llama_table(rows, results, target=None, expected=()):
    """The llama-bench table: each model and transport, its figures and x local;
    with `target`, whether the remote rows' pp and tg ratios reach it; `expected`
    transports get a row of "-" when they have no runs."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    transports = list(dict.fromkeys([r["transport"] for r in rows] + list(expected)))
    width = max([9] + [len(t) for t in transports])  # "vm-ivshmem" is 10
    header = (f"| {'model':<6} | {'transport':<{width}} | {'pp t/s median [min-max]':<26} | {'x local':>7} | "
              f"{'tg t/s median [min-max]':<26} | {'x local':>7} | {'load s median [min-max]':<24} | {'x local':>7} |")
    if target is not None:
        header += f" {'target':<7} |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for model in models:
        local = [r for r in rows if r["model"] == model and r["transport"] == "local"]
        for transport in transports:
            runs = [r for r in rows if r["model"] == model and r["transport"] == transport]
            if not runs and transport not in expected:
                continue
            stats = {k: spread([r.get(k) for r in runs]) for k in ("pp_tps", "tg_tps", "load_s")}
            x_pp, x_tg = paired_ratio(runs, local, "pp_tps"), paired_ratio(runs, local, "tg_tps")
            line = (f"| {model:<6} | {transport:<{width}} | {fmt(stats['pp_tps']):<26} | {x_pp:>7} | "
                    f"{fmt(stats['tg_tps']):<26} | {x_tg:>7} | "
                    f"{fmt(stats['load_s'], 3):<24} | {paired_ratio(runs, local, 'load_s'):>7} |")
            if target is not None:
                met = transport == "local" or all(x != "-" and float(x[:-1]) >= target for x in (x_pp, x_tg))
                line += f" {'-' if transport == 'local' else ('met' if met else 'missed'):<7} |"
            print(line)
            for r in runs:
                results.append({"model": model, "transport": transport, "rep": r["rep"], "kind": r.get("kind", "cpu"),
                                "pp_tps": r.get("pp_tps"), "tg_tps": r.get("tg_tps"), "load_s": r.get("load_s")})


def report(path):
    rows = [json.loads(line) for line in sys.stdin if line.strip()]
    whisper = [r for r in rows if r.get("kind") == "whisper"]
    rtts = [r for r in rows if r.get("kind") == "rtt"]
    accounting = [r for r in rows if r.get("kind") == "accounting"]
    many = [r for r in rows if (r.get("kind") or "").startswith("many-")]
    vulkan = [r for r in rows if r.get("kind") == "vulkan"]
    vm = [r for r in rows if r.get("kind") == "vm"]
    rows = [r for r in rows if r.get("kind") is None]
    results = []
    if rows:
        llama_table(rows, results)
        print("(x local: the median over rounds of the round's figure over that round's local figure)")
    if vulkan:
        print("\nVulkan0 (issue 17): llama-bench -ngl 99 on the host's Vulkan0, locally"
              " (GGML_VK_VISIBLE_DEVICES=0) and through a server serving only Vulkan0")
        llama_table(vulkan, results, target=0.95)
        print("(x local: as above, over local Vulkan0; target: the remote's x local at least 0.95, pp and tg)")
    if vm:
        print("llama.cpp from a QEMU VM (issue 18, scripts/bench_vm.sh): local is the host's CPU without a VM")
        order = ["local", "vm-cpu", "vm-tcp", "vm-vsock", "vm-ivshmem", "vm-rpc"]
        llama_table(sorted(vm, key=lambda r: order.index(r["transport"]) if r["transport"] in order else 99),
                    results, expected=("vm-vsock", "vm-ivshmem"))
        print("(x local: as above; a variant that was not run shows -)")
    if whisper:
        print()
        wheader = (f"| {'model':<13} | {'transport':<9} | {'encode ms median [min-max]':<28} | {'x local':>7} | "
                   f"{'decode ms/run median [min-max]':<30} | {'x local':>7} | {'total ms median [min-max]':<27} | {'x local':>7} |")
        print(wheader)
        print("|" + "|".join("-" * len(c) for c in wheader.split("|")[1:-1]) + "|")
        for model in dict.fromkeys(r["model"] for r in whisper):
            base = {}
            for transport in dict.fromkeys(r["transport"] for r in whisper):
                runs = [r for r in whisper if r["model"] == model and r["transport"] == transport]
                if not runs:
                    continue
                stats = {k: spread([r.get(k) for r in runs]) for k in ("encode_ms", "decode_ms_per_run", "total_ms")}
                if transport == "local":
                    base = stats
                none = (None,) * 3
                print(f"| {model:<13} | {transport:<9} | {fmt(stats['encode_ms']):<28} | "
                      f"{ratio(stats['encode_ms'], base.get('encode_ms', none)):>7} | "
                      f"{fmt(stats['decode_ms_per_run'], 2):<30} | "
                      f"{ratio(stats['decode_ms_per_run'], base.get('decode_ms_per_run', none)):>7} | "
                      f"{fmt(stats['total_ms']):<27} | {ratio(stats['total_ms'], base.get('total_ms', none)):>7} |")
                results.extend(runs)
        print("(times: lower is better; x local is the ratio of medians. Over unix and tcp a compute returns\n"
              " before the host finishes, so whisper-bench books the encoder under decode: compare totals.)")
    if rtts:
        print()
        print("| transport  | empty round trip median | p99 | 16 MiB write GB/s (x local)        | 16 MiB read GB/s (x local)        |")
        print("|------------|------------|------------|------------------------------------|-----------------------------------|")
        for r in rtts:
            def rate(kind):
                shared = r.get(f"{kind}_tensor (shared memory)")
                plain = r.get(f"{kind}_tensor")
                local = r.get(f"local memcpy ({'write' if kind == 'set' else 'read'})")
                if shared and local:
                    return f"{shared['median_gbs']:.2f} ({shared['median_gbs'] / local['median_gbs']:.2f}x)"
                # A named device's rows (--device, --local): beside the same device here.
                device = next((v for k, v in r.items() if k.startswith(f"{kind}_tensor on ") and " on local " not in k), None)
                here = next((v for k, v in r.items() if k.startswith(f"{kind}_tensor on local ")), None)
                if device and here:
                    return f"{device['median_gbs']:.2f} ({device['median_gbs'] / here['median_gbs']:.2f}x of {here['median_gbs']:.2f})"
                return f"{plain['median_gbs']:.2f}" if plain else "-"
            def micros(key):
                return f"{r[key]:7.1f} us" if key in r else f"{'-':>10}"
            print(f"| {r['transport']:<10} | {micros('rtt_median_us')} | {micros('rtt_p99_us')} | "
                  f"{rate('set'):<34} | {rate('get'):<33} |")
        print("(shm: commands through the shared-memory ring; shm-socket: the same session with GGML_REMOTE_SHARED_RING=0;\n"
              " x local: over a local memcpy; vulkan-*: to a buffer of the server's Vulkan0, over ggml_backend_tensor_set/get\n"
              " of a local Vulkan0 buffer in the same process (x of its GB/s))")
        results.extend(rtts)
    if accounting:
        print()
        print("| model  | transport | round trips/token | commands/token | bytes sent/token | bytes received/token |")
        print("|--------|-----------|-------------------|----------------|------------------|----------------------|")
        for r in accounting:
            print(f"| {r['model']:<6} | {r['transport']:<9} | {r['round_trips_per_token']:17.2f} | {r['commands_per_token']:14.2f} | "
                  f"{r['bytes_sent_per_token']:16.0f} | {r['bytes_received_per_token']:20.0f} |")
        print("(llama-simple, GGML_REMOTE_STATS=1: a 64-token run minus a 32-token run, divided by 32)")
        results.extend(accounting)
    if many:
        report_many(many)
        results.extend(many)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nper-run records: {path}")


# The many-guests section (bench_many.sh): issue 15's targets, as (the record's
# variant or guest count, a bound, a sense, what the bound is relative to).
def paired_spread(runs, base_runs, key, base_key=None):
    """(median, min, max) over rounds of each round's figure over the base figure of
    the same round."""
    base = {r["rep"]: r.get(base_key or key) for r in base_runs}
    return spread([r[key] / base[r["rep"]] for r in runs
                   if r.get(key) is not None and base.get(r["rep"]) not in (None, 0)])


def fmt_ratio(stats):
    median, low, high = stats
    return "-" if median is None else f"{median:.2f}x [{low:.2f}-{high:.2f}]"


def verdict(stats, bound, at_most):
    """Whether the median over rounds meets a target."""
    if stats[0] is None:
        return "-"
    return "met" if (stats[0] <= bound if at_most else stats[0] >= bound) else "missed"


def table(header, rows):
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


def sent_share(runs):
    """(median, min, max) of the share of the model's bytes the guest sent, in %."""
    return spread([r["sent_bytes"] / r["model_bytes"] * 100 for r in runs if r.get("sent_bytes") is not None])


def fmt_sent(runs):
    share = sent_share(runs)
    return "" if share[0] is None else f"{fmt(share, 2)} % of {runs[0]['model_bytes'] / 2**20:.0f} MiB"


def models_load_row(name, runs, local, hashed):
    """A first load through a server whose --models holds the model (issue 27): its
    time against local, and the share of the model's bytes the guest sent."""
    x_local = paired_spread(runs, local, "load_s")
    share, sent = sent_share(runs), fmt_sent(runs) or "-"
    targets = [f"sent < 1 %: {verdict(share, 1.0, True)}"]
    if hashed:
        targets.append(f"<= 1.20x local: {verdict(x_local, 1.2, True)}")
    return [name, fmt(spread([r["load_s"] for r in runs]), 3), fmt_ratio(x_local), "", sent, "; ".join(targets)]


def report_many(records):
    loads = [r for r in records if r["kind"] == "many-load"]
    psses = [r for r in records if r["kind"] == "many-pss"]
    tgs = [r for r in records if r["kind"] == "many-tg"]
    if loads:
        model = loads[0]["model"]
        store = any(r["weight_store"] for r in loads)
        print(f"\nMany guests: {model} model load over TCP, first and second "
              + ("(our server with a fresh --weight-store each round)" if store else
                 "(the server has no --weight-store: ours 'first' and 'second' are the store-less path)"))
        by = {v: [r for r in loads if r["variant"] == v] for v in dict.fromkeys(r["variant"] for r in loads)}
        names = {"local": "local", "tcp": "ours tcp, no store", "tcp-store-first": "ours tcp, first load",
                 "tcp-store-second": "ours tcp, second load", "rpc-cache-first": "rpc -c, first load (fresh cache)",
                 "rpc-cache-second": "rpc -c, second load",
                 "tcp-models-unhashed": "ours tcp --models, first load, file never hashed",
                 "tcp-models-hashed": "ours tcp --models, first load, hashed before"}
        targets = {"tcp-store-first": ("tcp", 1.1, "<= 1.10x tcp, no store"),
                   "tcp-store-second": ("local", 1.5, "<= 1.50x local")}
        rows = []
        for variant, runs in by.items():
            if variant.startswith("tcp-models"):
                rows.append(models_load_row(names[variant], runs, by.get("local", []), variant.endswith("-hashed")))
                continue
            x_local = paired_spread(runs, by.get("local", []), "load_s")
            x_tcp = paired_spread(runs, by.get("tcp", []), "load_s")
            target = ""
            if variant in targets:
                base, bound, text = targets[variant]
                # Without a store, the first load is the store-less one: nothing to compare.
                if store:
                    target = f"{text}: {verdict(x_local if base == 'local' else x_tcp, bound, True)}"
                elif base == "local":
                    target = f"{text}: {verdict(x_local, bound, True)} (no store)"
                else:
                    target = f"{text}: n/a, no store"
            rows.append([names.get(variant, variant), fmt(spread([r["load_s"] for r in runs]), 3),
                         fmt_ratio(x_local), fmt_ratio(x_tcp), fmt_sent(runs), target])
        table(["load", "s median [min-max]", "x local", "x ours tcp, no store", "sent", "target"], rows)
        print("(x: the median [min-max] over rounds of the round's figure over that round's base;"
              " a target is met when the median is)")
    for model in dict.fromkeys(r["model"] for r in psses):
        report_many_pss(model, [r for r in psses if r["model"] == model])
    for model in dict.fromkeys(r["model"] for r in tgs):
        report_many_tg(model, [r for r in tgs if r["model"] == model])
    latencies = [r for r in records if r["kind"] == "many-latency"]
    for model in dict.fromkeys(r["model"] for r in latencies):
        report_many_latency(model, [r for r in latencies if r["model"] == model])


def report_many_pss(model, psses):
    if psses:
        print(f"\nMany guests: the server's memory (PSS of listener and workers, peak) while TCP guests "
              f"of the {model} model generate")
        rows = []
        one = [r for r in psses if r["guests"] == 1]
        stores = {"none": "no store", "warm": "holds the model", "fresh": "empty"}
        for guests, store in sorted({(r["guests"], r.get("store", "none")) for r in psses},
                                    key=lambda k: (k[0], k[1] == "fresh")):
            runs = [r for r in psses if r["guests"] == guests and r.get("store", "none") == store]
            x_one = paired_spread(runs, one, "peak_mib")
            # The target is about guests sharing a model the server has: a fresh
            # store's row is there to compare.
            # Issue 27: four that load at once hold at most 1.5x.
            bound = 1.5 if store == "fresh" else 1.3
            target = f"<= {bound:.2f}x: {verdict(x_one, bound, True)}" if guests == 4 else ""
            rows.append([runs[0]["server"], str(guests), stores.get(store, store),
                         fmt(spread([r["peak_mib"] for r in runs])),
                         fmt_ratio(x_one), fmt(spread([r["idle_mib"] for r in runs])),
                         str(max(r["most_processes"] for r in runs)), target])
        rows.append(["ggml-rpc-server", "-", "-", "not measured: it serves one client at a time", "", "", "", ""])
        table(["server", "guests", "weight store", "PSS peak MiB median [min-max]", "x 1 guest", "idle MiB",
               "most processes", "target"], rows)
        print("(sampled every 100 ms from before the guests start until the last ends; processes: the"
              " listener and its workers at once, at most;\n weight store: holds the model when one guest"
              " loaded it before, empty for guests that all load at once; ggml-rpc-server\n accepts its next"
              " client only when the last one is gone, so its 4 guests would run one after another)")


def report_many_tg(model, tgs):
    if tgs:
        print(f"\nMany guests: tg of guests started together ({model} model, llama-bench -p 0), through one"
              " server over shm, and as many local processes")
        rows = []
        variants = list(dict.fromkeys(r["variant"] for r in tgs))
        for variant in variants:
            # The 1-guest base of a variant: its own, or for a comparison row of our
            # server (core scheduling off) our server's.
            base = [r for r in tgs if r["guests"] == 1 and r["variant"] == variant] or \
                   [r for r in tgs if r["guests"] == 1 and r["variant"] == "shm"]
            for guests in sorted({r["guests"] for r in tgs if r["variant"] == variant}):
                runs = [r for r in tgs if r["variant"] == variant and r["guests"] == guests]
                for r in runs:
                    r["slowest_tps"], r["fastest_tps"] = min(r["per_guest_tps"]), max(r["per_guest_tps"])
                    r["end_spread_s"] = max(r["ended_s"]) - min(r["ended_s"])
                x_one = paired_spread(runs, base, "aggregate_tps")
                slowest = paired_spread(runs, base, "slowest_tps", "aggregate_tps")
                target = ""
                if guests == 4 and variant.startswith("shm"):
                    ok = verdict(x_one, 0.8, False) == "met" and verdict(slowest, 0.2, False) == "met"
                    target = f">= 0.80x, each >= 0.20x: {'met' if ok else 'missed'}"
                rows.append([variant, str(guests), fmt(spread([r["aggregate_tps"] for r in runs])), fmt_ratio(x_one),
                             fmt(spread([r["slowest_tps"] for r in runs])), fmt(spread([r["fastest_tps"] for r in runs])),
                             fmt_ratio(slowest), fmt(spread([max(r["ended_s"]) for r in runs]), 2),
                             fmt(spread([r["end_spread_s"] for r in runs]), 2), target])
        table(["variant", "guests", "aggregate t/s median [min-max]", "x 1 guest", "slowest guest t/s",
               "fastest guest t/s", "slowest x 1 guest", "last ended s", "first to last s", "target"], rows)
        print("(aggregate: the sum of the guests' tg; x 1 guest: over the same variant's one guest in the same round"
              " (shm-no-core-scheduling:\n over shm's); slowest/fastest: the guest with the lowest/highest t/s of"
              " a round; last ended: seconds from the release\n to the last guest's exit; first to last: between"
              " the first guest's exit and the last's. The sum holds for guests that ran\n side by side: when"
              " first to last is small beside last ended)")


def report_many_latency(model, runs):
    print(f"\nMany guests: an interactive guest's time between two tokens ({model} model, llama-server,"
          " streamed replies), alone and beside 3 busy guests (llama-bench -p 512, back to back)")
    names = {"shm": "ours shm", "local": "local processes"}
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == variant]
        for r in mine:
            r["p99_x_alone_p99"] = r["busy_p99_ms"] / r["alone_p99_ms"]
            r["p99_x_alone_p50"] = r["busy_p99_ms"] / r["alone_p50_ms"]
        x_p99 = spread([r["p99_x_alone_p99"] for r in mine])
        target = f"<= 4x: {verdict(x_p99, 4.0, True)}" if variant == "shm" else ""
        rows.append([names.get(variant, variant), fmt(spread([r["alone_p50_ms"] for r in mine]), 2),
                     fmt(spread([r["alone_p99_ms"] for r in mine]), 2), fmt(spread([r["busy_p50_ms"] for r in mine]), 2),
                     fmt(spread([r["busy_p99_ms"] for r in mine]), 2), fmt_ratio(x_p99),
                     fmt_ratio(spread([r["p99_x_alone_p50"] for r in mine])), target])
    table(["variant", "alone p50 ms", "alone p99 ms", "beside 3 busy p50 ms", "beside 3 busy p99 ms",
           "p99 x alone p99", "p99 x alone p50", "target"], rows)
    counts = sorted({r[f"{case}_tokens"] for r in runs for case in ("alone", "busy")})
    print(f"(median [min-max] over rounds; each round's p50 and p99 are over {counts[0]}-{counts[-1]} times between"
          " two streamed tokens, taken by the client;\n the x columns are per round. Local processes: the same"
          " guests without a server, each with its own threads; a slow guest's replies stop after a time)")


if __name__ == "__main__":
    if sys.argv[1] == "record":
        record(*sys.argv[2:7])
    elif sys.argv[1] == "record-whisper":
        record_whisper(*sys.argv[2:5])
    elif sys.argv[1] == "record-rtt":
        record_rtt(sys.argv[2])
    elif sys.argv[1] == "record-accounting":
        record_accounting(*sys.argv[2:6])
    elif sys.argv[1] == "record-many-load":
        record_many_load(*sys.argv[2:9])
    elif sys.argv[1] == "record-many-pss":
        record_many_pss(*sys.argv[2:8])
    elif sys.argv[1] == "record-many-tg":
        record_many_tg(*sys.argv[2:7], *sys.argv[7:])
    elif sys.argv[1] == "record-many-latency":
        record_many_latency(*sys.argv[2:7])
    else:
        report(sys.argv[2])
