"""13_grounding's real-data path at `smoke`, end to end through `cvlc run`, on files in the datasets' official formats:
COCO's captions file and Flickr30K Entities' Sentences/ and Annotations/ with the real excerpts of
tests/fixtures/real-formats first and more records made up alike, region features made up in the layout the chapter
documents (`image_ids` as the datasets number their images: COCO's image id, Flickr30K's photo id, both numbers), and
a tiny random BERT as the masked LM. The parameters take exactly the forms the chapter's parameters cell documents."""
import copy, json, random, re

import numpy as np
import pytest

from conftest import ROOT
from test_real_data import cvlc_run

REAL = ROOT / "tests" / "fixtures" / "real-formats"
NOUNS = ["man", "woman", "dog", "child", "girl", "boy", "bike", "ball", "car", "horse", "table", "shirt", "hat"]
PLACES = ["the beach", "a park", "the street", "a field", "the snow", "a garden", "the road", "a yard"]
COLOURS = ["red", "blue", "green", "white", "black", "yellow"]
VERBS = ["stands on", "runs across", "sits in", "walks along", "plays in", "waits on"]


def made_up_caption(rng) -> tuple[str, list[str]]:
    "A caption in the datasets' style: a subject, what it wears or holds, a place; and its three noun phrases."
    subject, thing, place = f"a {rng.choice(COLOURS)} {rng.choice(NOUNS)}", f"a {rng.choice(NOUNS)}", rng.choice(PLACES)
    return f"{subject.capitalize()} with {thing} {rng.choice(VERBS)} {place} .", [subject.capitalize(), thing, place]


def coco_captions_file(path, n_images: int, seed: int = 0) -> list[int]:
    """captions_train2014.json in COCO's layout: the real header and image 391895's real record and captions first,
    then made-up images (ids spaced like COCO's), five made-up captions each. Returns the image ids."""
    rng = random.Random(seed)
    head = json.loads((REAL / "coco" / "captions_val2014_head.json").read_text())
    real = json.loads((REAL / "coco" / "captions_val2014_391895.json").read_text())
    images, annotations = [real["images"][0]], list(real["annotations"])
    for k in range(1, n_images):
        rec = copy.deepcopy(real["images"][0])
        rec["id"] = real["images"][0]["id"] + 13 * k
        rec["file_name"] = f"COCO_train2014_{rec['id']:012d}.jpg"
        rec["coco_url"] = f"http://images.cocodataset.org/train2014/{rec['file_name']}"
        images.append(rec)
        for j in range(5):
            annotations.append({"image_id": rec["id"], "id": 900000 + 5 * k + j, "caption": made_up_caption(rng)[0]})
    rng.shuffle(annotations)                                  # as in the official file: not grouped by image
    path.write_text(json.dumps({"info": head["info"], "images": images, "licenses": head["licenses"],
                                "annotations": annotations}))
    return [im["id"] for im in images]


def annotation_xml(image: str, width: int, height: int, boxes: dict, scenes=()) -> str:
    "A Flickr30K Entities annotation file: one <object> per box (1-based pixels), a no-box <object> per scene entity."
    objs = "".join(f"\t<object>\n\t\t<name>{e}</name>\n\t\t<bndbox>\n" + "".join(
        f"\t\t\t<{t}>{v}</{t}>\n" for t, v in zip(("xmin", "ymin", "xmax", "ymax"), b)) + "\t\t</bndbox>\n\t</object>\n"
        for e, bs in boxes.items() for b in bs)
    objs += "".join(f"\t<object>\n\t\t<name>{e}</name>\n\t\t<scene>0</scene>\n\t\t<nobndbox>1</nobndbox>\n\t</object>\n"
                    for e in scenes)
    return (f"<annotation>\n\t<filename>{image}.jpg</filename>\n\t<size>\n\t\t<width>{width}</width>\n\t\t<height>"
            f"{height}</height>\n\t\t<depth>3</depth>\n\t</size>\n{objs}</annotation>\n")


def random_box(rng, width: int, height: int) -> list[int]:
    x1, y1 = rng.randint(1, width // 2), rng.randint(1, height // 2)
    return [x1, y1, rng.randint(x1 + 10, width), rng.randint(y1 + 10, height)]


def entities_folder(root, n_images: int, seed: int = 0) -> dict[str, tuple[int, int]]:
    """Flickr30K Entities' Sentences/ and Annotations/: the real files of tests/fixtures/real-formats (image
    1000092795's real annotation; the other real sentence files get made-up boxes for their entities), then made-up
    images (photo ids spaced like Flickr's) with five marked-up captions each. Returns {photo id: (width, height)}."""
    rng = random.Random(seed)
    (root / "Sentences").mkdir(parents=True); (root / "Annotations").mkdir()
    sizes = {}
    for f in sorted((REAL / "flickr30k_entities" / "Sentences").glob("*.txt")):
        (root / "Sentences" / f.name).write_text(f.read_text())
        real_xml = REAL / "flickr30k_entities" / "Annotations" / f"{f.stem}.xml"
        if real_xml.is_file():
            (root / "Annotations" / real_xml.name).write_text(real_xml.read_text()); sizes[f.stem] = (333, 500)
            continue
        w, h = rng.randint(300, 500), rng.randint(300, 500)
        ents = sorted({m for m in re.findall(r"\[/EN#(\d+)/(?!notvisual)", f.read_text())})
        (root / "Annotations" / f"{f.stem}.xml").write_text(
            annotation_xml(f.stem, w, h, {e: [random_box(rng, w, h)] for e in ents}))
        sizes[f.stem] = (w, h)
    for k in range(n_images - len(sizes)):
        image, w, h = str(1000092795 + 7919 * (k + 1)), rng.randint(300, 500), rng.randint(300, 500)
        lines, boxes = [], {}
        for _ in range(5):
            text, phrases = made_up_caption(rng)
            for p, kind in zip(phrases, ("people", "other", "scene")):
                e = str(rng.randint(1, 40000))
                text = text.replace(p, f"[/EN#{e}/{kind} {p}]", 1)
                if kind != "scene": boxes[e] = [random_box(rng, w, h) for _ in range(rng.randint(1, 2))]
            lines.append(text)
        (root / "Sentences" / f"{image}.txt").write_text("\n".join(lines) + "\n")
        (root / "Annotations" / f"{image}.xml").write_text(annotation_xml(image, w, h, boxes))
        sizes[image] = (w, h)
    return sizes


def region_file(path, image_ids, sizes=None, regions: int = 10, dim: int = 32, seed: int = 0) -> None:
    """Made-up detector output in the layout the chapter reads: `image_ids` (N,) as given, `features` (N, R, d), `mask`
    (N, R) (some images with fewer boxes), `boxes` (N, R, 4) in each image's pixels."""
    g = np.random.default_rng(seed)
    n = len(image_ids)
    mask = np.arange(regions)[None] < g.integers(regions // 2, regions + 1, n)[:, None]
    w, h = (np.array([sizes[str(i)][k] for i in image_ids], float)[:, None] for k in (0, 1)) if sizes else (640, 480)
    x1, y1 = g.uniform(0, 0.5, (n, regions)) * w, g.uniform(0, 0.5, (n, regions)) * h
    boxes = np.stack([x1, y1, x1 + g.uniform(0.2, 0.5, (n, regions)) * w, y1 + g.uniform(0.2, 0.5, (n, regions)) * h], -1)
    np.savez(path, image_ids=np.asarray(image_ids), features=g.normal(size=(n, regions, dim)).astype(np.float32),
             mask=mask, boxes=boxes.astype(np.float32))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """COCO captions of 240 images (regions for 220 of them), Flickr30K Entities of 90 images (the official split file
    names 80), their region files with numeric ids, a noun list and a tiny BERT over the files' words."""
    from cvlc.models import tiny_bert
    d = tmp_path_factory.mktemp("real13")
    coco_ids = coco_captions_file(d / "captions_train2014.json", 240)
    region_file(d / "coco_regions.npz", coco_ids[:220])
    sizes = entities_folder(d / "flickr30k_entities", 90)
    flickr_ids = sorted(sizes, key=int)
    region_file(d / "flickr_regions.npz", [int(i) for i in flickr_ids], sizes, seed=1)
    (d / "test.txt").write_text("\n".join(flickr_ids[:80]) + "\n")
    (d / "nouns.txt").write_text("\n".join(NOUNS) + "\n")
    words = set(re.findall(r"[a-z]+", (d / "captions_train2014.json").read_text().lower()))
    for f in (d / "flickr30k_entities" / "Sentences").glob("*.txt"):
        words |= set(re.findall(r"[a-z]+", re.sub(r"\[/EN#\d+/\S+", "", f.read_text().lower())))
    tiny_bert(d / "bert", sorted(words))
    return d


def said_by(run) -> str:
    nb = json.loads((run / "13_grounding.ipynb").read_text())
    return "".join("".join(o["text"]) for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "stream")


def real_params(d, **change) -> list[tuple[str, str]]:
    "Every real-data parameter of 13_grounding, as its parameters cell documents them (file paths, a hub name or folder)."
    p = {"COCO_CAPTIONS": d / "captions_train2014.json", "COCO_REGIONS": d / "coco_regions.npz",
         "FLICKR_ENTITIES": d / "flickr30k_entities", "FLICKR_REGIONS": d / "flickr_regions.npz",
         "FLICKR_SPLIT": d / "test.txt", "NOUNS": d / "nouns.txt", "LM": d / "bert", **change}
    return [(k, str(v)) for k, v in p.items()]


def test_grounding_runs_on_real_format_files(files, tmp_path):
    """Every real-data parameter of 13_grounding at smoke: the regions' numeric ids match the captions' images in both
    datasets; the profile's seeded draw of the files (not all of them), said with the files' names and counts; Table
    2's four rows trained on COCO and scored on Flickr30K Entities."""
    d = files
    r = cvlc_run("13", tmp_path / "run", *real_params(d))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    said = said_by(tmp_path / "run")
    assert f"COCO_CAPTIONS {d / 'captions_train2014.json'}: 240 images" in said, said
    assert "220 with regions in" in said and "drew 160 of them" in said, said
    assert f"FLICKR_ENTITIES {d / 'flickr30k_entities'}: 80 images" in said and "drew 60 of them" in said, said
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    read = m["full_read"]
    assert read["coco_images"] == 160 and read["coco_captions"] == 800 and read["flickr_images"] == 60, read
    assert list(m["full"]) == ["none", "random", "plausible", "re-ranked"]
    for rep in m["full"].values():
        assert rep["phrases"] == read["flickr_phrases"] > 0
        assert 0 <= rep["R@1"] <= rep["R@5"] <= rep["R@10"] <= 1 and 0 <= rep["pointing"] <= 1, rep


def test_grounding_finds_mismatched_ids_before_training(files, tmp_path):
    "Region ids that match no image of the captions: a ValueError naming both files and their ids, before any unit."
    d = files
    region_file(tmp_path / "wrong.npz", [f"COCO_train2014_{i:012d}" for i in range(30)], seed=2)
    r = cvlc_run("13", tmp_path / "run", *real_params(d, FLICKR_REGIONS=tmp_path / "wrong.npz"))
    assert r.returncode != 0 and "ValueError" in r.stderr, r.stderr[-2000:]
    err = r.stderr
    assert str(tmp_path / "wrong.npz") in err and str(d / "flickr30k_entities") in err, err[-2000:]
    assert "photo id" in err and "'COCO_train2014_000000000000'" in err, err[-2000:]
    assert not (tmp_path / "run" / "units").exists() or not any((tmp_path / "run" / "units").iterdir())
