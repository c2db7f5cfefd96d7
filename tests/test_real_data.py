"""Every chapter's real-data path, run end to end at `smoke` through `cvlc run`, on files in the datasets' official
formats (the real excerpts of tests/fixtures/real-formats enlarged in the same formats, images and features made up,
and Raven files written as I-RAVEN's generator writes them: SOURCES.md there records each format)."""
import json, subprocess

import pytest

from conftest import BIN, ROOT


def cvlc_run(chapter: str, out, *params: tuple[str, str], profile: str = "smoke", timeout: int = 1200):
    "Run one chapter through the command line with `-p NAME VALUE` parameters; the completed process."
    args = [str(BIN / "cvlc"), "run", chapter, "--profile", profile, "--out", str(out)]
    for name, value in params: args += ["-p", name, value]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def iraven_folder(folder, sizes: dict, configurations=("center_single", "left_right")):
    "Generated matrices written as I-RAVEN's generator writes them (160-pixel panels), `sizes`: {split: matrices}."
    from cvlc.rpm import RPMConfig, make_rpm
    for k, (split, n) in enumerate(sizes.items()):
        config = RPMConfig(size=160, configurations=configurations)
        make_rpm(n, seed=k, config=config, progress=False).save_raven(folder, split)
    (folder / "SOURCE.json").write_text(json.dumps({"generator": "cvlc.rpm (a test)", "counts": sizes}))
    return folder


def test_mlcl_trains_on_iraven_files(tmp_path):
    "16_mlcl with RAVEN_DIR: the profile's draw of the files (here all of center_single's), a finished run, claims."
    d = iraven_folder(tmp_path / "I-RAVEN", {"train": 420, "val": 20, "test": 140})
    r = cvlc_run("16", tmp_path / "run", ("RAVEN_DIR", str(d)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    nb = json.loads((tmp_path / "run" / "16_mlcl.ipynb").read_text())
    said = "".join("".join(o["text"]) for c in nb["cells"] for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")
    n_train = said.split("train: ")[1].split(" of ")[0]
    assert f"files under {d} (center_single {n_train})" in said and int(n_train) > 150   # smoke: center_single only
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["train_matrices"] == int(n_train) and metrics["claims"]
    assert metrics["raven_source"] == {"generator": "cvlc.rpm (a test)", "counts": {"train": 420, "val": 20, "test": 140}}
    # each method trained on the files and on the generator's matrices, each tested on both: a transfer table
    t = metrics["transfer"]
    assert set(t) == {"ce", "aux_dense", "aux_sparse", "mlcl"}
    for by_source in t.values():
        assert set(by_source) == {"this run", "the generator"}
        for by_test in by_source.values():
            assert set(by_test) == {"this run", "the generator"} and all(0 <= a <= 1 for v in by_test.values() for a in v)


def test_mlcl_says_when_the_files_are_too_few(tmp_path):
    "Too few training files for the budget points: a ValueError that says how many are needed, before any training."
    d = iraven_folder(tmp_path / "I-RAVEN", {"train": 60, "test": 70}, configurations=("center_single",))
    r = cvlc_run("16", tmp_path / "run", ("RAVEN_DIR", str(d)))
    assert r.returncode != 0 and "ValueError" in r.stderr and "use at least 192 matrices" in r.stderr, r.stderr[-2000:]
