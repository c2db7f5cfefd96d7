"""Build the offline documentation site (and README.md) from the notebooks, without Quarto.

Each notebook is executed (chapters at a profile through `cvlc.cli.run_chapter`, the other pages as they
are), or taken already executed from a run folder (`--from-run runs/<timestamp>`); nbdev's own documentation
processors then turn it into a docs notebook (`show_doc` cells rendered, `#| hide` cells and export
directives dropped); nbconvert renders that to HTML with MathJax served from the site itself.

    python tools/build_docs.py --profile smoke --out _site
    python tools/build_docs.py --readme            # rewrite README.md from nbs/index.ipynb
"""
import argparse, html, os, re, shutil, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / "nbs"
TEMPLATES = Path(__file__).resolve().parent / "docs_template"


def page_name(nb: Path) -> str:
    "Site path of a notebook, as nbdev names pages: `00_core.ipynb` -> `core.html`, `api/cli.ipynb` -> `api/cli.html`."
    from nbdev.config import nbpath2html
    return nbpath2html(nb.relative_to(NBS)).as_posix()


def notebooks() -> list[Path]:
    "Every notebook of the site, home page first."
    nbs = [p for p in sorted(NBS.rglob("*.ipynb")) if not any(part.startswith((".", "_")) or part == "runs" for part in p.relative_to(NBS).parts)]
    return sorted(nbs, key=lambda p: (p.name != "index.ipynb", p.relative_to(NBS).parts[:-1], p.name))


def execute(nb: Path, dest: Path, profile: str, from_run: Path | None) -> Path:
    "An executed copy of `nb` in `dest`: from `from_run` when it holds one, else run now."
    from cvlc.cli import Chapter, run_chapter, _CHAPTER_RE, _header
    out = dest / nb.relative_to(NBS)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = from_run / nb.stem / f"{nb.stem}.ipynb" if from_run else None
    if done is not None and done.is_file():
        shutil.copy2(done, out)
    elif _CHAPTER_RE.match(nb.stem):
        run_chapter(Chapter(nb.stem, nb, *_header(nb)), profile, out=out.parent / f".run-{nb.stem}")
        shutil.move(out.parent / f".run-{nb.stem}" / f"{nb.stem}.ipynb", out)
    else:
        import papermill
        papermill.execute_notebook(str(nb), str(out), cwd=str(nb.parent), progress_bar=False, kernel_name="python3",
                                   extra_arguments=["--IPKernelApp.log_level=ERROR"])
    return out


_QUARTO_LINK = re.compile(r'\[([^\]]+)\]\(([^)\s]+)\)\{([^}]*)\}')  # [text](url){target="_blank" ...}
_DIRECTIVE = re.compile(r"^#\|\s*(echo|output|include)\s*:\s*(\w+)\s*$", re.M)


def _apply_quarto_options(nb) -> None:
    "Honour the cell options nbdev's processors leave for Quarto: `include: false`, `echo: false`, `output: false`."
    keep = []
    for cell in nb.cells:
        opts = dict(_DIRECTIVE.findall(cell.source)) if cell.cell_type == "code" else {}
        cell.source = _DIRECTIVE.sub("", cell.source).strip("\n") if opts else cell.source
        if opts.get("include") == "false": continue
        if "injected-parameters" in cell.metadata.get("tags", []): continue  # papermill's copy of the parameters
        if opts.get("echo") == "false": cell.metadata.setdefault("tags", []).append("remove_input")
        if opts.get("output") == "false": cell.outputs = []
        for out in cell.get("outputs", []):
            md = out.get("data", {}).get("text/markdown")
            if md: out["data"]["text/markdown"] = _QUARTO_LINK.sub(r'<a href="\2" \3>\1</a>', md)
        if cell.cell_type == "code" and not cell.source.strip() and not cell.get("outputs"): continue
        keep.append(cell)
    nb.cells = keep


def _frontmatter(nb) -> dict:
    "Title and description from the raw YAML cell nbdev's FrontmatterProc writes, then drop that cell."
    import yaml
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "raw" and cell.source.startswith("---"):
            meta = yaml.safe_load(cell.source.strip().strip("-")) or {}
            del nb.cells[i]
            return meta
    return {}


def process(executed: Path):
    "The executed notebook through nbdev's documentation processors, as an nbformat notebook plus its front matter."
    import nbformat
    from fastcore.nbio import read_nb, write_nb
    from nbdev.processors import FilterDefaults
    nb = read_nb(executed)
    FilterDefaults()(nb)
    tmp = executed.with_suffix(".proc.ipynb")
    write_nb(nb, tmp)
    nb = nbformat.read(tmp, as_version=4)
    meta = _frontmatter(nb)
    _apply_quarto_options(nb)
    for cell in nb.cells:  # papermill's per-cell metadata is noise on a page
        cell.metadata.pop("papermill", None); cell.metadata.pop("execution", None)
    return nb, meta


_LINK = re.compile(r'(href|src)="([^"#:?]+?)\.ipynb(#[^"]*)?"')


def _relink(body: str, page: Path, site_pages: dict[str, str]) -> str:
    "Point links to notebooks at their pages: `00_core.ipynb` -> `core.html`, relative to the page."
    def sub(m):
        target = (NBS / page.parent / f"{m.group(2)}.ipynb").resolve()
        rel = site_pages.get(str(target))
        if rel is None: return m.group(0)
        href = os.path.relpath(rel, page.parent.as_posix() or ".")
        return f'{m.group(1)}="{href}{m.group(3) or ""}"'
    return _LINK.sub(sub, body)


def figures_dir(page: str) -> str:
    "The folder, beside a page, that holds its figures: `core.html` -> `core_files`."
    return Path(page).with_suffix("").name + "_files"


def render(nb, meta: dict, page: str, pages: list[dict], site_pages: dict[str, str]) -> tuple[str, dict[str, bytes]]:
    "One page of the site as HTML, and its figures (file name relative to the page -> bytes)."
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import ExtractOutputPreprocessor, TagRemovePreprocessor
    depth = page.count("/")
    root = "../" * depth
    ex = HTMLExporter(template_name="cvlc", extra_template_basedirs=[str(TEMPLATES)],
                      exclude_input_prompt=True, exclude_output_prompt=True)
    ex.register_preprocessor(TagRemovePreprocessor(remove_input_tags={"remove_input"}, enabled=True), enabled=True)
    # figures become files beside the page (light pages, images a reader can open or save), not base64 in the HTML
    ex.register_preprocessor(ExtractOutputPreprocessor(extract_output_types={"image/png", "image/jpeg", "image/svg+xml"},
                                                       enabled=True), enabled=True)
    ex.mathjax_url = f"{root}mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
    nav = [dict(p, current=p["href"] == page) for p in pages]
    resources = {"metadata": {"name": meta.get("title", page)}, "output_files_dir": figures_dir(page),
                 "cvlc": {"root": root, "pages": nav, "title": meta.get("title", ""),
                          "description": meta.get("description", "")}}
    body, res = ex.from_notebook_node(nb, resources=resources)
    return _local_anchors(_relink(body, Path(page), site_pages), root), res.get("outputs", {})


_HEADING_ID = re.compile(r'(<h[1-6][^>]*\sid=")([^"]+)(")')
_SAME_PAGE = re.compile(r'(href="#)([^"]+)(")')


def _local_anchors(body: str, root: str) -> str:
    "Links into the hosted docs become relative; heading ids are lower-cased, as Quarto (and so nbdev's links) has them."
    from nbdev.config import get_config
    cfg = get_config()
    hosted = f"{cfg.doc_host}{cfg.doc_baseurl}".rstrip("/") + "/"
    if cfg.doc_host: body = body.replace(f'href="{hosted}', f'href="{root}')
    low = lambda m: m.group(1) + m.group(2).lower() + m.group(3)
    return _SAME_PAGE.sub(low, _HEADING_ID.sub(low, body))


def copy_assets(out: Path) -> None:
    "The stylesheet and a local MathJax, so that no page needs the network."
    import jupyter_server_mathjax
    shutil.copy2(NBS / "styles.css", out / "styles.css")
    mj = Path(jupyter_server_mathjax.__file__).parent / "static"
    shutil.copytree(mj, out / "mathjax", dirs_exist_ok=True)


def build_site(out: Path, profile: str = "smoke", from_run: Path | None = None) -> list[Path]:
    "Execute, process and render every notebook into `out`; return the pages written."
    os.chdir(ROOT)  # nbdev's processors read the project's configuration from the working directory
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cvlc-docs-"))
    nbs = notebooks()
    site_pages = {str(nb.resolve()): page_name(nb) for nb in nbs}
    done = []
    for i, nb in enumerate(nbs, 1):
        t0 = time.perf_counter()
        processed, meta = process(execute(nb, work, profile, from_run))
        done.append((nb, processed, meta))
        print(f"[{i}/{len(nbs)}] {nb.relative_to(NBS)} executed and processed in {time.perf_counter() - t0:.1f}s", flush=True)
    pages = [{"href": page_name(nb), "title": meta.get("title", nb.stem)} for nb, _, meta in done]
    written = []
    for nb, processed, meta in done:
        page = page_name(nb)
        dest = out / page
        dest.parent.mkdir(parents=True, exist_ok=True)
        body, figures = render(processed, meta, page, pages, site_pages)
        dest.write_text(body, encoding="utf-8")
        for name, data in figures.items():
            (dest.parent / name).parent.mkdir(parents=True, exist_ok=True)
            (dest.parent / name).write_bytes(data)
        written.append(dest)
    copy_assets(out)
    shutil.rmtree(work, ignore_errors=True)
    return written


def readme_text() -> str:
    "README.md as the home page notebook says it: its markdown cells, title and summary first."
    import nbformat
    nb = nbformat.read(NBS / "index.ipynb", as_version=4)
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "markdown": continue
        src = re.sub(r"\]\((?!https?:)([^)]+?)\.ipynb\)", r"](nbs/\1.ipynb)", cell.source)
        parts.append(src.strip())
    return "\n\n".join(parts) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "_site"), help="site folder (default: _site)")
    ap.add_argument("--profile", default="smoke", help="profile to execute chapters at (default: smoke)")
    ap.add_argument("--from-run", help="a run folder (runs/<timestamp>) whose executed chapters to use")
    ap.add_argument("--readme", action="store_true", help="only rewrite README.md from nbs/index.ipynb")
    args = ap.parse_args(argv)
    if args.readme:
        (ROOT / "README.md").write_text(readme_text(), encoding="utf-8")
        print("README.md written from nbs/index.ipynb")
        return 0
    t0 = time.perf_counter()
    pages = build_site(Path(args.out).resolve(), args.profile, Path(args.from_run).resolve() if args.from_run else None)
    print(f"docs: {len(pages)} pages in {args.out} in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
