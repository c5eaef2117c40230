"""What code formatters and fixers run through a shell say about the files they rewrote.

A formatter rewrites files in place, and its command line rarely names them (``black .``,
``cargo fmt``, ``npm run check`` running ``biome check --write .``): a file the agent showed the
model and then had formatted is no longer at the text the model saw. Two readings, both of text
only (this module never touches a session or a store):

- ``formatter_targets(argv)``: whether one simple command is a formatter that writes (``black``,
  ``ruff format``, ``ruff check --fix``, ``prettier --write``, ``biome … --write``, ``eslint
  --fix``, ``gofmt -w``, ``go fmt``, ``rustfmt``, ``cargo fmt``, ``mix format``, ``isort``,
  ``autopep8 -i``, ``clang-format -i``, also behind ``npx``, ``pnpm exec``, ``uv run``,
  ``python -m`` and the like), and the paths it names (``["."]``: its working directory);
- ``formatter_report(output)``: what a formatter's output says it did, from whichever command
  ran it (a package script's, a Makefile's): how many files it rewrote (Biome's ``Fixed 2
  files.``, Ruff's and Black's ``1 file reformatted``, Ruff's ``(3 fixed, 0 remaining)``, Black's
  ``reformatted PATH`` and isort's ``Fixing PATH`` lines, Prettier's ``PATH 12ms`` lines (its
  ``(unchanged)`` ones not)), and the paths where it says them.

Which files a formatter over a directory rewrote its output rarely says: ``VirtualFiles`` takes
a file for changed only where the command or its output names it.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

__all__ = ["FormatterReport", "formatter_report", "formatter_targets"]

_RUNNERS = {"npx": 1, "bunx": 1, "pnpx": 1, "pipx": 2, "uvx": 1}
"""Commands that run the next word as a program (``pipx run X``: two words before it)."""
_SUBCOMMAND_RUNNERS = {("pnpm", "exec"), ("pnpm", "dlx"), ("yarn", "exec"), ("uv", "run"), ("poetry", "run")}
_WRITING = {
    "prettier": ("--write", "-w"),
    "eslint": ("--fix",),
    "biome": ("--write", "--apply", "--apply-unsafe", "--fix"),
}
"""The options under which these formatters write (without one they only report)."""
_REPORT_ONLY = ("--check", "--diff", "--dry-run", "-l", "--list-different", "-c")
"""Options under which a formatter only reports (``black --check``, ``prettier -c``)."""


def formatter_targets(argv: list[str]) -> list[str] | None:
    """The paths a formatter command writes what it changes of (a file, or every file below a
    directory; ``["."]`` where it names none: its working directory); None for a command that is
    no formatter, or one that only reports (``--check``, ``--diff``)."""
    argv = _unwrapped(argv)
    if not argv:
        return None
    name, rest = posixpath.basename(argv[0]), argv[1:]
    options = [w for w in rest if w.startswith("-")]
    plain = [w for w in rest if not w.startswith("-")]
    if any(o in _REPORT_ONLY for o in options) and name not in ("clang-format", "gofmt"):
        return None
    if name in ("black", "isort", "rustfmt", "yapf") and (name != "yapf" or "-i" in options):
        return plain or ["."]
    if name == "ruff":
        if plain[:1] == ["format"] or "--fix" in options:
            return (plain[1:] if plain[:1] in (["format"], ["check"]) else plain) or ["."]
        return None
    if name in _WRITING:
        if not any(o in _WRITING[name] or o.startswith("--write=") for o in options):
            return None
        paths = plain[1:] if name == "biome" else plain  # biome's first word is its command
        return paths or ["."]
    if name in ("gofmt", "clang-format", "autopep8"):
        return (plain or ["."]) if any(o in ("-w", "-i", "--in-place") for o in options) else None
    if (name, plain[:1]) in (("go", ["fmt"]), ("cargo", ["fmt"]), ("mix", ["format"]), ("dotnet", ["format"])):
        if "--check" in options or "--check-formatted" in options:
            return None
        return [p for p in plain[1:] if not p.startswith("./...")] or ["."]
    return None


def _unwrapped(argv: list[str]) -> list[str]:
    """``argv`` without what runs the program it names (``npx -y prettier …``: ``prettier …``;
    ``python -m black``: ``black``)."""
    while argv:
        name = posixpath.basename(argv[0])
        if name in _RUNNERS:
            rest = argv[_RUNNERS[name] :]
            while rest and rest[0].startswith("-"):
                rest = rest[1:]
            argv = rest
        elif (name, *argv[1:2]) in _SUBCOMMAND_RUNNERS or (
            re.fullmatch(r"python[0-9.]*", name) and argv[1:2] == ["-m"]
        ):
            argv = argv[2:]
        else:
            return argv
    return argv


@dataclass
class FormatterReport:
    """What a formatter's output says it did."""

    fixed: int = 0
    """How many files it says it rewrote, in all."""
    paths: list[str] = field(default_factory=list)
    """The files it names as rewritten, where it names them."""


_COUNTS = (
    re.compile(r"^(?:Fixed|Formatted) (\d+) files?\b", re.M),  # Biome: "Checked 3 files in 2ms. Fixed 1 file."
    re.compile(r"\bFixed (\d+) files?\.", re.M),
    re.compile(r"^(\d+) files? reformatted\b", re.M),  # Black, Ruff format
    re.compile(r"\((\d+) fixed, \d+ remaining\)", re.M),  # Ruff check --fix
)
_NAMED = (
    re.compile(r"^reformatted (\S[^\n]*?\.pyi?)\s*$", re.M),  # Black
    re.compile(r"^Fixing (\S+\.pyi?)\s*$", re.M),  # isort
)
_PRETTIER = re.compile(r"^(\S+\.[A-Za-z0-9]+) \d+(?:\.\d+)?ms( \(unchanged\))?\s*$", re.M)
_SAID = re.compile(r"No fixes applied|files? left unchanged|\(0 fixed|\(unchanged\)|All done!", re.M)


def formatter_report(output: str) -> FormatterReport | None:
    """What ``output`` says a formatter rewrote; None where it says nothing a formatter says."""
    if not output:
        return None
    counts: dict[int, int] = {}  # where in the output, the count there: one line matched by two forms once
    for pattern in _COUNTS:
        for m in pattern.finditer(output):
            line = output.count("\n", 0, m.start())
            counts[line] = max(counts.get(line, 0), int(m.group(1)))
    paths = [m.group(1) for pattern in _NAMED for m in pattern.finditer(output)]
    pretty = list(_PRETTIER.finditer(output))
    paths += [m.group(1) for m in pretty if m.group(2) is None]
    if not counts and not paths and not pretty and not _SAID.search(output):
        return None
    return FormatterReport(max(sum(counts.values()), len(paths)), list(dict.fromkeys(paths)))
