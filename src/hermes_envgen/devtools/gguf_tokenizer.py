"""Build a transformers tokenizer directory from a GGUF file's metadata, without torch.

transformers' own GGUF reader (``from_pretrained(..., gguf_file=...)``) imports torch, which an
atroposlib install does not bring. The metadata a GGUF carries (``tokenizer.ggml.*`` and
``tokenizer.chat_template``) is enough to write the same tokenizer with the ``tokenizers``
library: ``tokenizer.json`` plus a hand-written ``tokenizer_config.json`` naming
``PreTrainedTokenizerFast``, which loads alike on transformers 4.x and 5.x.

Byte-level BPE models (``tokenizer.ggml.model == "gpt2"``: SmolLM, Llama 3, Qwen 2/3,
StarCoder...) are supported; a pre-tokenizer this module does not know is refused rather than
guessed, because a wrong one changes token ids silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_envgen.errors import GGUFTokenizerError

# llama.cpp's token types (gguf.TokenType), repeated here so the module reads without gguf.
_CONTROL = 3
_USER_DEFINED = 4

# Split patterns of the byte-level pre-tokenizers, by ``tokenizer.ggml.pre`` (as llama.cpp
# names them). None: ByteLevel's built-in GPT-2 pattern.
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT2_WITH_DIGITS = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone")
# name -> (split digits, split regex)
_PRE_TOKENIZERS: dict[str, tuple[bool, str | None]] = {
    "default": (False, None),
    "gpt-2": (False, None),
    "gpt2": (False, None),
    **{name: (True, None) for name in _GPT2_WITH_DIGITS},
    "llama-bpe": (False, _LLAMA3),
    "llama3": (False, _LLAMA3),
    "qwen2": (False, _QWEN2),
}
# Pre-tokenizers whose words are looked up whole in the vocabulary before any merge (llama.cpp
# sets ignore_merges for Llama 3, as its tokenizer.json does): 'Cửa Việt' needs it.
_IGNORE_MERGES = {"llama-bpe", "llama3"}


@dataclass
class GGUFVocabulary:
    """The tokenizer metadata of one GGUF file."""

    model: str
    pre: str
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    special_ids: dict[str, int]  # bos, eos, unknown, padding -> id
    add_bos: bool
    add_eos: bool
    chat_template: str | None

    def token(self, role: str) -> str | None:
        """The text of the special token of ``role`` (bos, eos, unknown, padding), or None."""
        index = self.special_ids.get(role)
        return self.tokens[index] if index is not None and index < len(self.tokens) else None


def read_vocabulary(gguf_file: Path) -> GGUFVocabulary:
    """Read the tokenizer metadata of ``gguf_file`` with the ``gguf`` package."""
    try:
        from gguf import GGUFReader
    except ImportError as exc:
        raise GGUFTokenizerError(
            "reading GGUF files needs the gguf package: pip install 'hermes-envgen[gguf]'"
        ) from exc
    if not gguf_file.is_file():
        raise GGUFTokenizerError(f"{gguf_file}: no such file")
    try:
        fields = GGUFReader(gguf_file).fields
    except (ValueError, OSError, IndexError, KeyError) as exc:  # gguf raises these on bad files
        raise GGUFTokenizerError(f"{gguf_file}: not a readable GGUF file ({exc})") from exc

    def value(key: str, default: Any = None) -> Any:
        field = fields.get(key)
        return default if field is None else field.contents()

    if "tokenizer.ggml.tokens" not in fields:
        raise GGUFTokenizerError(f"{gguf_file}: the GGUF carries no tokenizer")
    roles = ("bos", "eos", "unknown", "padding")
    special_ids = {
        role: int(value(f"tokenizer.ggml.{role}_token_id"))
        for role in roles
        if f"tokenizer.ggml.{role}_token_id" in fields
    }
    return GGUFVocabulary(
        model=str(value("tokenizer.ggml.model", "")),
        pre=str(value("tokenizer.ggml.pre", "default")),
        tokens=list(value("tokenizer.ggml.tokens")),
        token_types=[int(t) for t in value("tokenizer.ggml.token_type", [])],
        merges=list(value("tokenizer.ggml.merges", [])),
        special_ids=special_ids,
        add_bos=bool(value("tokenizer.ggml.add_bos_token", False)),
        add_eos=bool(value("tokenizer.ggml.add_eos_token", False)),
        chat_template=value("tokenizer.chat_template"),
    )


def _merge(text: str) -> tuple[str, str]:
    """A BPE merge of the GGUF's list ("a b") as the pair of tokens it joins."""
    left, space, right = text.partition(" ")
    if not space:
        raise GGUFTokenizerError(f"merge {text[:80]!r} is not two tokens separated by a space")
    return left, right


def build_tokenizer(vocabulary: GGUFVocabulary) -> Any:
    """A ``tokenizers.Tokenizer`` equal to the GGUF's (byte-level BPE models only)."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
    )

    if vocabulary.model != "gpt2":
        raise GGUFTokenizerError(
            f"tokenizer model {vocabulary.model!r} is not supported "
            "(only byte-level BPE, tokenizer.ggml.model = 'gpt2')"
        )
    if vocabulary.pre not in _PRE_TOKENIZERS:
        raise GGUFTokenizerError(
            f"pre-tokenizer {vocabulary.pre!r} is not known; known: {', '.join(_PRE_TOKENIZERS)}"
        )
    digits, pattern = _PRE_TOKENIZERS[vocabulary.pre]
    vocab = {token: index for index, token in enumerate(vocabulary.tokens)}
    merges = [_merge(merge) for merge in vocabulary.merges]
    ignore_merges = vocabulary.pre in _IGNORE_MERGES
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))

    steps: list[Any] = []
    if digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    if pattern is not None:
        steps.append(pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pattern is None))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tokenizer.decoder = decoders.ByteLevel()

    added = [
        AddedToken(token, special=kind == _CONTROL, normalized=False)
        for token, kind in zip(vocabulary.tokens, vocabulary.token_types)
        if kind in (_CONTROL, _USER_DEFINED)
    ]
    tokenizer.add_special_tokens([t for t in added if t.special])
    tokenizer.add_tokens([t for t in added if not t.special])

    # A GGUF that asks for BOS/EOS around every encoded text gets them from the post-processor.
    template, specials = ["$A"], []
    for role, wanted, at in (("bos", vocabulary.add_bos, 0), ("eos", vocabulary.add_eos, 2)):
        token = vocabulary.token(role)
        if wanted and token is not None:
            template.insert(at, token)
            specials.append((token, vocabulary.special_ids[role]))
    if specials:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=" ".join(template), special_tokens=specials
        )
    return tokenizer


def tokenizer_from_gguf(gguf_file: Path, directory: Path) -> Path:
    """Write the tokenizer of ``gguf_file`` into ``directory`` (loads with AutoTokenizer)."""
    vocabulary = read_vocabulary(Path(gguf_file))
    tokenizer = build_tokenizer(vocabulary)  # everything is built before anything is written
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1_000_000,
        "bos_token": vocabulary.token("bos"),
        "eos_token": vocabulary.token("eos"),
        "unk_token": vocabulary.token("unknown"),
        "pad_token": vocabulary.token("padding"),
        "add_bos_token": vocabulary.add_bos,
        "add_eos_token": vocabulary.add_eos,
        "clean_up_tokenization_spaces": False,
    }
    if vocabulary.chat_template:
        config["chat_template"] = vocabulary.chat_template
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tokenizer.save(str(directory / "tokenizer.json"))
        (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    except OSError as exc:
        raise GGUFTokenizerError(f"cannot write the tokenizer into {directory}: {exc}") from exc
    return directory
