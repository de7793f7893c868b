#!/usr/bin/env python3
"""The module include-cycle check: no circle of includes between the modules of the given folders.

A module is a header and its source file taken as one node (x.h + x.cpp, or x.h alone, or x.cpp
alone); an edge A -> B means a file of A includes B's header. Within a layer (check_layers.py
judges the edges between layers) a circle such as dataset -> idx_dataset -> dataset means neither
module can be understood, tested or replaced without the other: the check fails on one, naming
each circle found.

    python3 tests/check_module_cycles.py ROOT FOLDER...   exit 0: no circle; 1: some (listed)
    python3 tests/check_module_cycles.py --self-test      a planted circle must be found

Python 3 standard library only. Includes are read from '#include "..."' lines and resolved
against ROOT; only modules inside the given folders count.
"""

import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SUFFIXES = (".h", ".cpp", ".cu", ".cuh")


def module_of(rel):
    """'runtime/data/feed.cpp' -> 'runtime/data/feed'."""
    return os.path.splitext(rel)[0]


def graph(root, folders):
    """Module -> the set of modules it includes (both within `folders`)."""
    edges = {}
    for folder in folders:
        base = os.path.join(root, folder)
        for name in sorted(os.listdir(base)):
            if not name.endswith(SUFFIXES):
                continue
            rel = os.path.join(folder, name).replace(os.sep, "/")
            node = module_of(rel)
            edges.setdefault(node, set())
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = os.path.normpath(m.group(1)).replace(os.sep, "/")
                    if not os.path.isfile(os.path.join(root, target)):
                        continue
                    if os.path.dirname(target) not in folders:
                        continue
                    other = module_of(target)
                    if other != node:
                        edges[node].add(other)
    return edges


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check(root, folders):
    found = cycles(graph(root, folders))
    for comp in found:
        print("include circle between modules (x.h + x.cpp as one): " + ", ".join(comp))
    return 1 if found else 0


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "lib"))

        def put(name, text):
            with open(os.path.join(d, "lib", name), "w") as f:
                f.write(text)

        put("a.h", "#pragma once\n")
        put("a.cpp", '#include "lib/a.h"\n#include "lib/b.h"\n')
        put("b.h", '#pragma once\n#include "lib/c.h"\n')
        put("c.h", "#pragma once\n")
        if check(d, ["lib"]) != 0:
            print("self-test: a tree without a circle failed")
            return 1
        put("c.cpp", '#include "lib/c.h"\n#include "lib/a.h"\n')  # a -> b -> c -> a
        found = cycles(graph(d, ["lib"]))
        if found != [["lib/a", "lib/b", "lib/c"]]:
            print(f"self-test: the planted circle a -> b -> c -> a was not found: {found}")
            return 1
    print("self-test: ok")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 3:
        print(__doc__)
        return 2
    return check(argv[1], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
