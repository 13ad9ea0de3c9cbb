"""Every notebook in notebooks/ runs top to bottom (simulator: tiny sizes; GPU: full size) and is
committed without outputs.

Each notebook runs twice: with no committed results (it must say so) and with a synthetic timed
results file (it must plot it), chosen through ``BENCH_RESULTS_DIR``. The kernel gets this
process's environment, so ``NUMBA_ENABLE_CUDASIM=1`` (set by conftest without a GPU) reaches it.

The Jupyter kernel is this interpreter: a kernel spec written into a temporary Jupyter data folder
(``JUPYTER_DATA_DIR``, ``IPYTHONDIR`` there too), so nothing is registered in the user's home and a
kernel registered there cannot pick another Python.
"""

import json
import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is a test extra (pip install -e .[test])")
nbclient = pytest.importorskip("nbclient", reason="nbclient is a test extra (pip install -e .[test])")
pytest.importorskip("ipykernel", reason="ipykernel is a test extra (pip install -e .[test])")
pytest.importorskip("matplotlib", reason="matplotlib is a test extra (pip install -e .[test])")

from numba import config  # noqa: E402

SIMULATED = bool(config.ENABLE_CUDASIM)
ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TIMEOUT_S = 600  # per cell; on a GPU the first cells compile kernels


def _outputs(nb):
    texts, images = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                texts.append(out.text)
            elif out.output_type in ("execute_result", "display_data"):
                texts.append(out.data.get("text/plain", ""))
                images += "image/png" in out.data
            elif out.output_type == "error":
                texts.append("\n".join(out.traceback))
    return "\n".join(texts), images


def test_there_is_a_notebook():
    assert NOTEBOOKS, "notebooks/*.ipynb is empty"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name} cell {i} has outputs"


KERNEL = "int4gemv-tests"


def _this_interpreter_as_kernel(folder: Path, monkeypatch) -> dict:
    """A kernel spec ``KERNEL`` running ``sys.executable`` in ``folder``; returns the env the kernel
    needs (Jupyter and IPython state kept in ``folder``)."""
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "int4gemv tests", "language": "python"}))
    state = {"JUPYTER_DATA_DIR": str(folder), "JUPYTER_RUNTIME_DIR": str(folder / "runtime"),
             "IPYTHONDIR": str(folder / "ipython"), "MPLCONFIGDIR": str(folder / "matplotlib")}
    for name, value in state.items():
        monkeypatch.setenv(name, value)
    return state


@pytest.mark.parametrize("results", ["none", "synthetic"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, results, tmp_path, monkeypatch):
    from test_bench import synthetic_doc

    _this_interpreter_as_kernel(tmp_path / "jupyter", monkeypatch)
    if results == "synthetic":
        (tmp_path / "nvidia-h200.json").write_text(json.dumps(synthetic_doc()))
    # The kernel finds the repository first, then whatever PYTHONPATH already held.
    path_list = [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = dict(os.environ, BENCH_RESULTS_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(path_list))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=TIMEOUT_S, kernel_name=KERNEL,
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute(env=env)
    text, images = _outputs(nb)
    assert "Traceback" not in text
    timed_here = not SIMULATED   # the compare() chart is drawn only when something was timed
    assert ("not timed" in text) == SIMULATED and "single_warp" in text
    if results == "none":
        assert "No benchmark results are committed yet" in text and images == int(timed_here)
    else:
        assert "NVIDIA H200" in text and images == 1 + int(timed_here)
