"""tools/install_deps.py hands pip's configuration to uv unchanged in meaning."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "install_deps.py"
spec = importlib.util.spec_from_file_location("install_deps", SCRIPT)
install_deps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install_deps)

LISTING = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='/opt/wheels'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels /srv/more-wheels'
global.index-url='https://mirror.example/simple'
user.timeout='60'
"""


def test_pip_settings_collects_every_value_once_in_order():
    s = install_deps.pip_settings(LISTING)
    assert s == {
        "find-links": ["/opt/wheels", "/srv/more-wheels"],
        "constraint": ["/etc/xdg/pip/constraints.txt"],
        "extra-index-url": ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"],
        "index-url": ["https://mirror.example/simple"],
    }


def test_uv_environment_uses_uv_names_and_separators():
    env = install_deps.uv_environment(install_deps.pip_settings(LISTING), {"HOME": "/root"})
    assert env["HOME"] == "/root"
    assert env["UV_FIND_LINKS"] == "/opt/wheels,/srv/more-wheels"
    assert env["UV_EXTRA_INDEX_URL"] == "file:///opt/pypi/simple file:///opt/pypi-more/simple"
    assert env["UV_CONSTRAINT"] == "/etc/xdg/pip/constraints.txt"
    assert env["UV_INDEX_URL"] == "https://mirror.example/simple"
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match"


def test_no_pip_configuration_leaves_uv_on_its_defaults():
    env = install_deps.uv_environment(install_deps.pip_settings("user.timeout='60'\nnonsense\n"), {})
    assert env == {"UV_INDEX_STRATEGY": "unsafe-best-match"}
