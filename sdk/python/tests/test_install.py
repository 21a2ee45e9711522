"""`pip install ./sdk/python` works offline (the build backend is Debian's
setuptools, the dependencies already there) and installs a working package."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def test_pip_install(tmp_path):
    src = tmp_path / "src"
    # A copy: pip builds in the tree it is given, and the checkout stays clean.
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
    target = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps",
         "--disable-pip-version-check", "--target", str(target), str(src)],
        capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    env = dict(os.environ, PYTHONPATH=str(target))
    r = subprocess.run(
        [sys.executable, "-c", "import berth, berth.models as m; print(berth.__file__); "
         "print(m.Sandbox.__name__, berth.Client.__name__, berth.AsyncClient.__name__)"],
        capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    path, names = r.stdout.splitlines()
    assert path.startswith(str(target)) and names == "Sandbox Client AsyncClient"
