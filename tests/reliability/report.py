"""Write the "Latest run" section of docs/reliability.md from a report JSON of a real run.

    CTXOS_RELIABILITY_REPORT=/tmp/reliability.json make test
    .venv/bin/python -m tests.reliability.report /tmp/reliability.json

Every number in the section comes from the JSON the run wrote (see tests/_reliability.py).
"""

from __future__ import annotations

import json
import platform
import re
import sys
from pathlib import Path
from typing import Any

from tests._reliability import TOTALS

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
BEGIN = "### Latest run\n"
END = "To regenerate:"

ATTACKS = {
    "attack: symlink swap (write)": "`write` to a file, and into a directory, of the workspace while a thread"
    " swaps it with a symlink to outside (`tests/files/test_toctou.py`)",
    "attack: symlink swap (read)": "`read` of a file, and of a file in a directory, swapped likewise",
    "attack: symlink swap (edit)": "`edit` of a file, and of a file in a directory, swapped likewise",
    "attack: symlink swap (grep, find, ls)": "`grep`, `find` and `ls` in a directory swapped likewise",
    "attack: hostile HTTP request": "what a web page or another local process can send to `ctxos serve --http`:"
    " a foreign Host or Origin, text/plain, no or a wrong token, a workspace not granted (a home directory,"
    " `/`, one reached through a symlink or `..`) (`tests/server/test_security.py`)",
    "attack: two replays of one session": "two `ctxos replay --session same` into one store at once, then"
    " `ctxos verify --frames` (`tests/context/test_lease.py`)",
    "attack: evict from a live session": "a secret evicted from a chat page, a tool output and a file of a"
    " running session, from a closed session, and by `ctxos evict` in another process (`tests/context/test_evict.py`)",
    "attack: damaged store (verify)": "`ctxos verify` on copies of a store with 1 to 3 random bytes flipped"
    " (`tests/cli/test_failures.py`)",
    "attack: non-regular replay input": "`ctxos replay` of `/dev/zero`, a FIFO nobody writes and a directory",
    "attack: bad --as-of or store URL": "`--as-of` values that are no time, XTDB URLs that are no URL",
    "attack: read-only command on a missing store": "each read-only command on a store that does not exist,"
    " named by URL and by path",
    "attack: secret shape (redactor)": "each secret shape the redactor must catch, and a private key as a file,"
    " a JSON string and one line (`tests/test_redact.py`)",
    "attack: secret sent to the store": "tokens, JWTs, key ids, passwords and a private key in every place a"
    " message carries text, through sessions and `ctxos replay`; the store's documents and files searched"
    " (`tests/context/test_session_redaction.py`)",
    "attack: hostile megabyte (redactor)": "1 MB of one detector's prefix repeated, for each prefix"
    " (`tests/test_redact.py`)",
}
"""What each attack check tries, in the order of its table; checks not named here follow."""
HELD = (
    "escaped",
    "leaked",
    "internal_errors",
    "ran_anyway",
    "frames_failed",
    "verify_failed",
    "found_in_store",
    "found_in_context",
    "damage_called_clean",
    "untyped_errors",
    "failed_otherwise",
    "slow",
    "store_created",
    "missed",
    "leaked_into_store",
)
"""Counts that must be 0, shown in bold: what got through."""


def _n(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else str(v)


def _errors(checks: dict[str, Any], name: str) -> str:
    errs = checks.get(f"{name} (errors)", {})
    return ", ".join(f"{k} {_n(v)}" for k, v in sorted(errs.items()))


def _attacks(checks: dict[str, Any], secs: dict[str, Any]) -> list[str]:
    """The attack table and its totals line; nothing if the run made no attack."""
    names = [n for n in ATTACKS if n in checks]
    names += sorted(n for n in checks if n.startswith("attack: ") and n not in ATTACKS)
    if not names:
        return []
    lines = [
        "Attacks (security and reliability issue):",
        "",
        "| attack | what was tried | attempts | outcome | s |",
        "|---|---|---:|---|---:|",
    ]
    for name in names:
        c = checks[name]
        held = [f"{k.replace('_', ' ')} **{_n(c[k])}**" for k in HELD if k in c]
        rest = [f"{k.replace('_', ' ')} {_n(v)}" for k, v in sorted(c.items()) if k not in HELD and k != "attempts"]
        outcome = "; ".join(", ".join(part) for part in (held, rest) if part)
        lines.append(
            f"| {name.removeprefix('attack: ')} | {ATTACKS.get(name, '–')} | {_n(c.get('attempts', 0))}"
            f" | {outcome} | {secs.get(name, '–')} |"
        )
    attempts = sum(checks[n].get("attempts", 0) for n in names)
    through = sum(checks[n].get(k, 0) for n in names for k in HELD)
    lines += [
        "",
        f"Attacks: {_n(attempts)} attempts in {len(names)} checks, **{_n(through)} got through** (the counts in"
        " bold, summed).",
        "",
    ]
    return lines


def section(r: dict[str, Any]) -> str:
    checks, secs = r["checks"], r["seconds"]
    when = r["date"].replace("T", " ")[:16]
    lines = [
        BEGIN,
        "<!-- written by `python -m tests.reliability.report REPORT.json` from a real `make test` run -->",
        f"_Run of {when} UTC (`make test`, CPython {platform.python_version()}; XTDB 1.x in-memory node started"
        f" by the fixture; seed {r['seed']})._",
        "",
        "| check | done | outcome | s |",
        "|---|---|---|---:|",
    ]
    for store in ("sqlite", "xtdb"):
        c = checks.get(f"crash: {store}")
        if c:
            lines.append(
                f"| crash: {store} | {c['kills']} kills, {c['turns']} turns; {_n(c['acknowledged_txs_checked'])}"
                f" acknowledged txs ({_n(c['versions_checked'])} versions) checked; {c['in_doubt_txs']} txs in"
                f" doubt; {c['frames_verified']} frames re-rendered | data lost **{c['data_lost']}**; partial txs"
                f" {c['partial_txs']} ({c['in_doubt_landed_whole']} of the in-doubt landed whole, the rest not at"
                f" all); `ctxos verify` mismatches {c['verify_cli_mismatches']} | {secs.get(f'crash: {store}', '–')} |"
            )
    for store in ("sqlite", "xtdb"):
        c = checks.get(f"concurrency: {store}")
        if c:
            lines.append(
                f"| concurrency: {store} | {c['processes']} processes, {_n(c['acknowledged_txs_checked'])} acknowledged"
                f" txs, {_n(c['versions_checked'])} versions checked, {c['cas_increments']} compare-and-set"
                f" increments ({c['cas_retries']} retried after a failed match), {_n(c['interleavings'])} switches"
                f" between writers | data lost **{c['data_lost']}**; no duplicate tx id, no unacknowledged tx,"
                f" histories exactly as acknowledged | {secs.get(f'concurrency: {store}', '–')} |"
            )
    outage = r.get("xtdb_outage_tests", {})
    lines.append(
        "| xtdb outage (`tests/store/test_xtdb_outbox.py`) | node stopped and restarted mid-session (a shown object"
        " and a recall source; a read, an edit and a tracked change made while it is down), a replay killed mid-way,"
        f" refused connections | {outage.get('passed', 0)} passed, {outage.get('failed', 0)} failed | – |"
    )
    lines += ["", "| fuzz target | inputs | accepted | typed errors | s |", "|---|---:|---:|---|---:|"]
    for name in sorted(k for k in checks if k.startswith("fuzz: ") and "(" not in k):
        c, target = checks[name], name.removeprefix("fuzz: ")
        errs = _errors(checks, name)
        lines.append(
            f"| `{target}` | {_n(c['inputs'])} | {_n(c['accepted'])} | {_n(c['typed_errors'])}"
            f"{f' ({errs})' if errs else ''} | {secs.get(name, '–')} |"
        )
    t = {name: r["totals"].get(name, 0) for name in TOTALS}  # a check that did not run counts 0
    lines += [
        "",
        f"Totals: {t['kills']} kills, {_n(t['inputs'])} fuzz inputs, {_n(t['acknowledged_txs_checked'])} acknowledged"
        f" transactions and {_n(t['versions_checked'])} versions checked, {t['partial_txs']} partial transactions,"
        f" **{t['data_lost']} data lost**. Tests of the suite: "
        + (", ".join(f"{v} {k}" for k, v in sorted(r.get("outcomes", {}).items())) or "none run")
        + ".",
        "",
    ]
    lines += _attacks(checks, secs)
    return "\n".join(lines)


def main(path: str) -> int:
    report = json.loads(Path(path).read_text())
    text = DOC.read_text()
    pattern = re.compile(rf"^{re.escape(BEGIN)}.*?(?=^{re.escape(END)})", re.S | re.M)
    if not pattern.search(text):
        print(f"{DOC}: no '{BEGIN.strip()}' section followed by '{END}'", file=sys.stderr)
        return 1
    DOC.write_text(pattern.sub(lambda _: section(report) + "\n", text))
    print(f"{DOC}: latest run of {report['date']} written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]) if len(sys.argv) == 2 else 2)
