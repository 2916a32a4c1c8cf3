#!/usr/bin/env python3
"""scripts/packaged-socket.py names each file that misses or contradicts the packaged socket."""
import importlib.util
import pathlib
import subprocess
import sys
import tempfile
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "packaged-socket.py"
spec = importlib.util.spec_from_file_location("packaged_socket", SCRIPT)
packaged_socket = importlib.util.module_from_spec(spec)
spec.loader.exec_module(packaged_socket)

UNIT = "[Socket]\nListenStream=/run/ggml-remote/s.sock\nSocketMode=0660\n"
SOCKET = "/run/ggml-remote/s.sock"


class PackagedSocketTest(unittest.TestCase):
    def test_the_socket_and_its_directory_are_fine(self):
        text = "hostPath: /run/ggml-remote\nGGML_REMOTE_SERVERS=shm:/run/ggml-remote/s.sock.\n"
        self.assertEqual(packaged_socket.mistakes_in("spec", text, SOCKET), [])

    def test_another_path_under_run_is_named(self):
        text = "shm:/run/ggml-remote/s.sock and unix:/run/ggml-remote.sock\n"
        self.assertEqual(
            packaged_socket.mistakes_in("README", text, SOCKET),
            ["README names /run/ggml-remote.sock, neither the packaged socket /run/ggml-remote/s.sock nor its directory"],
        )

    def test_a_file_that_never_names_the_socket_is_named(self):
        self.assertEqual(
            packaged_socket.mistakes_in("server.conf", "keep-sessions\n", SOCKET),
            ["server.conf does not name the packaged socket /run/ggml-remote/s.sock"],
        )

    def test_a_metrics_endpoint_is_another_socket_on_purpose(self):
        text = "--metrics unix:/run/ggml-remote/metrics.sock, --connect unix:/run/ggml-remote/metrics.sock\n"
        self.assertEqual(len(packaged_socket.other_paths("doc", text, SOCKET)), 1)

    def test_troff_hyphens_are_read_as_hyphens(self):
        text = ".B /run/ggml\\-remote/old.sock\n"
        self.assertEqual(
            packaged_socket.other_paths("page.1", text, SOCKET),
            ["page.1 names /run/ggml-remote/old.sock, neither the packaged socket /run/ggml-remote/s.sock nor its directory"],
        )

    def test_sources_below_a_may_name_folder_need_not_name_the_socket(self):
        with tempfile.TemporaryDirectory() as folder:
            folder = pathlib.Path(folder)
            (folder / "sub").mkdir()
            (folder / "sub" / "a.cpp").write_text('const char *kSocket = "/run/ggml-remote/old.sock";\n')
            (folder / "b.h").write_text("// no socket at all\n")
            (folder / "data.bin").write_text("/run/ggml-remote/ignored.sock\n")
            names = [name for name, text in packaged_socket.texts_below(folder)]
            self.assertEqual([pathlib.Path(name).name for name in names], ["b.h", "a.cpp"])
            mistakes = [m for name, text in packaged_socket.texts_below(folder)
                        for m in packaged_socket.other_paths(name, text, SOCKET)]
            self.assertEqual(len(mistakes), 1)
            self.assertIn("a.cpp names /run/ggml-remote/old.sock", mistakes[0])

    def test_the_script_fails_on_a_mistake_and_passes_without(self):
        with tempfile.TemporaryDirectory() as folder:
            folder = pathlib.Path(folder)
            (folder / "unit").write_text(UNIT)
            (folder / "good").write_text("GGML_REMOTE_SERVERS=shm:/run/ggml-remote/s.sock\n")
            (folder / "bad").write_text("GGML_REMOTE_SERVERS=shm:/run/ggml-remote/old.sock\n")
            run = lambda *files: subprocess.run(  # noqa: E731
                [sys.executable, str(SCRIPT), "--socket-unit", str(folder / "unit"), *map(str, files)],
                capture_output=True, text=True)
            self.assertEqual(run(folder / "good").returncode, 0)
            bad = run(folder / "good", folder / "bad")
            self.assertEqual(bad.returncode, 1)
            self.assertIn("bad names /run/ggml-remote/old.sock", bad.stdout)
            self.assertIn("bad does not name the packaged socket", bad.stdout)


if __name__ == "__main__":
    unittest.main()
