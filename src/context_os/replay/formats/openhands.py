"""OpenHands event streams, as OpenAI chat messages, the way OpenHands' ``ConversationMemory``
turns events into the messages it sends its model.

A session is a list of events: a JSON list (a saved trajectory), or the ``history`` of one
record of an evaluation's ``output.jsonl`` (one record per line, each its own session, ``label``
its ``instance_id``); OpenDevin's records (mid 2024) hold ``[action, observation]`` pairs.

* An action with ``tool_call_metadata`` is part of one model response (``model_response.id``):
  the response's message (its text and tool calls: ``execute_bash``, ``str_replace_editor``,
  ``think``, ``execute_ipython_cell``...) is one assistant message, sent once every call of it
  has its observation; an observation with ``tool_call_metadata`` answers its ``tool_call_id``.
  A command's output is sent as OpenHands' ``to_agent_observation`` writes it (prefix, output,
  suffix, working directory, exit code), an error with OpenHands' note after it.
* ``finish`` is the assistant's last message (its thought and the response's text); a
  ``message`` is the user's or the assistant's text; ``system`` the system prompt.
* Events of the older format, without ``tool_call_metadata`` (and often without ``source``, their
  arguments inline): each agent action is one model call, made a tool call (``run`` is
  ``execute_bash``, ``run_ipython`` ``execute_ipython_cell``, other actions keep their name) that
  the next observation answers.
* Recall observations (whose text OpenHands builds from its prompt templates, not recorded),
  agent state changes and empty observations are not messages; nor are the condenser's
  ``condensation`` actions (the events it forgets from then on, a summary in their place): the
  replay is uncompacted, each call's input every message before it, as for Pi's compactions.

A call never answered is dropped, as OpenHands drops it. The tools map to roles by the
``openhands`` preset (harness/toolnames.py).

**V1** (the OpenHands software agent SDK, and the CLI and app built on it): a conversation
directory (``base_state.json``, ``events/event-*.json``, one event a file, each with a ``kind``),
a JSON list or JSON lines of such events. They become the messages the SDK sends
(``v1_messages``: its ``events_to_messages``).

This module reads files; it never touches a store or a session.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ...errors import InputError
from .common import Parsed, Transcript, json_type, openai_calls, pair_openai, shape, text_field, uploaded_dir

__all__ = ["read_openhands"]

_NOT_MESSAGES = {
    "agent_state_changed",
    "null",
    "recall",
    "loop_detection",
    "change_agent_state",
    "condensation",
    "condensation_request",
}
_LEGACY_NAMES = {"run": "execute_bash", "run_ipython": "execute_ipython_cell"}
_EVENT_FIELDS = {"id", "timestamp", "source", "message", "action", "observation", "cause", "content", "extras"}
_IMAGE = re.compile(r"!\[image\]\(data:image/png;base64,")
_LABEL = re.compile(r"\s+")


def _args(e: Mapping[str, Any]) -> dict[str, Any]:
    """An event's arguments: ``args``, or (older format) its fields inline."""
    if isinstance(e.get("args"), Mapping):
        return dict(e["args"])
    return {k: v for k, v in e.items() if k not in _EVENT_FIELDS and k not in ("tool_call_metadata", "llm_metrics")}


def _extras(e: Mapping[str, Any]) -> dict[str, Any]:
    return dict(e["extras"]) if isinstance(e.get("extras"), Mapping) else {}


def _content(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(str(b.get("text", "")) for b in value if isinstance(b, Mapping) and b.get("type") == "text")
    return "" if value is None else str(value)


def _command_output(text: str, meta: Mapping[str, Any]) -> str:
    """A command's output as OpenHands sends it (V0 and V1 alike): its prompt's prefix and suffix
    around it, then the working directory, the interpreter and the exit code it knows."""
    text = f"{meta.get('prefix') or ''}{text}{meta.get('suffix') or ''}"
    if meta.get("working_dir"):
        text += f"\n[Current working directory: {meta['working_dir']}]"
    if meta.get("py_interpreter_path"):
        text += f"\n[Python interpreter: {meta['py_interpreter_path']}]"
    if meta.get("exit_code", -1) != -1:
        text += f"\n[Command finished with exit code {meta.get('exit_code')}]"
    return text


def _observation_text(e: Mapping[str, Any]) -> str:
    kind = e.get("observation")
    text = _content(e.get("content"))
    if kind == "run":
        meta = _extras(e).get("metadata")
        if isinstance(meta, Mapping):  # CmdOutputObservation.to_agent_observation
            text = _command_output(text, meta)
    elif kind == "run_ipython":
        text = "\n".join(
            "![image](data:image/png;base64, ...) already displayed to user" if _IMAGE.search(line) else line
            for line in text.split("\n")
        )
    elif kind == "error":
        text += "\n[Error occurred in processing last action]"
    elif kind == "user_rejected":
        text = "OBSERVATION:\n" + text + "\n[Last action has been rejected by the user]"
    return text


def _response(tcm: Mapping[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """(response id, assistant message) of an action's ``tool_call_metadata``."""
    response = tcm.get("model_response")
    choices = response.get("choices") if isinstance(response, Mapping) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, Mapping) else None
    if not isinstance(response, Mapping) or not isinstance(message, Mapping):
        raise InputError(f"{where}: tool_call_metadata without a model response message")
    calls = openai_calls(message.get("tool_calls") or [], f"{where}: the model response")
    text = _content(message.get("content"))
    msg: dict[str, Any] = {"role": "assistant", "content": text if text.strip() else None}
    if calls:
        msg["tool_calls"] = calls
    rid = response.get("id")
    return (rid if isinstance(rid, str) else f"{where}:{id(response)}"), msg


class _Memory:
    """Events in, messages out (module docstring)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.messages: list[dict[str, Any]] = []
        self.pending: dict[str, dict[str, Any]] = {}  # response id → its assistant message
        self.results: dict[str, dict[str, Any]] = {}  # tool call id → its tool message
        self.legacy: list[str] = []  # older format: calls waiting for their observation

    def flush(self, *, all_: bool = False) -> None:
        """Send the responses whose calls are all answered (``all_``: every response, with the
        answered calls only)."""
        for rid, msg in list(self.pending.items()):
            calls = msg.get("tool_calls") or []
            if not all_ and not all(c["id"] in self.results for c in calls):
                continue
            del self.pending[rid]
            self.messages.append(msg)
            self.messages += [self.results.pop(c["id"]) for c in calls if c["id"] in self.results]

    def add(self, k: int, e: Any) -> None:
        at = f"{self.where}: event {k}"
        if not isinstance(e, Mapping):
            raise InputError(f"{at}: expected an event object, got {json_type(e)}")
        tcm = e.get("tool_call_metadata") if isinstance(e.get("tool_call_metadata"), Mapping) else None
        if isinstance(e.get("action"), str):
            self._action(e, e["action"], tcm, at, k)
        elif isinstance(e.get("observation"), str):
            self._observation(e, e["observation"], tcm)
        self.flush()

    def _say(self, msg: dict[str, Any]) -> None:
        self.flush(all_=True)  # a response whose calls are still open will not be answered now
        self.messages.append(msg)

    def _action(self, e: Mapping[str, Any], kind: str, tcm: Mapping[str, Any] | None, at: str, k: int) -> None:
        args = _args(e)
        source = e.get("source")
        if kind in _NOT_MESSAGES:
            return
        if kind == "system":
            self._say({"role": "system", "content": _content(args.get("content", e.get("message")))})
        elif kind == "message":
            agent = source == "agent" or (source is None and args.get("wait_for_response") in (True, "True"))
            text = _content(args.get("content", e.get("message")))
            self._say({"role": "assistant" if agent else "user", "content": text})
        elif kind == "finish":
            thought = text_field(args.get("thought")) or text_field(args.get("final_thought")) or ""
            said = _content(_response(tcm, at)[1].get("content")) if tcm is not None else ""
            text = f"{thought}\n{said}" if thought and said and said != thought else thought or said
            role = "user" if source == "user" else "assistant"
            self._say({"role": role, "content": text or _content(e.get("message"))})
        elif tcm is not None:
            rid, msg = _response(tcm, at)
            if rid not in self.pending:
                self.flush(all_=True)  # a new response: the earlier ones are done
            self.pending[rid] = msg
        elif source == "user":
            if kind == "run":
                self._say({"role": "user", "content": f"User executed the command:\n{args.get('command', '')}"})
        else:  # the older format: the action is the call
            thought = text_field(args.pop("thought", None)) or ""
            call_id = f"call_{e.get('id', k)}"
            arguments = {n: v for n, v in args.items() if n not in ("is_confirmed", "action_risk", "security_risk")}
            name = _LEGACY_NAMES.get(kind, kind)
            function = {"name": name, "arguments": json.dumps(arguments, default=str)}
            call = {"id": call_id, "type": "function", "function": function}
            self._say({"role": "assistant", "content": thought, "tool_calls": [call]})
            self.legacy.append(call_id)

    def _observation(self, e: Mapping[str, Any], kind: str, tcm: Mapping[str, Any] | None) -> None:
        if kind in _NOT_MESSAGES:
            return
        text = _observation_text(e)
        call_id = tcm.get("tool_call_id") if tcm is not None else None
        if isinstance(call_id, str):
            self.results.setdefault(call_id, {"role": "tool", "tool_call_id": call_id, "content": text})
        elif self.legacy:
            call_id = self.legacy.pop(0)
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind == "run":
            self._say({"role": "user", "content": f"\nObserved result of command executed by user:\n{text}"})
        else:
            self._say({"role": "user", "content": text})


def _session(events: list[Any], where: str, *, session_id: str | None, label: str | None) -> Transcript:
    memory = _Memory(where)
    # OpenDevin (mid 2024) kept its history as [action, observation] pairs
    if any(isinstance(e, list) for e in events):
        events = [x for e in events for x in (e if isinstance(e, list) else [e])]
    for k, e in enumerate(events):
        memory.add(k, e)
    memory.flush(all_=True)
    messages = pair_openai(memory.messages)
    # OpenHands separates consecutive user messages by a blank line
    for before, m in zip(messages, messages[1:], strict=False):
        if m["role"] == before["role"] == "user" and m["content"]:
            m["content"] = "\n\n" + m["content"]
    cwd = next((d for m in messages if m["role"] == "user" and (d := uploaded_dir(str(m["content"])))), None)
    return Transcript("openhands", "openai", "openhands", messages, session_id, cwd, [], len(events), label=label)


# --- OpenHands V1 (the software agent SDK) --------------------------------------------------------

V1_KINDS = (
    "SystemPromptEvent",
    "MessageEvent",
    "ActionEvent",
    "ObservationEvent",
    "AgentErrorEvent",
    "UserRejectObservation",
    "Condensation",
    "CondensationRequest",
    "CondensationSummaryEvent",
    "ConversationStateUpdateEvent",
    "PauseEvent",
)
"""The ``kind`` of an event of the OpenHands software agent SDK (V1)."""
_V1_ERROR = "[An error occurred during execution.]\n"
"""What the SDK puts before an observation marked ``is_error`` (``Observation.ERROR_MESSAGE_HEADER``)."""


def is_v1_event(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("kind") in V1_KINDS


def _v1_text(parts: Any, at: str, name: str) -> str:
    """The text of an SDK content list (``TextContent`` parts), or of a plain string; ``InputError``
    naming the field (``name``) for a value of another type."""
    if isinstance(parts, str):
        return parts
    if parts is not None and not isinstance(parts, list):
        raise InputError(f"{at}: {name} must be a string or a list of content parts, not {json_type(parts)}")
    return "".join(str(p.get("text", "")) for p in parts or () if isinstance(p, Mapping) and p.get("type") == "text")


def _v1_observation(obs: Mapping[str, Any], at: str) -> str:
    """An observation as the SDK sends it (``to_llm_content``): the error header if it failed, its
    text (``content``; ``output`` in the SDK's first releases), and a command's metadata after it
    (``TerminalObservation``: prefix, suffix, working directory, interpreter, exit code)."""
    name = "content" if "content" in obs else "output"
    text = _v1_text(obs.get(name), at, f"observation.{name}")
    meta = obs.get("metadata")
    if isinstance(meta, Mapping) and ("exit_code" in obs or ("command" in obs and "timeout" in obs)):
        text = _command_output(text, meta)  # TerminalObservation.to_llm_content
    return (_V1_ERROR if obs.get("is_error") or obs.get("error") is True else "") + text


def _v1_call(e: Mapping[str, Any], at: str) -> dict[str, Any]:
    """An ActionEvent's tool call in chat-completions shape (the SDK's ``{id, name, arguments}``,
    or its first releases' LiteLLM call)."""
    call = e.get("tool_call")
    fn = call.get("function") if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping) else call
    if not isinstance(call, Mapping) or not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise InputError(f"{at}: an ActionEvent needs a tool_call with a name")
    call_id = call.get("id") if isinstance(call.get("id"), str) else e.get("tool_call_id")
    if not isinstance(call_id, str):
        raise InputError(f"{at}: an ActionEvent's tool call needs an id")
    args = fn.get("arguments")
    args = args if isinstance(args, str) else json.dumps(args if args is not None else {})
    return {"id": call_id, "type": "function", "function": {"name": fn["name"], "arguments": args}}


def v1_messages(events: list[Any], where: str) -> list[dict[str, Any]]:
    """The chat messages the SDK sends for ``events`` (``LLMConvertibleEvent.events_to_messages``):
    the actions of one model response (``llm_response_id``) one assistant message, the first's
    thought its text; an observation, a rejection or an agent error a tool message; adjacent
    user messages one. A ``Condensation`` is left out: the replay is of the uncompacted history."""
    out: list[dict[str, Any]] = []
    response: str | None = None
    for k, e in enumerate(events):
        at = f"{where}: event {k}"
        if not isinstance(e, Mapping):
            raise InputError(f"{at}: expected an event object, got {json_type(e)}")
        kind = e.get("kind")
        if kind == "ActionEvent":
            call = _v1_call(e, at)
            rid = e.get("llm_response_id")
            if response is not None and rid == response and out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
                continue
            response = rid if isinstance(rid, str) else None
            text = _v1_text(e.get("thought"), at, "thought")
            out.append({"role": "assistant", "content": text or None, "tool_calls": [call]})
            continue
        response = None
        if kind == "SystemPromptEvent":
            parts = [_v1_text([e.get(k)], at, k) for k in ("system_prompt", "dynamic_context")]
            out.append({"role": "system", "content": "\n".join(p for p in parts if p)})
        elif kind == "MessageEvent":
            msg = e.get("llm_message")
            if not isinstance(msg, Mapping) or msg.get("role") not in ("user", "assistant", "system"):
                raise InputError(f"{at}: a MessageEvent needs an llm_message with a role")
            text = _v1_text(msg.get("content"), at, "llm_message.content")
            text += _v1_text(e.get("extended_content"), at, "extended_content")
            if msg["role"] == "user" and out and out[-1]["role"] == "user":
                out[-1]["content"] += text  # the SDK merges adjacent user messages
            else:
                out.append({"role": msg["role"], "content": text})
        elif kind in ("ObservationEvent", "UserRejectObservation", "AgentErrorEvent"):
            call_id = e.get("tool_call_id")
            if not isinstance(call_id, str):
                continue  # an agent error of no tool call: not sent as a result
            if kind == "ObservationEvent":
                obs = e.get("observation")
                text = _v1_observation(obs, at) if isinstance(obs, Mapping) else ""
            elif kind == "UserRejectObservation":
                text = f"Action rejected: {e.get('rejection_reason', '')}"
            else:
                text = str(e.get("error", ""))
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
    return out


def _v1_session(events: list[Any], where: str, *, session_id: str | None, cwd: str | None) -> Transcript:
    messages = pair_openai(v1_messages(events, where))
    return Transcript("openhands", "openai", "openhands", messages, session_id, cwd, [], len(events))


def _label(record: Mapping[str, Any], n: int) -> str:
    if isinstance(record.get("instance_id"), str) and record["instance_id"].strip():
        return _LABEL.sub("_", record["instance_id"].strip())
    issue = record.get("issue")
    if isinstance(issue, Mapping) and isinstance(issue.get("number"), int):
        return f"issue-{issue['number']}"
    if isinstance(record.get("id"), str) and record["id"].strip():  # OpenDevin's records
        return _LABEL.sub("_", record["id"].strip())
    return f"record-{n}"


def read_openhands(parsed: Parsed, **_: Any) -> list[Transcript]:
    """The sessions of an OpenHands file: one for an event list, one per ``output.jsonl`` record."""
    where = str(parsed.path)
    doc = parsed.document if parsed.is_document else None
    if isinstance(doc, Mapping) and isinstance(doc.get("events"), list) and any(map(is_v1_event, doc["events"])):
        state: Mapping[str, Any] = doc["state"] if isinstance(doc.get("state"), Mapping) else {}
        workspace: Mapping[str, Any] = state["workspace"] if isinstance(state.get("workspace"), Mapping) else {}
        sid, cwd = text_field(state.get("id")), text_field(workspace.get("working_dir"))
        return parsed.stamp([_v1_session(doc["events"], where, session_id=sid, cwd=cwd)])  # a conversation dir
    if isinstance(doc, list) and any(map(is_v1_event, doc)):
        return parsed.stamp([_v1_session(doc, where, session_id=None, cwd=None)])
    if not parsed.is_document and any(is_v1_event(e) for _, e in parsed.rows):
        return parsed.stamp([_v1_session([e for _, e in parsed.rows], where, session_id=None, cwd=None)])
    if isinstance(doc, list):
        return parsed.stamp([_session(doc, where, session_id=None, label=None)])
    records = [(1, doc)] if isinstance(doc, dict) else [] if parsed.is_document else parsed.rows
    out = []
    for n, (line, record) in enumerate(records, 1):
        history = record.get("history")
        if not isinstance(history, list):
            raise InputError(f"{where}:{line}: {shape(record)}: not an OpenHands record (no history list)")
        label = _label(record, n)
        at = f"{where}:{line}" if not parsed.is_document else where
        out.append(_session(history, at, session_id=label, label=label))
    if not out:
        raise InputError(f"{where}: {shape(doc)}: not an OpenHands event list or output record")
    return parsed.stamp(out)
