"""Redaction (``context_os.redact``) on real text, in one run against the home-grown redactor it
replaced (``bench/_old_redactor.py``):

* **hits by detector** on public text: a real Pi coding session and the LoCoMo conversations
  (``shared/data``, read here and never copied), the bundled demo session, and what a coding agent
  reads in this repository: its tracked files but the tests (full of fake secrets on purpose;
  lock files, JSON with tool-call ids, docs) and its history as JSON (``git log``: commit and tree
  hashes). Public text holds no live secret, so a hit there is a false positive, except a token
  that is real but was published with the data (a JWT that decodes);
* the same for the plugin sets **not** chosen, the numbers behind ``default_plugins()``: every
  detect-secrets detector (high-entropy strings, public IPs, … included), and its keyword
  detector with the rules it uses for config files (values without quotes);
* **throughput** (chars/s) over the Pi session's strings, redacted one by one as a session does,
  against the old redactor: target ≥ 0.8× (it runs every default detector, [files.md](../docs/files.md#redaction), where the old one ran 10 regexes);
* **replay** of the Pi session and the demo with redaction on and off: the token counts must not
  move by more than 0.1%.

Writes the "Redaction" section of docs/benchmarks.md; exit status 1 if a target is missed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.filters import heuristic
from detect_secrets.plugins.base import BasePlugin
from detect_secrets.plugins.keyword import DENYLIST_REGEX, KeywordDetector

from context_os import Session, open_store
from context_os.redact import Redactor, slug
from context_os.replay.run import replay_transcript
from context_os.replay.transcripts import Transcript, demo_messages, demo_transcript, read_session

from ._old_redactor import Redactor as OldRedactor
from ._report import DATA, command_line, left_out, sized, write_section
from ._sessions import SHARED_PI as PI_SESSION
from ._sessions import shared_pi

ROOT = Path(__file__).resolve().parent.parent
LOCOMO = DATA / "locomo" / "locomo10.json"

ENCODED = re.compile(r"data:.*|[A-Za-z0-9+/]{256,}={0,2}", re.DOTALL)
"""Strings a session never redacts (context/session.py): data URIs, long plain base64."""
SPEED_TARGET = 0.8
TOKEN_TOLERANCE = 0.001
LOCOMO_CONVERSATIONS = sized(None, 1)
REPO_FILES = sized(None, 30)
"""The repository's tracked files read (None: all but the tests), and the commits of its history."""
COMMITS = sized([], ["-n", "30"])
REPLAY_RUNS = sized(2, 1)
"""Replays with redaction off and on, in turn; the faster of each counts."""

Texts = list[tuple[str, str]]
"""(where, text): where is a file path for the repository, a field name elsewhere."""


def strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a message, as a session hands them to the redactor."""
    if isinstance(value, str):
        if not ENCODED.fullmatch(value):
            yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v, key)


def pi_texts() -> Texts:
    out: Texts = []
    for line in shared_pi().read_text("utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("type") == "message":
            out += strings(entry["message"])
    return out


def locomo_texts() -> Texts:
    out: Texts = []
    for sample in json.loads(LOCOMO.read_text("utf-8"))[:LOCOMO_CONVERSATIONS]:
        for turns in sample["conversation"].values():
            if isinstance(turns, list):
                out += strings(turns)
    return out


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def repo_texts() -> Texts:
    out: Texts = []
    for name in [n for n in git("ls-files").split() if not n.startswith("tests/")][:REPO_FILES]:
        try:
            out.append((name, (ROOT / name).read_text("utf-8")))
        except (UnicodeDecodeError, OSError):
            continue  # binary, or removed in the work tree
    return out


def history_texts() -> Texts:
    """The repository's history as a tool shows it in JSON: commit, tree and parent hashes."""
    fmt = '{"commit": "%H", "tree": "%T", "parents": "%P", "author": "%an", "date": "%aI"}'
    return [("git log", git("log", f"--format={fmt}", *COMMITS))]


def corpora() -> dict[str, Texts]:
    found: dict[str, Texts] = {}
    if PI_SESSION.exists():
        found["Pi session"] = pi_texts()
    else:
        left_out(f"{PI_SESSION} not found: the real Pi session is left out")
    found["demo session"] = [kv for m in demo_messages() for kv in strings(m)]
    if LOCOMO.exists():
        found["LoCoMo"] = locomo_texts()
    else:
        left_out(f"LoCoMo not found at {LOCOMO}: it is left out")
    found["repository files"] = repo_texts()
    found["git history"] = history_texts()
    return found


def judge(corpus: str, name: str) -> str:
    """What a hit on public text is: a real token published with a data set (a JWT: it decodes,
    the detector checked), or a false positive."""
    if name == "json-web-token" and corpus in ("Pi session", "demo session", "LoCoMo"):
        return "published token"
    return "false positive"


def hits(redactor: Redactor, texts: Texts, corpus: str, samples: list[str] | None = None) -> Counter[tuple[str, str]]:
    """(detector, judgement) → count."""
    counts: Counter[tuple[str, str]] = Counter()
    for where, text in texts:
        for start, end, name in redactor.find(text):
            verdict = judge(corpus, name)
            counts[name, verdict] += 1
            if samples is not None and verdict == "false positive" and len(samples) < 12:
                lo = max(0, start - 60)
                samples.append(f"  {corpus} / {where} / {name}: …{text[lo : end + 20]!r}…")
    return counts


def unquoted_keyword_hits(texts: Texts) -> int:
    """Hits of detect-secrets' keyword detector with the rules it picks for config files (values
    need no quotes), through its own ``analyze_line`` and heuristic filters, line by line."""
    plugin = KeywordDetector()
    keyword = re.compile(DENYLIST_REGEX, re.IGNORECASE)
    n = 0
    for _, text in texts:
        for line in text.replace("\\n", "\n").splitlines():
            if not keyword.search(line) or heuristic.is_indirect_reference(line):
                continue
            for found in plugin.analyze_line(filename="config.yaml", line=line):
                value = found.secret_value or ""
                if not (
                    heuristic.is_templated_secret(value)
                    or heuristic.is_prefixed_with_dollar_sign(value)
                    or heuristic.is_sequential_string(value)
                    or heuristic.is_potential_uuid(value)
                    or heuristic.is_not_alphanumeric_string(value)
                ):
                    n += 1
    return n


def old_hits(texts: Texts) -> int:
    old = OldRedactor()
    return sum(old.redact(text)[1] for _, text in texts)


def throughput(redact: Callable[[str], tuple[str, int]], texts: list[str]) -> float:
    """Characters per second, best of three passes (the machine is shared)."""
    n = sum(map(len, texts))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for text in texts:
            redact(text)
        best = min(best, time.perf_counter() - t0)
    return n / best


def replay_tokens(transcript: Transcript, redact: bool) -> tuple[int, int, float]:
    """(tokens_full, tokens_assembled, seconds) of a replay into a temporary store."""
    with tempfile.TemporaryDirectory() as d:
        store = open_store(f"sqlite:///{d}/r.db")
        try:
            session = Session.open(store, "r", harness=transcript.harness, workspace=transcript.cwd, redact=redact)
            t0 = time.perf_counter()
            r = replay_transcript(transcript, session, verify="none")
            return r.tokens_full, r.tokens_assembled, time.perf_counter() - t0
        finally:
            store.close()


def replay_pair(transcript: Transcript) -> tuple[tuple[int, int, float], tuple[int, int, float]]:
    """Redaction off, then on: the faster of two alternating runs each (the machine is shared)."""
    runs = [replay_tokens(transcript, redact) for _ in range(REPLAY_RUNS) for redact in (False, True)]
    off, on = runs[0::2], runs[1::2]
    return min(off, key=lambda r: r[2]), min(on, key=lambda r: r[2])


def main() -> int:
    texts = corpora()
    classes: list[Any] = list(get_mapping_from_secret_type_to_class().values())
    every: list[BasePlugin] = [cls() for cls in classes]
    chosen, everything = Redactor(), Redactor(plugins=every)
    from_library = {slug(str(p.secret_type)) for p in every}

    table: dict[str, dict[str, Counter[tuple[str, str]]]] = {}
    samples: list[str] = []
    summary: dict[str, dict[str, str]] = {}
    for corpus, items in texts.items():
        got = hits(chosen, items, corpus, samples)
        table[corpus] = {"chosen": got, "every": hits(everything, items, corpus)}
        chars = sum(len(t) for _, t in items)

        def fp(c: Counter[tuple[str, str]]) -> int:
            return sum(v for (_, verdict), v in c.items() if verdict == "false positive")

        summary[corpus] = {
            "size": f"{len(items):,} texts, {chars:,} chars",
            "chosen": f"{sum(got.values())} / {fp(got)}",
            "every": f"{sum(table[corpus]['every'].values())} / {fp(table[corpus]['every'])}",
            "unquoted": str(unquoted_keyword_hits(items)),
            "old": str(old_hits(items)),
        }
        print(f"{corpus}: {summary[corpus]}")
    if samples:
        print("false positives of the chosen detectors (excerpts, not written to the docs):")
        print("\n".join(samples))

    speed_texts = [t for _, t in texts.get("Pi session", texts["demo session"])]
    old_rate = throughput(OldRedactor().redact, speed_texts)
    new_rate = throughput(chosen.redact, speed_texts)
    every_rate = throughput(everything.redact, speed_texts)
    speed = new_rate / old_rate
    print(
        f"throughput: {new_rate:,.0f} chars/s vs old {old_rate:,.0f} chars/s = {speed:.2f}x; every detector {every_rate:,.0f}"
    )

    replays = {"demo session": demo_transcript()}
    if PI_SESSION.exists():
        replays["Pi session"] = read_session(shared_pi())
    replay_rows = []
    tokens_ok = True
    for label, transcript in replays.items():
        off, on = replay_pair(transcript)
        moved = abs(on[1] - off[1]) / max(1, off[1])
        tokens_ok &= moved <= TOKEN_TOLERANCE and abs(on[0] - off[0]) / max(1, off[0]) <= TOKEN_TOLERANCE
        replay_rows.append(
            f"| {label} | {off[0]:,} / {on[0]:,} | {off[1]:,} / {on[1]:,} | {moved:.3%} | {off[2]:.2f} s / {on[2]:.2f} s |"
        )
        print(f"replay {label}: off {off}, on {on}")

    detectors = sorted(
        {name for c in table.values() for (name, _) in c["every"]}
        | {name for c in table.values() for (name, _) in c["chosen"]}
    )
    chosen_names = set(chosen.names)
    rows = []
    for name in detectors:
        cells = []
        for corpus in texts:
            c = table[corpus]["chosen" if name in chosen_names else "every"]
            n = sum(v for (det, _), v in c.items() if det == name)
            wrong = sum(v for (det, verdict), v in c.items() if det == name and verdict == "false positive")
            cells.append(f"{n} ({wrong} FP)" if n else "0")
        origin = "detect-secrets" if name in from_library else "context_os"
        status = "default" if name in chosen_names else "**left out**"
        rows.append(f"| `{name}` | {origin} | {status} | " + " | ".join(cells) + " |")

    ok = speed >= SPEED_TARGET and tokens_ok
    corpus_cols = " | ".join(texts)
    body = f"""
`bench/redaction.py`: the default redactor (`Redactor()`, context_os/redact.py: detect-secrets
detectors plus the ones context_os adds) on public text, where a hit is a false positive (FP)
unless it is a JWT published with a data set. Texts: every string of each message, as a session
redacts them (a real Pi coding session; the bundled demo session; the LoCoMo conversations, read
from `../shared/data`), this repository's tracked files but the tests, and its history as JSON.

| | {corpus_cols} |
|---|{"---:|" * len(texts)}
| size | {" | ".join(s["size"] for s in summary.values())} |
| **default detectors**: hits / FP | {" | ".join(s["chosen"] for s in summary.values())} |
| every detect-secrets detector: hits / FP | {" | ".join(s["every"] for s in summary.values())} |
| detect-secrets keyword rules for config files (no quotes needed): hits, all FP | {" | ".join(s["unquoted"] for s in summary.values())} |
| the old home-grown redactor: hits | {" | ".join(s["old"] for s in summary.values())} |

Hits by detector (a left-out detector's hits are what it would have added):

| detector | from | | {corpus_cols} |
|---|---|---|{"---:|" * len(texts)}
{chr(10).join(rows)}

Throughput over the Pi session's strings, redacted one by one as a session does (best of 3):

| | chars/s |
|---|---:|
| old home-grown redactor (10 regexes, one entropy rule) | {old_rate:,.0f} |
| default redactor | {new_rate:,.0f} |
| ratio default / old | {speed:.2f}× (target ≥ {SPEED_TARGET}×: {"met" if speed >= SPEED_TARGET else "**MISSED**"}) |
| every detect-secrets detector | {every_rate:,.0f} |

Replays with redaction off / on (`Session.open(..., redact=False)` / the default), no frame
verification; tokens must not move by more than {TOKEN_TOLERANCE:.1%} ({"met" if tokens_ok else "**MISSED**"}):

| session | tokens_full | tokens_assembled | moved | replay time |
|---|---:|---:|---:|---:|
{chr(10).join(replay_rows)}
"""
    write_section("Redaction", body)
    print("targets met" if ok else "TARGET MISSED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    command_line(__doc__, main)
