"""The chat template's names by their earlier import path (kept for envs and tests that use it).

The work lives in three modules, one job each: ``template_data`` (the built-in templates and
the probe conversation), ``template_render`` (rendering a conversation and shaping it for the
template) and ``template_check`` (the start-up check that refuses a template whose training
data would be wrong). The runtime imports those; this module imports nothing the runtime needs.
"""

from __future__ import annotations

from hermes_envgen.runtime.template_check import (
    ChatTemplateDropsToolCalls,
    check_tool_calls_rendered,
    prepare_chat_template,
)
from hermes_envgen.runtime.template_data import (
    BUILTIN_TEMPLATES,
    CHATML_TOOLS_TEMPLATE,
    HERMES_TEMPLATE,
    resolve_chat_template,
)
from hermes_envgen.runtime.template_render import (
    AS_GIVEN,
    NAMED,
    SHORT,
    as_sent,
    call_id_style,
    encode,
    end_marker,
    for_template,
    render,
    renders_raw_arguments,
    set_template_kwargs,
    short_call_id,
    template_kwargs,
    text_after_turn,
    with_arguments,
    with_call_ids,
)

__all__ = [
    "AS_GIVEN",
    "BUILTIN_TEMPLATES",
    "CHATML_TOOLS_TEMPLATE",
    "HERMES_TEMPLATE",
    "NAMED",
    "SHORT",
    "ChatTemplateDropsToolCalls",
    "as_sent",
    "call_id_style",
    "check_tool_calls_rendered",
    "encode",
    "end_marker",
    "for_template",
    "prepare_chat_template",
    "render",
    "renders_raw_arguments",
    "resolve_chat_template",
    "set_template_kwargs",
    "short_call_id",
    "template_kwargs",
    "text_after_turn",
    "with_arguments",
    "with_call_ids",
]
