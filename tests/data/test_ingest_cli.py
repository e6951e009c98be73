"""`driftmatrix ingest --option key=value` reaches the reader and writes the report."""

import json

from typer.testing import CliRunner

from driftmatrix.cli import app

PARAMS = """\
dataset:
  name: reviews
  source: table
  path: {path}
  task: multiclass
  options: {{timestamp: when, input: body, label: y, task: binary}}
models:
  MLP-S: {{}}
"""


def test_ingest_options_override_params(tmp_path):
    data = tmp_path / "t.csv"
    data.write_text("when,body,y\n2015,good,pos\n2016,bad,neg\n2017,,pos\n2018,meh,neutral\n")
    params = tmp_path / "params.yaml"
    params.write_text(PARAMS.format(path=data))
    out = tmp_path / "ingested"
    result = CliRunner().invoke(app, ["ingest", "-p", str(params), "--out", str(out),
                                      "--option", "task=multiclass", "-o", "classes=[neg, neutral, pos]"])
    assert result.exit_code == 0, result.output
    assert "records read 4, kept 3, dropped 1" in result.output
    report = json.loads((out / "report.json").read_text())
    assert report["dropped"] == {"empty input": 1} and report["kept"] == 3
    meta = json.loads((out / "meta.json").read_text())
    assert meta["class_names"] == ["neg", "neutral", "pos"] and meta["task"] == "multiclass"
    bad = CliRunner().invoke(app, ["ingest", "-p", str(params), "--out", str(out), "--option", "nonsense"])
    assert bad.exit_code != 0
