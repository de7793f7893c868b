#!/usr/bin/env python3
"""Tests of tests/check_layers.py: back-edges planted in small temporary trees (one of them a copy
of a real runtime file) must fail the check, naming file:line and the edge; allowed edges, system
headers and build trees must not. Python 3 standard library only."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CHECK = os.path.join(HERE, "check_layers.py")


class LayerCheck(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="cb-layers-")

    def tearDown(self):
        shutil.rmtree(self.root)

    def write(self, rel, text="#pragma once\n"):
        p = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)

    def run_check(self):
        r = subprocess.run(
            [sys.executable, CHECK, self.root], capture_output=True, text=True, check=False
        )
        return r.returncode, r.stdout + r.stderr

    def assert_fails(self, *expected):
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        for e in expected:
            self.assertIn(e, out)

    def assert_passes(self):
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        self.assertIn("no forbidden edge", out)

    def test_planted_in_a_copy_of_a_runtime_file(self):
        with open(os.path.join(REPO, "runtime", "graph.cpp"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        self.write("runtime/graph.cpp", "\n".join(lines))
        self.assert_passes()
        last = max(i for i, l in enumerate(lines) if l.startswith("#include"))
        lines.insert(last + 1, '#include "sma/trainer.h"')
        self.write("runtime/graph.cpp", "\n".join(lines))
        self.assert_fails(
            f'runtime/graph.cpp:{last + 2}: forbidden edge runtime -> sma: #include "sma/trainer.h"'
        )

    def test_each_forbidden_edge_is_named(self):
        cases = [
            ("runtime/a.cpp", '#include "kernels/cpu/cpu_device.h"', "runtime -> kernels/cpu"),
            ("runtime/a.cpp", '#include "runtime/data/dataset.h"', "runtime -> data"),
            ("runtime/a.cpp", '#include "viz/svg.h"', "runtime -> viz"),
            ("kernels/common/a.h", '#include "kernels/cpu/cpu_device.h"',
             "kernels/common -> kernels/cpu"),
            ("kernels/cuda/a.cpp", '#include "kernels/cpu/cpu_device.h"',
             "kernels/cuda -> kernels/cpu"),
            ("kernels/cpu/a.cpp", '#include "kernels/cuda/launch.h"',
             "kernels/cpu -> kernels/cuda"),
            ("kernels/cuda/a.cu", '#include "sma/trainer.h"', "kernels/cuda -> sma"),
            ("runtime/data/a.cpp", '#include "kernels/common/scalar_math.h"',
             "data -> kernels/common"),
            ("importer/a.cpp", '#include "autodiff/autodiff.h"', "importer -> autodiff"),
            ("autodiff/a.cpp", '#include "importer/onnx_importer.h"', "autodiff -> importer"),
            ("sma/a.cpp", '#include "kernels/cpu/cpu_device.h"', "sma -> kernels/cpu"),
            ("sma/a.cpp", '#include "importer/onnx_importer.h"', "sma -> importer"),
            ("viz/a.cpp", '#include "sma/trainer.h"', "viz -> sma"),
            ("sma/a.cpp", "#include <tools/cb_train.h>", "sma -> tools"),
            ("sma/a.cpp", '#include "session/options.h"', "sma -> session"),
            ("kernels/cpu/a.cpp", '#include "session/devices.h"', "kernels/cpu -> session"),
            ("session/a.cpp", '#include "tools/inspect_report.h"', "session -> tools"),
        ]
        for rel, include, edge in cases:
            with self.subTest(rel=rel, include=include):
                shutil.rmtree(self.root)
                os.makedirs(self.root)
                # The included file exists (an angle include counts only then).
                target = include.split()[1][1:-1]
                self.write(target)
                self.write(rel, f"// a file\n{include}\n")
                self.assert_fails(f"{rel}:2: forbidden edge {edge}: {include}")

    def test_an_include_circle_between_modules_fails(self):
        # Within one layer, so only the circle is wrong: graph.cpp needs the catalog, whose header
        # needs the graph's; a header and its source are one module.
        self.write("runtime/graph.h")
        self.write("runtime/graph.cpp", '#include "runtime/graph.h"\n#include "runtime/op_catalog.h"\n')
        self.write("runtime/op_catalog.h", '#pragma once\n#include "runtime/graph.h"\n')
        self.write("runtime/op_catalog.cpp", '#include "runtime/op_catalog.h"\n')
        self.assert_fails(
            "include circle runtime/graph -> runtime/op_catalog -> runtime/graph "
            "(runtime/graph.cpp:2, runtime/op_catalog.h:2)"
        )
        # Broken by a module of its own for what the two share: passes.
        self.write("runtime/graph.cpp", '#include "runtime/graph.h"\n#include "runtime/op_info.h"\n')
        self.write("runtime/op_info.h")
        self.assert_passes()

    def test_relative_include_is_resolved_from_the_including_folder(self):
        self.write("runtime/data/dataset.h")
        self.write("runtime/a.cpp", '#include "data/dataset.h"\n')
        self.assert_fails("runtime/a.cpp:1: forbidden edge runtime -> data")
        self.write("runtime/a.cpp", '#include "../sma/trainer.h"\n')
        self.assert_fails("runtime/a.cpp:1: forbidden edge runtime -> sma")

    def test_a_source_in_no_layer_fails(self):
        self.write("kernels/geometry.h")
        self.assert_fails("kernels/geometry.h: a source in no layer")

    def test_allowed_edges_system_headers_and_build_trees_pass(self):
        self.write("runtime/device.h")
        self.write("runtime/data/dataset.h", '#include "runtime/device.h"\n')
        self.write("kernels/common/scalar_math.h", '#include "runtime/device.h"\n')
        self.write("kernels/cpu/a.cpp", '#include "kernels/common/scalar_math.h"\n#include "a.h"\n')
        self.write("kernels/cpu/a.h", "#include <vector>\n#include <doctest/doctest.h>\n")
        self.write("autodiff/autodiff.h", '#include "runtime/device.h"\n')
        self.write("sma/trainer.h",
                   '#include "runtime/data/dataset.h"\n#include "autodiff/autodiff.h"\n')
        self.write("viz/svg.h", '#include "runtime/device.h"\n')
        self.write("tools/cb_train.cpp",
                   '#include "sma/trainer.h"\n#include "kernels/cpu/a.h"\n#include "viz/svg.h"\n')
        self.write("tests/test_a.cpp", '#include "kernels/cpu/a.h"\n#include "sma/trainer.h"\n')
        # A build tree's generated sources are not ours to judge.
        self.write("build/CMakeCache.txt", "")
        self.write("build/cuda_host/x.cpp", '#include "sma/trainer.h"\n')
        self.write("out/CMakeCache.txt", "")
        self.write("out/x.cpp", '#include "sma/trainer.h"\n')
        self.assert_passes()


if __name__ == "__main__":
    unittest.main()
