"""The workspace's types with the most inherent methods (issue 40 asks for at most 40 each).

Counts the `fn` items at the top level of every inherent `impl` block (not `impl Trait for`) in
the tracked Rust sources outside tests and fuzzing, summed per crate and type name. A text scan,
not a parser: a brace inside a string or a `fn` in a macro can shift a count by one.

Usage: python3 scripts/python/type_methods.py [HOW_MANY]   (run from the repository's top)
"""

import collections
import re
import subprocess
import sys

IMPL = re.compile(r"\bimpl\b(?:<[^{]*?>)?\s+([^{;]*?)\s*\{")
TOKEN = re.compile(r"[{}]|\bfn\s+\w+")


def methods_per_type():
    files = subprocess.check_output(["git", "ls-files", "*.rs"], text=True).split()
    counts = collections.Counter()
    for path in files:
        if "/tests/" in path or path.startswith("fuzz"):
            continue
        with open(path, encoding="utf-8") as source:
            text = re.sub(r"//[^\n]*", "", source.read())
        for found in IMPL.finditer(text):
            head = found.group(1)
            if " for " in head:
                continue
            name = re.sub(r"<.*", "", head).strip().split("::")[-1]
            depth, end = 1, found.end()
            while depth and end < len(text):
                depth += {"{": 1, "}": -1}.get(text[end], 0)
                end += 1
            level, methods = 0, 0
            for token in TOKEN.finditer(text[found.end():end]):
                if token.group(0) == "{":
                    level += 1
                elif token.group(0) == "}":
                    level -= 1
                elif level == 0:
                    methods += 1
            counts[(path.split("/src/")[0], name)] += methods
    return counts


if __name__ == "__main__":
    how_many = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    for (crate, name), methods in methods_per_type().most_common(how_many):
        print(f"{methods:4} {name} ({crate})")
