"""The real-data paths of 11_paraphrase and 12_conclat, run end to end at `smoke` through `cvlc run`, with the
parameters in exactly the forms the chapters' parameter docs give, on files in the datasets' official formats: the real
VQA v2 excerpt of tests/fixtures/real-formats enlarged in its format (more images, questions and annotations),
VQA-Rephrasings written in the same format with `rephrasing_of` (its *_humans_og_* files: each original with its three
rephrasings), region features and translation models made up."""
import json, random, re

import numpy as np

from conftest import ROOT
from test_real_data import cvlc_run

VQA = ROOT / "tests" / "fixtures" / "real-formats" / "vqa"
OBJECTS = {"dog": "dogs", "cat": "cats", "man": "men", "woman": "women", "bus": "buses", "clock": "clocks",
           "umbrella": "umbrellas", "pizza": "pizzas", "table": "tables", "kite": "kites", "horse": "horses"}
COLORS = ["red", "blue", "white", "black", "green", "yellow"]
# (question, its three rephrasings, answers): the kinds of VQA v2 questions, and rephrasings in VQA-Rephrasings' style
KINDS = [
    ("What color is the {o}?", ["What is the color of the {o}?", "The {o} is what color?",
                                "Can you tell me what color the {o} is?"], COLORS),
    ("How many {os} are there?", ["What is the number of {os}?", "How many {os} can be seen?",
                                  "What is the count of {os} in this picture?"], ["1", "2", "3", "4"]),
    ("Is there a {o} in the picture?", ["Does the picture show a {o}?", "Can you see a {o} here?",
                                        "Is a {o} visible in this image?"], ["yes", "no"]),
]


def _header(name: str, subtype: str) -> dict:
    "The official header fields of the real excerpt's file, for another split."
    head = {k: v for k, v in json.loads((VQA / name).read_text()).items() if k not in ("questions", "annotations")}
    return {**head, "data_subtype": subtype}


def _annotation(qid: int, image: int, answer: str, rng: random.Random, choices: list) -> dict:
    "An annotation record as VQA v2's: ten human answers (mostly the majority's), confidences and ids."
    answers = [answer if rng.random() < 0.8 else rng.choice(choices) for _ in range(10)]
    kind = "yes/no" if answer in ("yes", "no") else "number" if answer.isdigit() else "other"
    qtype = {"other": "what color is the", "number": "how many", "yes/no": "is there a"}[kind]
    return {"question_type": qtype, "multiple_choice_answer": answer, "image_id": image, "answer_type": kind,
            "question_id": qid,
            "answers": [{"answer": a, "answer_confidence": rng.choice(["yes", "yes", "maybe"]), "answer_id": j + 1}
                        for j, a in enumerate(answers)]}


def vqa_files(folder, images, subtype: str, rephrasings: bool = False, seed: int = 0):
    """VQA v2 questions and annotations in the official files' layout, three questions per image (ids as VQA's: image
    id * 1000 + k); with `rephrasings`, VQA-Rephrasings' layout instead: each question followed by three rephrasings
    carrying `rephrasing_of`. The real excerpt's record comes first. Returns (questions file, annotations file)."""
    rng = random.Random(seed)
    real_q = json.loads((VQA / "v2_OpenEnded_mscoco_val2014_questions.json").read_text())["questions"]
    real_a = json.loads((VQA / "v2_mscoco_val2014_annotations.json").read_text())["annotations"]
    questions, annotations = ([] if rephrasings else list(real_q)), ([] if rephrasings else list(real_a))
    for image in images:
        for k, (text, rephrased, choices) in enumerate(rng.sample(KINDS, 3)):
            o, qid, answer = rng.choice(sorted(OBJECTS)), image * 1000 + k, rng.choice(choices)
            wordings = [text] + (rephrased if rephrasings else [])
            for j, w in enumerate(wordings):
                rid = qid if j == 0 else qid * 10 + j          # a rephrasing's own id, its original's in rephrasing_of
                questions.append({"image_id": image, "question": w.format(o=o, os=OBJECTS[o]), "question_id": rid,
                                  **({"rephrasing_of": qid} if j else {})})
                annotations.append(_annotation(rid, image, answer, rng, choices))
    name = ("v2_OpenEnded_mscoco_{}_humans_og_questions.json" if rephrasings
            else "v2_OpenEnded_mscoco_{}_questions.json").format(subtype)
    aname = ("v2_mscoco_{}_humans_og_annotations.json" if rephrasings
             else "v2_mscoco_{}_annotations.json").format(subtype)
    (folder / name).write_text(json.dumps({**_header("v2_OpenEnded_mscoco_val2014_questions.json", subtype),
                                           "questions": questions}))
    (folder / aname).write_text(json.dumps({**_header("v2_mscoco_val2014_annotations.json", subtype),
                                            "annotations": annotations}))
    return folder / name, folder / aname


def region_features(path, images, regions: int = 10, dim: int = 32, seed: int = 0):
    "A detector's region features, made up: image_ids (N,) int64, features (N, R, d) float32, mask (N, R)."
    rng = np.random.default_rng(seed)
    n = rng.integers(3, regions + 1, len(images))
    np.savez(path, image_ids=np.asarray(images, np.int64),
             features=rng.standard_normal((len(images), regions, dim)).astype(np.float32),
             mask=np.arange(regions)[None, :] < n[:, None])
    return path


def said(run) -> str:
    "What the executed chapter printed."
    nb = json.loads(next(run.glob("*.ipynb")).read_text())
    return "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")


def test_paraphrase_back_translates_vqa_questions(tmp_path):
    """11_paraphrase with VQA_QUESTIONS and BT_PAIRS (as its docs write it: a list of (en->xx, xx->en) tuples), here
    two tiny random MarianMT models in folders: the smoke profile's draw of the questions, back-translated, filtered,
    cached, and recorded in metrics.json."""
    from cvlc.paraphrase import tiny_marian
    train = list(range(100, 160))                                   # 60 images: 181 questions with the real one
    questions, _ = vqa_files(tmp_path, train, "train2014")
    texts = [q["question"] for q in json.loads(questions.read_text())["questions"]]
    words = {w for t in texts for w in re.findall(r"[\w'-]+|[^\w\s]", t.lower())}
    en_de, de_en = (tiny_marian(tmp_path / name, words, seed=s) for s, name in enumerate(("en-de", "de-en")))
    out = tmp_path / "run"
    r = cvlc_run("11", out, ("VQA_QUESTIONS", str(questions)), ("BT_PAIRS", f"[('{en_de}', '{de_en}')]"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())["vqa_run"]
    assert (m["questions_read"], m["questions"], m["pairs"]) == (len(texts), 120, [[en_de, de_en]]), m
    assert 0 <= m["paraphrases_per_question"] <= 3 and m["table"] == str(out / "paraphrases_vqa.json")
    table = json.loads((out / "paraphrases_vqa.json").read_text())["table"]
    assert 0 < len(table) <= 120 and set(table) <= set(texts)              # by text: the drawn questions' texts
    drawn = f"VQA v2 questions: {len(texts)} read from {questions}; 120 drawn (seed 0, the smoke profile's size)"
    assert drawn in said(out)


def test_paraphrase_says_what_form_bt_pairs_takes(tmp_path):
    "A pair given as one string is refused before anything runs, with the parameter's name and the form it expects."
    questions, _ = vqa_files(tmp_path, range(100, 110), "train2014")
    r = cvlc_run("11", tmp_path / "run", ("VQA_QUESTIONS", str(questions)), ("BT_PAIRS", "['en-de,de-en']"))
    assert r.returncode == 1 and "TypeError: BT_PAIRS must be a list of (en->xx, xx->en) model pairs" in r.stderr, \
        r.stderr[-2000:]


def conclat_files(folder, bad_group: bool = False) -> list[tuple[str, str]]:
    """12_conclat's real-data parameters on written files: VQA v2 train (60 images), VQA-Rephrasings (40 val images,
    3 groups each), the regions of all of them, and a paraphrase table in 11_paraphrase's format."""
    train, val = list(range(100, 160)), list(range(500, 540))
    v2 = vqa_files(folder, train, "train2014")
    rp = vqa_files(folder, val, "valrep2014", rephrasings=True, seed=1)
    if bad_group:                                          # a rephrasing of a question that is not in the file
        data = json.loads(rp[0].read_text()); data["questions"][5]["rephrasing_of"] = 1
        rp[0].write_text(json.dumps(data))
    regions = region_features(folder / "regions.npz", [262148] + train + val)
    texts = [q["question"] for q in json.loads(v2[0].read_text())["questions"]]
    table = {t: [f"Could you tell me: {t[0].lower()}{t[1:]}", t.replace("?", " here?")] for t in texts}
    (folder / "paraphrases_vqa.json").write_text(json.dumps({"key": "written by the test", "table": table}))
    return [("VQA_QUESTIONS", str(v2[0])), ("VQA_ANNOTATIONS", str(v2[1])), ("REPHRASINGS", str(rp[0])),
            ("REPHRASINGS_ANNOTATIONS", str(rp[1])), ("REGION_FEATURES", str(regions)),
            ("PARAPHRASES", str(folder / "paraphrases_vqa.json"))]


def test_conclat_trains_on_vqa_and_rephrasings(tmp_path):
    """12_conclat with every real-data file: the smoke profile's draw (120 training questions, 90 complete groups),
    said at the top, then CE and ConClaT trained on them and scored on VQA-Rephrasings."""
    params = conclat_files(tmp_path)
    out = tmp_path / "run"
    r = cvlc_run("12", out, *params)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["real_data"] == dict(questions_read=181, questions=120, rephrasings_read=480, groups=90,
                                  test_questions=360, regions=101, paraphrased=120), m["real_data"]
    assert set(m["full"]) == {"CE, D^aug", "ConClaT (SSC, RQI, alternate)"}
    assert all(0 <= rep[k] <= 1 for rep in m["full"].values() for k in ("vqa", "cs1", "cs4")), m["full"]
    text = said(out)
    files = dict(params)
    assert f"VQA v2: 181 questions read from {files['VQA_QUESTIONS']}" in text
    assert f"VQA-Rephrasings: 480 questions read from {files['REPHRASINGS']}" in text
    assert text.index("VQA-Rephrasings: 480") < text.index("paraphrases for")        # read before the world's training


def test_conclat_checks_the_rephrasing_groups_before_any_training(tmp_path):
    "A rephrasing whose original is not in the file: a ValueError naming the file and the rule, and nothing trained."
    params = conclat_files(tmp_path, bad_group=True)
    r = cvlc_run("12", tmp_path / "run", *params)
    rephrasings = dict(params)["REPHRASINGS"]
    rule = f"ValueError: {rephrasings}: VQA-Rephrasings groups an original question"
    assert r.returncode == 1 and rule in r.stderr, r.stderr[-2000:]
    assert "which is not in the file" in r.stderr and not (tmp_path / "run" / "units").exists()
