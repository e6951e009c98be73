#!/usr/bin/env bash
# Rebuild the authors' side of the anchor benchmark outside this repository.
#
#   bench/authors_setup.sh GIT_DIR [SRC_DIR] [VENV_DIR]
#
# GIT_DIR: a git directory of learning-mechanisms/drift-happens (e.g. what the `fetch` tool
# returns). Their tree at HEAD is exported to SRC_DIR (default ../authors-src) without their
# website/paper files, and a Python 3.13 venv with bench/authors-requirements.txt is made at
# VENV_DIR (default ../authors-venv). Then:
#   DRIFT_AUTHORS_SRC=SRC_DIR DRIFT_AUTHORS_VENV=VENV_DIR python bench/anchor.py
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
git_dir="${1:?usage: $0 GIT_DIR [SRC_DIR] [VENV_DIR]}"
src="${2:-$repo/../authors-src}"
venv="${3:-$repo/../authors-venv}"
python="${PYTHON313:-}"
if [ -z "$python" ]; then
  for p in python3.13 "$HOME/.pyenv/versions/3.13.0/bin/python"; do
    if command -v "$p" >/dev/null 2>&1; then python="$p"; break; fi
  done
fi
[ -n "$python" ] || { echo "no Python 3.13 found (set PYTHON313)" >&2; exit 1; }

mkdir -p "$src"
# pixi.toml marks their project root; configs/ holds the presets. A snapshot that lacks their
# large website files makes git print "invalid object" for them: harmless, those are not exported.
git --git-dir="$git_dir" archive HEAD -- drift_happens configs pixi.toml pyproject.toml | tar -x -C "$src"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q -r "$here/authors-requirements.txt"
PYTHONPATH="$src" "$venv/bin/python" -c "import torch, drift_happens.cli.main; print('authors side ready:', torch.__version__)"
