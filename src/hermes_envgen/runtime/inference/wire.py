"""The three token-mode wire formats: the request each server takes, the reply it gives.

- ``completions``: stock vLLM's ``/v1/completions`` with a token-id prompt.
- ``generate``: Atropos's vLLM server's ``/generate``.
- ``sglang``: SGLang's native ``/generate``.

Each reader checks the reply against what the API promises and raises ``MalformedReply``
(naming the part that is missing) for JSON that lacks it; nothing else is caught, so that a
bug here surfaces as the bug it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from hermes_envgen.runtime.errors import MalformedReply
from hermes_envgen.runtime.inference.endpoint import Endpoint

# What a token-mode request gives: ([output ids], [logprobs], [finish reason]), one completion.
TokenReply = tuple[list[list[int]], list[list[float]], list[Any]]
ReplyReader = Callable[[Any, str], TokenReply]


def sampling(kwargs: dict) -> dict:
    """The sampling fields of a request (``n`` is always 1; ``tools`` is rendered already)."""
    body = {k: v for k, v in kwargs.items() if k not in ("model", "n", "tools", "tool_choice")}
    if "max_new_tokens" in body:
        body["max_tokens"] = body.pop("max_new_tokens")
    if "max_completion_tokens" in body:
        body["max_tokens"] = body.pop("max_completion_tokens")
    body.update(body.pop("extra_body", None) or {})
    return body


def completions_body(endpoint: Endpoint, input_ids: list[int], kwargs: dict) -> dict:
    """Stock vLLM's /v1/completions with a token-id prompt, token ids and logprobs returned."""
    return {
        "model": endpoint.model,
        "prompt": list(input_ids),
        **sampling(kwargs),
        "n": 1,
        "logprobs": 0,  # the sampled token's logprob only
        # Tokens as "token_id:<id>": per request since vLLM 0.8 (vllm-project/vllm#14066);
        # older servers only with --return-tokens-as-token-ids.
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,  # vLLM >= 0.10.2: the ids in the choice; ignored before
        "skip_special_tokens": False,
    }


def generate_body(endpoint: Endpoint, input_ids: list[int], kwargs: dict) -> dict:
    """``/generate``'s body: SGLang's (``input_ids``) or Atropos's vLLM server's (``prompt``)."""
    fields = sampling(kwargs)
    if endpoint.server_type == "sglang":
        if "max_tokens" in fields:
            fields["max_new_tokens"] = fields.pop("max_tokens")
        return {"input_ids": list(input_ids), "sampling_params": fields, "return_logprob": True}
    return {"prompt": {"prompt_token_ids": list(input_ids)}, "logprobs": 0, **fields, "n": 1}


def reader_of(api: str, server_type: str) -> ReplyReader:
    """The reply reader of a token API (``completions`` or ``generate``) on that server."""
    if api == "completions":
        return read_completions
    return read_sglang if server_type == "sglang" else read_generate


# -- reading replies -----------------------------------------------------------------------------


def read_completions(data: Any, url: str = "") -> TokenReply:
    """Stock vLLM: the ids in ``token_ids`` (>= 0.10.2) or as ``token_id:N`` logprob tokens."""
    reply = _Reply(url, "/v1/completions")
    choice = reply.item(reply.field(data, "choices", list), 0, dict, "choices")
    logprobs = choice.get("logprobs") or {}
    if not isinstance(logprobs, dict):
        reply.bad("logprobs is not an object")
    ids = choice.get("token_ids")
    if ids is None:
        tokens = logprobs.get("tokens")
        if tokens is None:
            reply.bad("no token ids: neither token_ids nor logprobs.tokens")
        ids = [str(t).removeprefix("token_id:") for t in reply.of_kind(tokens, list, "tokens")]
    values = reply.of_kind(logprobs.get("token_logprobs") or [], list, "token_logprobs")
    return (
        [[reply.number(t, int, "a token id") for t in reply.of_kind(ids, list, "token_ids")]],
        [[reply.number(v, float, "a logprob") if v is not None else 0.0 for v in values]],
        [choice.get("finish_reason")],
    )


def read_generate(data: Any, url: str = "") -> TokenReply:
    """Atropos's vLLM server: ``logprobs`` is ``[[{id: logprob}], ...]`` per completion."""
    reply = _Reply(url, "/generate (Atropos's vLLM server)")
    positions = reply.item(reply.field(data, "logprobs", list), 0, list, "logprobs")
    ids, values = [], []
    for position in positions:
        sampled = reply.item(position, 0, dict, "a position")
        if not sampled:
            reply.bad("a position names no token")
        token, logprob = next(iter(sampled.items()))
        ids.append(reply.number(token, int, "a token id"))
        values.append(reply.number(logprob, float, "a logprob"))
    reasons = reply.field(data, "finish_reasons", list)
    return [ids], [values], [reasons[0] if reasons else None]


def read_sglang(data: Any, url: str = "") -> TokenReply:
    """SGLang: ``meta_info.output_token_logprobs`` is ``[[logprob, id, text], ...]``."""
    reply = _Reply(url, "SGLang's /generate")
    result = reply.item(data, 0, dict, "the reply") if isinstance(data, list) else data
    meta = reply.field(result, "meta_info", dict)
    triples = reply.field(meta, "output_token_logprobs", list)
    ids, values = [], []
    for triple in triples:
        if not isinstance(triple, list) or len(triple) < 2:
            reply.bad("an output_token_logprobs entry is not [logprob, id, ...]")
        values.append(reply.number(triple[0], float, "a logprob"))
        ids.append(reply.number(triple[1], int, "a token id"))
    reason = meta.get("finish_reason")
    reason = reason.get("type") if isinstance(reason, dict) else reason
    return [ids], [values], [reason]


class _Reply:
    """One reply's JSON, read part by part: a part that is missing is a MalformedReply."""

    def __init__(self, url: str, api: str) -> None:
        self.url, self.api = url, api

    def bad(self, what: str) -> NoReturn:
        where = f"{self.url}: " if self.url else ""
        raise MalformedReply(
            f"{where}the reply is not in the form {self.api} answers ({what}); "
            "is inference_api right for this server?",
            url=self.url,
        )

    def of_kind(self, value: Any, kind: type, name: str) -> Any:
        if not isinstance(value, kind):
            self.bad(f"{name} is not a{'n' if kind is dict else ''} {_KINDS[kind]}")
        return value

    def field(self, data: Any, key: str, kind: type) -> Any:
        if not isinstance(data, dict) or key not in data:
            self.bad(f"no {key}")
        return self.of_kind(data[key], kind, key)

    def item(self, values: list, index: int, kind: type, name: str) -> Any:
        if len(self.of_kind(values, list, name)) <= index:
            self.bad(f"{name} is empty")
        return self.of_kind(values[index], kind, f"an item of {name}")

    def number(self, value: Any, kind: type, name: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            self.bad(f"{name} is not a number: {value!r:.40}")
        try:
            return kind(value)
        except ValueError:  # a string that is no number
            self.bad(f"{name} is not a number: {value!r:.40}")


_KINDS: dict[type, str] = {list: "list", dict: "object"}
