"""Published results (nbs/results/<chapter>/<profile>/) are records of runs that were really made: well-formed claims
whose verdicts follow from their own scores, complete provenance naming a commit of this repository, and the home
page's table of what reproduces computed from them."""
import json, re, subprocess

import pytest

from conftest import NBS, ROOT, chapters

RESULTS = NBS / "results"
RECORDS = sorted(p.parent for p in RESULTS.glob("*/*/metrics.json"))
VARIANTS = sorted(p.parent for p in RESULTS.glob("*/variants/*/*/metrics.json"))   # <chapter>/variants/<profile>/<name>
HISTORY = sorted(p.parent for p in RESULTS.glob("*/history/*/metrics.json"))     # <chapter>/history/<commit>: earlier
PROVENANCE = ("chapter", "profile", "commit", "uncommitted_changes", "device", "torch", "python", "date", "command",
              "wall_seconds")


def test_a_paper_run_is_published():
    assert any(r.name == "paper" for r in RECORDS), "no chapter has a published paper-profile run"


def _check_record(record, chapter, profile) -> dict:
    "The checks every published run passes; its provenance."
    from cvlc.core import PROFILES
    from cvlc.metrics import check_claims
    assert chapter in {c.name for c in chapters()}, f"{chapter} is not a chapter of the course"
    assert profile in PROFILES
    metrics = json.loads((record / "metrics.json").read_text())
    assert metrics["profile"] == profile
    claims = check_claims(metrics["claims"])               # each verdict re-derived from its scores
    assert claims, f"{record}: a published run without claims"
    prov = json.loads((record / "provenance.json").read_text())
    missing = [k for k in PROVENANCE if k not in prov or prov[k] in (None, "")]
    assert not missing, f"{record}: provenance lacks {missing}"
    assert (prov["chapter"], prov["profile"]) == (chapter, profile)
    assert prov["uncommitted_changes"] is False
    assert re.fullmatch(r"[0-9a-f]{40}", prov["commit"])
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", prov["commit"] + "^{commit}"], capture_output=True)
    assert known.returncode == 0, f"{record}: commit {prov['commit']} is not in this repository's history"
    assert prov["wall_seconds"] > 0
    for fig in (record / "figures").glob("*"):
        assert fig.suffix == ".png" and fig.stat().st_size > 1000, fig
    return prov


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_published_record_is_complete(record):
    prov = _check_record(record, record.parent.name, record.name)
    assert not prov.get("params"), f"{record}: a run with parameters changed is a variant, published under variants/"


@pytest.mark.parametrize("record", VARIANTS, ids=lambda p: f"{p.parents[2].name}/{p.parent.name}/{p.name}")
def test_published_variant_is_complete(record):
    from cvlc.cli import variant_name
    prov = _check_record(record, record.parents[2].name, record.parent.name)
    assert prov.get("params") and variant_name(prov["params"]) == record.name, \
        f"{record}: a variant's folder is named after the parameters it changed, got {prov.get('params')}"


@pytest.mark.parametrize("record", HISTORY, ids=lambda p: str(p.relative_to(RESULTS)))
def test_earlier_record_kept_as_data_is_complete(record):
    """An earlier record that a report reads as data (<chapter>/history/<the commit that published it>/) is a complete
    record, and that commit is in this repository's history; it is neither the chapter's record nor a variant."""
    profile = json.loads((record / "metrics.json").read_text())["profile"]
    _check_record(record, record.parents[1].name, profile)
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", record.name + "^{commit}"], capture_output=True)
    assert known.returncode == 0, f"{record}: {record.name} is not a commit of this repository"
    assert record not in RECORDS + VARIANTS


def test_home_page_shows_what_the_records_say():
    from cvlc.cli import RESULTS_HEADING, results_markdown
    nb = json.loads((NBS / "index.ipynb").read_text())
    cell = next("".join(c["source"]) for c in nb["cells"] if "".join(c["source"]).startswith(RESULTS_HEADING))
    assert cell == results_markdown(NBS), "the home page's table is stale: cvlc.cli.refresh_home_results, then --readme"


@pytest.mark.parametrize("record", RECORDS + VARIANTS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_record_params_agree_with_its_metrics(record):
    """A parameter whose value a chapter also writes into its metrics (16_mlcl's REASONER as `reasoner`, SEED as
    `seed`) has there the value the record's params give it, or else the chapter's default: a record made under an
    older default names that parameter in its params, so that its label says how it differs from the chapter today."""
    import ast
    from cvlc.cli import declared_params
    chapter = next(c for c in chapters() if c.name == record.relative_to(RESULTS).parts[0])
    metrics = json.loads((record / "metrics.json").read_text())
    params = json.loads((record / "provenance.json").read_text()).get("params") or {}
    for name, spec in declared_params(chapter).items():
        default = ast.literal_eval(spec["default"])
        if name == "PROFILE" or default in (None, "auto") or name.lower() not in metrics: continue
        if not isinstance(default, (str, int, float, bool)): continue
        assert metrics[name.lower()] == params.get(name, default), \
            f"{record}: {name.lower()} is {metrics[name.lower()]!r} in its metrics, {params.get(name, default)!r} by its params"


def _chapter_of(record):
    "The chapter of a published record's folder: <chapter>/<profile> or <chapter>/variants/<profile>/<name>."
    parts = record.relative_to(RESULTS).parts
    return parts[0]


@pytest.mark.parametrize("record", RECORDS + VARIANTS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_ledger_claim_counts_against_a_listed_paper_claim(record):
    """Each claim of every published record names a paper claim of its own chapter in nbs/claims.md, or is the
    chapter's own finding, so every verdict and count can be computed (an unlinked claim is an error that names it)."""
    from cvlc.metrics import check_claims, paper_verdicts, read_claims_list
    listed = read_claims_list(NBS / "claims.md")
    metrics = json.loads((record / "metrics.json").read_text())
    verdicts, own = paper_verdicts(_chapter_of(record), check_claims(metrics["claims"]), metrics, listed)
    assert sum(len(v.parts) for v in verdicts) + len(own) == len(metrics["claims"])


def test_claims_list_counts_each_paper_claim_once():
    """The papers' claims list: ids unique, one section per paper chapter with a published `paper` run, each ledger
    link names a claim of its own chapter, no paper claim is tested from two chapters, and every claim a chapter's
    `paper` record leaves untested says why."""
    from cvlc.metrics import read_claims_list
    listed = read_claims_list(NBS / "claims.md")
    assert len(listed.claims) == len({c.id for c in listed.claims.values()})
    published = sorted(r.parent.name for r in RECORDS if r.name == "paper")
    assert sorted(listed.chapters) == published
    owner = {}
    for chapter, links in listed.links.items():
        for link in links.values():
            if link.tests is None: continue
            assert listed.claims[link.tests].chapter == chapter, f"{chapter}: {link.ledger} tests another chapter's claim"
            assert owner.setdefault(link.tests, chapter) == chapter, f"{link.tests} is tested from two chapters"
    linked = {l.tests for links in listed.links.values() for l in links.values()}
    for chapter in published:
        ids = {c["id"] for c in json.loads((RESULTS / chapter / "paper" / "metrics.json").read_text())["claims"]}
        tested = {listed.links[chapter][i].tests for i in ids}
        for c in listed.of(chapter):
            assert c.id in tested or c.why_not or c.id in linked, \
                f"{c.id}: not tested by the paper run, and neither says why nor names the ledger claims that test it"
            assert not (c.id in tested and c.why_not), f"{c.id}: tested, yet says why not"


def test_shipped_weights_stay_small_and_load_safely():
    "The trained weights published records ship for the lessons: at most 20 MB in all, each loads with weights_only."
    from cvlc.core import load_checkpoint
    files = sorted(RESULTS.glob("*/*/weights/*.pt"))
    assert sum(f.stat().st_size for f in files) <= 20 * 2**20
    for f in files: assert isinstance(load_checkpoint(f), dict), f
