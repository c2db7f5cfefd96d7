"""The library is exactly what the notebooks export, the notebooks are clean, README.md is the home page."""
import ast, filecmp, itertools, json, re, shutil, subprocess
from pathlib import Path

import pytest

from conftest import BIN, NBS, ROOT, chapters


def _project_copy(tmp: Path) -> Path:
    "A copy of what nbdev reads (configuration, notebooks, the hand-kept __init__) without run outputs."
    shutil.copy2(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    shutil.copytree(NBS, tmp / "nbs", ignore=shutil.ignore_patterns("runs", ".ipynb_checkpoints", "__pycache__"))
    (tmp / "cvlc").mkdir()
    shutil.copy2(ROOT / "cvlc" / "__init__.py", tmp / "cvlc" / "__init__.py")
    return tmp


def _files(d: Path, pattern: str) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob(pattern)) if "__pycache__" not in p.parts and "runs" not in p.parts}


def test_library_is_what_the_notebooks_export(tmp_path):
    proj = _project_copy(tmp_path)
    subprocess.run([BIN / "nbdev-export"], cwd=proj, check=True, capture_output=True)
    exported, committed = _files(proj / "cvlc", "*.py"), _files(ROOT / "cvlc", "*.py")
    assert sorted(exported) == sorted(committed), "modules differ: run nbdev-export"
    stale = [f for f in exported if exported[f] != committed[f]]
    assert not stale, f"cvlc/ is not what the notebooks export (run nbdev-export): {stale}"


def test_notebooks_are_clean(tmp_path):
    proj = _project_copy(tmp_path)
    before = _files(proj / "nbs", "*.ipynb")
    subprocess.run([BIN / "nbdev-clean"], cwd=proj, check=True, capture_output=True)
    after = _files(proj / "nbs", "*.ipynb")
    dirty = [f for f in before if before[f] != after[f]]
    assert not dirty, f"notebooks not clean (run nbdev-clean): {dirty}"


def test_readme_is_the_home_page():
    from build_docs import readme_text
    assert (ROOT / "README.md").read_text() == readme_text(), "README.md is stale: python tools/build_docs.py --readme"


def _tagged(nb, tag): return [c for c in nb["cells"] if tag in c.get("metadata", {}).get("tags", [])]


@pytest.mark.parametrize("chapter", chapters(), ids=lambda c: c.name)
def test_chapter_has_one_parameters_cell_with_profile(chapter):
    nb = json.loads(chapter.path.read_text())
    cells = _tagged(nb, "parameters")
    assert len(cells) == 1, f"{chapter.name}: {len(cells)} cells tagged 'parameters', expected exactly one"
    tree = ast.parse("".join(cells[0]["source"]))
    assigned = [t.id for node in tree.body for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)]
    assert all(isinstance(n, (ast.Assign, ast.AnnAssign)) for n in tree.body), "the parameters cell holds only assignments"
    assert "PROFILE" in assigned, f"{chapter.name}: the parameters cell does not set PROFILE"


@pytest.mark.parametrize("chapter", chapters(), ids=lambda c: c.name)
def test_chapter_opens_with_hidden_colab_install_cell(chapter):
    nb = json.loads(chapter.path.read_text())
    first = "".join(nb["cells"][0]["source"])
    assert nb["cells"][0]["cell_type"] == "code" and first.startswith("#| hide"), "first cell must be a hidden code cell"
    assert "pip" in first and "install" in first and "cvlc" in first, "first cell must install cvlc"


def test_chapters_exist_and_are_in_order():
    names = [c.name for c in chapters()]
    assert names and names[0] == "00_core" and names == sorted(names)


def _code_cells(nb):
    for c in nb["cells"]:
        if c["cell_type"] == "code": yield "".join(c["source"])


@pytest.mark.parametrize("nb_path", sorted(NBS.rglob("[0-9a-z]*.ipynb")), ids=lambda p: p.name)
def test_no_cell_mixes_imports_with_other_code(nb_path):
    """nbdev's documentation processor re-runs every cell that contains an import; one that also runs other code
    breaks the docs build (or does work twice). Exported cells are exempt: their code only defines things."""
    if "runs" in nb_path.parts or ".ipynb_checkpoints" in nb_path.parts: return
    nb = json.loads(nb_path.read_text())
    bad = []
    for i, src in enumerate(_code_cells(nb)):
        # exported cells only define things, and the Colab install cell is meant to run anywhere; a hidden cell is
        # re-run like any other
        directives = itertools.takewhile(lambda line: line.startswith("#|"), src.lstrip().splitlines())
        if any(re.match(r"#\|\s*(export|exports|exporti|exec_doc)\b", d) for d in directives): continue
        if i == 0 and "# Colab / a fresh kernel" in src: continue
        try: tree = ast.parse(src)
        except SyntaxError: continue   # IPython magics
        # nbdev re-runs a cell if an import appears anywhere in it, even inside a function (ast.walk, as nbdev does)
        has_import = any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree))
        only_imports = all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body)
        if has_import and not only_imports: bad.append(src.splitlines()[0])
    assert not bad, f"{nb_path.name}: cells mixing imports with code: {bad}"


MAX_CELL_LINES = 120   # one idea per cell: a longer cell is split at its functions, each part introduced by prose
MAX_LINE_CHARS = 120   # code a reader can see whole on the docs site and in Colab without scrolling sideways


@pytest.mark.parametrize("chapter", chapters(), ids=lambda c: c.name)
def test_chapter_reads_as_a_lesson(chapter):
    "No code cell longer than MAX_CELL_LINES; the chapter ends with a summary and exercises."
    nb = json.loads(chapter.path.read_text())
    long = [(len(s.splitlines()), s.splitlines()[1][:60] if len(s.splitlines()) > 1 else s[:60])
            for s in _code_cells(nb) if len(s.splitlines()) > MAX_CELL_LINES]
    assert not long, f"{chapter.name}: code cells over {MAX_CELL_LINES} lines: {long}"
    prose = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    tail = prose[prose.rfind("\n## "):] if "\n## " in prose else prose
    assert "Exercises" in tail, f"{chapter.name}: the last section has no exercises"
    assert re.search(r"^## (Summary|What we learned|What we (tried|found))", prose, re.M), f"{chapter.name}: no summary section"


@pytest.mark.parametrize("nb_path", sorted(NBS.rglob("[0-9a-z]*.ipynb")), ids=lambda p: p.name)
def test_code_lines_fit_the_page(nb_path):
    "No line of a code cell is longer than MAX_LINE_CHARS characters."
    nb = json.loads(nb_path.read_text())
    wide = [line[:60] for s in _code_cells(nb) for line in s.splitlines() if len(line) > MAX_LINE_CHARS]
    assert not wide, f"{nb_path.name}: {len(wide)} code lines over {MAX_LINE_CHARS} characters, e.g. {wide[:3]}"
