#!/usr/bin/env bash
# Idempotent install: a virtual environment with torch first, then cvlc in editable mode with its course, cli,
# dev and bench extras, then the removal of a torchvision that cannot import (it breaks transformers on CPU torch).
set -euo pipefail
venv=${1:-.venv}
base=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  # Where the base interpreter already has torch (Colab, a CUDA machine), the venv sees it and keeps it.
  if "$base" -c "import torch" 2>/dev/null; then "$base" -m venv --system-site-packages "$venv"
  else "$base" -m venv "$venv"; fi
fi
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip
"$py" -c "import torch" 2>/dev/null || "$py" -m pip install "torch==2.13.*"
# Pin the torch that is there, so that no other requirement (fastai -> torchvision) can replace it.
"$py" -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > "$venv/constraints.txt"
"$py" -m pip install -c "$venv/constraints.txt" -e ".[course,cli,dev,bench]"
if "$py" -m pip show -q torchvision >/dev/null 2>&1 && ! "$py" -c "import torchvision" >/dev/null 2>&1; then
  echo "install: removing torchvision: it cannot import with this torch and would break transformers"
  "$py" -m pip uninstall -y -q torchvision
fi
"$py" -c "import cvlc, torch, fastai.learner, transformers; print('install: cvlc', cvlc.__version__, '| torch', torch.__version__)"
