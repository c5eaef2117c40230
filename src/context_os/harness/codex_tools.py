"""What Codex CLI's tool calls say about files: ``apply_patch`` patches, and shell commands that
only print a file.

Codex has no read tool: its model reads a file with a shell command (``sed -n '1,200p' app.js``,
``nl -ba app.js | sed -n '40,80p'``, ``head -n 40 README.md``, ``cat app.js``) and changes one
with ``apply_patch``, a tool whose input is a patch in Codex's own format:

    *** Begin Patch
    *** Update File: app.js
    @@ function render() {
     context line
    -removed line
    +added line
    *** End Patch

(``*** Add File: PATH`` with ``+`` lines, ``*** Delete File: PATH``, ``*** Move to: PATH`` after
an update's header). The model calls it as a freeform tool (its input is the patch), as a
function (``{"input": patch}``), or through the shell (``apply_patch <<'PATCH' ... PATCH``, also
spelt ``applypatch``, maybe after ``cd DIR &&``).

``environment_cwd(text)`` reads the session's directory from the environment message Codex sends
first (``<environment_context><cwd>/path</cwd>…``): a patch's relative paths are under it.
``shell_read(arguments)`` says whether a shell call is a plain read of one file, and which lines;
``call_patch(arguments)`` finds a call's patch and ``parse_patch`` reads it. Anything more than
one plain command (a pipe into another program, ``&&``, a redirection, a glob) is not a read:
its output is not simply the file's lines. Only the shapes above are recognised; a command this
does not understand is a shell command like any other.

This module only parses text; it never touches a session or a store.
"""

from __future__ import annotations

import itertools
import json
import posixpath
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .formatters import formatter_targets

__all__ = [
    "Patch",
    "PatchFile",
    "ShellChanges",
    "ShellRead",
    "call_patch",
    "content_role",
    "environment_cwd",
    "named_cwd",
    "named_cwds",
    "is_operation",
    "json_arguments",
    "parse_patch",
    "shell_changes",
    "shell_read",
    "shell_script",
]

_SHELLS = ("bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/bin/zsh", "/usr/bin/bash", "/usr/bin/zsh")
_SED_RANGE = re.compile(r"\A(\d+)(?:,(\d+|\$))?p\Z")
_PATCH_COMMANDS = ("apply_patch", "applypatch")
"""The names Codex runs a patch by through the shell (codex-rs ``apply-patch/src/invocation.rs``)."""
_HEREDOC = re.compile(
    r"\A(?:cd\s+(?:'(?P<quoted>[^']*)'|\"(?P<dquoted>[^\"\\$`]*)\"|(?P<word>[^\s'\"\\$`~&;|<>()][^\s'\"\\$`&;|<>()]*))"
    r"\s*&&\s*)?(?:apply_patch|applypatch)\s+<<-?\s*(['\"]?)(?P<tag>\w+)\4\n(?P<body>.*?)\n(?P=tag)\s*\Z",
    re.DOTALL,
)
"""``apply_patch <<'EOF' … EOF``, maybe after one ``cd DIR &&`` (a word, or one quoted string
without expansions), as Codex accepts it: the patch's paths are then under that directory."""
_PATCH_PATH = re.compile(r"^(\*\*\* (?:(?:Add|Update|Delete) File|Move to): )(.+?)(\r?)$", re.MULTILINE)
_PATCH_HEADER = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$")
_OPERATIONS = {"create_file": "Add", "update_file": "Update", "delete_file": "Delete"}
"""The built-in ``apply_patch`` tool's operations, by the patch header each stands for."""
_ENVIRONMENT_CWD = re.compile(r"\A\s*<environment_context>\s*<cwd>(?P<cwd>/[^<\n]*)</cwd>")
_ENV_BLOCK_CWD = re.compile(r"^<env>\n[ \t]*Working directory: (?P<cwd>/[^\n]*?)[ \t]*$", re.MULTILINE)
"""OpenCode's (and Claude Code's) system prompt: an ``<env>`` block whose first line names the
directory the agent runs in."""


_NAMED_CWD = re.compile(
    r"(?:^|\n)[ \t]*(?:[-*][ \t]*)?(?:Primary working directory|Current working directory|Working directory"
    r"|I'm currently working in the directory)[ \t]*:[ \t]*(?P<line>[^\n]+?)[ \t]*(?=\n|$)"
    r"|<cwd>\s*(?P<tag>[^<\n]+?)\s*</cwd>"
    r"|\*\*Workspace Directories:\*\*[ \t]*\n[ \t]*-[ \t]*(?P<listed>[^\n]+?)[ \t]*(?=\n|$)"
)
"""How coding agents name the directory they work in, to the model: Claude Code and OpenCode in
their system prompt's environment (``Working directory: /w``, or ``Primary working directory:``),
Pi at its system prompt's end (``<cwd>`` with ``/w`` on a line of its own; older versions
``Current working directory: /w``), Codex in an ``<environment_context>`` message
(``<cwd>/w</cwd>``), Gemini CLI in its first message's list (``- **Workspace Directories:**`` then
``  - /w``; older versions and Qwen Code ``I'm currently working in the directory: /w``)."""


def environment_cwd(text: str) -> str | None:
    """The directory of a Codex session, from its environment message, or of an OpenCode session,
    from its system prompt's ``<env>`` block (None for any other text)."""
    found = _ENVIRONMENT_CWD.match(text) or _ENV_BLOCK_CWD.search(text)
    if found is None:
        return None
    return found.group("cwd").rstrip("/") or "/"


def named_cwd(text: str) -> str | None:
    """The first directory ``text`` names as its agent's, in any agent's words (``named_cwds``),
    that is an absolute path (a drive's, on Windows); None if it names none."""
    for named in named_cwds(text):
        if named.startswith("/") or re.match(r"[A-Za-z]:[\\/]", named):
            return named.rstrip("/\\") or "/"
    return None


def named_cwds(text: str) -> Iterator[str]:
    """Each directory ``text`` names as the one its agent works in, in any agent's words
    (``_NAMED_CWD``), as written: not checked."""
    for m in _NAMED_CWD.finditer(text):
        named = m.group("line") or m.group("tag") or m.group("listed") or ""
        yield named.strip().strip("`'\"")


@dataclass(frozen=True)
class ShellRead:
    """A shell command that prints lines of one file and nothing else."""

    path: str
    first: int = 1
    """The first line printed."""
    last: int | None = None
    """The last line asked for (None: to the end of the file)."""
    numbered: bool = False
    """The lines are printed with their numbers (``nl -ba``, ``cat -n``)."""


def shell_script(arguments: Any) -> tuple[str, str | None] | None:
    """(script, working directory) of a shell call's arguments: ``command`` as a string
    (``shell_command``) or an argv list (``shell``, ``local_shell``; ``["bash", "-lc", script]``
    unwrapped), ``cmd`` (``exec_command``), or ``commands`` (the Responses API's built-in shell:
    its commands, one script); None when there is no command."""
    args = json_arguments(arguments)
    if args is None:
        return None
    command = args.get("command", args.get("cmd"))
    commands = args.get("commands")
    if command is None and isinstance(commands, list) and commands and all(isinstance(c, str) for c in commands):
        command = "\n".join(commands)
    workdir = args.get("workdir", args.get("working_directory"))
    workdir = workdir if isinstance(workdir, str) and workdir else None
    if isinstance(command, str):
        return command, workdir
    if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        if len(command) == 3 and command[0] in _SHELLS and command[1] in ("-c", "-lc"):
            return command[2], workdir
        return shlex.join(command), workdir
    return None


def shell_read(arguments: Any) -> ShellRead | None:
    """The file a shell call only prints, and which lines; None for any other command."""
    got = shell_script(arguments)
    if got is None:
        return None
    script, workdir = got
    if "\n" in script.strip():
        return None
    stages = script.split("|")
    if len(stages) > 2:
        return None
    try:
        words = [shlex.split(s, posix=True) for s in stages]
    except ValueError:
        return None
    if any(not w or any(_special(a) for a in w) for w in words):
        return None
    read = _single(words[0]) if len(words) == 1 else _numbered_then_sed(words[0], words[1])
    if read is None:
        return None
    return ShellRead(_joined(workdir, read.path), read.first, read.last, read.numbered)


def _special(word: str) -> bool:
    """Whether an argument makes the command more than a plain read (shlex has removed quotes, so
    a sed script's ``$`` is here too: only the characters of control and globbing count, and a
    word the shell expands: a variable, ``~/x`` in a home directory the transcript does not name)."""
    return any(c in word for c in ";&<>`*?") or word.startswith(("$", "~"))


def _single(argv: list[str]) -> ShellRead | None:
    name, rest = argv[0], argv[1:]
    if name == "cat":
        numbered = rest[:1] == ["-n"]
        files = rest[1:] if numbered else rest
        return ShellRead(files[0], numbered=numbered) if len(files) == 1 and not files[0].startswith("-") else None
    if name == "nl" and rest[:1] == ["-ba"] and len(rest) == 2:
        return ShellRead(rest[1], numbered=True)
    if name == "sed":
        return _sed(rest)
    if name == "head":
        return _head(rest)
    return None


def _sed(rest: list[str]) -> ShellRead | None:
    """``sed -n 'A,Bp' FILE`` (also ``Ap`` and ``A,$p``)."""
    if len(rest) != 3 or rest[0] != "-n" or rest[2].startswith("-"):
        return None
    m = _SED_RANGE.match(rest[1])
    if m is None:
        return None
    first = int(m.group(1))
    last = first if m.group(2) is None else None if m.group(2) == "$" else int(m.group(2))
    if first < 1 or (last is not None and last < first):
        return None
    return ShellRead(rest[2], first, last)


def _head(rest: list[str]) -> ShellRead | None:
    """``head FILE``, ``head -n N FILE``, ``head -N FILE``."""
    count = 10
    if len(rest) == 3 and rest[0] == "-n" and rest[1].isdigit():
        count, rest = int(rest[1]), rest[2:]
    elif len(rest) == 2 and rest[0].startswith("-") and rest[0][1:].isdigit():
        count, rest = int(rest[0][1:]), rest[1:]
    if len(rest) != 1 or rest[0].startswith("-") or count < 1:
        return None
    return ShellRead(rest[0], 1, count)


def _numbered_then_sed(first: list[str], second: list[str]) -> ShellRead | None:
    """``nl -ba FILE | sed -n 'A,Bp'`` and ``cat -n FILE | sed -n 'A,Bp'``."""
    numbered = _single(first)
    if numbered is None or not numbered.numbered or second[:2] != ["sed", "-n"] or len(second) != 3:
        return None
    ranged = _sed(["-n", second[2], numbered.path])
    return ShellRead(numbered.path, ranged.first, ranged.last, numbered=True) if ranged is not None else None


@dataclass(frozen=True)
class ShellChanges:
    """What a shell call may have written: files it changed in a way its text does not say
    (``sed -i``, ``perl -i``, a redirection, ``tee``, ``mv``, ``cp``, ``git mv``), files a heredoc
    wrote whole (``cat > F <<'EOF'``), with their text, and what git commands changed (``trees``,
    ``either``)."""

    changed: list[str] = field(default_factory=list)
    written: list[tuple[str, str]] = field(default_factory=list)
    trees: list[str] = field(default_factory=list)
    """Paths below which every file may have changed (each a file or a directory): what a git
    command put back or brought in. ``git checkout -- PATHS`` and ``git restore PATHS`` name them
    (a pathspec's glob or variable: the directory before it); ``git reset --hard``, ``git stash``,
    ``git pull``, ``merge``, ``rebase``, ``cherry-pick``, ``revert``, ``am``, ``apply``, a branch
    switched to: the work tree, taken as the call's directory (or where it went by an absolute
    ``cd``, or ``git -C DIR``)."""
    copies: list[tuple[str, str]] = field(default_factory=list)
    """(source, destination) of a ``cp A B`` or ``mv A B`` of one file to one file named whole (not
    a directory, not ``-r``): the destination then holds the source's text as it was before the
    call (a source a command before it in the script changed is in ``changed`` instead). ``mv``'s
    source is also in ``changed``."""
    formatted: list[str] = field(default_factory=list)
    """What a formatter the script runs rewrites what it changes of (``formatters``): a file, or
    the files below a directory (``black .``, ``cargo fmt``: its working directory). Which files
    below a directory it rewrote the command does not say (``VirtualFiles`` takes a named file
    only)."""
    globs: list[str] = field(default_factory=list)
    """Paths with a glob the shell expanded (``sed -i … core/*.ts``): the known files they match."""
    directory: str | None = None
    """Where the script's last command ran (its work tree: see ``trees``); None where not said.
    A formatter's output from a command that does not name it (``npm run check``) is about it."""
    either: list[tuple[list[str], str]] = field(default_factory=list)
    """``git checkout X…`` without ``--``, which git reads as paths where X names one and as a
    branch or commit otherwise: (the paths X, the work tree). The paths where one of them names a
    file the session knows (a file, or a directory it knows files below), else the work tree."""


_CAT_HEREDOC = (
    re.compile(
        r"\A\s*cat\s*>\s*(?P<path>[^\s<>;&|]+)\s*<<-?\s*(['\"]?)(?P<tag>\w+)\2\n(?P<body>.*?)\n(?P=tag)\s*\Z", re.S
    ),
    re.compile(
        r"\A\s*cat\s*<<-?\s*(['\"]?)(?P<tag>\w+)\1\s*>\s*(?P<path>[^\s<>;&|]+)\n(?P<body>.*?)\n(?P=tag)\s*\Z", re.S
    ),
)
_SEPARATORS = (";", "&&", "||", "|", "&", "|&")


def shell_changes(arguments: Any, output: str = "") -> ShellChanges:
    """The files a shell call may have changed (``ShellChanges``), as far as its script says
    (and its ``output``, where a command says there what it changed: ``git pull``'s ``Already up
    to date.`` or the files of its diffstat): a command this does not understand (a script,
    ``python fix.py``) changes what it changes unseen, and a script that cannot be read says
    nothing."""
    got = shell_script(arguments)
    if got is None:
        return ShellChanges()
    script, workdir = got
    for pattern in _CAT_HEREDOC:
        m = pattern.match(script)
        if m is not None:
            if m.group("path").startswith("~"):
                return ShellChanges()  # a file in a home directory the transcript does not name
            return ShellChanges(written=[(_joined(workdir, m.group("path")), m.group("body") + "\n")])
    changed: list[str] = []
    copies: list[tuple[str, str]] = []
    trees: list[str] = []
    either: list[tuple[list[str], str]] = []
    formatted: list[str] = []
    cwd: str | None = "."  # where the script is now, below ``workdir`` (None: not known)
    work: str | None = "."
    body_ends: list[tuple[str, bool]] = []  # the heredocs whose bodies follow: (tag, tabs stripped)
    for line in script.split("\n"):
        if body_ends:  # a heredoc's body: its lines are no commands
            tag, dash = body_ends[0]
            if (line.lstrip("\t") if dash else line) == tag:
                body_ends.pop(0)
            continue
        try:
            lex = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
            lex.whitespace_split = True
            tokens = list(lex)
        except ValueError:
            break
        command: list[str] = []
        for k, token in enumerate([*tokens, ";"]):
            if token in _SEPARATORS:
                if command and command[0].startswith("("):
                    cwd = None  # a subshell: where its cd leaves it is not followed
                if command[:1] == ["cd"]:
                    cwd = _cd(cwd, command[1:])
                elif command:
                    said = _command_changes(command, output)
                    for source, target in said.copies:
                        here = _here(cwd, [source, target])
                        if len(here) == 2 and here[0] not in changed:
                            copies.append((here[0], here[1]))
                        else:  # changed before it in the script, or where the script is not known
                            changed += _here(cwd, [target])
                    changed += _here(cwd, said.files)
                    trees += _here(cwd, said.trees)
                    formatted += _here(cwd, said.formats)
                    work = _work_tree(cwd, said.at)
                    if said.whole and work is not None:
                        trees.append(work)
                    if work is not None:
                        trees += [_joined(work, p) for p in said.in_tree]
                    if said.either and work is not None:
                        either.append((_here(cwd, said.either), work))
                command = []
            else:
                command.append(token)
            if token == "<<" and k + 1 < len(tokens):
                tag = tokens[k + 1]  # <<EOF, <<-EOF (tabs stripped), <<- EOF
                tag = tag + tokens[k + 2] if tag == "-" and k + 2 < len(tokens) else tag
                body_ends.append((tag[1:], True) if tag.startswith("-") else (tag, False))

    def named(paths: list[str]) -> list[str]:
        """``paths`` under the call's directory, once each, but those no file of it (``~/x``)."""
        return list(dict.fromkeys(_joined(workdir, p) for p in paths if p and p != "/dev/null" and p[0] != "~"))

    files = named(changed)
    return ShellChanges(
        changed=[p for p in files if not _unexpanded(p)],
        copies=[(a[0], b[0]) for a, b in ((named([s]), named([t])) for s, t in copies) if a and b],
        globs=[p for p in files if _unexpanded(p) and not _unexpanded(p, "$`{}")],
        trees=named([_said_below(p) for p in trees]),
        formatted=named([_said_below(p) for p in formatted]),
        directory=_joined(workdir, work) if work is not None else None,
        either=[(named([_said_below(p) for p in ps]), _joined(workdir, t)) for ps, t in either],
    )


def _here(cwd: str | None, paths: list[str]) -> list[str]:
    """``paths`` of a command run in ``cwd``, as paths below the call's directory (or absolute);
    at a place not known (None), only the absolute ones."""
    if cwd is None:
        return [p for p in paths if posixpath.isabs(p)]
    return [_joined(cwd, p) for p in paths]


def _work_tree(cwd: str | None, at: str | None) -> str | None:
    """The work tree of a git command run in ``cwd`` (``git -C AT``): ``AT``; else where an
    absolute ``cd`` went; else the call's own directory (``.``: a ``cd`` into one of its
    directories stays in its repository); None where the script does not say."""
    if at is not None:
        return next(iter(_here(cwd, [at])), None)
    if cwd is None:
        return None
    return cwd if posixpath.isabs(cwd) else "."


def _said_below(path: str) -> str:
    """The part of a git pathspec before its first glob or variable (``src/*.py``: ``src``):
    every file it may name is below it."""
    parts = path.split("/")
    known = list(itertools.takewhile(lambda part: not _unexpanded(part), parts))
    return path if len(known) == len(parts) else "/".join(known) or ("/" if path.startswith("/") else ".")


def _cd(cwd: str | None, args: list[str]) -> str | None:
    """Where ``cd ARGS`` run in ``cwd`` goes (a path below the call's working directory, or an
    absolute one); None where the script does not say (``cd``, ``cd -``, ``cd ~/x``, ``cd $D``)."""
    args = [a for a in args if a not in ("-L", "-P", "--")]
    if cwd is None or len(args) != 1 or args[0] == "-" or args[0].startswith("~") or _unexpanded(args[0]):
        return None
    return _joined(cwd, args[0])


def _unexpanded(word: str, chars: str = "*?[]{}$`") -> bool:
    """Whether the shell would expand ``word`` into something its text does not say."""
    return any(c in word for c in chars)


@dataclass
class _Said:
    """What one simple command may change (``ShellChanges``), its paths as it names them."""

    files: list[str] = field(default_factory=list)
    trees: list[str] = field(default_factory=list)
    whole: bool = False
    """The whole work tree (git's ``reset --hard``, ``stash``, ``pull``…)."""
    either: list[str] = field(default_factory=list)
    at: str | None = None
    """``git -C AT``: where git runs."""
    formats: list[str] = field(default_factory=list)
    """A formatter's paths (``formatter_targets``)."""
    in_tree: list[str] = field(default_factory=list)
    """Paths below the work tree (the files a ``git pull``'s diffstat names)."""
    copies: list[tuple[str, str]] = field(default_factory=list)
    """(source, destination) of a ``cp``/``mv`` of one file to another (``_copy``)."""


def _command_changes(words: list[str], output: str = "") -> _Said:
    """What one simple command may change: redirection targets, the files of the commands that
    write in place, and what a git command put back or brought in."""
    out: list[str] = []
    argv: list[str] = []
    k = 0
    while k < len(words):
        word, after = words[k], words[k + 1] if k + 1 < len(words) else None
        if word.isdigit() and after is not None and after[:1] in "<>":
            k += 1  # 2>/dev/null, 2>&1: the descriptor's number is no word of the command
            continue
        if after is not None and ((word.endswith(">") and set(word) <= set("&>")) or word == ">|"):
            out.append(after)  # > F, >> F, &> F, >| F
            k += 2
            continue
        if after is not None and word == ">&":
            if not (after.isdigit() or after == "-"):
                out.append(after)  # >& F: both outputs to F; >&2 only points one at another
            k += 2
            continue
        if word in ("<", "<<", "<<<", "<&", "<>"):
            k += 2
            continue
        argv.append(word)
        k += 1
    while argv and "=" in argv[0] and not argv[0].startswith("-"):
        argv = argv[1:]  # VAR=value before the command
    if not argv:
        return _Said(out)
    name, rest = posixpath.basename(argv[0]), argv[1:]
    formats = formatter_targets(argv)
    if formats is not None:
        return _Said(out, formats=formats)
    if name == "git":
        said = _git(rest, output)
        said.files += out
        return said
    plain = [w for w in rest if not w.startswith("-")]
    if name == "sed" and any(w == "-i" or w.startswith(("-i", "--in-place")) for w in rest):
        i = rest.index("-i") if "-i" in rest else -1
        if 0 <= i < len(rest) - 1 and rest[i + 1] in ("", ".bak", ".orig"):
            # BSD's (macOS's) ``sed -i '' …``: the backup suffix as a word of its own
            del rest[i + 1]
            plain = [w for w in rest if not w.startswith("-")]
        scripted = any(w in ("-e", "-f") or w.startswith(("--expression", "--file")) for w in rest)
        values = {rest[j + 1] for j, w in enumerate(rest[:-1]) if w in ("-e", "-f")}
        scripts = [rest[j + 1] for j, w in enumerate(rest[:-1]) if w == "-e"] if scripted else plain[:1]
        if not _sed_cannot_match(scripts, rest):
            out += [w for w in plain if w not in values] if scripted else plain[1:]
    elif name == "perl" and any(w.startswith("-") and not w.startswith("--") and "i" in w for w in rest):
        values = {rest[j + 1] for j, w in enumerate(rest[:-1]) if w.startswith("-") and w.endswith("e")}
        out += [w for w in plain if w not in values]
    elif name == "tee":
        out += plain
    # ``rm`` is not followed: a deleted file keeps its last text, which misleads nobody (the
    # agent deleted it), and a session that removes its scratch script at the end is not sent
    # its whole context anew for it
    elif name in ("mv", "cp") and len(plain) >= 2:
        copy = _copy(rest, plain)
        if copy is not None:
            return _Said(out + plain[:1] if name == "mv" else out, copies=[copy])
        into = next((rest[j + 1] for j, w in enumerate(rest[:-1]) if w in ("-t", "--target-directory")), None)
        if into is not None:  # cp -t DIR A B: DIR/A, DIR/B
            sources = [w for w in plain if w != into]
            out += [posixpath.join(into, posixpath.basename(w)) for w in sources]
            out += sources if name == "mv" else []
        else:
            out += plain if name == "mv" else plain[-1:]
    elif (name, *plain[:1]) in _PACKAGE_CHANGES and (len(plain) > 1 if name != "go" else bool(output.strip())):
        out += _PACKAGE_CHANGES[(name, plain[0])]  # npm install X: its manifest and lock file (go: if it says so)
    return _Said(out)


_COPY_OPTIONS = re.compile(r"-[fpva]+|--(force|verbose|archive|preserve(=[\w,]+)?)")


def _copy(options: list[str], plain: list[str]) -> tuple[str, str] | None:
    """``cp``/``mv`` of one file to another: (source, destination); a destination ending in ``/``
    is the source's name in that directory. None where the words do not say that the destination
    is a file: more than two paths, ``-r``, ``-t DIR``, ``-n``/``-u`` (it may not copy), a glob,
    or a destination named without the extension its source has (``cp a.ts src``: maybe a
    directory)."""
    if len(plain) != 2 or any(o != "--" and o.startswith("-") and not _COPY_OPTIONS.fullmatch(o) for o in options):
        return None
    source, target = plain
    if _unexpanded(source) or _unexpanded(target) or source.endswith("/"):
        return None
    if target.endswith("/"):
        return source, target + posixpath.basename(source)
    if "." in posixpath.basename(source) and "." not in posixpath.basename(target):
        return None
    return source, target


_PACKAGE_FILES = {
    "npm": ["package.json", "package-lock.json"],
    "pnpm": ["package.json", "pnpm-lock.yaml"],
    "yarn": ["package.json", "yarn.lock"],
    "bun": ["package.json", "bun.lock", "bun.lockb"],
    "cargo": ["Cargo.toml", "Cargo.lock"],
    "uv": ["pyproject.toml", "uv.lock"],
    "poetry": ["pyproject.toml", "poetry.lock"],
    "go": ["go.mod", "go.sum"],
}
_PACKAGE_CHANGES = {
    (tool, verb): _PACKAGE_FILES[tool]
    for tool, verbs in {
        "npm": ("install", "i", "add", "uninstall", "remove", "rm", "un"),
        "pnpm": ("add", "install", "i", "remove", "rm", "uninstall"),
        "yarn": ("add", "remove"),
        "bun": ("add", "install", "i", "remove", "rm"),
        "cargo": ("add", "remove", "rm"),
        "uv": ("add", "remove"),
        "poetry": ("add", "remove"),
        "go": ("get",),
    }.items()
    for verb in verbs
}
_PACKAGE_CHANGES[("go", "mod")] = _PACKAGE_FILES["go"]  # go mod tidy, go mod edit
"""A package manager's commands that write its manifest in the directory they run in, with a
package named (``npm install X``; ``npm install`` alone installs what the manifest says). Go's
say what they changed (``go: added …``): a silent ``go mod tidy`` is taken for one that changed
nothing (a real session's was: its go.mod taken for changed sent it a third more at cache price)."""


def _sed_cannot_match(scripts: list[str], words: list[str]) -> bool:
    """Whether ``sed``'s scripts are substitutions that cannot match a line: a pattern with a
    ``\\n`` in it, while sed reads one line at a time (no ``-z``, no ``N`` command joining lines).
    A real session's ``sed -i 's/…;\\n\\t\\t\\tthis.…/…/g' F`` changed nothing (its agent said
    so), and F's whole known text was forgotten for it."""
    if not scripts or any(w in ("-z", "--null-data") or (w[:1] == "-" and w[1:2] != "-" and "z" in w) for w in words):
        return False
    for script in scripts:
        if len(script) < 4 or script[0] != "s" or script[1].isalnum() or script[1] in "\\\n":
            return False
        parts = re.split(r"(?<!\\)" + re.escape(script[1]), script[2:])
        if len(parts) != 3 or "\\n" not in parts[0] or not re.fullmatch(r"[gGiIpP0-9]*", parts[2]):
            return False  # (flags only after it: no other command that may join lines)
    return True


_UP_TO_DATE = re.compile(r"^Already up.to.date\.?\s*$", re.M)
_DIFFSTAT = re.compile(r"^ (\S[^|\n]*?)\s+\|\s+(?:\d+ ?[-+]*|Bin\b)", re.M)
"""A line of git's diffstat (`` src/app.py | 4 ++--``): the path, as below the work tree."""
_GIT_VALUED = ("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env")
"""git's options before its command that take the next word as their value."""
_GIT_MERGING = ("pull", "merge", "rebase", "cherry-pick", "revert", "am")
_GIT_BISECT = ("start", "good", "bad", "new", "old", "skip", "reset", "run")
_GIT_APPLY_NOTHING = ("--check", "--stat", "--numstat", "--summary", "--cached")
"""``git apply`` options under which it writes nothing to the work tree (without ``--index``)."""


def _git(args: list[str], output: str = "") -> _Said:
    """What a git command may change in its work tree (``ShellChanges.trees``): the paths it puts
    back (``checkout -- PATHS``, ``restore``, ``stash push -- PATHS``), the whole tree (``reset
    --hard``, ``stash``, a branch switched to, ``pull``, ``merge``…), the files ``git mv`` moves.
    Anything else (``status``, ``diff``, ``add``, ``commit``, ``reset`` of the index) changes no
    file; ``git rm`` and ``git clean`` delete, which is not followed (as ``rm``)."""
    at: str | None = None
    k = 0
    while k < len(args) and args[k].startswith("-"):  # options before the command
        if args[k] == "-C" and k + 1 < len(args):
            at = args[k + 1] if at is None else posixpath.join(at, args[k + 1])
        k += 2 if args[k] in _GIT_VALUED else 1
    if k >= len(args):
        return _Said()
    command, rest = args[k], args[k + 1 :]
    said = _git_command(command, rest, output)
    if at is not None:
        said.files = [posixpath.join(at, p) for p in said.files]
        said.trees = [posixpath.join(at, p) for p in said.trees]
        said.either = [posixpath.join(at, p) for p in said.either]
        said.copies = [(posixpath.join(at, a), posixpath.join(at, b)) for a, b in said.copies]
        said.at = at
    return said


def _split(rest: list[str], valued: tuple[str, ...]) -> tuple[list[str], list[str], list[str]]:
    """A git command's words as (its options, its other words before ``--``, the words after
    ``--``); an option in ``valued`` takes the next word (``-b NAME``), kept with it."""
    options: list[str] = []
    plain: list[str] = []
    k = 0
    while k < len(rest):
        word = rest[k]
        if word == "--":
            return options, plain, rest[k + 1 :]
        if word.startswith("-") and word != "-":
            options.append(word)
            if word in valued and k + 1 < len(rest):
                options.append(rest[k + 1])
                k += 1
        else:
            plain.append(word)
        k += 1
    return options, plain, []


def _given(options: list[str], letter: str, long: str) -> bool:
    """Whether ``options`` hold ``-LETTER`` (alone or among short ones: ``-SW``) or ``long``."""
    return any(o == long or (o.startswith("-") and not o.startswith("--") and letter in o) for o in options)


def _git_command(command: str, rest: list[str], output: str) -> _Said:
    """``_git`` for one command and the words after it."""
    if command in ("pull", "merge") and not any(w in ("--abort", "--quit") for w in rest):
        if _UP_TO_DATE.search(output):
            return _Said()
        stat = [m.group(1) for m in _DIFFSTAT.finditer(output)]
        if stat and not any(p.startswith("...") or "=>" in p for p in stat):  # (abbreviated, renamed: not said)
            return _Said(in_tree=stat)
    if command == "checkout":
        options, plain, paths = _split(rest, ("-b", "-B", "--orphan", "--conflict"))
        if paths or "--" in rest:
            return _Said(trees=paths)
        if any(o in ("-b", "-B", "--orphan") for o in options):
            return _Said(whole=bool(plain))  # a new branch: at a start point, the tree switches
        if any(o in ("--ours", "--theirs", "-m", "--merge") for o in options):
            return _Said(trees=plain)  # a conflict's side: paths
        if not plain:
            return _Said(whole=any(o in ("-f", "--force") for o in options))
        return _Said(either=plain)
    if command == "switch":
        options, plain, _ = _split(rest, ("-c", "-C", "--create", "--force-create", "--orphan"))
        if any(o in ("-c", "-C", "--create", "--force-create", "--orphan") for o in options):
            return _Said(whole=bool(plain))
        return _Said(whole=bool(plain) or "--discard-changes" in options or "-f" in options)
    if command == "restore":
        options, plain, paths = _split(rest, ("-s", "--source"))
        if _given(options, "S", "--staged") and not _given(options, "W", "--worktree"):
            return _Said()  # the index only
        if any(o.startswith("--pathspec-from-file") for o in options):
            return _Said(whole=True)
        return _Said(trees=paths or plain)
    if command == "reset":
        options, _, _ = _split(rest, ())
        return _Said(whole=any(o in ("--hard", "--merge", "--keep") for o in options))
    if command == "stash":
        sub = rest[0] if rest and not rest[0].startswith("-") else "push"
        if sub in ("pop", "apply", "branch", "save"):
            return _Said(whole=True)
        if sub != "push":
            return _Said()  # list, show, drop, clear, create, store
        _, plain, paths = _split(rest[1:] if rest[:1] == ["push"] else rest, ("-m", "--message"))
        return _Said(trees=paths or plain, whole=not (paths or plain))
    if command == "apply":
        options, _, _ = _split(rest, ())
        return _Said(whole="--index" in options or not any(o in _GIT_APPLY_NOTHING for o in options))
    if command == "bisect":
        return _Said(whole=bool(rest) and rest[0] in _GIT_BISECT)
    if command in _GIT_MERGING:
        return _Said(whole=True)
    if command == "mv":
        options, plain, paths = _split(rest, ())
        if _given(options, "n", "--dry-run"):
            return _Said()
        copy = _copy(options, plain + paths)  # git mv A B: B holds A's text, as mv's (-k may not move)
        if copy is not None:
            return _Said(files=[copy[0]], copies=[copy])
        return _Said(files=plain + paths if len(plain + paths) >= 2 else [])
    return _Said()


def _joined(workdir: str | None, path: str) -> str:
    if workdir is None or workdir == "." or posixpath.isabs(path):
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(workdir, path))


# --- apply_patch ------------------------------------------------------------------------------------


@dataclass
class PatchFile:
    """One file of a patch."""

    kind: str
    """``add``, ``update`` or ``delete``."""
    path: str
    lines: list[str] = field(default_factory=list)
    """add: the new file's lines."""
    hunks: list[tuple[str, str]] = field(default_factory=list)
    """update: (old text, new text) per hunk, context lines in both."""
    anchors: list[str | None] = field(default_factory=list)
    """update: per hunk, the line its ``@@`` header names (the hunk is after it), or None."""
    ends: list[bool] = field(default_factory=list)
    """update: per hunk, whether ``*** End of File`` closes it (its old lines are the file's last)."""
    move_to: str | None = None


@dataclass
class Patch:
    files: list[PatchFile]


def is_operation(arguments: Mapping[str, Any]) -> bool:
    """Whether a call's arguments are the Responses API's built-in ``apply_patch`` operation (whose
    output item says by its ``status`` whether it was applied)."""
    return arguments.get("type") in _OPERATIONS and isinstance(arguments.get("path"), str)


def call_patch(arguments: Any) -> str | None:
    """The patch of an ``apply_patch`` call (freeform: the input itself; a function call:
    ``input``, OpenCode's ``patchText``; a shell call: ``apply_patch <<'EOF' ... EOF``, maybe after ``cd DIR &&``, or
    ``["apply_patch", patch]``, also spelt ``applypatch``, its relative paths given joined to the
    call's ``workdir`` and DIR, where Codex applies it; the
    Responses API's built-in tool: its ``operation``, one file's V4A diff, as the patch of that
    one file)."""
    if isinstance(arguments, str) and arguments.lstrip().startswith("*** Begin Patch"):
        return arguments
    args = json_arguments(arguments)
    if args is None:
        return None
    for key in ("input", "patchText"):  # OpenCode's apply_patch: patchText
        if isinstance(args.get(key), str):
            return str(args[key])
    if is_operation(args):
        header = _OPERATIONS[args["type"]]
        diff = args.get("diff") if header != "Delete" else ""
        if isinstance(diff, str):
            body = diff.strip("\n")
            hunks = [body] if body else []  # inner empty lines stay: context lines of empty lines
            return "\n".join(["*** Begin Patch", f"*** {header} File: {args['path']}", *hunks, "*** End Patch"])
    got = shell_script(args)
    if got is None:
        return None
    script, workdir = got
    command = args.get("command", args.get("cmd"))
    if isinstance(command, list) and len(command) == 2 and command[0] in _PATCH_COMMANDS:
        return _under(workdir, command[1]) if isinstance(command[1], str) else None
    m = _HEREDOC.match(script.strip())
    if m is None:
        return None
    directory = m.group("quoted") or m.group("dquoted") or m.group("word")
    # Codex applies it in the call's directory, joined with the cd's if any: its paths are under that
    return _under(_joined(workdir, directory) if directory else workdir, m.group("body"))


def _under(directory: str | None, patch: str) -> str:
    """``patch`` with its relative paths joined to ``directory``, where it is applied."""
    if directory is None:
        return patch
    return _PATCH_PATH.sub(lambda p: f"{p[1]}{_joined(directory, p[2].strip())}{p[3]}", patch)


def parse_patch(text: str) -> Patch | None:
    """The files of a patch and what it does to each; None if it is not a patch."""
    # lines as Codex reads them (Rust's str::lines): a CR before a line break is not the line's
    lines = [line.removesuffix("\r") for line in text.strip("\n").split("\n")]
    if not lines or lines[0].strip() != "*** Begin Patch":
        return None
    files: list[PatchFile] = []
    old: list[str] = []
    new: list[str] = []
    anchor: list[str | None] = [None]
    between = [True]  # no hunk begun: after a file's header, its move, or a hunk's end of file

    def close_hunk(next_anchor: str | None = None, *, at_end: bool = False) -> None:
        if files and files[-1].kind == "update" and (old or new):
            files[-1].hunks.append(("\n".join(old), "\n".join(new)))
            files[-1].anchors.append(anchor[0])
            files[-1].ends.append(at_end)
        old.clear()
        new.clear()
        anchor[0] = next_anchor
        between[0] = True

    for line in lines[1:]:
        header = _PATCH_HEADER.match(line)
        if header is not None:
            close_hunk()
            files.append(PatchFile(header.group(1).lower(), header.group(2).strip()))
            continue
        if line.strip() == "*** End Patch":
            break
        if not files:
            return None
        f = files[-1]
        if line.startswith("*** Move to: ") and f.kind == "update":
            f.move_to = line[len("*** Move to: ") :].strip()
        elif line.startswith("*** End of File"):
            # Codex ends the hunk here, and looks for its old lines at the file's end only
            close_hunk(at_end=True)
        elif f.kind == "update" and between[0] and not line.strip():
            continue  # a blank line between hunks (Codex skips it): no empty line of the file
        elif f.kind == "add":
            f.lines.append(line[1:] if line.startswith("+") else line)
        elif f.kind == "update":
            between[0] = False
            if line.startswith("@@"):
                close_hunk(line[2:].strip() or None)
                between[0] = False
            elif line.startswith("-"):
                old.append(line[1:])
            elif line.startswith("+"):
                new.append(line[1:])
            else:  # a context line (its leading space; an empty line in a patch lost it)
                old.append(line[1:])
                new.append(line[1:])
    close_hunk()
    return Patch(files) if files else None


def content_role(kind: str, arguments: Any) -> str | None:
    """The role a call plays by what it does (``ToolNames``' ``by_content``): ``kind`` ``patch``
    (``apply_patch``) or ``shell`` (a shell tool). A patch that adds one file is a ``write``, one
    that changes or deletes files an ``edit``; a shell call that only prints a file is a
    ``read``, one that applies a patch as a patch; None: nothing this recognises."""
    if kind not in ("patch", "shell"):
        return None
    text = call_patch(arguments)
    patch = parse_patch(text) if text is not None else None
    if patch is not None:
        return "write" if len(patch.files) == 1 and patch.files[0].kind == "add" else "edit"
    if kind == "shell" and shell_read(arguments) is not None:
        return "read"
    return None


def json_arguments(arguments: Any) -> Mapping[str, Any] | None:
    """A call's arguments as an object: given as one, or as its JSON text (OpenAI's
    ``function.arguments``); None if they are neither."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    return arguments if isinstance(arguments, Mapping) else None
