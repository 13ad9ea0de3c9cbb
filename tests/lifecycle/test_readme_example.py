"""The CPU example in README.md's lifecycle section runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_simulated_driver_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    example = next(b for b in blocks if "SimDriver()" in b)
    exec(compile(example, str(README), "exec"), {})
