#!/usr/bin/env bash
# ggml-remote-rtt --device/--local (issue 17): 16 MiB written to and read back from
# a buffer of the server's Vulkan0, over shm and tcp, beside the same through a
# local Vulkan0 in the rtt's own process; the bytes read must be those written.
source "$(dirname "$0")/lib.sh"
RTT=$BUILD/bin/ggml-remote-rtt
export GGML_VK_VISIBLE_DEVICES=0  # lavapipe's Vulkan0, for the server and the local baseline

start_server srv -d Vulkan0
failures=()
for endpoint in "shm:${srv_UNIX#unix:}" "$srv_TCP"; do
    if ! out=$("$RTT" "$endpoint" 0 --device 0 --local Vulkan0 2>&1); then
        failures+=("ggml-remote-rtt through $endpoint failed: $out")
        continue
    fi
    for direction in set get; do
        grep -Eq "^local: 16 MiB ${direction}_tensor on local Vulkan0: median [0-9.]+ GB/s" <<<"$out" ||
            failures+=("no local Vulkan0 ${direction}_tensor line: $out")
        grep -Eq "^$endpoint: 16 MiB ${direction}_tensor on Vulkan0: median [0-9.]+ GB/s .*, [0-9.]+x local$" <<<"$out" ||
            failures+=("no remote Vulkan0 ${direction}_tensor line with its ratio through $endpoint: $out")
    done
    note "$(grep -c 'GB/s' <<<"$out") rates through $endpoint"
done
# A device the server does not offer is refused with a message, not measured.
if out=$("$RTT" "$srv_UNIX" 0 --device 1 2>&1); then failures+=("--device 1 of a one-device server succeeded"); fi
grep -q "offers 1 devices, no device 1" <<<"$out" || failures+=("--device 1: no clear refusal: $out")
finish "$srv_LOG"
