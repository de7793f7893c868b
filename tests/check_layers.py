#!/usr/bin/env python3
"""The include-layer check (docs: DESIGN.md's folder table, CMakeLists.txt's library comment).

Reads every #include of the C++/CUDA sources under ROOT (default: the repository holding this
script) and fails on an edge the layer table below forbids, naming file:line, the two layers and
what the including layer may use; and on a circle among modules (a module is a header and its
sources: x.h, x.cpp, x.cu are one), naming each include that closes it, since two modules that
need each other are one concern split in two, or share a third that wants its own file. Static libraries do not catch such an edge: a header included
against the layers still compiles and links as long as the final binary links both libraries.

    python3 tests/check_layers.py [ROOT]      exit 0: no forbidden edge; 1: some (listed); 2: usage

Python 3 standard library only. A source file under ROOT in no layer is an error too, so a new
folder of sources has to be placed in the table. Build trees (a folder holding CMakeCache.txt,
or a top-level build*) and hidden folders are skipped.
"""

import os
import re
import sys

# Layer -> its folder (relative to ROOT, '/'-separated). A file belongs to the layer of the
# longest folder that holds it (runtime/data/ is not runtime/).
LAYERS = {
    "runtime": "runtime/",
    "data": "runtime/data/",
    "kernels/common": "kernels/common/",
    "kernels/cpu": "kernels/cpu/",
    "kernels/cuda": "kernels/cuda/",
    "importer": "importer/",
    "autodiff": "autodiff/",
    "sma": "sma/",
    "viz": "viz/",
    "session": "session/",
    "api": "include/crossbow/",
    "python": "python/",
    "tools": "tools/",
    "tests": "tests/",
}

ANY = frozenset(LAYERS)

# Layer -> the other layers it may include (every layer may include itself). Lowest first.
ALLOWED = {
    # The bottom: IR, op catalog, planner, executor, Device and Collective interfaces.
    "runtime": frozenset(),
    # Element math and geometry shared by the backends.
    "kernels/common": frozenset({"runtime"}),
    # One layer each on the runtime; a backend knows neither the other backend nor the trainer.
    "data": frozenset({"runtime"}),
    "importer": frozenset({"runtime"}),
    "autodiff": frozenset({"runtime"}),
    "kernels/cpu": frozenset({"runtime", "kernels/common"}),
    "kernels/cuda": frozenset({"runtime", "kernels/common"}),
    # The HTML views (cb_viz): run reports and graph views over the runtime.
    "viz": frozenset({"runtime"}),
    # The trainer: given its devices and collective, it knows no backend and no ONNX.
    "sma": frozenset({"runtime", "data", "autodiff"}),
    # A training session (cb_session): makes the devices, imports the model, drives the trainer
    # and records the run; the library's top layer.
    "session": frozenset(
        {"runtime", "data", "importer", "autodiff", "kernels/common", "kernels/cpu",
         "kernels/cuda", "viz", "sma"}
    ),
    # The public C++ API's header (implemented in session/api.cpp): it includes none of ours, so
    # a user's program sees nothing else of crossbow.
    "api": frozenset(),
    # The Python module: the public API only.
    "python": frozenset({"api"}),
    # On top.
    "tools": ANY,
    "tests": ANY,
}

SOURCE_SUFFIXES = (".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".inc", ".ipp")

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(rel):
    """The layer of a '/'-separated path relative to ROOT, or None."""
    best = None
    for name, folder in LAYERS.items():
        if rel.startswith(folder) and (best is None or len(folder) > len(LAYERS[best])):
            best = name
    return best


def sources(root):
    """Every C++/CUDA source under root, as '/'-separated paths relative to it, sorted."""
    out = []
    for d, dirs, files in os.walk(root):
        top = os.path.relpath(d, root) == "."
        dirs[:] = sorted(
            x
            for x in dirs
            if not x.startswith(".")
            and not (top and x.startswith("build"))
            and not os.path.exists(os.path.join(d, x, "CMakeCache.txt"))
        )
        for f in files:
            if f.endswith(SOURCE_SUFFIXES):
                out.append(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/"))
    return sorted(out)


def target_of(root, rel, quote, path):
    """What `#include <path>` / `"path"` in file rel names, relative to root, or None when it is
    not one of ours (a system or third-party header)."""
    if quote == '"':  # the including file's folder first, as the compiler searches
        local = os.path.normpath(os.path.join(os.path.dirname(rel), path)).replace(os.sep, "/")
        if not local.startswith("../") and os.path.isfile(os.path.join(root, local)):
            return local
        if path.startswith(("./", "../")):  # spelled relative: judged by its text
            return local if layer_of(local) else None
    p = os.path.normpath(path).replace(os.sep, "/")
    if layer_of(p) is None:
        return None
    # <...> only when the file is ours (a system header may share a first folder name);
    # "..." by its text, so an include of a header that does not exist yet is judged too.
    if quote == "<" and not os.path.isfile(os.path.join(root, p)):
        return None
    return p


def module_of(rel):
    """x.h, x.cpp, x.cu, ... -> x."""
    return os.path.splitext(rel)[0]


def circles(deps):
    """The include circles of a module graph {module: {module: "file:line"}}: one list of
    modules per strongly connected component of more than one, each a closed path through it."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):  # Tarjan's algorithm; module graphs are shallow enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
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
                comps.append(set(comp))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    out = []
    for comp in comps:  # a shortest way from the component's first module back to itself
        start = min(comp)
        prev, frontier = {start: None}, [start]
        end = None
        while frontier and end is None:
            nxt = []
            for v in frontier:
                for w in sorted(deps.get(v, ())):
                    if w == start:
                        end = v
                        break
                    if w in comp and w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if end is not None:
                    break
            frontier = nxt
        path = [end]
        while prev[path[-1]] is not None:
            path.append(prev[path[-1]])
        out.append(list(reversed(path)))
    return sorted(out)


def check(root):
    """(errors, files checked, project includes checked)."""
    errors, edges = [], 0
    deps = {}  # module -> {module it includes: the first file:line that does}
    files = sources(root)
    for rel in files:
        layer = layer_of(rel)
        if layer is None:
            errors.append(
                f"{rel}: a source in no layer: place its folder in the layer table "
                f"(tests/check_layers.py)"
            )
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = target_of(root, rel, m.group(1), m.group(2))
                if target is None:
                    continue
                edges += 1
                if module_of(target) != module_of(rel):
                    deps.setdefault(module_of(rel), {}).setdefault(module_of(target), f"{rel}:{n}")
                to = layer_of(target)
                if to != layer and to not in ALLOWED[layer]:
                    may = ", ".join(sorted({layer} | ALLOWED[layer]))
                    spelled = line.strip()
                    errors.append(
                        f"{rel}:{n}: forbidden edge {layer} -> {to}: {spelled} "
                        f"({layer} may include only {may})"
                    )
    for path in circles(deps):
        ring = path + [path[0]]
        how = ", ".join(deps[a][b] for a, b in zip(ring, ring[1:]))
        errors.append(
            f"include circle {' -> '.join(ring)} ({how}): move what they share into a module "
            f"of its own, or join them"
        )
    return errors, len(files), edges


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1] in ("-h", "--help")):
        print(__doc__.strip())
        return 2
    root = argv[1] if len(argv) == 2 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(root):
        print(f"check_layers: {root} is not a folder", file=sys.stderr)
        return 2
    errors, files, edges = check(root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_layers: {len(errors)} error(s) in {files} files", file=sys.stderr)
        return 1
    print(
        f"check_layers: {files} files, {edges} includes of ours, no forbidden edge, "
        f"no include circle"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
