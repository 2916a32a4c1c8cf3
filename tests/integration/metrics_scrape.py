#!/usr/bin/env python3
"""metrics_scrape: one HTTP request to a ggml-remote-server's --metrics endpoint,
and a strict check of the answer against Prometheus' text exposition format 0.0.4.

usage: metrics_scrape.py ENDPOINT [PATH]            GET PATH (default /metrics)
       metrics_scrape.py ENDPOINT --raw-bytes N     N bytes that never end a request
ENDPOINT is tcp://host:port or unix:/path.sock.

prints "status: CODE", "content-type: TYPE", and for a 200 answer every sample line
("name{labels} value"), after checking every line of the body:
  - "# HELP name text" and "# TYPE name counter|gauge|..." once per family, HELP
    first, TYPE before the family's samples, a family's samples together;
  - samples: a metric name, optional labels name="value" where a value escapes
    backslash, double quote and newline (no other escapes, no raw newline), and a
    value that is a float, +Inf, -Inf or NaN; no label set twice in a family;
  - counters are never negative;
  - histograms: name_bucket{le} lines in increasing le, ending with +Inf, whose
    counts never decrease, the +Inf one equal to name_count, and a name_sum.
exits 0 when the answer came and is valid, 1 otherwise (the reasons on stderr).
"""
import re
import socket
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
VALUE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]Inf|NaN")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


class Invalid(Exception):
    pass


def connect(endpoint):
    if endpoint.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(endpoint[len("unix:"):])
        return sock
    match = re.fullmatch(r"tcp://(.+):([0-9]+)", endpoint)
    if not match:
        raise SystemExit(f"metrics_scrape: not an endpoint: {endpoint}")
    return socket.create_connection((match.group(1), int(match.group(2))), timeout=10)


def exchange(endpoint, request):
    with connect(endpoint) as sock:
        sock.sendall(request)
        answer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return answer
            answer += chunk


def parse_labels(text, pos, line):
    """The labels from text[pos] == '{' on; returns (frozenset of pairs, position after '}')."""
    pairs = []
    pos += 1
    while True:
        if text.startswith("}", pos):
            return frozenset(pairs), pos + 1
        name = LABEL_NAME.match(text, pos)
        if not name or not text.startswith('="', name.end()):
            raise Invalid(f"bad label at column {pos}: {line}")
        pos = name.end() + 2
        value = []
        while True:
            if pos >= len(text):
                raise Invalid(f"unterminated label value: {line}")
            char = text[pos]
            if char == "\\":
                escaped = text[pos + 1:pos + 2]
                if escaped not in ("\\", '"', "n"):
                    raise Invalid(f"invalid escape \\{escaped} in a label value: {line}")
                value.append({"\\": "\\", '"': '"', "n": "\n"}[escaped])
                pos += 2
            elif char == '"':
                pos += 1
                break
            else:
                value.append(char)
                pos += 1
        if any(existing == name.group(0) for existing, _ in pairs):
            raise Invalid(f"label {name.group(0)} twice: {line}")
        pairs.append((name.group(0), "".join(value)))
        if text.startswith(",", pos):
            pos += 1
        elif not text.startswith("}", pos):
            raise Invalid(f"expected ',' or '}}' at column {pos}: {line}")


def parse_sample(line):
    """(name, labels, value) of a sample line."""
    name = NAME.match(line)
    if not name:
        raise Invalid(f"not a sample: {line}")
    pos = name.end()
    labels = frozenset()
    if line.startswith("{", pos):
        labels, pos = parse_labels(line, pos, line)
    rest = line[pos:]
    if not rest.startswith(" "):
        raise Invalid(f"no space before the value: {line}")
    fields = rest[1:].split(" ")
    if len(fields) not in (1, 2) or not VALUE.fullmatch(fields[0]):
        raise Invalid(f"bad value: {line}")
    if len(fields) == 2 and not re.fullmatch(r"-?[0-9]+", fields[1]):
        raise Invalid(f"bad timestamp: {line}")
    return name.group(0), labels, float(fields[0])


def histogram_part(name, family, types):
    """The family a sample belongs to: a histogram's _bucket, _sum and _count are its own."""
    if types.get(family) == "histogram":
        for suffix in ("_bucket", "_sum", "_count"):
            if name == family + suffix:
                return family
    return name


def check_histograms(histograms):
    """Each histogram's buckets against its count (histograms: family -> samples)."""
    for family, samples in histograms.items():
        buckets = [(labels, value) for name, labels, value in samples if name == family + "_bucket"]
        counts = [value for name, _, value in samples if name == family + "_count"]
        if len(counts) != 1 or not any(name == family + "_sum" for name, _, _ in samples):
            raise Invalid(f"histogram {family}: not one _count and a _sum")
        bounds = [float(dict(labels).get("le", "nan")) for labels, _ in buckets]
        values = [value for _, value in buckets]
        if not bounds or bounds[-1] != float("inf") or bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
            raise Invalid(f"histogram {family}: le not increasing up to +Inf: {bounds}")
        if values != sorted(values):
            raise Invalid(f"histogram {family}: bucket counts decrease: {values}")
        if values[-1] != counts[0]:
            raise Invalid(f"histogram {family}: +Inf bucket {values[-1]} but _count {counts[0]}")


def check_exposition(body):
    """Raises Invalid at the first line that breaks the format; returns the sample lines."""
    if not body.endswith("\n"):
        raise Invalid("the body does not end with a newline")
    helped, typed, finished, samples, histograms = set(), {}, set(), [], {}
    family, seen = None, set()
    for line in body[:-1].split("\n"):
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            keyword, rest = line[2:6], line[7:]
            name = NAME.match(rest)
            if not name or (len(rest) > name.end() and rest[name.end()] != " "):
                raise Invalid(f"bad metric name: {line}")
            metric, text = name.group(0), rest[name.end() + 1:]
            if metric in finished or (metric != family and family is not None and metric in helped):
                raise Invalid(f"family {metric} is split: {line}")
            if family is not None and metric != family:
                finished.add(family)
            family = metric
            if keyword == "HELP":
                if metric in helped or metric in typed:
                    raise Invalid(f"HELP twice or after TYPE: {line}")
                if re.search(r"\\[^\\n]|\\$", text):
                    raise Invalid(f"invalid escape in HELP: {line}")
                helped.add(metric)
            else:
                if metric in typed or text not in TYPES:
                    raise Invalid(f"TYPE twice or unknown: {line}")
                typed[metric] = text
            seen = set()
        elif line.startswith("#"):
            continue  # a comment
        else:
            name, labels, value = parse_sample(line)
            if histogram_part(name, family, typed) != family or family not in typed:
                raise Invalid(f"sample outside its family (after # TYPE {family}): {line}")
            if (name, labels) in seen:
                raise Invalid(f"label set twice: {line}")
            seen.add((name, labels))
            if typed[family] in ("counter", "histogram") and not value >= 0:
                raise Invalid(f"negative counter: {line}")
            if typed[family] == "histogram":
                histograms.setdefault(family, []).append((name, labels, value))
            samples.append(line)
    check_histograms(histograms)
    return samples


def main(argv):
    if len(argv) < 2:
        raise SystemExit(__doc__)
    endpoint = argv[1]
    if len(argv) == 4 and argv[2] == "--raw-bytes":
        request = b"GET /metrics HTTP/1.1\r\nX-Padding: " + b"a" * int(argv[3])
    else:
        path = argv[2] if len(argv) > 2 else "/metrics"
        request = f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n".encode()
    answer = exchange(endpoint, request)
    head, separator, body = answer.partition(b"\r\n\r\n")
    if not separator:
        print(f"metrics_scrape: no HTTP header in {answer[:200]!r}", file=sys.stderr)
        return 1
    status_line, *fields = head.decode("ascii").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
    print(f"status: {status_line.split(' ')[1]}")
    print(f"content-type: {headers.get('content-type', '')}")
    if int(headers.get("content-length", -1)) != len(body):
        print(f"metrics_scrape: Content-Length {headers.get('content-length')} but {len(body)} bytes",
              file=sys.stderr)
        return 1
    if not status_line.startswith("HTTP/1.0 200"):
        return 0
    try:
        samples = check_exposition(body.decode("utf-8"))
    except (Invalid, UnicodeDecodeError) as problem:
        print(f"metrics_scrape: invalid exposition: {problem}", file=sys.stderr)
        return 1
    for sample in samples:
        print(sample)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        # The checker must refuse what the format does not allow.
        bad = ["a 1\n", "# HELP a x\n# TYPE a gauge\na{l=\"x\\q\"} 1\n",
               "# HELP a x\n# TYPE a gauge\na{l=\"x\"} one\n", "# HELP a x\n# TYPE a counter\na -1\n",
               "# HELP a x\n# TYPE a gauge\na 1\n# HELP b y\n# TYPE b gauge\nb 1\na 2\n",
               "# HELP a x\n# TYPE a gauge\na{l=\"1\"} 1\na{l=\"1\"} 2\n", "# HELP a x\n# TYPE a gauge\na 1"]
        histogram = "# HELP h x\n# TYPE h histogram\n"
        bad += [histogram + 'h_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n',  # decreasing
                histogram + 'h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 3\n',  # +Inf != count
                histogram + 'h_bucket{le="1"} 1\nh_sum 1\nh_count 1\n',  # no +Inf
                histogram + 'h_bucket{le="2"} 1\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n']
        for text in bad:
            try:
                check_exposition(text)
            except Invalid:
                continue
            raise SystemExit(f"metrics_scrape: the checker accepted {text!r}")
        check_exposition('# HELP a x\n# TYPE a gauge\na{l="q\\"\\\\\\n"} +Inf\n')
        check_exposition('# HELP h x\n# TYPE h histogram\nh_bucket{le="0.5"} 1\nh_bucket{le="+Inf"} 2\n'
                         'h_sum 3.5\nh_count 2\n')
        print("self-test: ok")
        sys.exit(0)
    sys.exit(main(sys.argv))
