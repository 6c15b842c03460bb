#!/usr/bin/env python3
"""House rule: no function in lib/ or programs/ longer than LIMIT lines (style.md).

Counts from the line that starts a definition at column 0 to its closing brace at column 0, the
layout every C, C++ and CUDA file here uses. Prints each function over the limit with its file,
line and length, and exits 1 when there is one.

usage: check_function_length.py [--limit N] [ROOT]   (ROOT: the repository, default .)"""
import os
import re
import sys

DEF = re.compile(r"^[A-Za-z_][\w\s\*,:<>]*?\b(\w+)\s*\(")
SOURCES = (".c", ".cu", ".cuh", ".cc", ".cpp")


def functions(path):
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        m = DEF.match(line)
        if (m and not line.rstrip().endswith(";") and "=" not in line.split("(")[0]
                and not line.startswith(("typedef", "return", "else", "#"))):
            j = i
            while j < len(lines) and j < i + 12 and not lines[j].rstrip().endswith(("{", ";")):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{"):
                k = j + 1
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                yield m.group(1), i + 1, k - i + 1
                i = k + 1
                continue
        i += 1


def main(argv):
    limit, root = 120, "."
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--limit" and args:
            limit = int(args.pop(0))
        else:
            root = a
    over = []
    for top in ("lib", "programs"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith(SOURCES):
                    p = os.path.join(folder, f)
                    over += [(n, os.path.relpath(p, root), name, at)
                             for name, at, n in functions(p) if n > limit]
    for n, p, name, at in sorted(over, reverse=True):
        print(f"{p}:{at}: {name} is {n} lines (limit {limit})")
    print(f"function length: {len(over)} over {limit} lines" if over else
          f"function length: every function in lib/ and programs/ within {limit} lines")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
