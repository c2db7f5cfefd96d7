"""Build the offline documentation site (and README.md) from the notebooks, without Quarto.

Each notebook is executed (chapters at a profile through `cvlc.cli.run_chapter`, the other pages as they
are), or taken already executed from a run folder (`--from-run runs/<timestamp>`); nbdev's own documentation
processors then turn it into a docs notebook (`show_doc` cells rendered, `#| hide` cells and export
directives dropped); nbconvert renders that to HTML with MathJax served from the site itself.

    python tools/build_docs.py --from-run latest --profile demo --out _site   # what `make docs` does
    python tools/build_docs.py --profile smoke --out _site                     # execute every chapter now
    python tools/build_docs.py --readme            # rewrite README.md from nbs/index.ipynb

Every page has the chapter list from `nbs/sidebar.yml` (in its order and sections, sticky), a search box over
all pages (an index written as a script, so the site also works from file://), a table of contents of its
own sections, previous / next links, and for a chapter its paper and an "Open in Colab" link.
"""
import argparse, html, os, posixpath, re, shutil, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / "nbs"
TEMPLATES = Path(__file__).resolve().parent / "docs_template"


def page_name(nb: Path) -> str:
    "Site path of a notebook, as nbdev names pages: `00_core.ipynb` -> `core.html`, `api/cli.ipynb` -> `api/cli.html`."
    from nbdev.config import nbpath2html
    return nbpath2html(nb.relative_to(NBS)).as_posix()


def notebooks() -> list[Path]:
    "Every notebook of the site, home page first, and the Markdown pages of `nbs/` (the papers' claims)."
    nbs = [p for p in sorted(NBS.rglob("*.ipynb")) if not any(part.startswith((".", "_")) or part == "runs" for part in p.relative_to(NBS).parts)]
    nbs += sorted(NBS.glob("[!_.]*.md"))
    return sorted(nbs, key=lambda p: (p.name != "index.ipynb", p.relative_to(NBS).parts[:-1], p.name))


def nav_sections(nbs: list[Path]) -> list[tuple[str, list[Path]]]:
    "The sidebar as `nbs/sidebar.yml` orders it: (section title, notebooks); `nbs` it leaves out come last, under 'More'."
    import yaml
    side = yaml.safe_load((NBS / "sidebar.yml").read_text())["website"]["sidebar"]["contents"]
    known = {nb.relative_to(NBS).as_posix(): nb for nb in nbs}
    sections = [("", [])]
    for entry in side:
        if isinstance(entry, dict):
            sections.append((entry["section"], [known[e] for e in entry["contents"] if e in known]))
        elif entry in known:
            if sections[-1][0]: sections.append(("", []))
            sections[-1][1].append(known[entry])
    seen = {nb for _, group in sections for nb in group}
    rest = [nb for nb in nbs if nb not in seen]
    if rest:
        print(f"note: {', '.join(nb.name for nb in rest)} not in nbs/sidebar.yml; listed under 'More'", file=sys.stderr)
        sections.append(("More", rest))
    return [(title, group) for title, group in sections if group]


RUN_FOLDER = re.compile(r"^\d{8}-\d{6}$")


def latest_run(runs: Path = ROOT / "runs") -> Path | None:
    "The newest `runs/<timestamp>` folder that holds at least one executed chapter, or None."
    found = sorted((p for p in runs.glob("*") if RUN_FOLDER.match(p.name) and any(p.glob("*/*.ipynb"))), reverse=True)
    return found[0] if found else None


def _run_profile(folder: Path) -> str | None:
    "The profile a chapter's run folder says it ran at (its metrics.json), or None."
    import json
    try: return json.loads((folder / "metrics.json").read_text()).get("profile")
    except (OSError, ValueError): return None


def execute(nb: Path, dest: Path, profile: str, from_run: Path | None) -> tuple[Path, str | None]:
    "An executed copy of `nb` in `dest` (from `from_run` when it holds one, else run now), and the profile it ran at."
    from cvlc.cli import Chapter, run_chapter, _CHAPTER_RE, _header
    out = dest / nb.relative_to(NBS)
    out.parent.mkdir(parents=True, exist_ok=True)
    if nb.suffix == ".md":                              # a Markdown page: one markdown cell, nothing to run
        import nbformat
        out = out.with_suffix(".ipynb")
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(nb.read_text(encoding="utf-8"))]), out)
        return out, None
    chapter = nb.parent == NBS and _CHAPTER_RE.match(nb.stem)   # reports/10_simclr.ipynb is not the chapter 10_simclr
    done = from_run / nb.stem / f"{nb.stem}.ipynb" if from_run and chapter else None
    ran_at = _run_profile(done.parent) if done is not None and done.is_file() else None
    if ran_at:                                          # a chapter that finished wrote metrics.json
        shutil.copy2(done, out)
        return out, ran_at
    if chapter:
        run = out.parent / f".run-{nb.stem}"
        run_chapter(Chapter(nb.stem, nb, *_header(nb)), profile, out=run)
        shutil.move(run / f"{nb.stem}.ipynb", out)
        return out, _run_profile(run)
    import papermill
    papermill.execute_notebook(str(nb), str(out), cwd=str(nb.parent), progress_bar=False, kernel_name="python3",
                               extra_arguments=["--IPKernelApp.log_level=ERROR"])
    return out, None


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
            # show_doc names classes the notebook defines `__main__.X`: a reader imports them from cvlc, so drop the prefix
            if md: out["data"]["text/markdown"] = _QUARTO_LINK.sub(r'<a href="\2" \3>\1</a>', md).replace("__main__.", "")
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


_WARNING_AT = re.compile(r"^\S+\.py:\d+: (\w*Warning: .*)\n(?:  .*\n?)?", re.M)  # file:line: Warning: msg + source line
_TMP_DIR = re.compile(r"/(?:tmp|var/folders/[^/\s]+/[^/\s]+/T)/(?:tmp|pytest-of-)[\w.-]*")


def tidy_stream(text: str) -> str:
    "A kernel's printed text as a reader should see it: warnings without the kernel's temporary file and line, temporary folders as `.../`."
    return _TMP_DIR.sub("...", _WARNING_AT.sub(r"\1\n", text))


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
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream": out["text"] = tidy_stream(out["text"])
    return nb, meta


_LINK = re.compile(r'(href|src)="([^"#:?]+?)\.(ipynb|md)(#[^"]*)?"')


def _relink(body: str, page: Path, site_pages: dict[str, str]) -> str:
    "Point links to notebooks and Markdown pages at their pages: `00_core.ipynb` -> `core.html`, relative to the page."
    def sub(m):
        target = (NBS / page.parent / f"{m.group(2)}.{m.group(3)}").resolve()
        rel = site_pages.get(str(target))
        if rel is None: return m.group(0)
        href = os.path.relpath(rel, page.parent.as_posix() or ".")
        return f'{m.group(1)}="{href}{m.group(4) or ""}"'
    return _LINK.sub(sub, body)


def figures_dir(page: str) -> str:
    "The folder, beside a page, that holds its figures: `core.html` -> `core_files`."
    return Path(page).with_suffix("").name + "_files"


def description_html(text: str) -> str:
    "A page's description (the notebook's `> ...` line) as inline HTML: its links and code rendered, not shown raw."
    import mistune
    html_ = mistune.html(text).strip()
    return html_[3:-4] if html_.startswith("<p>") and html_.endswith("</p>") else html_


def render(nb, meta: dict, page: str, context: dict, site_pages: dict[str, str]) -> tuple[str, dict[str, bytes]]:
    "One page of the site as HTML (`context`: sections, prev, next, paper, colab, profile), and its figures (file name relative to the page -> bytes)."
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
    resources = {"metadata": {"name": meta.get("title", page)}, "output_files_dir": figures_dir(page),
                 "cvlc": dict(context, root=root, page=page, title=meta.get("title", ""),
                              description=description_html(meta.get("description", "")))}
    body, res = ex.from_notebook_node(nb, resources=resources)
    body = _local_anchors(_relink(body, Path(page), site_pages), root)
    return body.replace("<!--cvlc-toc-->", toc_html(body)), res.get("outputs", {})


_SECTION = re.compile(r'<h([1-3])[^>]*\sid="([^"]+)"[^>]*>(.*?)</h\1>', re.S)
_TAGS = re.compile(r"<[^>]+>")


def _heading_text(inner: str) -> str:
    "A heading's words, without nbconvert's pilcrow anchor link."
    return html.unescape(_TAGS.sub("", inner)).replace("\u00b6", "").strip()


def _main(body: str) -> str:
    "The page's own content: inside <main>, after the title header."
    main = body[body.index("<main>"):body.rindex("</main>")]
    return main[main.index("</header>"):] if "</header>" in main else main


def toc_html(body: str) -> str:
    "The page's table of contents (its h2 and h3 sections), or nothing for a page with fewer than two."
    heads = [(int(level), anchor, _heading_text(inner)) for level, anchor, inner in _SECTION.findall(_main(body)) if level in "23"]
    if len(heads) < 2: return ""
    items = "\n".join(f'<li class="toc-h{lvl}"><a href="#{a}">{html.escape(t)}</a></li>' for lvl, a, t in heads)
    return f'<p class="cvlc-toc-title">On this page</p>\n<ul>\n{items}\n</ul>'


def search_entries(body: str, page: str, title: str, lead: str = "", limit: int = 4000) -> list[dict]:
    "The page cut at its h1-h3 headings: {p: page title, h: section heading, u: address, t: the section's text}; `lead` opens the first."
    main = re.sub(r"<(script|style)\b.*?</\1>", " ", _main(body), flags=re.S)
    cuts = [(m.start(), m.group(2), _heading_text(m.group(3))) for m in _SECTION.finditer(main)]
    spans = [(0, "", "")] + cuts
    entries = []
    for (start, anchor, head), end in zip(spans, [c[0] for c in cuts] + [len(main)]):
        text = re.sub(r"\s+", " ", html.unescape(_TAGS.sub(" ", main[start:end]))).strip()
        if head and text.startswith(head): text = text[len(head):].lstrip("\u00b6 ")
        if not entries and not head: text = f"{lead} {text}".strip()
        if text or head: entries.append({"p": title, "h": head, "u": page + (f"#{anchor}" if anchor else ""), "t": text[:limit]})
    return entries


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


_ID = re.compile(r'\sid="([^"]+)"')
_DOC_LINK = re.compile(r'<a href="([^":?#]*)#([^"]+)">(<code>[^<]*</code>)</a>')


def unlink_unshown_symbols(body: str, page: str, ids: dict[str, set[str]]) -> str:
    """A doc link nbdev made of a `symbol` in prose (`<a href="page.html#name"><code>name</code></a>`) stays a link where
    the target page shows the symbol's documentation; where it does not (a symbol the page hides, such as a chapter's
    experiment machinery, or a name nbdev resolved to another module's hidden symbol), it becomes the plain code."""
    def sub(m):
        target = posixpath.normpath(posixpath.join(posixpath.dirname(page), m.group(1))) if m.group(1) else page
        return m.group(0) if m.group(2) in ids.get(target, ()) else m.group(3)
    return _DOC_LINK.sub(sub, body)


def copy_assets(out: Path, entries: list[dict]) -> None:
    "The stylesheet, the search script and its index, and a local MathJax, so that no page needs the network."
    import json
    import jupyter_server_mathjax
    shutil.copy2(NBS / "styles.css", out / "styles.css")
    shutil.copy2(TEMPLATES / "search.js", out / "search.js")
    (out / "search_index.js").write_text("window.CVLC_SEARCH = " + json.dumps(entries, ensure_ascii=False, separators=(",", ":")) + ";\n",
                                         encoding="utf-8")
    mj = Path(jupyter_server_mathjax.__file__).parent / "static"
    shutil.copytree(mj, out / "mathjax", dirs_exist_ok=True)


def colab_url(nb: Path) -> str:
    "Where Colab opens the notebook from the project's repository (pyproject's Repository URL, nbdev's branch)."
    import tomllib
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    repo = cfg["project"]["urls"]["Repository"].removeprefix("https://github.com/").strip("/")
    branch = cfg["tool"]["nbdev"].get("branch", "main")
    return f"https://colab.research.google.com/github/{repo}/blob/{branch}/{nb.relative_to(ROOT).as_posix()}"


def page_context(nb: Path, meta: dict, profile: str | None) -> dict:
    "What a page's header says beyond its title: the paper it implements, Open in Colab (chapters), the profile of its outputs."
    from cvlc.cli import _CHAPTER_RE
    chapter = bool(_CHAPTER_RE.match(nb.stem)) and nb.parent == NBS
    paper = {"url": meta["paper"], "title": meta.get("paper_title", meta["paper"])} if meta.get("paper") else None
    return {"paper": paper, "colab": colab_url(nb) if chapter else None, "profile": profile if chapter else None}


def build_site(out: Path, profile: str = "smoke", from_run: Path | None = None) -> list[Path]:
    "Execute, process and render every notebook into `out`; return the pages written."
    os.chdir(ROOT)  # nbdev's processors read the project's configuration from the working directory
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cvlc-docs-"))
    nbs = notebooks()
    site_pages = {str(nb.resolve()): page_name(nb) for nb in nbs}
    done = {}
    for i, nb in enumerate(nbs, 1):
        t0 = time.perf_counter()
        executed, ran_at = execute(nb, work, profile, from_run)
        processed, meta = process(executed)
        done[nb] = (processed, meta, ran_at)
        print(f"[{i}/{len(nbs)}] {nb.relative_to(NBS)} executed and processed in {time.perf_counter() - t0:.1f}s", flush=True)
    link = lambda nb: {"href": page_name(nb), "title": done[nb][1].get("title", nb.stem)}
    nav = nav_sections(nbs)
    sections = [{"title": title, "pages": [link(nb) for nb in group]} for title, group in nav]
    order = [nb for _, group in nav for nb in group]
    rendered = {}
    for k, nb in enumerate(order):
        processed, meta, ran_at = done[nb]
        context = dict(page_context(nb, meta, ran_at), sections=sections,
                       prev=link(order[k - 1]) if k else None, next=link(order[k + 1]) if k + 1 < len(order) else None)
        rendered[page_name(nb)] = (nb, meta, *render(processed, meta, page_name(nb), context, site_pages))
    ids = {page: set(_ID.findall(body)) for page, (_, _, body, _) in rendered.items()}
    written, entries = [], []
    for page, (nb, meta, body, figures) in rendered.items():
        body = unlink_unshown_symbols(body, page, ids)
        dest = out / page
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(body, encoding="utf-8")
        for name, data in figures.items():
            (dest.parent / name).parent.mkdir(parents=True, exist_ok=True)
            (dest.parent / name).write_bytes(data)
        entries += search_entries(body, page, meta.get("title", nb.stem), lead=meta.get("description", ""))
        written.append(dest)
    copy_assets(out, entries)
    if (NBS / "images").is_dir():                      # the drawn diagrams the pages show (`![...](images/x.svg)`)
        shutil.copytree(NBS / "images", out / "images", dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    return written


def readme_text() -> str:
    "README.md as the home page notebook says it: its markdown cells, title and summary first."
    import nbformat
    nb = nbformat.read(NBS / "index.ipynb", as_version=4)
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "markdown": continue
        src = re.sub(r"\]\((?!https?:)([^)]+?)\.(ipynb|md)\)", r"](nbs/\1.\2)", cell.source)
        parts.append(src.strip())
    return "\n\n".join(parts) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "_site"), help="site folder (default: _site)")
    ap.add_argument("--profile", default="smoke", help="profile to execute chapters at (default: smoke)")
    ap.add_argument("--from-run", help="a run folder (runs/<timestamp>, or 'latest') whose executed chapters to use; "
                                       "chapters it lacks are executed at --profile")
    ap.add_argument("--readme", action="store_true", help="only rewrite README.md from nbs/index.ipynb")
    args = ap.parse_args(argv)
    if args.readme:
        (ROOT / "README.md").write_text(readme_text(), encoding="utf-8")
        print("README.md written from nbs/index.ipynb")
        return 0
    t0 = time.perf_counter()
    from_run = Path(args.from_run).resolve() if args.from_run and args.from_run != "latest" else None
    if args.from_run == "latest":
        from_run = latest_run()
        print(f"docs: outputs from {from_run.relative_to(ROOT)}" if from_run else
              f"docs: no run in runs/ yet; every chapter is executed now at --profile {args.profile}", flush=True)
    pages = build_site(Path(args.out).resolve(), args.profile, from_run)
    print(f"docs: {len(pages)} pages in {args.out} in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
