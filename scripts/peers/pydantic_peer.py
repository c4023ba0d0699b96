"""A real third-party ACP agent for acpx's interoperability tests: pydantic-acp serving a
pydantic-ai agent whose model is a scripted `FunctionModel` (no LLM, no API key, no network).

The reply of every turn tells what the agent remembers, so a test can check that a later
`acpx` command continued the same conversation in the mode the user chose:

    mode=<current mode>; turns=<user turns the model saw>; heard=<each user text, joined by ' | '>

Sessions persist in `$PYD_PEER_SESSIONS` (default `<cwd>/.pyd-peer-sessions`) with
pydantic-acp's own `FileSessionStore`, so `session/load` works across agent processes. The mode
lives only in this process's memory, as real agents keep it: a new agent process starts in
`ask` unless the client sets the mode again.

The peer offers two models, `alpha` (its default) and `beta`, and each reply ends with
`; model=<the model that answered>`. With `PYD_PEER_MODEL_OPTION=hidden` its session answers
list no `model` config option, yet `session/set_config_option` with configId `model` still
selects one (and the unstable `session/set_model` is refused): the shape acpx must probe.

`PYD_PEER_UNSTABLE=1` serves the unstable `session/fork` and `session/resume` it advertises
(pydantic-acp's `run_acp` does not: its SDK answers them -32601 unless asked to).

A prompt `read-note <name>` makes the model call the `read_note` tool first (a tool call with
a result of about 2 KB, as a file read gives), then reply as above. A prompt
`write-file <absolute path> <content…>` makes it call the `write_file` tool, which needs the
user's approval (pydantic-ai's `requires_approval`: pydantic-acp asks the client with
`session/request_permission`), then reply `written` or `not written` as the tool's result says.
A prompt `slow` makes the model think for a minute before it answers (a turn to cancel).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from acp import run_agent
from pydantic_acp import AdapterConfig, AdapterModel, FileSessionStore, ModeState, create_acp_agent
from acp.schema import SessionMode
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

MODES = [
    SessionMode(id="ask", name="Ask", description="asks before every change"),
    SessionMode(id="code", name="Code", description="edits files"),
    SessionMode(id="read-only", name="Read only", description="never writes"),
]
_current_mode: dict[str, str] = {}
_last_mode = {"id": "ask"}


class InMemoryModes:
    """Modes kept only in this process (lost when the agent restarts)."""

    def get_mode_state(self, session, agent):
        return ModeState(modes=MODES, current_mode_id=_current_mode.get(session.session_id, "ask"))

    def set_mode(self, session, agent, mode_id):
        if mode_id not in {m.id for m in MODES}:
            return None
        _current_mode[session.session_id] = mode_id
        _last_mode["id"] = mode_id
        return ModeState(modes=MODES, current_mode_id=mode_id)


def _model(name: str) -> FunctionModel:
    """The scripted model called `name`: its replies say which model answered."""

    async def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1] if messages else None
        if isinstance(last, ModelRequest) and any(
            isinstance(p, UserPromptPart) and _text(p) == "slow" for p in last.parts
        ):
            await asyncio.sleep(60)
        response = _reply(messages, info)
        if isinstance(response.parts[0], TextPart):
            response.parts[0] = TextPart(f"{response.parts[0].content}; model={name}")
        return response

    return FunctionModel(reply, model_name=name)


def _text(part: UserPromptPart) -> str:
    """A user message's text: a prompt of several text blocks comes as a list, joined here."""
    if isinstance(part.content, str):
        return part.content
    return "\n".join(c for c in part.content if isinstance(c, str))


def _reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1] if messages else None
    if isinstance(last, ModelRequest):
        returned = [p for p in last.parts if isinstance(p, (ToolReturnPart, RetryPromptPart))]
        prompt = next((_text(p) for p in last.parts if isinstance(p, UserPromptPart)), "")
        if returned and any(getattr(p, "tool_name", "") == "write_file" for p in returned):
            done = any(isinstance(p, ToolReturnPart) and p.content == "written" for p in returned)
            return ModelResponse(parts=[TextPart("written" if done else "not written")])
        if not returned and prompt.startswith("read-note "):
            name = prompt.split(" ", 1)[1].strip()
            return ModelResponse(parts=[ToolCallPart(tool_name="read_note", args={"name": name})])
        if not returned and prompt.startswith("write-file "):
            _, path, content = (prompt.split(" ", 2) + [""])[:3]
            args = {"path": path, "content": content}
            return ModelResponse(parts=[ToolCallPart(tool_name="write_file", args=args)])
    heard: list[str] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    heard.append(_text(part))
    text = f"mode={_last_mode['id']}; turns={len(heard)}; heard={' | '.join(heard)}"
    return ModelResponse(parts=[TextPart(text)])


def main() -> None:
    root = Path(os.environ.get("PYD_PEER_SESSIONS", Path.cwd() / ".pyd-peer-sessions"))
    models = {name: _model(name) for name in ("alpha", "beta")}
    agent = Agent(models["alpha"], name="pydantic-peer")

    @agent.tool_plain
    def read_note(name: str) -> str:
        """Reads the note called `name`."""
        return f"note {name}: " + "lorem ipsum dolor sit amet " * 80

    @agent.tool_plain(requires_approval=True)
    def write_file(path: str, content: str) -> str:
        """Writes `content` to the file at `path` (asks the user first)."""
        Path(path).write_text(content, encoding="utf-8")
        return "written"

    adapter = create_acp_agent(
        agent=agent,
        config=AdapterConfig(
            session_store=FileSessionStore(root=root),
            modes_provider=InMemoryModes(),
            replay_history_on_load=True,
            available_models=[
                AdapterModel(model_id=name, name=name.title(), override=model)
                for name, model in models.items()
            ],
            enable_model_config_option=os.environ.get("PYD_PEER_MODEL_OPTION") != "hidden",
        ),
    )
    # `run_acp` as pydantic-acp ships it, unless PYD_PEER_UNSTABLE=1 turns on the SDK's
    # unstable methods (`session/fork`, `session/resume`), which it advertises either way.
    unstable = os.environ.get("PYD_PEER_UNSTABLE") == "1"
    asyncio.run(run_agent(adapter, use_unstable_protocol=unstable))


if __name__ == "__main__":
    main()
