"""`pip install cvlc` is light: the wheel asks only for the core (torch, numpy, pillow), installs into a fresh virtual
environment that has nothing else, runs the README's library snippet there, and a chapter module that needs an
extra says which one in one line."""
import importlib.metadata as md
import re, subprocess, sys, venv, zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from conftest import ROOT

CORE = {"torch", "numpy", "pillow"}


def _norm(name: str) -> str: return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = out.glob("cvlc-*.whl")
    return whl


def _requires(whl: Path) -> list[Requirement]:
    with zipfile.ZipFile(whl) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [Requirement(l.split(":", 1)[1].strip()) for l in meta.splitlines() if l.startswith("Requires-Dist:")]


def test_wheel_requires_only_the_core(wheel):
    plain = {_norm(r.name) for r in _requires(wheel) if r.marker is None}
    assert plain == CORE, f"the wheel's unconditional requirements should be the core {CORE}, got {plain}"
    extras = {str(r.marker) for r in _requires(wheel) if r.marker is not None}
    assert any('"course"' in m for m in extras) and any('"cli"' in m for m in extras)


def test_wheel_carries_the_license_and_the_classifiers(wheel):
    "The Apache-2.0 text (2026, cvlc developers) is in the repository and in the wheel; the usual PyPI classifiers."
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "Copyright 2026 cvlc developers" in text
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (lic,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert z.read(lic).decode() == text
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta
    classifiers = {l.split(":", 1)[1].strip() for l in meta.splitlines() if l.startswith("Classifier:")}
    wanted = {"Operating System :: OS Independent", "Intended Audience :: Science/Research",
              *(f"Programming Language :: Python :: 3.{v}" for v in range(10, 14))}
    assert wanted <= classifiers, wanted - classifiers
    assert any(c.startswith("Development Status :: ") for c in classifiers)


def _closure(names) -> set[str]:
    "The installed distributions that `names` need (without extras), by name."
    seen, todo = set(), list(names)
    while todo:
        n = _norm(todo.pop())
        if n in seen: continue
        seen.add(n)
        for req in md.requires(n) or []:
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate({"extra": ""}): todo.append(r.name)
    return seen


def _link_distributions(names: set[str], site: Path) -> None:
    "Make the installed files of `names` visible in `site` by symbolic links (no download, no copy of torch)."
    for n in names:
        dist = md.distribution(n)
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            src = Path(dist.locate_file(top))
            dst = site / top
            if src.exists() and not dst.exists() and top not in ("bin", "__pycache__"): dst.symlink_to(src)


@pytest.fixture(scope="module")
def core_venv(wheel, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(root)
    py = root / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    _link_distributions(_closure(CORE), site)
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return py


def _readme_library_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Use the library"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_snippet_runs_with_the_core_alone(core_venv, tmp_path):
    have = subprocess.run([str(core_venv), "-c", "import importlib.util as u; print([m for m in ('fastai', 'transformers', 'matplotlib', 'sklearn', 'papermill') if u.find_spec(m)])"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert have.stdout.strip() == "[]", f"the fresh environment should hold the core only, it has {have.stdout}"
    r = subprocess.run([str(core_venv), "-c", _readme_library_snippet()], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "SupCon loss" in r.stdout and "{1:" in r.stdout


def test_core_modules_import_and_extras_are_named(core_venv, tmp_path):
    ok = subprocess.run([str(core_venv), "-c", "import cvlc.core, cvlc.losses, cvlc.metrics, cvlc.world, cvlc.rpm, cvlc.data, cvlc.models; "
                         "w = cvlc.world.make_world(4, seed=1); print(len(w.captions) > 0)"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert ok.returncode == 0 and ok.stdout.strip() == "True", ok.stderr[-3000:]
    for mod, extra in [("cvlc.training", "course"), ("cvlc.viz", "course"), ("cvlc.simclr", "course")]:
        r = subprocess.run([str(core_venv), "-c", f"import {mod}"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
        last = r.stderr.strip().splitlines()[-1]
        assert r.returncode != 0 and f"pip install 'cvlc[{extra}]'" in last, last
    r = subprocess.run([str(core_venv), "-c", "from cvlc.models import HFTextEncoder; HFTextEncoder()"], capture_output=True, text=True, cwd=tmp_path)
    assert "pip install 'cvlc[course]'" in r.stderr.strip().splitlines()[-1]


def test_cli_outside_a_clone_lists_the_installed_chapters(core_venv, tmp_path):
    "The wheel carries the chapters: `cvlc list` works anywhere; `cvlc run` without the cli extra says which extra to install."
    exe = core_venv.parent / "cvlc"
    r = subprocess.run([str(exe), "list"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("00_core") and "10_simclr" in r.stdout
    r = subprocess.run([str(exe), "run", "core", "--profile", "smoke", "--out", str(tmp_path / "o")], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "pip install 'cvlc[cli]'" in r.stderr and "Traceback" not in r.stderr, r.stderr
