#!/usr/bin/env python3
"""scripts/docs-name-flags.py finds every flag and variable, and names each one missing."""
import importlib.util
import pathlib
import subprocess
import tempfile
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "docs-name-flags.py"
spec = importlib.util.spec_from_file_location("docs_name_flags", SCRIPT)
docs_name_flags = importlib.util.module_from_spec(spec)
spec.loader.exec_module(docs_name_flags)

HELP = """usage: server [options]

options:
  -h,    --help                 show this help and exit
  -l,    --listen ENDPOINT      where to listen; also for
                                --metrics, which is not defined here
         --no-repack            compute with mapped weights as they are
  -v,    --verbose              also log more

status of a running server:
  server status --connect unix:/path/to.sock [--json]

example:
  server --listen unix:/tmp/x.sock
  llama-cli -m model.gguf -ngl 99
"""

# A fake server: prints HELP for --help, and a status usage line for `status --help`.
FAKE_SERVER = """#!/usr/bin/env python3
import sys
if sys.argv[1:2] == ["status"]:
    print("usage: server status --connect unix:/path/to.sock [--json]")
else:
    print(open(sys.argv[0] + ".help").read(), end="")
"""


class DocsNameFlagsTest(unittest.TestCase):
    def test_reads_option_lines_and_usage_lines_only(self):
        self.assertEqual(
            docs_name_flags.flags_of_help(HELP),
            ["-h", "--help", "-l", "--listen", "--no-repack", "-v", "--verbose", "--connect", "--json"],
        )

    def test_troff_hyphens_and_fonts_count_as_the_flag(self):
        page = r".BR \-l \", \" \-\-listen \fIENDPOINT\fR" + "\n.B \\-\\-no\\-repack\n"
        self.assertEqual(docs_name_flags.names_missing(["-l", "--listen", "--no-repack"], page), [])

    def test_a_longer_flag_does_not_stand_for_a_shorter_one(self):
        text = "`--weight-store-size SIZE` and `--max-sessions-per-peer N`"
        self.assertEqual(
            docs_name_flags.names_missing(["--weight-store", "--max-sessions", "--weight-store-size"], text),
            ["--weight-store", "--max-sessions"],
        )

    def test_environment_variables_are_quoted_literals_of_the_sources(self):
        with tempfile.TemporaryDirectory() as folder:
            (pathlib.Path(folder) / "a.cpp").write_text(
                'getenv("GGML_REMOTE_ONE"); // GGML_REMOTE_COMMENT\n#define GGML_REMOTE_MACRO(x)\n'
            )
            (pathlib.Path(folder) / "sub").mkdir()
            (pathlib.Path(folder) / "sub" / "b.h").write_text('setting("GGML_REMOTE_TWO")\n')
            self.assertEqual(docs_name_flags.env_of_sources([folder]), ["GGML_REMOTE_ONE", "GGML_REMOTE_TWO"])

    def run_checker(self, man_text, reference_text):
        with tempfile.TemporaryDirectory() as folder:
            folder = pathlib.Path(folder)
            server = folder / "server"
            server.write_text(FAKE_SERVER)
            server.chmod(0o755)
            # Ten flags at least, or the checker suspects --help changed its layout.
            extra = "".join("         --flag-%d   more\n" % i for i in range(6))
            (folder / "server.help").write_text(HELP.replace("options:\n", "options:\n" + extra))
            (folder / "page.1").write_text(man_text)
            (folder / "REFERENCE.md").write_text(reference_text)
            (folder / "src").mkdir()
            (folder / "src" / "opt.cpp").write_text('getenv("GGML_REMOTE_SERVERS")')
            args = ["--server", str(server), "--man", str(folder / "page.1"), "--reference", str(folder / "REFERENCE.md")]
            run = subprocess.run(
                ["python3", str(SCRIPT), *args, "--sources", str(folder / "src")], capture_output=True, text=True
            )
        return run

    def test_passes_when_both_documents_name_everything(self):
        everything = "-h --help -l --listen --no-repack -v --verbose --connect --json "
        everything += " ".join("--flag-%d" % i for i in range(6))
        run = self.run_checker(everything, everything + " GGML_REMOTE_SERVERS")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)

    def test_fails_naming_each_missing_flag_and_variable(self):
        everything = "-h --help -l --listen --no-repack -v --verbose --connect --json "
        everything += " ".join("--flag-%d" % i for i in range(6))
        run = self.run_checker(everything.replace("--no-repack", ""), everything.replace("--json", ""))
        self.assertEqual(run.returncode, 1)
        self.assertIn("page.1 does not name --no-repack", run.stdout)
        self.assertIn("REFERENCE.md does not name --json", run.stdout)
        self.assertIn("REFERENCE.md does not name GGML_REMOTE_SERVERS", run.stdout)
        self.assertNotIn("does not name --listen", run.stdout)

    def test_a_flag_the_server_lacks_is_named_unless_another_program_has_it(self):
        text = "ggml-remote-server --listen X --lisen Y; llama-cli --rpc host:port; setpriv --reuid 1"
        self.assertEqual(docs_name_flags.unknown_flags(["--listen"], text), ["--lisen"])


if __name__ == "__main__":
    unittest.main()
