#!/usr/bin/env python3
"""Tests of tests/check_docs.py on a copy of README.md and docs/: the copy passes; a broken link,
a link to a missing heading, a cb-train command with a flag it does not have, and an option
reference that differs from the option table each fail, named by file and line.

    python3 tests/check_docs_test.py CB_TRAIN
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CHECK = os.path.join(HERE, "check_docs.py")
CB_TRAIN = None  # set from argv


class DocsCheck(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="cb-docs-")
        shutil.copy(os.path.join(REPO, "README.md"), self.root)
        shutil.copytree(os.path.join(REPO, "docs"), os.path.join(self.root, "docs"))
        # What the pages link to outside docs/ (the C++ header, models/README.md, ...): the
        # repository's other entries, linked.
        for e in os.listdir(REPO):
            if e not in ("README.md", "docs") and not e.startswith((".", "build")):
                os.symlink(os.path.join(REPO, e), os.path.join(self.root, e))

    def tearDown(self):
        shutil.rmtree(self.root)

    def run_check(self):
        r = subprocess.run([sys.executable, CHECK, CB_TRAIN, "--root", self.root],
                           capture_output=True, text=True, check=False)
        return r.returncode, r.stdout + r.stderr

    def append(self, rel, text):
        with open(os.path.join(self.root, rel), "a", encoding="utf-8") as f:
            f.write(text)

    def lines(self, rel):
        with open(os.path.join(self.root, rel), encoding="utf-8") as f:
            return f.read().count("\n")

    def assert_fails(self, *expected):
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        for e in expected:
            self.assertIn(e, out)

    def test_the_copy_passes(self):
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)

    def test_broken_links_fail(self):
        n = self.lines("docs/data.md")
        self.append("docs/data.md", "\nSee [the packs](packs.md) and [SMA](sma.md#no-such-heading).\n")
        self.assert_fails(f"docs/data.md:{n + 2}: link to packs.md: no such file",
                          f"docs/data.md:{n + 2}: link to sma.md#no-such-heading: no heading")

    def test_a_flag_cb_train_does_not_have_fails(self):
        n = self.lines("README.md")
        self.append("README.md", "\n```sh\nbuild/cb-train m.onnx --data d \\\n    --learning-rate 0.1\n```\n")
        self.assert_fails(f"README.md:{n + 3}: `--learning-rate` in a cb-train command")
        n = self.lines("docs/sma.md")
        self.append("docs/sma.md", "\nWith `--sma-rules post-local` ...\n")
        self.assert_fails(f"docs/sma.md:{n + 2}: `--sma-rules`: not one of cb-train's options")

    def test_an_option_reference_out_of_date_fails(self):
        p = os.path.join(self.root, "docs", "cb-train.md")
        with open(p, encoding="utf-8") as f:
            text = f.read()
        with open(p, "w", encoding="utf-8") as f:
            f.write(text.replace("(INT, default `16`): examples per step", "(INT, default `32`): examples per step"))
        self.assert_fails("docs/cb-train.md: the option reference differs from the option table")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__.strip())
        sys.exit(2)
    CB_TRAIN = sys.argv.pop(1)
    unittest.main()
