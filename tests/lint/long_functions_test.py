#!/usr/bin/env python3
"""scripts/long-functions.py finds what it should, and only that."""
import importlib.util
import pathlib
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "long-functions.py"
spec = importlib.util.spec_from_file_location("long_functions", SCRIPT)
long_functions = importlib.util.module_from_spec(spec)
spec.loader.exec_module(long_functions)


def lengths(text):
    return {long_functions.name_of(h): last - first + 1 for first, last, h in long_functions.functions(text)}


class LongFunctionsTest(unittest.TestCase):
    def test_counts_a_function_from_signature_to_closing_brace(self):
        body = "\n".join("    x += %d;" % i for i in range(10))
        self.assertEqual(lengths("int f(int x)\n{\n%s\n    return x;\n}\n" % body), {"f": 14})

    def test_lambdas_and_blocks_belong_to_their_function(self):
        text = "void g() {\n    auto h = [](int) {\n        return 1;\n    };\n    { h(1); }\n}\n"
        self.assertEqual(lengths(text), {"g": 6})

    def test_members_constructors_and_qualifiers(self):
        text = (
            "namespace a {\nclass C : public B {\n  public:\n    int get() const override {\n        return 1;\n    }\n};\n"
            "C::C(int v) : v_{v}, w_(v) {\n    ++v_;\n}\n"
            "auto C::make() -> C {\n    return C(1);\n}\n}  // namespace a\n"
        )
        self.assertEqual(lengths(text), {"get": 3, "C::C": 3, "C::make": 3})

    def test_ignores_initialisers_comments_strings_and_macros(self):
        text = (
            'const int table[] = {1, 2, 3};\n// void fake() {\nconst char *s = "int bad() {";\n'
            "#define X(name) \\\n    void name() {}\nstruct S {\n    int v{0};\n};\n"
        )
        self.assertEqual(lengths(text), {})

    def test_main_reports_failure_over_the_limit(self):
        import subprocess
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            source = pathlib.Path(folder) / "long.cpp"
            source.write_text("void long_one() {\n" + "    ;\n" * 90 + "}\nvoid short_one() {\n}\n")
            run = subprocess.run(["python3", str(SCRIPT), "--limit", "80", folder], capture_output=True, text=True)
        self.assertEqual(run.returncode, 1)
        self.assertIn("long_one", run.stdout)
        self.assertNotIn("short_one", run.stdout)


if __name__ == "__main__":
    unittest.main()
