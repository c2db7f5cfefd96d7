"""14_vgbert's real-data path, run end to end at `smoke` through `cvlc run`, on files in the datasets' official formats:
the real COCO captions and Visual Genome relationships of tests/fixtures/real-formats (SOURCES.md there), enlarged in
the same formats with made-up images, and the four parameters in the forms the chapter's parameters cell gives."""
import copy, json, random

import PIL.Image
import pytest

from conftest import ROOT
from test_real_data import cvlc_run

FIXTURES = ROOT / "tests" / "fixtures" / "real-formats"
N_COCO, N_VG = 190, 170          # more than the smoke profile's 100 + 40 of each: the run draws its number


def _image(path, rng: random.Random) -> None:
    "A made-up photograph: a few coloured rectangles on a coloured ground, as a JPEG of a plausible odd size."
    w, h = rng.choice([(64, 48), (48, 64), (80, 60)])
    im = PIL.Image.new("RGB", (w, h), tuple(rng.randrange(256) for _ in range(3)))
    for _ in range(3):
        x, y = rng.randrange(w - 8), rng.randrange(h - 8)
        box = (x, y, x + rng.randrange(4, w - x), y + rng.randrange(4, h - y))
        im.paste(tuple(rng.randrange(256) for _ in range(3)), box)
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, quality=90)


def coco_files(folder, n: int = N_COCO, seed: int = 0):
    """captions_train2014.json in COCO's format (the real header, image and caption records of the excerpts, enlarged to
    `n` images of five captions each) and its images under train2014/."""
    rng = random.Random(seed)
    head = json.loads((FIXTURES / "coco" / "captions_val2014_head.json").read_text())
    one = json.loads((FIXTURES / "coco" / "captions_val2014_391895.json").read_text())
    captions = [a["caption"] for a in head["annotations"] + one["annotations"]]
    data = {"info": head["info"], "licenses": head["licenses"], "images": [], "annotations": []}
    for k in range(n):
        iid = 391895 + 7 * k
        rec = copy.deepcopy(one["images"][0])
        rec.update(id=iid, file_name=f"COCO_train2014_{iid:012d}.jpg",
                   coco_url=rec["coco_url"].replace("391895", str(iid)))
        data["images"].append(rec)
        for j in range(5):
            data["annotations"].append({"image_id": iid, "id": 770337 + 5 * k + j, "caption": rng.choice(captions)})
        _image(folder / "train2014" / rec["file_name"], rng)
    (folder / "annotations").mkdir(parents=True, exist_ok=True)
    (folder / "annotations" / "captions_train2014.json").write_text(json.dumps(data))
    return folder / "annotations" / "captions_train2014.json", folder / "train2014"


def vg_files(folder, n: int = N_VG, seed: int = 0):
    """relationships.json in Visual Genome's v1.4 format (the real records of the excerpt: a subject with `name`, an
    object with `names`, synsets, boxes), enlarged to `n` images of a few relationships each, and the images as
    <image_id>.jpg in VG_100K/ and VG_100K_2/ as the dataset ships them."""
    rng = random.Random(seed)
    real = json.loads((FIXTURES / "vg" / "relationships_head.json").read_text())[0]["relationships"]
    names = ["shade", "sidewalk", "tree", "bikes", "man", "horse", "street", "sign", "car", "window"]
    predicates = ["ON", "near", "has", "wearing", "behind", "in"]
    images, oid = [], 1000000
    for k in range(n):
        iid = 1 + 3 * k
        objects = []
        for _ in range(rng.randrange(3, 6)):
            oid += 1
            objects.append({"object_id": oid, "x": rng.randrange(300), "y": rng.randrange(200),
                            "w": rng.randrange(20, 200), "h": rng.randrange(20, 200), "synsets": [],
                            "name": rng.choice(names)})
        rels = []
        for j in range(rng.randrange(2, 6)):
            s, o = rng.sample(objects, 2)
            r = copy.deepcopy(real[j % len(real)])
            r["subject"] = {**{k_: v for k_, v in s.items() if k_ != "name"}, "name": s["name"]}
            r["object"] = {**{k_: v for k_, v in o.items() if k_ != "name"}, "names": [o["name"]],
                           "merged_object_ids": []}
            r.update(predicate=rng.choice(predicates), relationship_id=10 * iid + j)
            rels.append(r)
        images.append({"relationships": rels, "image_id": iid})
        _image(folder / ("VG_100K" if k % 3 else "VG_100K_2") / f"{iid}.jpg", rng)
    (folder / "relationships.json").write_text(json.dumps(images))
    return folder / "relationships.json", folder


def _said(run_folder) -> str:
    nb = json.loads((run_folder / "14_vgbert.ipynb").read_text())
    return "".join("".join(o["text"]) for c in nb["cells"] for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")


def test_vgbert_trains_on_coco_and_visual_genome_files(tmp_path):
    "The four paths as the parameters cell gives them: the profile's draw of each dataset, a finished run, the counts."
    captions, coco_images = coco_files(tmp_path / "coco")
    relationships, vg_images = vg_files(tmp_path / "vg")
    params = (("COCO_CAPTIONS", str(captions)), ("COCO_IMAGES", str(coco_images)),
              ("VG_RELATIONSHIPS", str(relationships)), ("VG_IMAGES", str(vg_images)))
    r = cvlc_run("14", tmp_path / "run", *params)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    said = _said(tmp_path / "run")
    assert f"COCO: {captions}: {N_COCO} images, {5 * N_COCO} captions; 140 images used (a draw of 140, seed 0)" in said
    assert f"Visual Genome: {relationships}: {N_VG} images" in said and f"{N_VG} images under {vg_images}" in said
    full = json.loads((tmp_path / "run" / "metrics.json").read_text())["full"]
    assert (full["coco_images"], full["vg_images"]) == (140, 140)               # smoke keeps its size on real data
    assert full["read"]["COCO images"] == N_COCO and full["files"]["VG_IMAGES"] == str(vg_images)
    assert 0 <= full["stage2"]["t2i@1"] <= 1 and 0 <= full["stage3"]["rel@1"] <= 1


def test_vgbert_names_the_files_that_do_not_match_before_training(tmp_path):
    "Part of Visual Genome missing from VG_IMAGES: an error that names both files, before anything trains."
    captions, coco_images = coco_files(tmp_path / "coco", n=150)
    relationships, vg_images = vg_files(tmp_path / "vg", n=150)
    for p in (vg_images / "VG_100K_2").glob("*.jpg"): p.unlink()                # one of the two image folders absent
    r = cvlc_run("14", tmp_path / "run", ("COCO_CAPTIONS", str(captions)), ("COCO_IMAGES", str(coco_images)),
                 ("VG_RELATIONSHIPS", str(relationships)), ("VG_IMAGES", str(vg_images)))
    assert r.returncode != 0
    said = r.stdout + r.stderr
    assert "FileNotFoundError" in said
    assert f"drawn from {relationships} have no <image_id>.jpg under {vg_images}" in said
    assert "stage-2 runs" not in _said(tmp_path / "run")                        # nothing trained
