"""A tiny causal LM for trainer tests on CPU that says what a script says: the stub server's
scripted model, as a model a trainer generates from and trains in-process.

A randomly initialised model never calls a tool, and teaching it one reply takes minutes of
CPU. This one is a real, randomly initialised Qwen2 (its weights get every gradient) whose
logits are raised by ``strength`` on the token the script continues with after the longest
end of the context found in the script (up to ``window`` tokens): given the script's opening,
it writes the script, turn after turn, whatever was put between the turns (tool results).
The raise is part of its logits, so the logprobs the trainer samples with and trains on agree.
Needs torch; import this module only where it is installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


class ScriptedCausalLM(Qwen2ForCausalLM):
    """A random Qwen2 that follows ``script`` (token ids) wherever its context is found."""

    def __init__(
        self,
        config: Qwen2Config,
        script: Sequence[int] = (),
        strength: float = 40.0,
        window: int = 64,
    ) -> None:
        super().__init__(config)
        self.strength = strength
        self.window = window
        self._next: dict[tuple[int, ...], int] = {}
        for length in range(window, 0, -1):  # the first occurrence of each piece wins
            for start in range(len(script) - length):
                piece = tuple(script[start : start + length])
                self._next.setdefault(piece, script[start + length])
        self._contexts: list[list[int]] = []  # each row's tokens so far, while generating

    def next_token(self, context: Sequence[int]) -> int | None:
        """The script's next token after the longest end of ``context`` found in it."""
        for length in range(min(self.window, len(context)), 0, -1):
            found = self._next.get(tuple(context[len(context) - length :]))
            if found is not None:
                return found
        return None

    def forward(self, input_ids: torch.Tensor | None = None, **kwargs: Any) -> Any:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # transformers 5: "cache"
        seen = cache.get_seq_length() if cache is not None else 0
        outputs = super().forward(input_ids=input_ids, **kwargs)
        if input_ids is None or not self._next:
            return outputs
        rows = input_ids.tolist()
        if seen and len(self._contexts) == len(rows):  # a step of generation: one more token
            for context, row in zip(self._contexts, rows):
                context.extend(row)
        else:  # a whole sequence: a prompt to generate from, or a batch to train on
            self._contexts = [list(row) for row in rows]
        kept = outputs.logits.shape[1]
        bias = torch.zeros_like(outputs.logits)
        for index, context in enumerate(self._contexts):
            for offset in range(kept):
                token = self.next_token(context[: len(context) - kept + offset + 1])
                if token is not None:
                    bias[index, offset, token] = self.strength
        outputs.logits = outputs.logits + bias
        return outputs


def scripted_model(
    vocab_size: int,
    script: Sequence[int],
    *,
    pad_token_id: int,
    eos_token_id: int,
    width: int = 64,
    layers: int = 2,
    seed: int = 0,
) -> ScriptedCausalLM:
    """A :class:`ScriptedCausalLM` over ``vocab_size`` tokens, small enough for a CPU."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=16384,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
    )
    return ScriptedCausalLM(config, script)
