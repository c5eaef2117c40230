"""Write the "Latest run" section of docs/reliability.md from a report JSON of a real run.

    CTXOS_RELIABILITY_REPORT=/tmp/reliability.json make test
    .venv/bin/python -m tests.reliability.report /tmp/reliability.json

Every number in the section comes from the JSON the suite wrote (see conftest.py).
"""

from __future__ import annotations

import json
import platform
import re
import sys
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
BEGIN = "### Latest run\n"
END = "To regenerate:"


def _n(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else str(v)


def _errors(checks: dict[str, Any], name: str) -> str:
    errs = checks.get(f"{name} (errors)", {})
    return ", ".join(f"{k} {_n(v)}" for k, v in sorted(errs.items()))


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
        "| xtdb outage (`tests/test_xtdb_outbox.py`) | node stopped and restarted mid-session, a replay killed"
        f" mid-way, refused connections | {outage.get('passed', 0)} passed, {outage.get('failed', 0)} failed | – |"
    )
    lines += ["", "| fuzz target | inputs | accepted | typed errors | s |", "|---|---:|---:|---|---:|"]
    for name in sorted(k for k in checks if k.startswith("fuzz: ") and "(" not in k):
        c, target = checks[name], name.removeprefix("fuzz: ")
        errs = _errors(checks, name)
        lines.append(
            f"| `{target}` | {_n(c['inputs'])} | {_n(c['accepted'])} | {_n(c['typed_errors'])}"
            f"{f' ({errs})' if errs else ''} | {secs.get(name, '–')} |"
        )
    t = r["totals"]
    lines += [
        "",
        f"Totals: {t['kills']} kills, {_n(t['inputs'])} fuzz inputs, {_n(t['acknowledged_txs_checked'])} acknowledged"
        f" transactions and {_n(t['versions_checked'])} versions checked, {t['partial_txs']} partial transactions,"
        f" **{t['data_lost']} data lost**. Tests of the suite: "
        + ", ".join(f"{v} {k}" for k, v in sorted(r.get("outcomes", {}).items()))
        + ".",
        "",
    ]
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
