import os, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / "nbs"
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "tools"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


def chapters():
    from cvlc.cli import list_chapters
    return list_chapters(NBS)


@pytest.fixture(scope="session")
def root(): return ROOT
