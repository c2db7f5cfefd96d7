"""The `cvlc` console script as a user meets it: exit codes and one-line messages, never a traceback."""
import json, shutil, subprocess

from conftest import BIN, NBS, ROOT


def cvlc(*args, cwd=ROOT):
    return subprocess.run([str(BIN / "cvlc"), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_list_shows_every_chapter_with_its_summary():
    r = cvlc("list")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("00_core")
    assert "Core: Seeding, devices" in r.stdout


def test_unknown_chapter_is_a_clear_error():
    r = cvlc("run", "no_such_chapter")
    assert r.returncode == 2
    assert "unknown chapter 'no_such_chapter'; the chapters are: 00_core" in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_parameter_is_a_clear_error(tmp_path):
    r = cvlc("run", "core", "-p", "EPOCHS", "3", "--out", tmp_path)
    assert r.returncode == 2 and "00_core has no parameter EPOCHS; it declares: PROFILE" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_profile_and_missing_command_exit_2():
    assert cvlc("run", "core", "--profile", "huge").returncode == 2
    assert cvlc().returncode == 2


def test_missing_notebooks_folder_is_a_clear_error(tmp_path):
    r = cvlc("list", cwd=tmp_path)  # an editable install still finds the repository's nbs/
    assert r.returncode == 0
    r = cvlc("--nbs", tmp_path, "list", cwd=tmp_path)
    assert r.returncode == 2 and "is not the course notebooks folder" in r.stderr


def test_a_failing_chapter_exits_1_and_names_the_notebook(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    shutil.copy2(NBS / "00_core.ipynb", nbs / "00_core.ipynb")
    boom = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Boom\n\n> fails on purpose"},
                      {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "PROFILE = 'auto'",
                       "outputs": [], "execution_count": None},
                      {"cell_type": "code", "metadata": {}, "source": "raise RuntimeError('kaboom')",
                       "outputs": [], "execution_count": None}],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "python3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}
    (nbs / "01_boom.ipynb").write_text(json.dumps(boom))
    r = cvlc("--nbs", nbs, "run", "boom", "--profile", "smoke", "--out", tmp_path / "out")
    assert r.returncode == 1
    assert "01_boom failed at In [" in r.stderr and "RuntimeError: kaboom" in r.stderr
    assert (tmp_path / "out" / "01_boom.ipynb").is_file()
    assert "FAILED" in r.stdout


def test_a_tuple_parameter_reaches_the_chapter_as_a_tuple(tmp_path):
    "`-p PAIRS \"[('a', 'b')]\"` is a list of tuples in the chapter's kernel, as `parse_params` read it."
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    shutil.copy2(NBS / "00_core.ipynb", nbs / "00_core.ipynb")
    check = ("import json, os\n"
             "assert PAIRS == [('<en-de>', '<de-en>')] and type(PAIRS[0]) is tuple, repr(PAIRS)\n"
             "json.dump({'profile': PROFILE}, open(os.path.join(os.environ['CVLC_OUT'], 'metrics.json'), 'w'))")
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Pairs\n\n> a tuple parameter"},
                    {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "outputs": [], "execution_count": None,
                     "source": "PROFILE = 'auto'\nPAIRS = None"},
                    {"cell_type": "code", "metadata": {}, "source": check, "outputs": [], "execution_count": None}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "python3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (nbs / "01_pairs.ipynb").write_text(json.dumps(nb))
    r = cvlc("--nbs", nbs, "run", "pairs", "--profile", "smoke", "-p", "PAIRS", "[('<en-de>', '<de-en>')]",
             "--out", tmp_path / "out")
    assert r.returncode == 0, r.stderr[-2000:]


def _documented_examples() -> list[list[str]]:
    "The command lines of the CLI page's example block."
    nb = json.loads((NBS / "api" / "cli.ipynb").read_text())
    text = next("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown" and "```text" in "".join(c["source"]))
    block = text.split("```text", 1)[1].split("```", 1)[0]
    return [l.split("#", 1)[0].split() for l in block.strip().splitlines()]


def test_every_documented_example_is_valid(tmp_path):
    "Each example of the CLI page names real chapters and declared parameters (checked with --dry-run, nothing runs)."
    examples = _documented_examples()
    assert len(examples) >= 4
    for ex in examples:
        assert ex[0] == "cvlc"
        args = ex[1:] + (["--dry-run"] if ex[1] == "run" and "--dry-run" not in ex else [])
        r = cvlc(*args, cwd=tmp_path)
        assert r.returncode == 0, f"{' '.join(ex)}: {r.stderr}"
        assert "Traceback" not in r.stderr
        if ex[1] == "run": assert "would run" in r.stdout


def test_dry_run_checks_parameters():
    r = cvlc("run", "simclr", "-p", "EPOCHS", "3", "--dry-run")
    assert r.returncode == 2 and "10_simclr has no parameter EPOCHS; it declares: PROFILE, SEED" in r.stderr


def test_an_unusable_output_folder_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    r = cvlc("run", "core", "--profile", "smoke", "--out", blocker / "sub")
    assert r.returncode == 2 and "cannot use" in r.stderr and "as the output folder" in r.stderr
    assert "Traceback" not in r.stderr


def test_claims_of_a_folder_without_runs_is_a_clear_error(tmp_path):
    r = cvlc("claims", tmp_path)
    assert r.returncode == 2 and "holds no metrics.json" in r.stderr and "Traceback" not in r.stderr


def test_claims_prints_what_reproduces_per_chapter():
    """`cvlc claims nbs/results/*/paper`: per chapter, the headline's verdict and the paper claims holding / tested /
    listed, as the library computes them from the records and the papers' claims list."""
    from cvlc.metrics import count_claims, load_published, paper_verdicts
    folders = sorted((NBS / "results").glob("*/paper"))
    r = cvlc("claims", *folders)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("What reproduces, counted against the papers' claims")
    for f in folders:
        rec = load_published(f.parent.name, "paper", NBS / "results")
        n = count_claims(*paper_verdicts(f.parent.name, rec["claims"], rec["metrics"]))
        assert f"\n{f.parent.name}: {n}\n" in r.stdout, f"{f.parent.name}'s count is missing"
    assert "\nover these runs: headlines " in r.stdout and "Every ledger claim" not in r.stdout
    r = cvlc("claims", "--ledger", *folders)
    assert r.returncode == 0 and "Every ledger claim" in r.stdout and "overall: " in r.stdout


def _course_repo(tmp_path):
    "A git repository holding the core chapter and a cvlc/ folder, committed."
    repo = tmp_path / "repo"
    (repo / "nbs").mkdir(parents=True); (repo / "cvlc").mkdir()
    shutil.copy2(NBS / "00_core.ipynb", repo / "nbs" / "00_core.ipynb")
    (repo / "cvlc" / "__init__.py").write_text("")
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)
    git("init", "-q"); git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "course")
    return repo, git


def _toy_chapter(repo):
    "A chapter with one parameter, WIDTH, that it records in its metrics."
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Toy\n\n> a chapter with one parameter"),
                nbformat.v4.new_code_cell('PROFILE = "auto"\nWIDTH = 1', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("from cvlc.core import resolve_profile, save_metrics\n"
                                          'save_metrics({"profile": resolve_profile(PROFILE), "width": WIDTH}, '
                                          'chapter="01_toy")')]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, repo / "nbs" / "01_toy.ipynb")


def test_publish_refuses_uncommitted_changes(tmp_path):
    repo, _ = _course_repo(tmp_path)
    with (repo / "nbs" / "00_core.ipynb").open("a") as f: f.write("\n")
    r = cvlc("--nbs", repo / "nbs", "run", "core", "--profile", "smoke", "--publish", "--out", tmp_path / "out")
    assert r.returncode == 2 and "uncommitted changes" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists() and not (repo / "nbs" / "results").exists()


def test_publish_writes_the_run_and_its_provenance(tmp_path):
    repo, git = _course_repo(tmp_path)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    r = cvlc("--nbs", repo / "nbs", "run", "core", "--profile", "smoke", "--publish", "--out", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    rec = repo / "nbs" / "results" / "00_core" / "smoke"
    assert json.loads((rec / "metrics.json").read_text()) == json.loads((tmp_path / "out" / "metrics.json").read_text())
    prov = json.loads((rec / "provenance.json").read_text())
    assert (prov["commit"], prov["profile"], prov["chapter"]) == (head, "smoke", "00_core")
    assert prov["wall_seconds"] > 0 and prov["device"] and prov["command"].startswith("cvlc ")


def test_a_run_with_a_parameter_changed_is_published_as_a_variant(tmp_path):
    repo, git = _course_repo(tmp_path)
    _toy_chapter(repo); git("add", "-A"); git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "toy")
    run = lambda out, *p: cvlc("--nbs", repo / "nbs", "run", "toy", "--profile", "smoke", *p, "--publish", "--out", out)
    res = repo / "nbs" / "results" / "01_toy"
    r = run(tmp_path / "a", "-p", "WIDTH", "1")            # the declared default: the chapter's own record
    assert r.returncode == 0, r.stderr
    assert json.loads((res / "smoke" / "metrics.json").read_text())["width"] == 1
    assert json.loads((res / "smoke" / "provenance.json").read_text())["params"] == {}
    assert not (res / "variants").exists()
    r = run(tmp_path / "b", "-p", "WIDTH", "3")
    assert r.returncode == 0, r.stderr
    variant = res / "variants" / "smoke" / "WIDTH=3"
    assert "published to " + str(variant) in r.stdout
    assert json.loads((variant / "metrics.json").read_text())["width"] == 3
    assert json.loads((variant / "provenance.json").read_text())["params"] == {"WIDTH": 3}
    assert json.loads((res / "smoke" / "metrics.json").read_text())["width"] == 1     # the chapter's record untouched
