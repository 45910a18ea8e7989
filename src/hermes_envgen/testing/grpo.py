"""Training steps with atroposlib's example GRPO trainer, unmodified, on a model small enough for
a CPU: proof that the groups an env delivers are data a real trainer learns from.

The groups go through the example trainer's own code (``example_trainer`` ships in atroposlib
0.4.0): ``pad_data_to_good_offset`` batches them and ``run_training_step`` computes its clipped
GRPO loss, clips the gradient and steps the optimizer. Only the model is ours: a randomly
initialised Llama of a few layers over the tokenizer's vocabulary, made here, so nothing is
downloaded. Needs torch (a CPU build will do); import this module only where it is installed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
from example_trainer.config import TrainingConfig
from example_trainer.data import pad_data_to_good_offset
from example_trainer.trainers import create_optimizer
from example_trainer.training import run_training_step
from transformers import LlamaConfig, LlamaForCausalLM

NOT_TRAINED = -100


def tiny_causal_lm(vocab_size: int, *, layers: int = 2, width: int = 64, seed: int = 0) -> Any:
    """A randomly initialised causal LM over ``vocab_size`` tokens, fast enough for a CPU."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=16384,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


@dataclass
class StepReport:
    """What one training step did, per sequence in the order the groups list them."""

    metrics: dict  # run_training_step's own (loss, grad_norm, mean_ratio, ...)
    batch_shapes: list[tuple[int, ...]]  # the token batches pad_data_to_good_offset made
    advantages: list[float] = field(default_factory=list)
    label_positions: list[set[int]] = field(default_factory=list)  # labels != -100
    gradient_positions: list[set[int]] = field(default_factory=list)  # logits that got gradient


class _RecordingModel(torch.nn.Module):
    """The model, with the logits of each forward pass kept so their gradients can be read."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.logits: list[torch.Tensor] = []

    def forward(self, tokens: torch.Tensor) -> Any:
        outputs = self.model(tokens)
        outputs.logits.retain_grad()
        self.logits.append(outputs.logits)
        return outputs


class ExampleTrainer:
    """The example trainer's training half: its config, optimizer factory and step, our model."""

    def __init__(self, vocab_size: int, *, lr: float = 1e-4, micro_batch: int = 4) -> None:
        self.config = TrainingConfig(
            model_name="tiny-causal-lm", lr=lr, device="cpu", optimizer="adamw",
            batch_size=micro_batch,
        )  # fmt: skip
        self.model = tiny_causal_lm(vocab_size)
        self.optimizer = create_optimizer(self.model, self.config)
        self.steps = 0

    def step(self, groups: list[dict]) -> StepReport:
        """One step on ``groups`` (as run-api hands them out, untouched).

        Raises what the example trainer raises: a ValueError naming ``inference_logprobs`` for
        groups sampled in chat mode.
        """
        data = {"batch": copy.deepcopy(groups)}  # the trainer normalises scores in place
        tokens, labels, advantages, temperatures, logprobs = pad_data_to_good_offset(
            data, self.config.batch_size
        )
        # One optimizer step over every micro-batch, as a trainer with this batch size takes.
        self.config.gradient_accumulation_steps = len(tokens)
        recorder = _RecordingModel(self.model)
        metrics = run_training_step(
            recorder,
            self.optimizer,
            tokens,
            labels,
            advantages,
            temperatures,
            self.config,
            self.steps,
            inference_logprob_batches=logprobs,
        )
        self.steps += 1
        report = StepReport(metrics=metrics, batch_shapes=[tuple(t.shape) for t in tokens])
        for batch_labels, batch_advantages, logits in zip(labels, advantages, recorder.logits):
            moved = logits.grad.abs().sum(dim=-1)  # [rows, positions]
            for row in range(batch_labels.shape[0]):
                report.advantages.append(float(batch_advantages[row, 0]))
                trained = torch.nonzero(batch_labels[row] != NOT_TRAINED).flatten()
                report.label_positions.append(set(trained.tolist()))
                report.gradient_positions.append(
                    set(torch.nonzero(moved[row] > 0).flatten().tolist())
                )
        return report
