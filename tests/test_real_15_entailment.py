"""15_entailment's real-data path at `smoke`, end to end through `cvlc run`, on files in the datasets' official formats:
the Karpathy split files of tests/fixtures/real-formats enlarged in their own layout (the real first record kept, more
records made up alike), SNLI and SNLI-VE JSON lines as the official releases write them, and made-up images. The
parameters take exactly the forms the chapter's parameters cell documents."""
import copy, json, random, re

import numpy as np
import pytest
from PIL import Image

from conftest import ROOT
from test_real_data import cvlc_run

REAL = ROOT / "tests" / "fixtures" / "real-formats" / "karpathy"
SUBJECTS = ["man", "woman", "dog", "child", "girl", "boy", "cyclist", "couple", "skier", "cat"]
PLACES = ["on a dirt road", "in a garden", "near a fountain", "on the beach", "in a park", "on a busy street",
          "in the snow", "at a table", "by the river", "in front of a building"]
COLOURS = ["red", "blue", "green", "white", "black", "yellow"]


def made_up_caption(rng) -> str:
    "A caption in the datasets' style: a subject, a colour and a place (made up)."
    return (f"A {rng.choice(COLOURS)} {rng.choice(SUBJECTS)} {rng.choice(['stands', 'sits', 'walks', 'waits'])} "
            f"{rng.choice(PLACES)}.")


def sentence(raw: str, imgid: int, sentid: int) -> dict:
    return {"tokens": re.findall(r"\w+", raw.lower()), "raw": raw, "imgid": imgid, "sentid": sentid}


def karpathy_file(path, dataset: str, splits: dict, seed: int = 0) -> list[dict]:
    """The real first record of dataset_<dataset>.json, then made-up records in its layout: `splits` {split: images}
    in order; `imgid` an index, `sentid` running; COCO records carry a `cocoid` and a `filepath`. Returns the records."""
    rng = random.Random(seed)
    first = json.loads((REAL / f"dataset_{dataset}_head.json").read_text())["images"][0]
    records, sentid = [], 0
    for split, n in splits.items():
        for _ in range(n):
            k = len(records)
            rec = copy.deepcopy(first)
            raws = [s["raw"] for s in first["sentences"]] if k == 0 else [made_up_caption(rng) for _ in range(5)]
            if dataset == "coco":
                rec["cocoid"] = first["cocoid"] + 17 * k
                rec["filepath"] = "val2014" if split in ("val", "test") else "train2014"
                rec["filename"] = f"COCO_{rec['filepath']}_{rec['cocoid']:012d}.jpg"
                ids = [first["sentids"][0] + 10 * sentid + j for j in range(5)]
            else:
                rec["filename"] = f"{int(first['filename'].split('.')[0]) + 7919 * k}.jpg"
                ids = list(range(sentid, sentid + 5))
            rec.update(imgid=k, split=split, sentids=ids, sentences=[sentence(r, k, i) for r, i in zip(raws, ids)])
            records.append(rec); sentid += 5
    path.write_text(json.dumps({"images": records, "dataset": dataset}))
    return records


def made_up_images(folder, records, seed: int = 0) -> None:
    "A made-up JPEG (not square: the reader crops the centre) for every record, at its Karpathy path."
    g = np.random.default_rng(seed)
    for rec in records:
        f = folder / rec.get("filepath", "") / rec["filename"]
        f.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(g.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(f, quality=80)


def parse(s: str) -> str:
    "A bracketed parse as SNLI writes one (flat: the fields must be there, their contents are not read)."
    return "(ROOT (S " + " ".join(f"(NN {w})" for w in re.findall(r"\w+", s)) + "))"


def nli_line(premise: str, hypothesis: str, label: str, k: int, image: str | None = None) -> str:
    "One line of SNLI (snli_1.0_*.jsonl) or, with a Flickr30K `image`, of SNLI-VE (snli_ve_*.jsonl)."
    rec = {"annotator_labels": [label] * (1 if label == "-" else 5), "captionID": f"{image or 'c'}.jpg#{k % 5}",
           "gold_label": label, "pairID": f"{image or 'c'}.jpg#{k % 5}r{k}{label[0]}", "sentence1": premise,
           "sentence1_binary_parse": parse(premise), "sentence1_parse": parse(premise), "sentence2": hypothesis,
           "sentence2_binary_parse": parse(hypothesis), "sentence2_parse": parse(hypothesis)}
    if image is not None: rec["Flickr30K_ID"] = image
    return json.dumps(rec)


def nli_files(d, flickr: list[dict], n_snli: int, n_ve: dict, seed: int = 0) -> dict:
    """SNLI lines (premise: a caption) and SNLI-VE lines (premise: a Flickr30K image of `flickr`, by photo id) with the
    three labels and a few unlabelled ('-') lines, as the releases have them. Returns {name: path}."""
    rng, labels = random.Random(seed), ["entailment", "neutral", "contradiction"]
    caps = [s["raw"] for r in flickr for s in r["sentences"]]
    lines = [nli_line(rng.choice(caps), made_up_caption(rng), rng.choice(labels + ["-"] * (k % 40 == 0)), k)
             for k in range(n_snli)]
    out = {"SNLI": d / "snli_1.0_train.jsonl"}
    out["SNLI"].write_text("\n".join(lines) + "\n")
    for split, n in n_ve.items():
        pool = [r for r in flickr if (r["split"] == "test") == (split == "test")]
        recs = [rng.choice(pool) for _ in range(n)]
        lines = [nli_line(r["sentences"][0]["raw"], made_up_caption(rng), rng.choice(labels), k,
                          image=r["filename"].split(".")[0]) for k, r in enumerate(recs)]
        out[f"SNLI_VE_{split.upper()}"] = d / f"snli_ve_{split}.jsonl"
        out[f"SNLI_VE_{split.upper()}"].write_text("\n".join(lines) + "\n")
    return out


def weak_pairs(path, records, n: int, seed: int = 0, key: str = "imgid") -> list:
    """Entailed pairs as the chapter reads them, [[image id, sentid], ...]: another image's caption of the same split;
    `key` the image id (imgid for Flickr30K, cocoid for COCO)."""
    rng, pairs = random.Random(seed), []
    while len(pairs) < n:
        a, b = rng.sample(records, 2)
        if a["split"] == b["split"]: pairs.append([a[key], rng.choice(b["sentids"])])
    path.write_text(json.dumps(pairs))
    return pairs


@pytest.fixture(scope="module")
def flickr(tmp_path_factory):
    "A Flickr30K Karpathy file, its images, SNLI, SNLI-VE and entailed pairs in imgid (the chapter's documented id)."
    d = tmp_path_factory.mktemp("flickr30k")
    recs = karpathy_file(d / "dataset_flickr30k.json", "flickr30k", {"train": 150, "val": 6, "test": 64})
    made_up_images(d / "flickr30k-images", recs)
    files = nli_files(d, recs, 180, {"train": 170, "test": 170})
    weak_pairs(d / "weak.json", recs, 400)
    return d, recs, files


def said_by(run) -> str:
    nb = json.loads((run / "15_entailment.ipynb").read_text())
    return "".join("".join(o["text"]) for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "stream")


def test_entailment_runs_on_real_format_files(flickr, tmp_path):
    """Every real-data parameter of 15_entailment at smoke: the profile's seeded draw of the files (not all of them),
    said with the files' names and counts; the dual encoders as usual and enhanced with the entailed pairs; Table 3's
    classifiers on SNLI / SNLI-VE; the many-to-many counts of the file with the entailed pairs."""
    d, recs, f = flickr
    r = cvlc_run("15", tmp_path / "run", ("KARPATHY", str(d / "dataset_flickr30k.json")),
                 ("IMAGES", str(d / "flickr30k-images")), ("WEAK_PAIRS", str(d / "weak.json")), ("IMAGE_SIZE", "64"),
                 ("SNLI", str(f["SNLI"])), ("SNLI_VE_TRAIN", str(f["SNLI_VE_TRAIN"])),
                 ("SNLI_VE_TEST", str(f["SNLI_VE_TEST"])), ("FLICKR_KARPATHY", str(d / "dataset_flickr30k.json")),
                 ("FLICKR_IMAGES", str(d / "flickr30k-images")))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    said = said_by(tmp_path / "run")
    assert f"KARPATHY {d / 'dataset_flickr30k.json'}" in said and "train 100 of 150, test 50 of 64" in said, said
    assert f"WEAK_PAIRS {d / 'weak.json'}: 400 pairs" in said and f"SNLI {f['SNLI']}" in said, said
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    full, cls = m["full"], m["full_classifier"]
    assert list(full["reports"]) == ["as usual", "enhanced"] and full["weak_train_pairs"] > 0
    assert full["read"] == {"train": 100, "test": 50}
    mm = full["many_to_many"]
    assert mm["captions per image (links)"] == 5 and mm["images per caption (links)"] == 1
    assert mm["images per caption (links + entailed)"] > 1
    assert list(cls["reports"]) == ["Only TE", "Only VE", "Ours"]
    assert cls["train"] == {"te": 120, "ve": 120, "mme": 120} and cls["test"] == 150     # the smoke profile's draw


def test_weak_pairs_in_photo_ids_are_found_before_training(flickr, tmp_path):
    "WEAK_PAIRS naming Flickr30K photo ids instead of imgid: an error naming both files and the id to use."
    from cvlc.entailment import read_karpathy_retrieval
    d, recs, _ = flickr
    weak_pairs(tmp_path / "photo.json", [{**r, "photo": int(r["filename"][:-4])} for r in recs], 20, key="photo")
    with pytest.raises(ValueError, match=r"photo\.json.*dataset_flickr30k\.json.*imgid"):
        read_karpathy_retrieval(d / "dataset_flickr30k.json", d / "flickr30k-images", tmp_path / "photo.json")


def test_snli_ve_images_missing_from_flickr_are_found_before_training(flickr, tmp_path):
    "An SNLI-VE line whose Flickr30K_ID is not a file of the Karpathy file: an error naming both files."
    from cvlc.entailment import read_nli_data
    d, recs, f = flickr
    lines = f["SNLI_VE_TRAIN"].read_text().splitlines()
    bad = json.loads(lines[0]); bad["Flickr30K_ID"] = "99"
    (tmp_path / "ve.jsonl").write_text("\n".join([json.dumps(bad)] + lines[1:]) + "\n")
    with pytest.raises(ValueError, match=r"ve\.jsonl.*dataset_flickr30k\.json"):
        read_nli_data(f["SNLI"], tmp_path / "ve.jsonl", f["SNLI_VE_TEST"], d / "dataset_flickr30k.json",
                      d / "flickr30k-images")


def test_coco_weak_pairs_name_the_cocoid(tmp_path):
    """For dataset_coco.json the image id is the `cocoid` (the id load_karpathy reads); `full` reads every record, a
    profile draws its number from each split."""
    from cvlc.entailment import read_karpathy_retrieval
    recs = karpathy_file(tmp_path / "dataset_coco.json", "coco", {"train": 12, "restval": 4, "val": 2, "test": 8})
    made_up_images(tmp_path / "images", recs)
    pairs = weak_pairs(tmp_path / "weak.json", recs, 30, key="cocoid")
    everything = read_karpathy_retrieval(tmp_path / "dataset_coco.json", tmp_path / "images", tmp_path / "weak.json")
    assert [len(everything.images[s]) for s in ("train", "test")] == [16, 8]        # restval trains, as Karpathy's
    split_of = {r["cocoid"]: r["split"] for r in recs}                    # val images are neither trained nor tested
    assert int(sum(w.sum() for w in everything.weak.values())) == len({tuple(p) for p in pairs
                                                                          if split_of[p[0]] != "val"})
    drawn = read_karpathy_retrieval(tmp_path / "dataset_coco.json", tmp_path / "images", tmp_path / "weak.json",
                                    sizes={"train": 10, "test": 5}, seed=1)
    assert [len(drawn.images[s]) for s in ("train", "test")] == [10, 5]
    with pytest.raises(ValueError, match="imgid"):                       # imgid is the index: not COCO's image id
        weak_pairs(tmp_path / "imgid.json", recs, 5, key="imgid")
        read_karpathy_retrieval(tmp_path / "dataset_coco.json", tmp_path / "images", tmp_path / "imgid.json")
