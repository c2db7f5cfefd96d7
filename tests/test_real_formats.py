"""The loaders of `cvlc.data` on real excerpts of the datasets' official files (tests/fixtures/real-formats, see
SOURCES.md there), not only on the fixtures the notebook writes."""
import json

import numpy as np
import pytest

from cvlc.data import (DataFormatError, load_coco_captions, load_flickr30k_entities, load_karpathy, load_raven,
                       load_vg_objects, load_vg_relationships, load_vqa, parse_entities_sentence, soft_target, answer_vocab)
from cvlc.data import save_coco_captions, save_karpathy
from cvlc.metrics import vqa_score

from conftest import ROOT

REAL = ROOT / "tests" / "fixtures" / "real-formats"


def test_vqa_v2_record():
    qs, rep = load_vqa(REAL / "vqa/v2_OpenEnded_mscoco_val2014_questions.json", REAL / "vqa/v2_mscoco_val2014_annotations.json")
    assert rep.loaded == 1 and rep.skipped == 0
    q = qs[0]
    assert (q.question_id, q.image_id, q.question, q.group_id) == (262148000, 262148, "Where is he looking?", 262148000)
    assert q.answer == "down" and len(q.answers) == 10 and q.answers.count("down") == 7
    assert (q.question_type, q.answer_type) == ("none of the above", "other")
    # 7 of 10 humans said "down": min(1, 7/3) for every leave-one-out subset
    assert vqa_score("down", q.answers) == 1.0
    # "table" was said once: 9 subsets have that one match (1/3), the subset without it has none
    assert vqa_score("table", q.answers) == pytest.approx(0.3)
    vocab = answer_vocab(qs)
    assert vocab == ["down"] and soft_target(q, {"down": 0}) == {0: 1.0}


def test_coco_captions_records():
    ims, rep = load_coco_captions(REAL / "coco/captions_val2014_391895.json")
    assert [im.image_id for im in ims] == [391895] and len(ims[0].captions) == 5
    assert ims[0].file_name == "COCO_val2014_000000391895.jpg"
    assert all(c == c.strip() for c in ims[0].captions)
    # the head of the real file: its first caption records belong to images that are not among its first two
    with pytest.raises(DataFormatError, match=r"annotations\[0\].*field 'image_id': \d+ is not in images"):
        load_coco_captions(REAL / "coco/captions_val2014_head.json")
    with pytest.warns(UserWarning, match="skipped 5 bad record"):
        ims, rep = load_coco_captions(REAL / "coco/captions_val2014_head.json", on_error="skip")
    assert len(ims) == 2 and rep.skipped == 5


@pytest.mark.parametrize("name", ["dataset_coco_head.json", "dataset_flickr30k_head.json"])
def test_karpathy_first_record(name):
    raw = json.loads((REAL / "karpathy" / name).read_text())["images"][0]
    ims, rep = load_karpathy(REAL / "karpathy" / name)
    assert rep.loaded == 1 and len(ims) == 1
    im = ims[0]
    assert im.captions == [s["raw"].strip() for s in raw["sentences"]]
    assert im.caption_ids == raw["sentids"]
    expected_split = "train" if raw["split"] == "restval" else raw["split"]
    assert im.split == expected_split
    assert im.file_name.endswith(raw["filename"])


def _fields(images):
    return [(i.image_id, i.file_name, i.captions, i.caption_ids, i.split) for i in images]


def test_coco_captions_writer_round_trip(tmp_path):
    ims, _ = load_coco_captions(REAL / "coco/captions_val2014_391895.json")
    back, _ = load_coco_captions(save_coco_captions(tmp_path / "c.json", ims))
    assert _fields(back) == _fields(ims)
    real, ours = (json.loads(f.read_text()) for f in (REAL / "coco/captions_val2014_391895.json", tmp_path / "c.json"))
    assert set(ours["images"][0]) <= set(real["images"][0])             # the fields the loader needs, named as COCO's
    assert set(ours["annotations"][0]) == set(real["annotations"][0])


@pytest.mark.parametrize("name,dataset",
                         [("dataset_coco_head.json", "coco"), ("dataset_flickr30k_head.json", "flickr30k")])
def test_karpathy_writer_writes_the_real_layout(tmp_path, name, dataset):
    real = json.loads((REAL / "karpathy" / name).read_text())
    ims, _ = load_karpathy(REAL / "karpathy" / name, restval_as_train=False)
    ours = json.loads(save_karpathy(tmp_path / "k.json", ims, dataset=dataset).read_text())
    r, o = real["images"][0], ours["images"][0]
    assert set(o) == set(r) and set(o["sentences"][0]) == set(r["sentences"][0])
    for k in ("filename", "split", "sentids") + (("filepath", "cocoid") if dataset == "coco" else ()):
        assert o[k] == r[k], k
    assert [s["tokens"] for s in o["sentences"]] == [s["tokens"] for s in r["sentences"]]   # Karpathy's tokenisation
    back, _ = load_karpathy(tmp_path / "k.json", restval_as_train=False)
    assert _fields(back) == _fields(ims)


def test_flickr30k_entities_real_image():
    caps, rep = load_flickr30k_entities(REAL / "flickr30k_entities", image_ids=["1000092795"])
    assert rep.loaded == 1 and len(caps) == 5
    c = caps[0]
    assert c.caption == "Two young guys with shaggy hair look at their hands while hanging out in the yard ."
    assert (c.width, c.height) == (333, 500)
    people = c.phrases[0]
    assert (people.text, people.first_word, people.n_words, people.entity_id, people.types) == ("Two young guys", 0, 3, "1", ["people"])
    # entity 1 has two boxes (one shared with entity 6); corners made 0-based as the official parser does
    assert people.boxes == [[158, 124, 218, 334], [196, 109, 260, 372]]
    bushes = caps[1].phrases[1]
    assert bushes.entity_id == "4" and bushes.boxes[0] == [0, 219, 210, 472]   # xmin 1 in the XML: the image's first column
    assert caps[3].phrases[0].boxes == [[196, 109, 260, 372]]                  # entity 6 shares entity 1's second object
    assert caps[4].phrases[1].boxes == []                                      # entity 10: <nobndbox>
    assert c.phrases[1].boxes == []                                            # entity 2 has no object in this excerpt


def test_flickr30k_entities_real_sentences():
    for f in sorted((REAL / "flickr30k_entities/Sentences").glob("*.txt")):
        for line in f.read_text(encoding="utf-8").splitlines():
            cap, phrases = parse_entities_sentence(line, f)
            words = cap.split()
            assert "[" not in cap and "/EN#" not in cap
            for text, first, n, entity, types in phrases:
                assert " ".join(words[first:first + n]) == text and entity.isdigit() and types


def test_visual_genome_records():
    rels, rep = load_vg_relationships(REAL / "vg/relationships_head.json")
    assert rep.loaded == 1 and len(rels) == 2
    r = rels[0]
    assert (r.image_id, r.subject, r.predicate, r.object) == (1, "shade", "on", "sidewalk")   # subject.name vs object.names
    assert r.subject_box == [119, 338, 119 + 274, 338 + 192] and r.object_box == [78, 308, 78 + 722, 308 + 290]
    assert (r.subject_id, r.object_id) == (5045, 1058534)
    objs, rep = load_vg_objects(REAL / "vg/objects_head.json")
    assert objs == {1: [("trees", [0, 0, 799, 557])], 2: [("road", [0, 345, 364, 345 + 254])]}


def test_raven_file_as_the_official_generators_write_it(tmp_path):
    "The key set and dtypes of RAVEN / I-RAVEN's Python 2 writers, as SOURCES.md lists them."
    rng = np.random.default_rng(0)
    f = tmp_path / "center_single" / "RAVEN_0_train.npz"
    f.parent.mkdir()
    np.savez(f, image=rng.integers(0, 256, (16, 160, 160), dtype=np.uint8), target=np.int64(5), predict=np.int64(0),
             meta_matrix=np.zeros((8, 9), np.uint8), meta_target=np.eye(9, dtype=np.uint8)[2],
             structure=np.array([b"Singleton", b"Root", b"Center_Single"], dtype="|S13"), meta_structure=np.zeros(21, np.uint8))
    rv, rep = load_raven(tmp_path, split="train")
    assert rv.structure == [("Singleton", "Root", "Center_Single")]
    assert rv.images.dtype == np.uint8 and rv.images.shape == (1, 16, 160, 160)
    assert rv.target.tolist() == [5] and rv.meta_target[0].tolist() == np.eye(9)[2].tolist()
