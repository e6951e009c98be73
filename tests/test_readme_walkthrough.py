"""Following only the README: a fresh clone, then one's own small text CSV, to a report.

The test runs the README's "Your own data" commands as they are printed (only the path of the
CSV is the test's own), against the committed presets, and checks that the README's params.yaml
example is the preset's. Nothing else in the clone is edited.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def readme_section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


def write_texts(path: Path, seed: int = 0) -> None:
    """Four years of short reviews whose telling word changes over time (a drifting cue)."""
    rng = random.Random(seed)
    cues = {2019: ("great", "awful"), 2020: ("great", "awful"), 2021: ("superb", "dreadful"),
            2022: ("superb", "dreadful")}
    filler = "the item arrived on time and the box was fine it works as described".split()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["date", "text", "label"])
        for year, (good, bad) in cues.items():
            for k in range(80):
                label = "pos" if k % 2 else "neg"
                words = rng.sample(filler, 6) + [good if label == "pos" else bad]
                rng.shuffle(words)
                out.writerow([f"{year}-{1 + k % 12:02d}-{1 + k % 28:02d}", " ".join(words), label])


def test_readme_example_is_the_preset():
    example = yaml.safe_load(blocks(readme_section("Your own data"), "yaml")[0])
    preset = yaml.safe_load((REPO / "presets" / "text-table.yaml").read_text())
    options = dict(preset["dataset"]["options"])
    options.pop("progress", None)
    assert example["dataset"] == {**preset["dataset"], "options": options}
    assert example["models"] == preset["models"]
    for section in ("slicing", "embed"):
        assert all(preset[section][k] == v for k, v in example[section].items()), section


@pytest.fixture(scope="module")
def walked(tmp_path_factory):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of the project")
    tmp = tmp_path_factory.mktemp("walk")
    clone = tmp / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    os.symlink(sys.prefix, clone / ".venv")
    with open(clone / ".git" / "info" / "exclude", "a") as f:
        f.write(".venv\n")
    mine = tmp / "my-texts.csv"
    write_texts(mine)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "VIRTUAL_ENV"))}
    venv_bin = Path(sys.prefix, "bin").resolve()  # off PATH, as in a fresh shell: the README puts it there
    path = [p for p in env["PATH"].split(os.pathsep) if p and Path(p).resolve() != venv_bin]
    env.update(PYTHONPATH=str(clone / "src"), PATH=os.pathsep.join(path), HOME=str(tmp))
    (commands,) = blocks(readme_section("Your own data"), "bash")
    logs, sourced = [], []
    for line in commands.splitlines():
        cmd = line.split("  #")[0].strip().replace("~/my-texts.csv", str(mine))
        if not cmd:
            continue
        if cmd.startswith("make "):  # the venv is installed already (its stamp is older than the clone)
            cmd = cmd.replace("make ", "make -o .venv/.installed ", 1)
        if cmd.startswith("source "):  # what it sets holds for the lines after it, as in one shell
            sourced.append(cmd)
        done = subprocess.run(["bash", "-c", "; ".join([*sourced, cmd])], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=1500)
        logs.append((cmd, done))
        if done.returncode:
            break
    return clone, logs


def test_own_data_installs_the_venv_before_using_its_commands():
    """A fresh clone has no dvc: `make install` and the venv's activation come first."""
    (commands,) = blocks(readme_section("Your own data"), "bash")
    lines = [ln.split("  #")[0].strip() for ln in commands.splitlines() if ln.strip()]
    first_use = next(k for k, ln in enumerate(lines) if ln.split()[0] in ("dvc", "driftmatrix", "mlflow"))
    assert lines.index("make install") < lines.index("source .venv/bin/activate") < first_use


def test_own_text_csv_reaches_a_report(walked):
    clone, logs = walked
    for cmd, done in logs:
        assert done.returncode == 0, f"{cmd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    out = "".join(d.stdout + d.stderr for _, d in logs)
    assert "Traceback" not in out
    assert (clone / "outputs" / "report" / "report.html").stat().st_size > 10_000
    matrices = {p.stem for p in (clone / "outputs" / "matrices").glob("*.json")}
    assert {"Prior", "FFN-S", "MiniLM-L6"} <= matrices
    ingested = json.loads((clone / "outputs" / "ingested" / "report.json").read_text())
    assert ingested["read"] == ingested["kept"] == 320 and ingested["per_period"] == {str(y): 80 for y in range(2019, 2023)}
    metrics = json.loads((clone / "metrics" / "metrics.json").read_text())
    assert metrics["FFN-S"]["in_distribution"] > metrics["Prior"]["in_distribution"] + 20  # it learned the cue
    assert metrics["FFN-S"]["decay"] > 0  # and lost some of it when the cue word changed
