#!/usr/bin/env python3
"""Lists the C++ functions longer than a limit, longest first; exits 1 if any.

    scripts/long-functions.py [--limit 80] [PATH...]     (default: src)

A function's length runs from the first line of its signature to its closing
brace, as universal-ctags counts it; lambdas count toward the function that holds
them. The scan is lexical (comments, literals and preprocessor lines removed, then
braces matched), which is enough for this project's code and needs only python3.
"""
import argparse
import pathlib
import re
import sys

SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc"}
# What a function's header ends with: its parameter list, then qualifiers or a
# trailing return type.
FUNCTION_TAIL = re.compile(r"\)\s*(?:const|noexcept|override|final|mutable|&|&&|\s|->\s*[\w:<>,\s*&]+)*$")
CONSTRUCTOR_INIT = re.compile(r"\)\s*:\s*[\w:]+\s*[({]")
ACCESS_LABELS = re.compile(r"\s*(?:(?:public|private|protected)\s*:(?!:)\s*)*")
SCOPE_HEAD = re.compile(r"^(?:template\s*<.*>\s*)?(?:namespace|class|struct|union|enum|extern)\b", re.S)


def blank_out(text):
    """Replaces comments, literals and preprocessor lines with spaces, keeping newlines."""
    pattern = re.compile(
        r'R"(?P<delim>[^(\s]*)\(.*?\)(?P=delim)"'  # raw string
        r'|"(?:\\.|[^"\\\n])*"'  # string
        r"|'(?:\\.|[^'\\\n])*'"  # character
        r"|//[^\n]*"  # line comment
        r"|/\*.*?\*/"  # block comment
        r"|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*",  # preprocessor line with continuations
        re.S | re.M,
    )
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def is_function_header(header):
    header = " ".join(header.split())
    if not header or SCOPE_HEAD.match(header) or "=" in header.split("(")[0]:
        return False
    return bool(FUNCTION_TAIL.search(header) or CONSTRUCTOR_INIT.search(header))


def functions(text):
    """Yields (first line, last line, header) of each function body in the text."""
    code = blank_out(text)
    line_of = [0] * (len(code) + 1)
    line = 1
    for i, ch in enumerate(code):
        line_of[i] = line
        if ch == "\n":
            line += 1
    header_start = 0
    i = 0
    while i < len(code):
        ch = code[i]
        if ch == ";" or ch == "}":
            header_start = i + 1
        elif ch == "{":
            header_start += ACCESS_LABELS.match(code, header_start, i).end() - header_start
            header = code[header_start:i]
            close = matching_brace(code, i)
            if is_function_header(header):
                first = header_start + len(header) - len(header.lstrip())
                yield line_of[first], line_of[close], " ".join(header.split())
                i, header_start = close, close + 1
            elif SCOPE_HEAD.match(" ".join(header.split())) or not header.strip():
                header_start = i + 1  # a namespace, class or block: scan inside it
            else:
                i = close  # a brace initialiser: part of the header that follows
        i += 1


def matching_brace(code, open_at):
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] == "{":
            depth += 1
        elif code[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(code) - 1


def name_of(header):
    before_params = header.split("(")[0].split()
    return before_params[-1] if before_params else header[:40]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=80)
    parser.add_argument("paths", nargs="*", default=["src"])
    args = parser.parse_args()
    found = []
    for root in args.paths:
        root = pathlib.Path(root)
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES)
        for path in files:
            for first, last, header in functions(path.read_text(errors="replace")):
                if last - first + 1 > args.limit:
                    found.append((last - first + 1, f"{path}:{first}", name_of(header)))
    for length, where, name in sorted(found, reverse=True):
        print(f"{length:5d}  {where}  {name}")
    if found:
        print(f"{len(found)} function(s) longer than {args.limit} lines", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
