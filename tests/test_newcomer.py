"""A newcomer's first contact: the wheel, installed into a fresh virtual environment outside the
checkout, runs ``int4gemv-demo`` and one ``time_gemv`` call on Numba's simulator.

The fresh venv gets only the wheel (``--no-deps``); its dependencies (numba, numpy, ...) come from
this interpreter's site-packages through a ``.pth`` line, so the test needs no download beyond the
wheel's build backend. The checkout is neither the working directory nor on ``sys.path`` there,
so anything the wheel forgot to ship (a module, the workload JSON, the autotune table) fails here.
Marked ``slow`` (about half a minute); CI runs it.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("pyproject.toml", "README.md", "int4gemv", "lifecycle")


def _run(cmd, cwd, env, timeout=300):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"$ {' '.join(map(str, cmd))}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory):
    """``(python, scripts, home, env)`` of a fresh venv holding only the built wheel."""
    tmp = tmp_path_factory.mktemp("newcomer")
    src = tmp / "src"
    src.mkdir()
    for name in SHIPPED:  # build from a copy: the checkout gets no build/ or egg-info
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(
            ROOT / name, src / name,
            **({"ignore": shutil.ignore_patterns("__pycache__", "*.pyc")} if (ROOT / name).is_dir() else {}))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    wheel_cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(src)]
    built = subprocess.run(wheel_cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=300, check=False)
    offline = ("No matching distribution found for setuptools", "Could not find a version that satisfies")
    if built.returncode and any(m in built.stderr for m in offline):
        # No index (an offline GPU host): build with the interpreter's own setuptools instead.
        built = subprocess.run(wheel_cmd + ["--no-build-isolation"], cwd=tmp, env=env,
                               capture_output=True, text=True, timeout=300, check=False)
        if built.returncode:
            pytest.skip("building the wheel needs setuptools>=77, neither on PyPI (unreachable) nor "
                        f"installed here: {built.stderr.strip()[-200:]}")
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp / "dist").glob("int4gemv-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, env)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
          str(wheel)], tmp, env)
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env).strip())
    # Dependencies resolve as they do here (PYTHONPATH entries such as a carried numpy first, then
    # site-packages), but nothing of the checkout is visible.
    deps = [p for p in sys.path if p and Path(p).is_dir() and ROOT not in (Path(p).resolve(), *Path(p).resolve().parents)]
    lines = list(dict.fromkeys(deps + [sysconfig.get_paths()["purelib"]]))
    if importlib.util.find_spec("_numba_cuda_redirector") is not None:
        # numba-cuda's own .pth makes ``numba.cuda`` its package (not numba's bundled, older
        # one); a path added by a .pth line has its .pth files skipped, so run that line here too.
        lines.append("import _numba_cuda_redirector")
    (site / "zz_ci_dependencies.pth").write_text("\n".join(lines) + "\n")
    home = tmp / "home"
    home.mkdir()
    # Caches of other software (the NVIDIA driver's JIT cache, which a GPU host's driver creates
    # under $HOME/.nv; triton; cupy) go outside home: the test is about what int4gemv leaves.
    caches = tmp / "caches"
    env.update(CUDA_CACHE_PATH=str(caches / "nv"), TRITON_CACHE_DIR=str(caches / "triton"),
               CUPY_CACHE_DIR=str(caches / "cupy"), XDG_CACHE_HOME=str(caches / "xdg"))
    env.update(NUMBA_ENABLE_CUDASIM="1", HOME=str(home), VIRTUAL_ENV=str(venv),
               PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return python, venv / "bin", home, env


@pytest.mark.slow
def test_the_wheel_ships_the_library_and_its_data_but_no_bench_package(newcomer):
    python, _, home, env = newcomer
    out = _run([str(python), "-c", """
import importlib.util, int4gemv, int4gemv.benchmark as b
from int4gemv.benchmark.workloads import load_workload, workload_names
from int4gemv.benchmark.peers import available_peers
print(int4gemv.__file__)
print(importlib.util.find_spec("bench"))
print(workload_names(), len(load_workload()["projections"]))
import importlib.resources as r; print((r.files("int4gemv") / "autotune_table.json").is_file())
print(available_peers(["tinygemm"]))
"""], home, env)
    lines = out.splitlines()
    assert str(ROOT) not in lines[0] and "site-packages" in lines[0]
    assert lines[1] == "None"                                   # no top-level bench package
    assert lines[2] == "['qwen3_vl_2b_decode'] 8" and lines[3] == "True"
    if "torch is not installed" in lines[4]:
        assert "int4gemv[peers]" in lines[4]


@pytest.mark.slow
def test_a_newcomer_runs_the_demo_and_times_a_gemv_from_the_wheel(newcomer):
    python, scripts, home, env = newcomer
    demo = _run([str(scripts / "int4gemv-demo")], home, env)
    assert "OK: worst relative error" in demo and "simulator" in demo
    assert demo == _run([str(scripts / "int4gemv-demo")], home, env)   # seeded: the same output
    timed = _run([str(python), "-c", """
from int4gemv.benchmark import random_weight, time_gemv
r = time_gemv(random_weight(8, 64, rng=1), tuning="single_warp")
print(r)
assert r.ok and r.simulated and r.us is None, r
"""], home, env)
    assert "simulated (Numba CUDA simulator)" in timed and "not timed" in timed
    left = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert left == [], f"the demo and time_gemv left files in the working folder: {left}"
