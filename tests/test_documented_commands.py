"""Every command of README.md's and docs/*.md's fenced ``bash`` blocks parses as written.

A documented command that names an option the harness no longer has (the nightly's
``history --dir`` did, hidden by ``|| true``) fails here, not on a user's machine: each
``python -m pytest`` line (and ``python -m harness run``, which hands its arguments to
pytest) goes through pytest's own parser with every plugin of the run loaded, in one
child process; each ``python -m harness COMMAND`` line through the harness's parser. A
line of another program is named in :data:`ELSEWHERE` with the place that runs it, so a
new kind of command cannot slip past unclassified. Running the commands for real is the
job of the tests that own them (docs/nightly.md: tests/test_nightly_doc.py; the README's
two commands: .ci/run, held to them by tests/test_repository.py).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import early
import pytest

from harness import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

ELSEWHERE = {
    "./run-suite": ".ci/run runs it in a fresh venv (tests/test_repository.py holds the spelling)",
    "./run-tests": ".ci/run runs it after ./run-suite (tests/test_repository.py)",
    ".ci/torch-matrix": ".ci/run runs it: the torch-line matrix",
    ".ci/torch-line": ".ci/torch-matrix runs it once per line (its arguments go to pytest)",
    ".ci/newest-torch": "the upgrade rehearsal script, not a CI gate (README says so)",
    "pip": "an installation step",
    "cd": "a shell step",
    "mkdir": "a shell step",
    "echo": "a shell step",
    "chromium": "a headless screenshot of a report (tests/browser.py renders reports)",
    "torchrun": "torch's launcher: tests/test_distributed.py runs the rank programs under it",
    "tox": "tox.ini's environments run ./run-tests' pytest command",
}
"""Programs whose documented lines are run elsewhere, with where."""

SEPARATORS = {"||", "&&", "|", ";"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _expand(text: str, variables: dict[str, str]) -> str:
    """Command substitutions become one word; ``$NAME`` the block's earlier assignment."""
    text = re.sub(r"\$\([^()]*\)", "SUBSTITUTED", text)
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?",
                  lambda m: variables.get(m.group(1), m.group(0)), text)


def _logical_lines(body: str):
    """The block's commands: backslash continuations joined, quotes spanning lines kept."""
    pending = ""
    for line in body.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote closes on a later line
            continue
        yield pending
        pending = ""
    assert not pending.strip(), f"unterminated command: {pending!r}"


def documented_commands() -> list[tuple[str, list[str]]]:
    """``(where, argv)`` for every command of every fenced bash block (env prefixes off)."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for block in re.finditer(r"^```bash\n(.*?)^```", text, re.S | re.M):
            line_no = text[:block.start()].count("\n") + 2
            variables: dict[str, str] = {}
            for line in _logical_lines(block.group(1)):
                words = shlex.split(_expand(line, variables), comments=True)
                if words[:1] == ["export"]:
                    words = words[1:]
                if words and all(ASSIGNMENT.match(w) for w in words):
                    variables.update(w.split("=", 1) for w in words)
                    continue
                command: list[str] = []
                for word in [*words, ";"]:
                    if word not in SEPARATORS:
                        command.append(word)
                        continue
                    while command and ASSIGNMENT.match(command[0]):
                        command.pop(0)
                    if command:
                        found.append((f"{doc.relative_to(ROOT)} (block at line {line_no})",
                                      command))
                    command = []
    return found


COMMANDS = documented_commands()


def _kind(argv: list[str]) -> str:
    if argv[0] == "pytest" or argv[:3] == ["python", "-m", "pytest"]:
        return "pytest"
    if argv[:3] == ["python", "-m", "harness"]:
        return {"run": "pytest", "localize": "localize"}.get(argv[3] if len(argv) > 3 else "",
                                                            "harness")
    return "elsewhere"


def _pytest_args(argv: list[str]) -> list[str]:
    return argv[1:] if argv[0] == "pytest" else argv[3:] if argv[2] == "pytest" else argv[4:]


def test_the_docs_have_commands_of_every_kind():
    kinds = {_kind(argv) for _, argv in COMMANDS}
    assert kinds == {"pytest", "harness", "localize", "elsewhere"}, kinds
    assert len(COMMANDS) > 60


def test_every_other_program_is_run_somewhere_named():
    unknown = sorted({f"{where}: {shlex.join(argv)}" for where, argv in COMMANDS
                      if _kind(argv) == "elsewhere" and argv[0] not in ELSEWHERE})
    assert not unknown, ("documented commands of programs nobody runs (name where they are "
                         "run in ELSEWHERE, or make them python -m pytest / harness lines):\n"
                         + "\n".join(unknown))


@pytest.mark.parametrize("where,argv", [c for c in COMMANDS if _kind(c[1]) == "harness"],
                         ids=lambda v: shlex.join(v) if isinstance(v, list) else None)
def test_harness_command_parses(where, argv, capsys):
    _assert_parses(cli.build_parser(), argv[3:], where, argv, capsys)


def test_localize_commands_parse(capsys):
    from harness.training import localize

    lines = [(w, a) for w, a in COMMANDS if _kind(a) == "localize"]
    assert lines
    for where, argv in lines:
        _assert_parses(localize.build_parser(), argv[4:], where, argv, capsys)


def _assert_parses(parser, args: list[str], where: str, argv: list[str], capsys) -> None:
    try:
        parser.parse_args(args)
    except SystemExit as exc:
        if exc.code:
            pytest.fail(f"{where}: `{shlex.join(argv)}` does not parse:\n"
                        f"{capsys.readouterr().err}")


PARSE_PYTEST = r"""
import json, sys
from _pytest.config import _prepareconfig
from _pytest.config.exceptions import UsageError
bad = []
for args in json.loads(sys.argv[1]):
    try:
        config = _prepareconfig(list(args))
        config._ensure_unconfigure()
    except (UsageError, SystemExit) as exc:
        bad.append([args, str(exc)])
print(json.dumps(bad))
"""


def _unparsable(env: dict, arg_lists: list[list[str]]) -> list[list]:
    """``[args, why]`` for each pytest argument list pytest's parser refuses (one child)."""
    proc = early.run([sys.executable, "-c", PARSE_PYTEST, json.dumps(arg_lists)],
                     cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


NO_SUCH_OPTION = ["-m", "npu", "--no-such-option"]
"""A pytest command line that must not parse: the check can fail."""


def _parse_every_pytest_line(env: dict) -> tuple[list, list]:
    """``(lines, refused)``: the documented pytest lines as ``(where, args)`` and what the
    parser refused of them and of :data:`NO_SUCH_OPTION`, in one child (an early job:
    Note [Early jobs] in tests/early.py; the child imports every plugin, ~5 s)."""
    lines = [(where, _pytest_args(argv)) for where, argv in COMMANDS if _kind(argv) == "pytest"]
    return lines, _unparsable(env, [args for _, args in lines] + [NO_SUCH_OPTION])


PARSED = early.Job("documented pytest lines parsed", _parse_every_pytest_line)
EARLY = (PARSED,)


def test_every_pytest_command_parses_with_the_runs_plugins():
    """pytest's parser with every plugin loaded (the harness's, pytest-benchmark's,
    pytest-split's, xdist's), as the documented line would start; nothing is collected."""
    lines, refused = early.result(PARSED)
    assert len(lines) > 30
    bad = [(args, why) for args, why in refused if args != NO_SUCH_OPTION]
    where_of = {json.dumps(args): where for where, args in lines}
    assert not bad, "documented pytest commands that do not parse:\n" + "\n".join(
        f"{where_of[json.dumps(args)]}: pytest {shlex.join(args)}\n  {why}" for args, why in bad)


def test_a_removed_option_is_caught():
    """The check can fail: the nightly's old ``history --dir`` and an unknown pytest option."""
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["history", "--dir", "x"])
    _, refused = early.result(PARSED)
    bad = [why for args, why in refused if args == NO_SUCH_OPTION]
    assert bad and "--no-such-option" in bad[0]
