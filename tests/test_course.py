"""Every chapter run end to end at PROFILE=smoke through `cvlc run all`, and the documentation site built from
those runs, served on localhost and checked in headless Chromium."""
import functools, html.parser, http.server, json, os, re, shutil, subprocess, sys, threading, urllib.parse, urllib.request
from pathlib import Path

import pytest

from conftest import BIN, NBS, ROOT, chapters
from cvlc.core import units_dir


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    r = subprocess.run([str(BIN / "cvlc"), "run", "all", "--profile", "smoke", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"cvlc run all failed:\n{r.stdout}\n{r.stderr}"
    return out, r.stdout


@pytest.mark.parametrize("chapter", chapters(), ids=lambda c: c.name)
def test_chapter_runs_at_smoke_and_writes_metrics(smoke_run, chapter):
    out, log = smoke_run
    folder = out / chapter.name
    assert (folder / f"{chapter.name}.ipynb").is_file(), "executed notebook missing"
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics, "metrics.json is empty"
    assert metrics.get("profile") == "smoke", "the chapter did not run at the profile it was given"
    nb = json.loads((folder / f"{chapter.name}.ipynb").read_text())
    errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    # its progress line: "[i/n] name ... ok in 12.3s", or with the units it finished said below it
    said = re.search(rf"\[\d+/\d+\] {chapter.name} \.\.\. (?:ok in [\d.]+s|\n((?:  unit \d+: [^\n]*\n)+)"
                     rf"  {chapter.name} ok in [\d.]+s)", log)
    assert said, "no progress line for the chapter"
    units = units_dir(folder)
    n = len(list(units.glob("*.json"))) if units.is_dir() else 0
    assert (said[1] or "").count("  unit ") == n, f"{n} units stored, the progress lines say others"


def _png_outputs(cell) -> int:
    return sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


@pytest.mark.parametrize("chapter", chapters(), ids=lambda c: c.name)
def test_every_figure_a_chapter_saves_is_shown_in_its_executed_notebook(smoke_run, chapter):
    "A cell that saves a figure also shows it: the kernel draws inline, whatever MPLBACKEND the shell has."
    nb = json.loads((smoke_run[0] / chapter.name / f"{chapter.name}.ipynb").read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and "save_figure(" in "".join(c["source"])
             and not "".join(c["source"]).lstrip().startswith("#| export")]
    blank = ["".join(c["source"])[:80] for c in cells if not _png_outputs(c)]
    assert not blank, f"{chapter.name}: cells that save a figure but show none: {blank}"


def test_run_all_prints_a_summary_table(smoke_run):
    _, log = smoke_run
    table = log[log.index("chapter  "):]
    for c in chapters(): assert re.search(rf"^{c.name}\s+ok\s+[\d.]+\s+\S", table, re.M), f"{c.name} missing from summary"


def test_run_all_ends_with_what_reproduces(smoke_run):
    "`cvlc run all` ends with every paper chapter's count against the papers' claims, then the counts over the run."
    out, log = smoke_run
    ledger = log[log.index("What reproduces, counted against the papers' claims"):]
    from cvlc.metrics import check_claims, read_claims_list
    listed = read_claims_list(NBS / "claims.md")
    for c in chapters():
        n = len(check_claims(json.loads((out / c.name / "metrics.json").read_text()).get("claims", [])))
        if n: assert re.search(rf"^{c.name}: headline (holds|does not hold); paper claims: \d+ hold, \d+ tested, "
                               rf"{len(listed.of(c.name))} listed; own findings: \d+ of \d+ hold$", ledger, re.M), \
            f"{c.name}'s count is missing"
    assert re.search(r"^over these runs: headlines \d+ of \d+ hold; paper claims: \d+ hold", ledger, re.M)


def test_published_claims_are_the_ones_the_chapters_define_now(smoke_run):
    """A renamed or dropped claim makes a published record stale: it must be made again. A claim added since a record
    was made is one the record does not test (the chapter's claims list says so)."""
    out, _ = smoke_run
    results = NBS / "results"
    records = sorted(results.glob("*/*/metrics.json")) + sorted(results.glob("*/variants/*/*/metrics.json"))
    assert records, "nothing published"
    stale = []                  # every stale record at once: one changed claim can make many of a chapter's records stale
    for rec in records:
        chapter = rec.relative_to(results).parts[0]
        now = [c["id"] for c in json.loads((out / chapter / "metrics.json").read_text()).get("claims", [])]
        then = [c["id"] for c in json.loads(rec.read_text())["claims"]]
        # a record may predate claims added since (they are not tested in it), never keep one the chapter dropped
        if then != [i for i in now if i in then]:
            stale.append(f"{rec.parent.relative_to(results)}: published with {sorted(set(then) - set(now)) or 'no'} "
                         f"claims the chapter no longer defines{'' if set(then) - set(now) else ', in another order'}")
    assert not stale, f"{len(stale)} published records are stale:\n" + "\n".join(stale)


# ---- the documentation site -------------------------------------------------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                  "--disable-component-update", "--disable-sync", "--disable-quic", "--hide-scrollbars"]


def chromium() -> str:
    "Debian's chromium, installed on first use (root can apt-get here)."
    exe = shutil.which("chromium")
    if exe is None:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True, timeout=900)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env, capture_output=True, timeout=900)
        exe = shutil.which("chromium")
    assert exe, "chromium could not be installed"
    return exe


class _Page(html.parser.HTMLParser):
    """A page's element ids, its links (href / src of a, link, script, img), and each <a href> with its class and the
    class of the <nav> / <aside> it sits in (attribute order does not matter)."""
    def __init__(self):
        super().__init__(); self.ids, self.links, self.anchors, self.where = set(), [], [], []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a: self.ids.add(a["id"])
        for k in ("href", "src"):
            if a.get(k) and tag in ("a", "link", "script", "img"): self.links.append(a[k])
        if tag in ("nav", "aside"): self.where.append(a.get("class", ""))
        if tag == "a" and a.get("href"): self.anchors.append((self.where[-1] if self.where else "", a.get("class", ""), a["href"]))
    def handle_endtag(self, tag):
        if tag in ("nav", "aside") and self.where: self.where.pop()


def _parse(text):
    p = _Page(); p.feed(text); return p


@pytest.fixture(scope="module")
def site(smoke_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([str(BIN / "python"), str(ROOT / "tools" / "build_docs.py"), "--out", str(out),
                        "--from-run", str(smoke_run[0])], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"docs build failed:\n{r.stdout}\n{r.stderr}"
    missing = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
        def send_error(self, code, *a, **k):
            if code == 404 and not self.path.startswith("/favicon"): missing.append(self.path)
            return super().send_error(code, *a, **k)

    class QuietServer(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):   # a browser closing a connection early is not an error
            if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)): return
            super().handle_error(request, client_address)

    server = QuietServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield out, f"http://127.0.0.1:{server.server_address[1]}/", missing
    server.shutdown()


def test_site_has_a_page_per_notebook(site):
    out, _, _ = site
    for name in ["index.html", "core.html", "api/cli.html", "claims.html", "styles.css", "mathjax/MathJax.js"]:
        assert (out / name).is_file(), f"{name} missing from the site"
    from build_docs import page_name
    for report in sorted((NBS / "reports").glob("*.ipynb")):      # every paper chapter's reproduction report
        page = out / page_name(report)
        assert page.is_file() and "reproduction report" in page.read_text().lower(), f"{page_name(report)}: no report"
    for img in sorted((NBS / "images").glob("*.svg")):              # the drawn diagrams the pages show
        assert (out / "images" / img.name).is_file(), f"images/{img.name} missing from the site"
    assert "cvlc" in (out / "index.html").read_text()


def test_site_has_no_broken_local_links(site):
    out, base, _ = site
    pages = [p.relative_to(out).as_posix() for p in out.rglob("*.html") if "mathjax" not in p.parts]
    ids = {p: _parse((out / p).read_text()).ids for p in pages}
    checked = 0
    for page in pages:
        for link in _parse((out / page).read_text()).links:
            u = urllib.parse.urlparse(link)
            if u.scheme or link.startswith(("mailto:", "//")): continue
            target = urllib.parse.urljoin(base + page, link)
            path = urllib.parse.urlparse(target).path.lstrip("/")
            if u.path:
                with urllib.request.urlopen(target.split("#")[0], timeout=10) as resp:
                    assert resp.status == 200, f"{page}: {link} -> {resp.status}"
            if u.fragment:
                dest = path or page
                assert u.fragment in ids.get(dest, set()), f"{page}: anchor {link} not found in {dest}"
            checked += 1
    assert checked > 10


def test_chapter_pages_show_their_figures_as_files(site, smoke_run):
    "Each figure of an executed chapter is an <img> on its page whose file is in the site."
    out, _, _ = site
    from build_docs import page_name
    pages_with_figures = 0
    for ch in chapters():
        nb = json.loads((smoke_run[0] / ch.name / f"{ch.name}.ipynb").read_text())
        n_png = sum(_png_outputs(c) for c in nb["cells"] if "#| hide" not in "".join(c["source"]))
        page = out / page_name(ch.path)
        srcs = [s for s in re.findall(r'<img[^>]*\ssrc="([^"]+)"', page.read_text()) if not s.startswith("data:")]
        assert len(srcs) >= n_png, f"{page.name}: {n_png} figures in the executed notebook, {len(srcs)} <img> files on the page"
        for s in srcs:
            f = page.parent / urllib.parse.unquote(s)
            assert f.is_file() and f.stat().st_size > 1000, f"{page.name}: <img src={s!r}> has no file in the site"
        pages_with_figures += bool(n_png)
    assert pages_with_figures >= 2, "expected figures on at least the world and rpm pages"


def _dom(url, tmp):
    r = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp}", "--virtual-time-budget=15000",
                        "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_pages_render_in_a_browser_with_title_api_and_equations(site, tmp_path):
    out, base, missing = site
    home = _dom(base + "index.html", tmp_path / "a")
    assert re.search(r'<h1 class="title">cvlc</h1>', home)
    assert 'class="MathJax_Display"' in home and 'class="MathJax"' in home, "the home page equation was not typeset"
    assert "$$" not in re.sub(r"<script.*?</script>", "", home, flags=re.S), "raw TeX left on the page"
    core = _dom(base + "core.html", tmp_path / "b")
    assert re.search(r'<h1 class="title">Core</h1>', core)
    for fn in ("seed_everything", "resolve_profile", "save_checkpoint", "load_checkpoint"):
        assert f'id="{fn}"' in core, f"API section for {fn} missing"
    assert "show_doc(" not in core, "show_doc calls should be hidden on the site"
    assert not missing, f"the browser asked for files the site lacks: {missing}"
    assert "pip" not in re.sub(r"<[^>]+>", "", core).split("Core", 1)[1][:500], "the Colab install cell leaked onto the page"


def test_screenshot_of_the_core_chapter(site, tmp_path):
    _, base, _ = site
    shot_dir = ROOT / "runs" / "docs"
    shot_dir.mkdir(parents=True, exist_ok=True)
    for page in ("index", "core"):
        shot = shot_dir / f"{page}.png"
        shot.unlink(missing_ok=True)
        r = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / page}", "--virtual-time-budget=15000",
                            "--window-size=1280,1600", f"--screenshot={shot}", base + f"{page}.html"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and shot.is_file() and shot.stat().st_size > 20_000, r.stderr[-2000:]


# ---- navigating the site ---------------------------------------------------------------------------------------

def test_sidebar_lists_every_notebook_once():
    "nbs/sidebar.yml orders the site: every notebook is in it (none falls into the 'More' catch-all), none twice."
    from build_docs import nav_sections, notebooks
    nav = nav_sections(notebooks())
    listed = [nb for _, group in nav for nb in group]
    assert sorted(listed) == sorted(notebooks()) and len(set(listed)) == len(listed)
    assert "More" not in [title for title, _ in nav]


def test_kernel_noise_is_tidied_from_printed_text():
    from build_docs import tidy_stream
    raw = ("/tmp/ipykernel_24828/4117105154.py:74: UserWarning: /tmp/tmp5tm8rttv/flickr: skipped 1 bad record(s)\n"
           "  per_image = _each(ids, root, on_error, parse, report)\nnext line\n")
    assert tidy_stream(raw) == "UserWarning: .../flickr: skipped 1 bad record(s)\nnext line\n"
    assert tidy_stream("loss 0.5 at step 3\n") == "loss 0.5 at step 3\n"
    assert tidy_stream("cvlc: 1 chapter(s) into /tmp/tmp7hio0jes\n") == "cvlc: 1 chapter(s) into ...\n"


def test_page_description_renders_its_links_and_code():
    "A report's description line links its lesson and sets code as code, instead of showing the Markdown raw."
    from build_docs import description_html
    html_ = description_html("The evidence behind the [MLCL lesson](../16_mlcl.ipynb): the `paper` run")
    assert html_ == 'The evidence behind the <a href="../16_mlcl.ipynb">MLCL lesson</a>: the <code>paper</code> run'
    assert description_html("") == ""


def test_site_descriptions_show_no_raw_markdown(site):
    "No page's description on the site shows a Markdown link or backtick as text."
    out, _, _ = site
    found = [(p.name, d) for p in out.rglob("*.html")
             for d in re.findall(r'<p class="description">(.*?)</p>', p.read_text(encoding="utf-8"), re.S)]
    assert found, "no page has a description"
    assert not [(n, d) for n, d in found if "](" in d or "`" in d], "raw Markdown in a page description"


def test_doc_links_to_symbols_a_page_does_not_show_become_code():
    "nbdev links every `symbol` in prose; where the target page hides it (a chapter's machinery) the link would be broken."
    from build_docs import unlink_unshown_symbols
    ids = {"mlcl.html": {"shown", "a-heading"}, "reports/mlcl.html": set()}
    link = lambda href, name: f'<a href="{href}"><code>{name}</code></a>'
    body = " ".join([link("mlcl.html#shown", "shown"), link("mlcl.html#hidden", "hidden"), link("#shown", "shown"),
                     '<a href="#a-heading">prose</a>', '<a href="#gone">prose</a>'])
    assert unlink_unshown_symbols(body, "mlcl.html", ids) == " ".join([
        link("mlcl.html#shown", "shown"), "<code>hidden</code>", link("#shown", "shown"),
        '<a href="#a-heading">prose</a>', '<a href="#gone">prose</a>'])   # a prose link stays: the site test checks it
    assert unlink_unshown_symbols(link("../mlcl.html#shown", "shown"), "reports/mlcl.html", ids) == link("../mlcl.html#shown", "shown")
    assert unlink_unshown_symbols(link("#shown", "shown"), "reports/mlcl.html", ids) == "<code>shown</code>"


def test_every_page_has_the_sidebar_prev_next_and_toc(site):
    "Each page lists every page in sidebar order, links to its neighbours in that order, and has a table of contents."
    out, _, _ = site
    from build_docs import nav_sections, notebooks, page_name
    order = [page_name(nb) for _, group in nav_sections(notebooks()) for nb in group]
    for k, page in enumerate(order):
        text = (out / page).read_text()
        links = _parse(text).anchors
        depth = "../" * page.count("/")
        side = [h for nav, cls, h in links if nav == "cvlc-nav" and cls != "cvlc-home"]
        assert side == [depth + p for p in order], f"{page}: the sidebar is not the site's page list"
        assert 'aria-current="page"' in text
        prev = [h for nav, cls, h in links if cls == "cvlc-prev"]
        nxt = [h for nav, cls, h in links if cls == "cvlc-next"]
        assert prev == ([depth + order[k - 1]] if k else []), f"{page}: wrong previous link {prev}"
        assert nxt == ([depth + order[k + 1]] if k + 1 < len(order) else []), f"{page}: wrong next link {nxt}"
        if text.count("<h2 ") >= 2:
            toc = [h for nav, cls, h in links if nav == "cvlc-toc"]
            assert len(toc) >= 2 and all(h.startswith("#") for h in toc), f"{page}: no table of contents"


def test_chapter_pages_link_their_paper_colab_and_profile(site):
    out, _, _ = site
    from build_docs import page_name
    from fastcore.nbio import md_frontmatter, read_nb
    for ch in chapters():
        text = (out / page_name(ch.path)).read_text()
        hrefs = [h for _, _, h in _parse(text).anchors]
        assert f"https://colab.research.google.com/github/cvlc-course/cvlc/blob/main/nbs/{ch.path.name}" in hrefs, ch.name
        assert 'Outputs from a <code>PROFILE="smoke"</code> run' in text, f"{ch.name}: the page does not say which run its outputs come from"
        fm = next(md_frontmatter(c.source) for c in read_nb(ch.path).cells if c.cell_type == "markdown")
        if fm.get("paper"): assert fm["paper"] in hrefs, f"{ch.name}: paper link missing"
    papers = [ch.name for ch in chapters() if "arxiv.org" in (out / page_name(ch.path)).read_text()]
    assert len(papers) >= 7, f"only {papers} link their paper"


def test_site_text_has_no_kernel_temporary_paths(site):
    out, _, _ = site
    for page in out.rglob("*.html"):
        if "mathjax" in page.parts: continue
        text = page.read_text()
        for bad in ("/tmp/ipykernel_", "/tmp/tmp", "[None, None"):
            assert bad not in text, f"{page.name}: {bad!r} on the page"
        assert not re.search(r"__main__(</span><span[^>]*>)?\.", text), f"{page.name}: a __main__.X name on the page"


def test_search_finds_pages_in_a_browser(site, tmp_path):
    "Typing a query (here through ?q=) lists matching sections of other pages, linked; a query nothing matches says so."
    _, base, missing = site
    dom = _dom(base + "core.html?q=supcon", tmp_path / "a")
    results = re.search(r'<ol[^>]*id="cvlc-search-results"[^>]*>(.*?)</ol>', dom, re.S).group(1)
    assert re.search(r'href="[^"]*losses.html#[^"]+"', results), "searching 'supcon' from the core page does not reach the losses page"
    assert "<mark>" in results.lower()
    dom = _dom(base + "api/cli.html?q=zzqxv", tmp_path / "b")
    assert "No page mentions" in dom
    assert not missing, f"the browser asked for files the site lacks: {missing}"
