"""A paper chapter is two pages: the lesson (the chapter notebook) teaches, its reproduction report
(`nbs/reports/<chapter>.ipynb`) holds the evidence. The lessons are held to a reader's budget: at most 4,000 words of
markdown and about 300 lines of code on the page that is not the library's, a drawn diagram of the method, and a
plain paragraph on what reproduces; no lesson, report or docstring sends a reader to something they cannot open."""
import ast, json, re

import pytest
import yaml

from conftest import NBS, ROOT

PAPER_CHAPTERS = ["10_simclr", "12_conclat", "13_grounding", "14_vgbert", "15_entailment", "16_mlcl"]
REWRITTEN = ["10_simclr", "12_conclat", "13_grounding", "14_vgbert", "15_entailment", "16_mlcl"]   # every paper chapter
MAX_WORDS, MAX_CODE_LINES = 4000, 330
REPRODUCES = "What reproduces here, and what does not"
# what a reader cannot open: the project's issues, the notes and sessions of the people who built it
UNREACHABLE = re.compile(r"\b(issues?|sessions?|issue note|issue's note|session's (?:note|experiments?))\b", re.I)


def _cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _src(cell) -> str:
    return "".join(cell["source"])


def _directives(cell) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^#\|\s*([\w-]+)", _src(cell), re.M)}


def markdown_words(path) -> int:
    "Words in the notebook's markdown cells (the prose a reader reads)."
    return sum(len(_src(c).split()) for c in _cells(path) if c["cell_type"] == "markdown")


def page_code_lines(path) -> int:
    "Non-blank lines of the code cells a reader sees on the page that are not the library's (no export, no hide)."
    hidden = {"export", "exporti", "hide", "default_exp"}
    return sum(sum(1 for line in _src(c).splitlines() if line.strip() and not line.startswith("#|"))
               for c in _cells(path) if c["cell_type"] == "code" and not _directives(c) & hidden)


def prose_and_strings(path) -> str:
    "The markdown of a notebook and the string literals and comments of its code: what a reader reads."
    out = []
    for c in _cells(path):
        s = _src(c)
        if c["cell_type"] == "markdown": out.append(s); continue
        out += [line.split("#", 1)[1] for line in s.splitlines() if "#" in line and not line.lstrip().startswith("#|")]
        try: out += [n.value for n in ast.walk(ast.parse(s)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        except SyntaxError: out.append(s)                      # a cell with IPython syntax: read it whole
    return "\n".join(out)


@pytest.mark.parametrize("chapter", PAPER_CHAPTERS)
def test_every_paper_chapter_has_its_report_after_it_in_the_sidebar(chapter):
    report = NBS / "reports" / f"{chapter}.ipynb"
    assert report.is_file(), f"{chapter} has no reproduction report at nbs/reports/{chapter}.ipynb"
    side = yaml.safe_load((NBS / "sidebar.yml").read_text())["website"]["sidebar"]["contents"]
    pages = [e for entry in side if isinstance(entry, dict) for e in entry["contents"]]
    assert pages[pages.index(f"{chapter}.ipynb") + 1] == f"reports/{chapter}.ipynb"
    first = next(_src(c) for c in _cells(report) if c["cell_type"] == "markdown")
    assert first.startswith("# ") and "reproduction report" in first.splitlines()[0].lower()


@pytest.mark.parametrize("chapter", REWRITTEN)
def test_lesson_keeps_to_the_reader_budget(chapter):
    path = NBS / f"{chapter}.ipynb"
    words, lines = markdown_words(path), page_code_lines(path)
    assert words <= MAX_WORDS, f"{chapter}: {words} words of markdown (budget {MAX_WORDS})"
    assert lines <= MAX_CODE_LINES, f"{chapter}: {lines} lines of code on the page that is not the library's"


@pytest.mark.parametrize("chapter", REWRITTEN)
def test_lesson_has_a_diagram_and_says_what_reproduces(chapter):
    cells = _cells(NBS / f"{chapter}.ipynb")
    md = "\n".join(_src(c) for c in cells if c["cell_type"] == "markdown")
    drawn = re.findall(r"!\[[^\]]*\]\((images/[^)\s]+\.svg)\)", md)
    assert drawn, f"{chapter}: no drawn diagram (a Markdown image of an SVG in nbs/images/)"
    for img in drawn: assert (NBS / img).is_file(), f"{chapter}: {img} is missing"
    assert re.search(rf"^##+ {re.escape(REPRODUCES)}", md, re.M), f"{chapter}: no '{REPRODUCES}' section"


@pytest.mark.parametrize("page", [f"{c}.ipynb" for c in PAPER_CHAPTERS] + [f"reports/{c}.ipynb" for c in PAPER_CHAPTERS])
def test_pages_send_no_reader_to_what_they_cannot_open(page):
    path = NBS / page
    found = sorted({m.group(0) for m in UNREACHABLE.finditer(prose_and_strings(path))})
    assert not found, f"{page} mentions {found}: name papers and talks, not the project's issues or sessions"


def test_library_docstrings_and_readme_send_no_reader_to_what_they_cannot_open():
    texts = {"README.md": (ROOT / "README.md").read_text()}
    for f in sorted((ROOT / "cvlc").glob("*.py")):
        tree = ast.parse(f.read_text())
        texts[f.name] = "\n".join(ast.get_docstring(n) or "" for n in ast.walk(tree)
                                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)))
    found = {name: sorted({m.group(0) for m in UNREACHABLE.finditer(t)}) for name, t in texts.items()}
    found = {k: v for k, v in found.items() if v}
    assert not found, f"docstrings or the README mention {found}"
