"""The CPU example in README.md's lifecycle section runs as written, in a fresh process (it
switches to Numba's simulator first, which a process that already imported ``numba.cuda`` for a
GPU, such as this test run on a GPU, can no longer do)."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_simulated_driver_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    example = next(b for b in blocks if "SimDriver()" in b)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-c", example], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) < 0.05  # the replayed output is the new input's product
