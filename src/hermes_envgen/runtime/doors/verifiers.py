"""The door to verifiers (its v1 ``Taskset``; prime-rl and its Env Hub): the env served to a
verifiers taskset across a process boundary.

verifiers 0.4 pins ``mcp==2.0.0`` and ``openai<3``, which this runtime cannot share (it needs
mcp 2.3 and openai 3), so the two never meet in one environment: the env runs in its own
process, served on 127.0.0.1 by :func:`verifiers_app`, and the taskset
(``hermes_envgen_verifiers``, which needs verifiers and nothing of ours) runs in verifiers'
environment and reaches it over HTTP:

- ``GET /tasks?split=eval|train``: the env's tasks, each its opening messages (``prompt``)
  and the task itself as JSON (``task``);
- ``POST /sessions`` ``{"task": "<json>"}``: that task started in a sandbox of its own
  (``prepare_sandbox`` run); the session's id and opening messages;
- ``/mcp?session=<id>``: the env's tools over MCP (streamable HTTP), with the env's own JSON
  schemas, each call run in that session's sandbox exactly as the env's agent loop runs one;
- ``POST /sessions/<id>/score`` ``{"messages": [...]}``: the env's ``compute_reward`` over the
  transcript and the sandbox as the agent left it (``reward``, ``signals``, ``failure``); the
  session is closed after it. ``DELETE /sessions/<id>`` closes one unscored;
- an env with turn hooks (a game, a simulated user): its MCP tools include ``reply(message)``,
  the model's message to the other side, answered by the env's hooks as its loop answers a
  turn; ``POST /sessions/<id>/turn`` ``{"message": "..."}`` is the same turn for a harness
  that speaks for the model itself (the env's ``messages``, ``reward``, ``over``, ``text``).
  The conversation the session keeps is what ``score`` scores, the transcript's last answer
  without a tool call its last word.

A session that is never scored nor closed (a crashed eval) is closed after ``idle_timeout``.
Nothing here imports verifiers.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from hermes_envgen.errors import exit_code
from hermes_envgen.runtime.doors import require, shared_sessions
from hermes_envgen.runtime.doors.session import (
    DEFAULT_SESSION_IDLE_TIMEOUT,
    REPLY_DESCRIPTION,
    REPLY_SCHEMA,
    REPLY_TOOL,
    SessionThread,
    turn_hooks,
)
from hermes_envgen.runtime.env.base_env import HermesAgentBaseEnv
from hermes_envgen.runtime.errors import DoorUnavailable, EnvConfigError

if TYPE_CHECKING:
    from starlette.responses import JSONResponse

SUPPORTED = ("0.4", "0.5")  # the verifiers releases this door was tested with
INSTALL = (
    "pip install 'verifiers>=0.4,<0.5' in an environment of its own (it pins mcp 2.0, which "
    "this project cannot share), beside hermes-envgen installed with --no-deps"
)
DEFAULT_PORT = 8765


def refuse_unreachable_judge(env: HermesAgentBaseEnv, settings: dict[str, Any]) -> None:
    """A reward that asks its judge on the policy's server cannot be paid through this door
    when no policy server is given: verifiers samples the model itself, so the env's policy
    endpoint is a placeholder. Refused now, with the reason, never a different reward."""
    judge = getattr(env, "judge", None)
    if judge is not None and judge is env.policy and not settings.get("base_url"):
        raise DoorUnavailable(
            f"{type(env).__name__}'s reward asks its judge on the policy's server, which the "
            "verifiers door does not have (verifiers samples the model itself): set "
            "judge_base_url to a judge server of its own"
        )


def verifiers_app(
    env_cls: type[HermesAgentBaseEnv],
    *,
    idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
    **settings: Any,
) -> Any:
    """The ASGI app (Starlette) serving ``env_cls`` to a verifiers taskset; ``settings``:
    ``open_env``'s. An env whose reward this door cannot pay is refused here."""
    require("mcp", "mcp", ("2.3", "3"), "verifiers")  # its tools are served over MCP
    import mcp_types as types
    from mcp.server.lowlevel.server import Server
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    thread: SessionThread = shared_sessions(env_cls, settings, idle_timeout)
    sessions = thread.sessions
    env = sessions.env
    refuse_unreachable_judge(env, settings)
    schemas = [s["function"] for s in env._resolve_tools()[0]]
    hooked = bool(turn_hooks(env_cls))
    if hooked:
        if any(s["name"] == REPLY_TOOL for s in schemas):
            raise DoorUnavailable(
                f"the tool {REPLY_TOOL!r} clashes with the tool through which the verifiers "
                "door plays an env with turn hooks: rename it"
            )
        schemas.append(
            {"name": REPLY_TOOL, "description": REPLY_DESCRIPTION, "parameters": REPLY_SCHEMA}
        )
    tools = [
        types.Tool(
            name=s["name"],
            description=s.get("description") or None,
            input_schema=s.get("parameters") or {"type": "object", "properties": {}},
        )
        for s in schemas
    ]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        request = ctx.request
        task_id = request.query_params.get("session", "") if request is not None else ""
        try:
            session = sessions.get(task_id)
        except EnvConfigError as exc:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"Error: {exc}")], is_error=True
            )
        if hooked and params.name == REPLY_TOOL:
            message = (params.arguments or {}).get("message", "")
            answer = await thread.run_async(session.reply(message))
            return types.CallToolResult(content=[types.TextContent(type="text", text=answer.text)])
        output = await thread.run_async(session.call_tool(params.name, params.arguments or {}))
        return types.CallToolResult(content=[types.TextContent(type="text", text=output)])

    async def tasks(request: Request) -> JSONResponse:
        split = request.query_params.get("split", "eval")
        if split not in ("eval", "train"):
            return _error(400, f"split must be eval or train, not {split!r}")
        if split == "eval":
            items = await thread.run_async(sessions.eval_tasks())
        else:
            items = await thread.run_async(sessions.training_tasks())
        rows = []
        for item in items:
            try:
                task = json.dumps(item)
            except TypeError as exc:
                return _error(500, f"a task of the env is not JSON ({exc}): {item!r:.80}")
            rows.append({"prompt": env.build_messages(item), "task": task})
        return JSONResponse({"env": type(env).__name__, "split": split, "tasks": rows})

    async def open_session(request: Request) -> JSONResponse:
        body = await _json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("task"), str):
            return _error(400, 'the body must be {"task": "<the task as JSON>"}')
        try:
            item = json.loads(body["task"])
        except ValueError:
            return _error(400, "the task is not JSON")
        split = "train" if body.get("split") == "train" else "eval"
        try:
            session = await thread.run_async(sessions.open(item, split=split))
        except Exception as exc:  # the task's sandbox could not be prepared: the rollout fails
            return _error(500, f"the task could not be started: {type(exc).__name__}: {exc}")
        return JSONResponse({"session": session.task_id, "messages": session.messages})

    async def score(request: Request) -> JSONResponse:
        task_id = request.path_params["task_id"]
        body = await _json_body(request)
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return _error(400, 'the body must be {"messages": [the rollout\'s messages]}')
        try:
            session = sessions.get(task_id)
        except EnvConfigError as exc:
            return _error(404, str(exc))
        # The transcript opens with the env's own messages, whatever the client sends back
        # before the model's first reply (a harness may keep the system prompt apart).
        first_reply = next(
            (i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages)
        )
        # A reply of tool calls alone comes with content null: the env's rewards read text.
        replies = [m if m.get("content") is not None else {**m, "content": ""} for m in messages]
        transcript = [*session.messages, *replies[first_reply:]]
        try:
            reward = await thread.run_async(session.score(transcript))
        finally:
            await thread.run_async(sessions.close(task_id))
        return JSONResponse(
            {"reward": reward.score, "signals": reward.signals, "failure": reward.failure}
        )

    async def turn(request: Request) -> JSONResponse:
        body = await _json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("message"), str):
            return _error(400, 'the body must be {"message": "<what the model said>"}')
        try:
            session = sessions.get(request.path_params["task_id"])
        except EnvConfigError as exc:
            return _error(404, str(exc))
        if not hooked:
            return _error(409, f"{type(env).__name__} has no turn hooks: nothing answers a turn")
        answer = await thread.run_async(session.reply(body["message"]))
        return JSONResponse(answer.as_dict())

    async def close(request: Request) -> JSONResponse:
        await thread.run_async(sessions.close(request.path_params["task_id"]))
        return JSONResponse({"closed": True})

    server: Any = Server(
        env.name or type(env).__name__, on_list_tools=list_tools, on_call_tool=call_tool
    )
    return server.streamable_http_app(
        json_response=True,
        stateless_http=True,
        # Reached on 127.0.0.1 by the taskset's harness, never by a browser.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        custom_starlette_routes=[
            Route("/tasks", tasks, methods=["GET"]),
            Route("/sessions", open_session, methods=["POST"]),
            Route("/sessions/{task_id}/score", score, methods=["POST"]),
            Route("/sessions/{task_id}/turn", turn, methods=["POST"]),
            Route("/sessions/{task_id}", close, methods=["DELETE"]),
        ],
    )


async def _json_body(request: Any) -> Any:
    try:
        return await request.json()
    except ValueError:
        return None


def _error(status: int, message: str) -> JSONResponse:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status)


def main(argv: list[str] | None = None) -> int:
    """``python -m hermes_envgen.runtime.doors.verifiers package.module:EnvClass``: serve it
    on 127.0.0.1 (``--port``, 8765) for the taskset ``hermes-envgen-verifiers``."""
    import argparse
    import importlib
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m hermes_envgen.runtime.doors.verifiers",
        description="Serve an env to a verifiers taskset (hermes-envgen-verifiers).",
    )
    parser.add_argument("env", help="the env class, as package.module:ClassName")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--tokenizer", help="the model's tokenizer (its chat template checked)")
    parser.add_argument("--idle-timeout", type=float, default=DEFAULT_SESSION_IDLE_TIMEOUT)
    parser.add_argument("--sandbox-root", help="where the sessions' sandboxes go")
    args = parser.parse_args(argv)
    module_name, _, class_name = args.env.partition(":")
    try:
        env_cls = getattr(importlib.import_module(module_name), class_name or "")
    except (ImportError, AttributeError) as exc:
        print(
            f"error: cannot load the env {args.env!r} ({exc}): give package.module:Class",
            file=sys.stderr,
        )
        return 2
    settings: dict[str, Any] = {"tokenizer_name": args.tokenizer}
    if args.sandbox_root:
        settings["sandbox_root"] = args.sandbox_root
    try:
        app = verifiers_app(env_cls, idle_timeout=args.idle_timeout, **settings)
    except EnvConfigError as exc:  # DoorUnavailable among them: the reason, in one line
        print(f"error: {exc}", file=sys.stderr)
        return exit_code(exc)
    import uvicorn

    if not (args.host in ("localhost", "::1") or args.host.startswith("127.")):
        print(
            f"warning: serving on {args.host}, beyond this machine: whoever reaches it can run "
            "the env's tools in its sandboxes; it takes no credentials",
            file=sys.stderr,
        )
    print(
        f"verifiers door of {class_name} on http://{args.host}:{args.port} "
        f"(in verifiers' environment: python -m hermes_envgen_verifiers "
        f"http://{args.host}:{args.port} -m MODEL --client.base-url URL)",
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
