#!/usr/bin/env python3
"""scripts/layers.py names an include that crosses the process boundary."""
import importlib.util
import pathlib
import tempfile
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "layers.py"
spec = importlib.util.spec_from_file_location("layers", SCRIPT)
layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layers)


def tree(files):
    root = pathlib.Path(tempfile.mkdtemp())
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


class LayersTest(unittest.TestCase):
    def test_the_listener_may_not_include_a_session(self):
        src = tree({"host/worker/session/session.h": "", "host/listener/listener.cpp":
                    '#include "host/worker/session/session.h"\n'})
        found = layers.offences(src)
        self.assertEqual(len(found), 1)
        self.assertIn("includes host/worker/session/session.h", found[0])

    def test_allowed_includes_pass(self):
        src = tree({"host/common/log.h": "", "host/worker/jail/sandbox.h": "", "host/listener/listener.cpp":
                    '#include "host/common/log.h"\n#include "host/worker/jail/sandbox.h"\n#include <ggml.h>\n'})
        self.assertEqual(layers.offences(src), [])

    def test_a_folder_without_a_rule_fails(self):
        src = tree({"host/elsewhere/x.cpp": ""})
        self.assertIn("has no rule", layers.offences(src)[0])


if __name__ == "__main__":
    unittest.main()
