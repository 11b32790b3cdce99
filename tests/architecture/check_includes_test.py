#!/usr/bin/env python3
"""Tests check_includes.py on small trees, then runs it on the repository.

Usage: check_includes_test.py REPO_ROOT
"""

import os
import subprocess
import sys
import tempfile
import unittest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "check_includes.py")
REPO = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else None

TABLE = """# Architecture
## The parts
| part | folder | library | owns | may include |
|---|---|---|---|---|
| low | `lib/low/` | | | `base/` |
| high | `lib/high/` | | | `base/`, `lib/low/` |
| base | `base/` | | | `base/` |
| tests | `tests/` | | | anything |
## Next section
| x | `lib/` | | | anything |
"""


def run(root):
    result = subprocess.run([sys.executable, CHECKER, root],
                            capture_output=True, text=True)
    return result.returncode, result.stdout


class CheckIncludesTest(unittest.TestCase):

    def tree(self, files):
        root = tempfile.mkdtemp()
        files = dict(files)
        files["docs/architecture.md"] = TABLE
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        return root

    def test_includes_down_and_outside_pass(self):
        code, out = run(self.tree({
            "base/b.h": "",
            "lib/low/l.h": '#include "base/b.h"\n#include "absl/status/status.h"\n',
            "lib/high/h.cc": '#include "lib/low/l.h"\n#include "lib/high/h.h"\n',
            "tests/t.cc": '#include "lib/high/h.h"\n',
        }))
        self.assertEqual(code, 0, out)
        self.assertIn("0 problems", out)

    def test_an_upward_include_fails_naming_the_file(self):
        code, out = run(self.tree({
            "lib/low/l.cc": '#include "lib/high/h.h"\n',
            "lib/high/h.h": "",
        }))
        self.assertEqual(code, 1, out)
        self.assertIn("lib/low/l.cc includes lib/high/h.h", out)

    def test_a_file_in_no_part_fails(self):
        code, out = run(self.tree({"lib/stray.cc": ""}))
        self.assertEqual(code, 1, out)
        self.assertIn("lib/stray.cc: in no part", out)

    @unittest.skipIf(REPO is None, "no repository root given")
    def test_the_repository_keeps_its_rules(self):
        code, out = run(REPO)
        self.assertEqual(code, 0, out)


if __name__ == "__main__":
    unittest.main()
