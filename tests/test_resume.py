"""A chapter's long run survives interruption: kill `cvlc run` (SIGKILL or SIGINT to its whole process group) once some
units are finished, run the same command again into the same folder, and nothing finished is recomputed while the
results equal those of an uninterrupted run."""
import json, os, re, signal, subprocess, time

import pytest

from conftest import BIN, ROOT
from cvlc.core import units_dir

CHAPTER, UNITS = "10_simclr", 11         # 10_simclr at smoke: 3 rows, 6 ablations and 2 SupCon / CE rows of one seed each


def _run(out, **kw):
    return subprocess.Popen([str(BIN / "cvlc"), "run", CHAPTER, "--profile", "smoke", "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, **kw)


def _said(log):
    "The units a run said it finished while it ran (one line each), in order."
    return re.findall(r"^  unit \d+: (.+) \(seed (\d+)\) in ", log, flags=re.M)


def _records_of(files):
    "(row, seed) of each unit record in `files` ({name: bytes})."
    return [(r["row"], str(r["seed"])) for r in (json.loads(b) for b in files.values())]


def _finished(units):
    return {p.name: p.read_bytes() for p in units.glob("*.json")} if units.is_dir() else {}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("fresh")
    p = _run(out)
    log, _ = p.communicate(timeout=900)
    assert p.returncode == 0, log
    said = _said(log)                                         # each unit said once, as it finished
    assert len(said) == UNITS and set(said) == set(_records_of(_finished(units_dir(out)))), log
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_an_interrupted_run_resumes_without_recomputing(tmp_path, uninterrupted, sig):
    out = tmp_path / "run"
    p = _run(out)
    deadline = time.monotonic() + 600
    while len(_finished(units_dir(out))) < 4:                 # the 4th unit is the first trained SimCLR encoder
        assert p.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline, "no unit finished in 10 minutes"
        time.sleep(0.05)
    os.killpg(p.pid, sig)
    p.communicate(timeout=120)
    if sig == signal.SIGINT: assert p.returncode != 0
    done = _finished(units_dir(out))
    assert 4 <= len(done) < UNITS, f"{len(done)} units finished before the kill"
    assert not (out / "metrics.json").exists(), "the killed run wrote its final metrics"

    again = _run(out)
    log, _ = again.communicate(timeout=900)
    assert again.returncode == 0, log
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["units_reused"], metrics["units_computed"]) == (len(done), UNITS - len(done)), log
    said = _said(log)                                          # the computed units are said, the reused ones not
    assert len(said) == UNITS - len(done), log
    assert not set(said) & set(_records_of(done)), log
    for name, data in done.items():                            # nothing finished was computed (or written) again
        assert (units_dir(out) / name).read_bytes() == data, name
    assert metrics["claims"] == uninterrupted["claims"]
    same = [k for k in uninterrupted if k not in ("minutes", "units_reused", "units_computed")]
    assert {k: metrics[k] for k in same} == {k: uninterrupted[k] for k in same}
