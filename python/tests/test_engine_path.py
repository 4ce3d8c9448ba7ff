"""Tests of libtune._engine_path (which tune program the package runs) and libtune._cli
(the wheel's `tune` command).

Run from the repository root:  PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import libtune._cli as cli
import libtune._engine_path as engine_path


def write(path, text, mode=0o755):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


class TuneBinary(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="libtune-engine-path-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        # No packaged program and an empty PATH unless a test gives them.
        self.packaged = os.path.join(self.tmp, "pkg", "bin", "tune")
        patcher = mock.patch.object(engine_path, "_PACKAGED", self.packaged)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.env = {"PATH": os.path.join(self.tmp, "empty")}

    def binary(self, **env):
        with mock.patch.dict(os.environ, dict(self.env, **env), clear=True):
            return engine_path.tune_binary()

    def test_libtune_tune_first(self):
        given = write(os.path.join(self.tmp, "mine", "tune"), "#!/bin/sh\n")
        write(self.packaged, "#!/bin/sh\n")
        self.assertEqual(self.binary(LIBTUNE_TUNE=given), given)

    def test_a_missing_libtune_tune_is_named(self):
        write(self.packaged, "#!/bin/sh\n")  # never a silent fall-back to another tune
        missing = os.path.join(self.tmp, "nope", "tune")
        with self.assertRaises(FileNotFoundError) as e:
            self.binary(LIBTUNE_TUNE=missing)
        self.assertIn("LIBTUNE_TUNE=" + missing, str(e.exception))

    def test_a_libtune_tune_that_is_not_executable_is_named(self):
        given = write(os.path.join(self.tmp, "mine", "tune"), "#!/bin/sh\n", mode=0o644)
        if os.access(given, os.X_OK):
            self.skipTest("root may execute anything here")
        with self.assertRaises(PermissionError) as e:
            self.binary(LIBTUNE_TUNE=given)
        self.assertIn("LIBTUNE_TUNE=" + given, str(e.exception))
        self.assertIn("not an executable file", str(e.exception))

    def test_the_packaged_program_before_the_path(self):
        write(self.packaged, "#!/bin/sh\n")
        write(os.path.join(self.tmp, "bin", "tune"), "#!/bin/sh\n")
        self.env["PATH"] = os.path.join(self.tmp, "bin")
        self.assertEqual(self.binary(), self.packaged)

    def test_the_path_without_the_wheels_own_console_script(self):
        script = os.path.join(self.tmp, "venv", "bin", "tune")
        write(script, "#!/usr/bin/python3\nimport sys\nfrom libtune._cli import main\nsys.exit(main())\n")
        real = write(os.path.join(self.tmp, "usr", "bin", "tune"), "#!/bin/sh\n")
        self.env["PATH"] = os.pathsep.join([os.path.dirname(script), os.path.dirname(real)])
        self.assertEqual(self.binary(), real)

    def test_none_says_what_to_do(self):
        with self.assertRaises(FileNotFoundError) as e:
            self.binary()
        text = str(e.exception)
        self.assertIn("LIBTUNE_TUNE", text)
        self.assertIn("pip install", text)
        self.assertIn("build-wheel.sh", text)


class Cli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="libtune-cli-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def run_cli(self, args, **env):
        """main(args) in a child Python (it replaces its process); its output."""
        code = "import sys; from libtune._cli import main; sys.exit(main(sys.argv[1:]))"
        full = {"PATH": os.path.join(self.tmp, "empty"), "PYTHONPATH": os.pathsep.join(sys.path)}
        full.update(env)
        return subprocess.run([sys.executable, "-c", code] + args, env=full, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=60)

    def test_it_runs_the_program_with_the_arguments(self):
        fake = write(os.path.join(self.tmp, "tune"), '#!/bin/sh\necho "$0" "$@"\nexit 3\n')
        p = self.run_cli(["run", "--samples", "3", "a b"], LIBTUNE_TUNE=fake)
        self.assertEqual((p.returncode, p.stdout), (3, fake + " run --samples 3 a b\n"), p.stderr)

    def test_a_wrong_libtune_tune_is_an_error_naming_it(self):
        p = self.run_cli(["--version"], LIBTUNE_TUNE=os.path.join(self.tmp, "missing"))
        self.assertEqual(p.returncode, 127)
        self.assertIn("tune: LIBTUNE_TUNE=" + os.path.join(self.tmp, "missing"), p.stderr)

    def test_main_without_a_program_returns_127(self):
        with mock.patch.object(cli, "tune_binary", side_effect=FileNotFoundError("no tune")), \
                mock.patch("sys.stderr") as err:
            self.assertEqual(cli.main(["--version"]), 127)
        self.assertIn("no tune", "".join(c.args[0] for c in err.write.call_args_list))


if __name__ == "__main__":
    unittest.main()
