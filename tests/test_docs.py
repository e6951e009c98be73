"""Every shell command and Python snippet in the README and docs/ is checked against the code.

Commands are parsed by the tools themselves: ``driftmatrix`` and ``mlflow`` through their click
command trees (each subcommand and option must exist), ``dvc`` through DVC's own argument parser,
``make`` against the Makefile's targets; file paths they name must exist in the repository. Python
blocks must compile and their ``driftmatrix`` imports must resolve. A renamed command, option,
target or path fails here instead of in a user's terminal. The long commands (``make repro``,
``dvc repro``) are run for real by tests/test_fresh_clone.py and tests/test_readme_walkthrough.py.
"""

from __future__ import annotations

import ast
import importlib
import re
import shlex
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("CONTRIBUTING.md"))]
SHELL = {"bash", "sh", "shell", "console"}
PATH_PREFIXES = ("presets/", "docs/", "src/", "tests/", "bench/", "tools/", ".ci/")
#: commands whose arguments are not ours to check (beyond the paths they name)
PASSTHROUGH = {"curl", "sed", "cat", "cp", "mv", "ls", "cd", "echo", "export", "git", "for", "done", "do", "source",
               "pip", "python3", "wc", "head", "tail", "chromium", "ray", "runuser", "initdb", "pg_ctl", "sleep",
               "kill", "mkdir", "rm", "test", "apt-get", "sudo", "uv", "open", "xdg-open", "true", "tar", "unzip",
               "createdb", "createuser", "psql", "postgres", "pg_ctlcluster", "ss", "hostname", "ssh", "scp"}


def code_blocks(path: Path) -> list[tuple[str, str, int]]:
    """(language, body, line number) of every fenced block of ``path``."""
    text = path.read_text()
    return [(m.group(1), textwrap.dedent(m.group(2)), text.count("\n", 0, m.start()) + 1)
            for m in re.finditer(r"^[ \t]*```(\w*)[^\n]*\n(.*?)^[ \t]*```", text, re.S | re.M)]


def shell_commands(body: str) -> list[str]:
    """One string per command: continuation lines joined, comments and prompts dropped, split on
    ``&&``, ``||``, ``;`` and ``|``."""
    joined, out, env = re.sub(r"\\\n\s*", " ", body), [], {}
    for line in joined.splitlines():
        line = line.strip().removeprefix("$ ")
        assigned = re.fullmatch(r"([A-Z_][A-Z0-9_]*)=(\"[^\"]*\"|'[^']*'|\S*)", line)
        if assigned:  # VAR=value on its own line: expanded in the commands below it
            env[assigned.group(1)] = assigned.group(2).strip("'\"")
            continue
        for var, value in env.items():
            line = line.replace(f"${var}", value)
        line = re.sub(r";(\s|$)", r" ; \1", line)
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:  # an unbalanced quote in prose: checked as it stands
            tokens = line.split()
        current: list[str] = []
        for tok in tokens + [";"]:
            if tok in ("&&", "||", ";", "|"):
                if current:
                    out.append(current)
                current = []
            else:
                current.append(tok)
    return [shlex.join(c) for c in out]


def _cases():
    for path in DOCS:
        for lang, body, line in code_blocks(path):
            where = f"{path.relative_to(REPO)}:{line}"
            if lang in SHELL:
                for cmd in shell_commands(body):
                    yield pytest.param("shell", cmd, id=f"{where} {cmd[:60]}")
            elif lang == "python":
                yield pytest.param("python", body, id=f"{where} python")


def _strip_env(argv: list[str]) -> list[str]:
    while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
        argv = argv[1:]
    return argv


def _check_click(root, argv: list[str], name: str) -> None:
    """Walk a click (or Typer's click) command tree along ``argv``; every option must exist."""
    cmd, ctx_args = root, list(argv)
    while hasattr(cmd, "commands") and ctx_args and not ctx_args[0].startswith("-"):
        sub = cmd.commands.get(ctx_args[0])
        assert sub is not None, f"{name}: no command {ctx_args[0]!r} (have {sorted(cmd.commands)})"
        cmd, ctx_args = sub, ctx_args[1:]
    options = {o: p for p in cmd.params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
    options["--help"] = None
    tokens = iter(ctx_args)
    for tok in tokens:
        if tok.startswith("-") and not re.match(r"^-\d", tok):
            flag = tok.split("=", 1)[0]
            assert flag in options, f"{name} {cmd.name}: no option {flag} (have {sorted(options)})"
            param = options[flag]
            if "=" not in tok and param is not None and not getattr(param, "is_flag", True) \
                    and not getattr(param, "count", False):
                next(tokens, None)  # its value, which may start with "-" (--gunicorn-opts "--timeout 300")


def _check_paths(argv: list[str]) -> None:
    for tok in argv:
        for part in re.split(r"[=,:]", tok):
            part = part.strip("'\"")
            if part.startswith(PATH_PREFIXES) and not any(c in part for c in "<>*$"):
                assert (REPO / part).exists(), f"{part} does not exist in the repository"


def _makefile_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:", (REPO / "Makefile").read_text(), re.M))


def check_shell(cmd: str) -> None:
    argv = _strip_env(shlex.split(cmd))
    if not argv or "..." in cmd:  # elided examples (a request body cut short) are prose
        return
    tool, args = Path(argv[0]).name, argv[1:]
    _check_paths(args)
    if tool == "make":
        targets = [a for a in args if not a.startswith("-") and "=" not in a]
        missing = [t for t in targets if t not in _makefile_targets()]
        assert not missing, f"make: no target {missing}"
    elif tool == "driftmatrix":
        import typer

        from driftmatrix.cli import app

        _check_click(typer.main.get_command(app), args, "driftmatrix")
    elif tool == "mlflow":
        from mlflow.cli import cli

        _check_click(cli, args, "mlflow")
    elif tool == "dvc":
        from dvc.cli.parser import get_main_parser

        try:
            get_main_parser().parse_args(args)
        except (SystemExit, Exception) as exc:  # DVC's parser raises its own DvcParserError
            raise AssertionError(f"dvc rejects {cmd!r}") from exc
    elif tool in ("python", "pytest") or tool.startswith("python"):
        if args[:1] == ["-m"]:
            module = args[1]
            if module.startswith("driftmatrix"):
                assert importlib.util.find_spec(module) is not None, f"no module {module}"
        elif args and args[0].endswith(".py"):
            assert (REPO / args[0]).exists(), f"{args[0]} does not exist"
    else:
        assert tool in PASSTHROUGH or tool.startswith(("./", ".venv/")), f"unknown command {tool!r} in {cmd!r}"


def check_python(body: str) -> None:
    tree = ast.parse(body)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("driftmatrix"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), \
                    f"{node.module} has no {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("driftmatrix"):
                    importlib.import_module(alias.name)


@pytest.mark.parametrize("kind,text", list(_cases()))
def test_documented_code_matches_the_code(kind, text):
    (check_shell if kind == "shell" else check_python)(text)


def test_the_checks_catch_broken_commands():
    """Each checker rejects what a rename would leave behind."""
    for broken in ("make reproduce", "driftmatrix trains -m CNN-S", "driftmatrix train --modle CNN-S",
                   "dvc exp runn", "dvc repro --no-such-flag", "make repro PARAMS=presets/nope.yaml",
                   "python bench/nope.py", "mlflow models serv -m x"):
        with pytest.raises(AssertionError):
            check_shell(broken)
    for fine in ("make repro PARAMS=presets/yearbook.yaml", "driftmatrix train -m CNN-S",
                 "dvc exp run -S train.epochs=3 -n epochs3", "mlflow models serve -m x --env-manager local -h 127.0.0.1"):
        check_shell(fine)
    with pytest.raises((AssertionError, ImportError)):
        check_python("from driftmatrix.tracking.runs import no_such_function\n")
    assert shell_commands("a \\\n  --b 1 && c  # note\n$ d | e\n") == ["a --b 1", "c", "d", "e"]
