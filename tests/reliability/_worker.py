"""Child processes for the crash and concurrency tests: ``python -m tests.reliability._worker ...``.

Each prints one JSON line per transaction, flushed, so that the parent knows exactly what the
store acknowledged before the child died:

* ``{"begin": [...ops]}`` right before a submit (the transaction is then *in doubt* until its ack);
* ``{"ack": tx_id, "time": ..., "committed": ..., "ops": [...ops]}`` once the store returned it;

where an op is ``["put", id, valid_from, object_hash, content]`` (``content`` only for the writer),
or ``[kind, id]`` for the other operations.

``session``: ingests a deterministic OpenAI-format coding session through ``Session`` and
``OpenAIHook`` (the library's own writes), resuming from whatever the store holds, until
``--turns`` turns are done. ``writer``: versions of its own id, a shared id and a shared counter
(compare-and-set) with unique valid times, for the concurrency test.

Only the parent (the tests) decides when a child is killed; nothing here knows about it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

from context_os import Session
from context_os.harness.openai import OpenAIHook
from context_os.hashing import doc_hashes
from context_os.store import Delete, Evict, Match, Op, Put, Store, Tx, open_store

T0 = 1_700_000_000_000
"""Valid times of the writer's versions start here (explicit, so each write is its own version)."""


def _say(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _op(op: Op, with_content: bool) -> list[Any]:
    if isinstance(op, Put):
        out = ["put", op.doc["id"], op.valid_from, op.doc.get("object_hash")]
        return [*out, op.doc.get("content")] if with_content else out
    if isinstance(op, Match):
        return ["match", op.id]
    if isinstance(op, Delete):
        return ["delete", op.id]
    if isinstance(op, Evict):
        return ["evict", op.id]
    raise TypeError(op)  # pragma: no cover


def recording(store: Store, *, with_content: bool = False) -> Store:
    """``store`` whose ``submit`` reports each transaction before and after (see the module docstring)."""
    submit = store.submit

    def reporting_submit(ops: Sequence[Op]) -> Tx:
        ops = list(ops)
        shown = [_op(op, with_content) for op in ops]
        _say({"begin": shown})
        tx = submit(ops)
        _say({"ack": tx.id, "time": tx.time, "committed": tx.committed, "ops": shown})
        return tx

    store.submit = reporting_submit  # type: ignore[method-assign]
    return store


# -- the session child ----------------------------------------------------------------------------


def turn_messages(n: int) -> list[dict[str, Any]]:
    """The messages turn ``n`` adds: sometimes a user message, always a tool call and its result
    (of a size that varies from turn to turn, up to ~60 KB, so some transactions are large)."""
    size = 40 + (n * 7919) % 60_000
    out: list[dict[str, Any]] = [{"role": "user", "content": f"step {n}: look at module {n}"}] if n % 3 == 0 else []
    args = json.dumps({"command": f"cat m{n}.py"})
    out.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": args}}],
        }
    )
    out.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"# module {n}\n" + "x = 1\n" * (size // 6)})
    return out


def session_messages(turns: int) -> list[dict[str, Any]]:
    """What the harness sends at the call of turn ``turns - 1``: the system prompt and every turn so far."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for n in range(turns):
        msgs.extend(turn_messages(n))
    return msgs


def prefix_lengths(turns: int) -> list[int]:
    """``out[k]`` = how many messages the calls of turns 0..k-1 sent in total (``out[0]`` = 1)."""
    out = [1]
    for n in range(turns):
        out.append(out[-1] + len(turn_messages(n)))
    return out


def run_session(url: str, session_id: str, turns: int) -> int:
    store = recording(open_store(url))
    hook = OpenAIHook(Session.open(store, session_id, harness="openai"))
    cursor = len(hook.session.view.visible)
    # every call is one ingest transaction: the cursor is always at the end of some turn
    start, length = 0, 1
    while cursor > length:
        length += len(turn_messages(start))
        start += 1
    if cursor not in (0, length):
        _say({"error": f"cursor {cursor} is not at the end of a turn: a partial ingest"})
        return 3
    _say({"resume": start, "cursor": cursor, "pid": os.getpid()})
    msgs = session_messages(start)
    for n in range(start, turns):
        msgs.extend(turn_messages(n))
        hook.transform_context(msgs)
        assert hook.last is not None
        _say({"turn": n, "frame": hook.last.frame_id})
    store.close()
    return 0


# -- the concurrent writer ------------------------------------------------------------------------


def _doc(id: str, content: dict[str, Any]) -> dict[str, Any]:
    d: dict[str, Any] = {"id": id, "kind": "note", "content": content, "meta": {"writer": content.get("w")}}
    d.update(doc_hashes(d))
    return d


def run_writer(url: str, prefix: str, name: str, index: int, writers: int, n: int, seed: int, start_at: float) -> int:
    """``n`` transactions from ``start_at`` (epoch s) on: puts of the own id, of the shared id, of
    both, and counter increments."""
    rng = random.Random(f"{seed}:{name}")
    store = recording(open_store(url), with_content=True)
    time.sleep(max(0.0, start_at - time.time()))
    own, shared, counter = f"note:{prefix}:own:{name}", f"note:{prefix}:shared", f"note:{prefix}:counter"
    own_n = shared_n = 0

    def own_put() -> Put:
        nonlocal own_n
        own_n += 1
        return Put(_doc(own, {"w": name, "n": own_n}), T0 + own_n)

    def shared_put() -> Put:
        nonlocal shared_n
        shared_n += 1
        # unique across writers: each write of the shared id is its own version
        return Put(_doc(shared, {"w": name, "n": shared_n}), T0 + shared_n * writers + index)

    for _ in range(n):
        r = rng.random()
        if r < 0.35:
            store.submit([own_put()])
        elif r < 0.65:
            store.submit([shared_put()])
        elif r < 0.8:
            store.submit([own_put(), shared_put()])
        else:
            while True:  # compare-and-set increment, retried until it commits
                current = store.get(counter)
                value = 0 if current is None or current.doc is None else int(current.doc["content"]["value"])
                new = _doc(counter, {"w": name, "value": value + 1})
                tx = store.submit([Match(counter, None if current is None else current.doc), Put(new)])
                if tx.committed:
                    break
        time.sleep(rng.random() * 0.002)  # some work between writes: lets the other writer take the lock
    _say({"done": name})
    store.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.reliability._worker")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("session")
    s.add_argument("--store", required=True)
    s.add_argument("--session", required=True)
    s.add_argument("--turns", type=int, required=True)
    w = sub.add_parser("writer")
    w.add_argument("--store", required=True)
    w.add_argument("--prefix", required=True)
    w.add_argument("--name", required=True)
    w.add_argument("--index", type=int, required=True)
    w.add_argument("--writers", type=int, required=True)
    w.add_argument("--n", type=int, required=True)
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--start-at", type=float, default=0.0)
    a = p.parse_args(argv)
    if a.cmd == "session":
        return run_session(a.store, a.session, a.turns)
    return run_writer(a.store, a.prefix, a.name, a.index, a.writers, a.n, a.seed, a.start_at)


if __name__ == "__main__":
    sys.exit(main())
