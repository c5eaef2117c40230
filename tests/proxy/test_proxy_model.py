"""Conversations through the proxy, drawn by hypothesis: five agents (OpenAI chat completions,
Anthropic messages with extended thinking or without, the Responses API with a reasoning model's
items kept by the client, the Responses API continuing the responses the provider keeps,
``previous_response_id``, and Gemini's generateContent, its calls signed and its conversation
given no key) each send their conversation at every call, as agents do, and it grows
by turns of talk, by calls of the agent's own tools (outputs small and large), and by calls of
our tools, which the proxy runs in a round the agent never sees. Between calls a conversation
may go back to an earlier turn (a rewind, an edited prompt; a chained one continues an earlier
response), have an earlier user message reworded, send its last request again (a retry), its
requests may be streamed or not, and the proxy may be restarted over the same store. Every
message carries a marker of its own.

At every call, the provider reading each request as it keeps it (after the response it
continues, when one goes upstream as it came: a chain the restarted proxy no longer knows):

* the agent gets the model's answer, and never a call of our tools;
* the provider accepts every request the proxy sends it (calls and results pair, reasoning and
  thinking come back with their turns: the scripted model refuses what the providers refuse),
  one request per round, as many rounds as planned;
* the provider is shown every user message and assistant text of the conversation, and nothing
  of a message it no longer holds (a branch left, a message reworded);
* each exchange with our tools stands in every later request while the conversation still holds
  the messages it came after, and in none once it does not (a restarted proxy too; without a
  client's key, a rewind is another conversation, which need not show them);

and at the end each conversation given a key is one session, one without a key is at least one
(and at most one more for each time it went back: with keys, the Gemini one), and every frame of
them verifies.
"""

from __future__ import annotations

import copy
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from google.genai import types
from hypothesis import Phase, given, settings

from context_os.store.sqlite import SqliteStore
from tests.proxy.running import Running, verified_frames
from tests.proxy.upstream import ToolCall, Upstream, signature, upstream
from tests.reliability._adversarial import FUZZ, examples

Reply = str | ToolCall | Callable[[dict[str, Any]], str | ToolCall]

MARK = re.compile(r"\bM(\d+)x\b")
STEP = st.one_of(
    st.tuples(st.sampled_from(["talk", "tool", "big", "ours"]), st.integers(0, 1)),
    st.tuples(st.sampled_from(["rewind", "reword"]), st.integers(0, 1000)),
    st.tuples(st.just("retry"), st.integers(0, 1)),
    st.tuples(st.just("restart"), st.just(0)),
    st.tuples(st.just("stream"), st.integers(0, 1)),
)
STEPS = st.lists(STEP, min_size=2, max_size=14)


@dataclass
class Dialect:
    """What an agent of one API sends and reads."""

    path: str
    send: Callable[[World, dict[str, Any], bool], dict[str, Any]]
    """Send a request with the API's own client (streamed or not): its answer, whole."""
    body: Callable[[list[dict[str, Any]], str | None], dict[str, Any]]
    """The request of a conversation's messages (its system prompt first), with the client's key
    for it if it gives one."""
    user: Callable[[str], dict[str, Any]]
    results: Callable[[list[tuple[str, str]]], list[dict[str, Any]]]
    calls: Callable[[dict[str, Any]], list[tuple[str, str, dict[str, Any]]]]
    """(id, name, arguments) of each call of an answer."""
    text: Callable[[dict[str, Any]], str]
    said: Callable[[dict[str, Any]], list[dict[str, Any]]]
    """The answer as the agent keeps it in its conversation."""
    call_ids: Callable[[dict[str, Any]], list[str]]
    """The ids of the calls a request holds, in order."""
    hidden_id: Callable[[int], str]
    """The id (Gemini: the signature) the scripted model gives the call of its ``n``-th answer."""


def _openai_calls(answer: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    message = answer["choices"][0]["message"]
    return [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or ()
    ]


def _sender(client: str, endpoint: str, final: str) -> Callable[[World, dict[str, Any], bool], dict[str, Any]]:
    """Send with the proxy's ``client`` (``openai``, ``anthropic``) through its ``endpoint``
    (``chat.completions``, ``messages``, ``responses``), a stream read whole by its ``final``."""

    def send(world: World, body: dict[str, Any], stream: bool) -> dict[str, Any]:
        api: Any = getattr(world.running, client)()
        for name in endpoint.split("."):
            api = getattr(api, name)
        if not stream:
            return api.create(**body).model_dump(exclude_none=True)
        with api.stream(**body) as events:
            return getattr(events, final)().model_dump(exclude_none=True)

    return send


def _anthropic_body(thinking: bool) -> Callable[[list[dict[str, Any]], str | None], dict[str, Any]]:
    def body(msgs: list[dict[str, Any]], key: str | None) -> dict[str, Any]:
        sent = {"model": "m", "max_tokens": 2048, "system": msgs[0]["content"], "messages": msgs[1:]}
        sent["tools"] = [{"name": "bash", "description": "Run a command.", "input_schema": _BASH}]
        if thinking:
            sent["thinking"] = {"type": "enabled", "budget_tokens": 1024}
        return sent | ({"metadata": {"user_id": key}} if key else {})

    return body


_BASH = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
OPENAI = Dialect(
    path="/v1/chat/completions",
    send=_sender("openai", "chat.completions", "get_final_completion"),
    body=lambda msgs, key: (
        {
            "model": "m",
            "messages": msgs,
            "tools": [
                {"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": _BASH}}
            ],
        }
        | ({"prompt_cache_key": key} if key else {})
    ),
    user=lambda text: {"role": "user", "content": text},
    results=lambda done: [{"role": "tool", "tool_call_id": i, "content": out} for i, out in done],
    calls=_openai_calls,
    text=lambda answer: answer["choices"][0]["message"].get("content") or "",
    said=lambda answer: [
        {k: v for k, v in answer["choices"][0]["message"].items() if k in ("role", "content", "tool_calls")}
    ],
    call_ids=lambda body: [c["id"] for m in body["messages"] for c in m.get("tool_calls") or ()],
    hidden_id=lambda n: f"call_{n}",
)
ANTHROPIC = Dialect(
    path="/v1/messages",
    send=_sender("anthropic", "messages", "get_final_message"),
    body=_anthropic_body(thinking=False),
    user=lambda text: {"role": "user", "content": [{"type": "text", "text": text}]},
    results=lambda done: [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": out} for i, out in done]}
    ],
    calls=lambda answer: [(b["id"], b["name"], b["input"]) for b in answer["content"] if b["type"] == "tool_use"],
    text=lambda answer: "".join(b["text"] for b in answer["content"] if b["type"] == "text"),
    said=lambda answer: [{"role": "assistant", "content": answer["content"]}],
    call_ids=lambda body: [
        b["id"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ],
    hidden_id=lambda n: f"toolu_{n}",
)
THINKING = replace(ANTHROPIC, body=_anthropic_body(thinking=True))
"""Anthropic with extended thinking: each answer starts with a signed thinking block, which must
come back as it came with the calls of its turn."""
RESPONSES = Dialect(
    path="/v1/responses",
    send=_sender("openai", "responses", "get_final_response"),
    body=lambda msgs, key: (
        {
            "model": "m",
            "instructions": msgs[0]["content"],
            "input": msgs[1:],
            "tools": [{"type": "function", "name": "bash", "description": "Run a command.", "parameters": _BASH}],
            # a reasoning model, its items kept by the client (as Codex does): each answer's reasoning
            # item must come back with the items of its answer
            "reasoning": {"effort": "low"},
            "include": ["reasoning.encrypted_content"],
            "store": False,
        }
        | ({"prompt_cache_key": key} if key else {})
    ),
    user=lambda text: {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    results=lambda done: [{"type": "function_call_output", "call_id": i, "output": out} for i, out in done],
    calls=lambda answer: [
        (i["call_id"], i["name"], json.loads(i["arguments"])) for i in answer["output"] if i["type"] == "function_call"
    ],
    text=lambda answer: "".join(
        c["text"]
        for i in answer["output"]
        if i["type"] == "message"
        for c in i["content"]
        if c["type"] == "output_text"
    ),
    said=lambda answer: answer["output"],
    call_ids=lambda body: [i["call_id"] for i in body["input"] if i.get("type") == "function_call"],
    hidden_id=lambda n: f"call_{n}",
)


def _gemini_send(world: World, body: dict[str, Any], stream: bool) -> dict[str, Any]:
    """Gemini CLI's way: the SDK, and a stream's parts taken in as they come, the texts that follow
    each other one part (so its candidate's content, kept in the conversation, is whole)."""
    client = world.running.gemini()
    bash = types.FunctionDeclaration(name="bash", description="Run a command.", parameters_json_schema=_BASH)
    config = types.GenerateContentConfig(
        system_instruction=body["system"], tools=[types.Tool(function_declarations=[bash])]
    )
    contents = body["contents"]
    if not stream:
        got = client.models.generate_content(model="m", contents=contents, config=config)
        return got.model_dump(mode="json", by_alias=True, exclude_none=True)
    parts: list[dict[str, Any]] = []
    for chunk in client.models.generate_content_stream(model="m", contents=contents, config=config):
        for part in _gemini_parts(chunk.model_dump(mode="json", by_alias=True, exclude_none=True)):
            if parts and set(part) == {"text"} and set(parts[-1]) == {"text"}:
                parts[-1] = {"text": parts[-1]["text"] + part["text"]}
            else:
                parts.append(part)
    return {"candidates": [{"content": {"role": "model", "parts": parts}}]}


def _gemini_parts(answer: dict[str, Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = answer["candidates"][0]["content"]["parts"]
    return parts


GEMINI = Dialect(
    path="/v1beta/models/m:generateContent",
    send=_gemini_send,
    body=lambda msgs, key: {"system": msgs[0]["content"], "contents": msgs[1:]},
    user=lambda text: {"role": "user", "parts": [{"text": text}]},
    results=lambda done: [
        {"role": "user", "parts": [{"functionResponse": {"name": "bash", "response": {"output": o}}} for _, o in done]}
    ],
    # a call has no id: its signature, unique to each answer, tells it
    calls=lambda answer: [
        (p["thoughtSignature"], p["functionCall"]["name"], p["functionCall"]["args"])
        for p in _gemini_parts(answer)
        if "functionCall" in p
    ],
    text=lambda answer: "".join(p.get("text", "") for p in _gemini_parts(answer)),
    said=lambda answer: [answer["candidates"][0]["content"]],
    call_ids=lambda body: [
        p["thoughtSignature"] for c in body["contents"] for p in c.get("parts") or () if "functionCall" in p
    ],
    hidden_id=signature,
)
"""Gemini CLI's API: no key for a conversation (one that goes back is another session)."""
TEXTS = frozenset({"text", "input_text", "output_text"})


@dataclass
class Conversation:
    """An agent's conversation: its messages (the system prompt first, for both dialects), the
    length at each turn's end (where a rewind goes), and the exchanges with our tools the proxy
    ran after a prefix of it."""

    dialect: Dialect
    key: str | None
    """The key the client gives its conversation (a session of its own whatever it does), or none
    (a session told from another that starts alike by what it holds: a rewind is another)."""
    msgs: list[dict[str, Any]]
    bounds: list[int] = field(default_factory=list)
    hidden: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    """(the id of our tool's call, the conversation's messages it came after)."""
    answered_at: int = 0
    """Where the last answer that ended a turn starts (a retry takes it back)."""
    chained: bool = False
    """Responses: the client sends what is new only, and names the response it continues
    (``previous_response_id``): the provider keeps the conversation (``store``)."""
    responses: list[tuple[int, str]] = field(default_factory=list)
    """(the conversation's length after it, its id) of each response the client got (chained)."""

    def took(self, answer: dict[str, Any]) -> None:
        """The client keeps the model's answer."""
        self.msgs += self.dialect.said(answer)
        if self.chained:
            self.responses.append((len(self.msgs), answer["id"]))

    def answered(self, answer: dict[str, Any]) -> None:
        """The model's answer ends the turn."""
        self.answered_at = len(self.msgs)
        self.took(answer)
        self.bounds.append(len(self.msgs))

    def cut(self, at: int) -> None:
        """Back to the conversation's first ``at`` messages."""
        del self.msgs[at:]
        self.bounds = [b for b in self.bounds if b <= at]
        self.responses = [(end, rid) for end, rid in self.responses if end <= at]

    def request(self) -> dict[str, Any]:
        body = self.dialect.body(copy.deepcopy(self.msgs), self.key)
        if self.chained:
            body["store"] = True
            if self.responses:  # what came after the newest response, which it continues
                end, body["previous_response_id"] = self.responses[-1]
                body["input"] = body["input"][end - 1 :]
        return body


class World:
    def __init__(self, tmp: Path, up: Upstream) -> None:
        self.tmp, self.up, self.n = tmp, up, 0
        self.running = Running(tmp, up, gemini_upstream=up.url)
        self.stream = False
        """Whether the next requests are streamed."""

    def mark(self) -> str:
        self.n += 1
        return f"M{self.n}x"

    def restart(self) -> None:
        self.running.close()
        self.running = Running(self.tmp, self.up, gemini_upstream=self.up.url)

    def close(self) -> None:
        self.running.close()

    def post(self, conv: Conversation, replies: list[Reply], rounds: Callable[[], int] | None = None) -> dict[str, Any]:
        """Send the conversation as it stands; the model answers each round with the next of
        ``replies`` (``rounds`` of them, by default all). Every request the provider got for it
        is checked."""
        up = self.up
        first = len(up.requests)
        up.replies[first:] = replies
        answer = conv.dialect.send(self, conv.request(), self.stream)
        got = [up.as_read(body) for body in up.requests[first:]]
        planned = len(replies) if rounds is None else rounds()
        assert len(got) == planned, f"{len(got)} rounds upstream for {planned} planned"
        self.check(conv, got)
        return answer

    def check(self, conv: Conversation, requests: list[dict[str, Any]]) -> None:
        held = _markers(conv.msgs, texts_only=False)
        said = _markers(conv.msgs, texts_only=True)
        for body in requests:
            shown = set(MARK.findall(json.dumps(body)))
            assert said <= shown, f"not shown: {sorted(said - shown)}"
            assert shown <= held, f"shown, but no longer in the conversation: {sorted(shown - held)}"
        ids = set(conv.dialect.call_ids(requests[0]))
        for call_id, prefix in conv.hidden:
            fits = conv.msgs[: len(prefix)] == prefix
            if fits and conv.key is None and call_id not in ids:
                continue  # (after a rewind, another session: of another conversation that started alike)
            where = "shown" if call_id in ids else "not shown"
            assert (call_id in ids) == fits, (call_id, "kept" if fits else "dropped", where)


def _markers(msgs: list[dict[str, Any]], *, texts_only: bool) -> set[str]:
    """The markers of the user messages and assistant texts (``texts_only``), or of everything."""
    if not texts_only:
        return set(MARK.findall(json.dumps(msgs)))
    out: set[str] = set()
    for m in msgs[1:]:
        content = m.get("content", m.get("parts"))  # (Gemini's parts: a text is one with no type)
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        out |= {x for b in blocks if b.get("type", "text") in TEXTS for x in MARK.findall(b.get("text", ""))}
    return out


def turn(world: World, conv: Conversation, what: str) -> None:
    """One turn: a user message, then the model's answer (after a call of the agent's own tool,
    or of ours, as ``what`` says)."""
    d = conv.dialect
    conv.msgs.append(d.user(f"{world.mark()} asks"))
    answer = world.mark() + " answers"
    if what in ("tool", "big"):
        command = f"echo {world.mark()}"
        called = world.post(conv, [ToolCall("bash", {"command": command})])
        [(call_id, name, args)] = d.calls(called)
        assert (name, args) == ("bash", {"command": command})
        conv.took(called)
        output = f"{world.mark()} output\n" + ("line of output\n" * (3000 if what == "big" else 3))
        conv.msgs += d.results([(call_id, output)])
    prefix = copy.deepcopy(conv.msgs)
    ran: list[int] = []

    def ours(body: dict[str, Any]) -> str | ToolCall:
        """Our tool, when it is offered (not when the request goes upstream as it came: a chain
        the proxy does not know)."""
        if "pin" not in json.dumps(body.get("tools")):
            return answer
        ran.append(len(world.up.requests))  # the call's id is the scripted model's: the request's number
        return ToolCall("pin", {"id": "r1"})

    plan: list[Reply] = [ours, answer] if what == "ours" else [answer]
    got = world.post(conv, plan, rounds=lambda: 1 + len(ran))
    assert answered(conv, got) == answer
    for n in ran:
        conv.hidden.append((d.hidden_id(n), prefix))
    conv.answered(got)


def step(world: World, conv: Conversation, what: str, k: int) -> None:
    if what in ("talk", "tool", "big", "ours"):
        turn(world, conv, what)
    elif what == "rewind":
        conv.cut(conv.bounds[k % len(conv.bounds)])
        turn(world, conv, "talk")
    elif what == "reword":  # not the first user message: it names the conversation
        users = [i for i, m in enumerate(conv.msgs) if m.get("role") == "user" and MARK.search(json.dumps(m))][1:]
        users = [i for i in users if "asks" in json.dumps(conv.msgs[i])]
        if users and not conv.chained:  # (the provider holds a chained one's history)
            conv.msgs[users[k % len(users)]] = conv.dialect.user(f"{world.mark()} reworded")
        turn(world, conv, "talk")
    elif what == "retry":  # its last request again (the answer lost on its way): a new answer
        if conv.bounds and conv.bounds[-1] == len(conv.msgs):
            conv.cut(conv.answered_at)
            answer = world.mark() + " answers again"
            got = world.post(conv, [answer])
            assert answered(conv, got) == answer
            conv.answered(got)
    elif what == "restart":
        world.restart()
    elif what == "stream":  # the requests from now on streamed, or not
        world.stream = bool(k)


def answered(conv: Conversation, got: dict[str, Any]) -> str:
    """The text of an answer that calls nothing."""
    assert not conv.dialect.calls(got)
    return conv.dialect.text(got)


# (not shrunk: an example takes a second or two, and shrinking one ran past five minutes; the
# failing example is printed as drawn)
@settings(FUZZ, max_examples=examples(25), phases=[Phase.generate])
@given(
    steps=STEPS,
    who=st.lists(st.integers(0, 4), min_size=14, max_size=14),
    keyed=st.booleans(),
    thinking=st.booleans(),
)
def test_conversations_through_the_proxy_show_what_they_hold_and_their_exchanges_where_they_fit(
    steps: list[tuple[str, int]], who: list[int], keyed: bool, thinking: bool
) -> None:
    """``keyed``: each client gives its conversation a key; ``thinking``: the Anthropic one with
    extended thinking."""
    with tempfile.TemporaryDirectory() as tmp, upstream(replies=[]) as up:
        world = World(Path(tmp), up)
        try:
            convs = []
            dialects = (OPENAI, THINKING if thinking else ANTHROPIC, RESPONSES, RESPONSES, GEMINI)
            for c, d in enumerate(dialects):
                system = {"role": "system", "content": "You are a coding agent."}
                first = d.user(f"{world.mark()} starts, as {d.path}")
                key = f"conversation-{c}" if keyed and d is not GEMINI else None
                conv = Conversation(d, key, [system, first], chained=c == 3)
                answer = world.mark() + " answers"
                got = world.post(conv, [answer])
                assert answered(conv, got) == answer
                conv.answered(got)
                convs.append(conv)
            for (what, k), w in zip(steps, who, strict=False):
                step(world, convs[w], what, k)
        finally:
            world.close()
        # the keyless Gemini conversation: a session, and one more for each time it went back
        forks = sum(1 for (what, _), w in zip(steps, who, strict=False) if w == 4 and what in ("rewind", "reword"))
        with SqliteStore(Path(tmp) / "proxy.db") as db:
            sessions = [v.id.removeprefix("session:") for v in db.find("session")]
            assert 5 <= len(sessions) <= (5 + forks if keyed else 5 + len(steps))
            for sid in sessions:
                verified_frames(db, sid)
