"""A real, tiny GGUF model for the demo and the tests that run llama-server: made, never downloaded.

`make_tiny_gguf(path)` writes a llama-architecture model with random weights (n_embd 64,
2 layers, 4 heads, ff 128, ctx 512) and a small SentencePiece-style ("llama") tokenizer
built here: <unk>, <s>, </s>, the ChatML markers, the 256 byte-fallback tokens and a few
hundred pieces. llama-server b11434 loads it, answers /health, /v1/chat/completions
(streaming and not), /v1/completions, /v1/embeddings (with --embeddings) and /metrics
(with --metrics). The text it writes is nonsense, but every endpoint does real work.

Needs the `gguf` package (PyPI) and numpy, which it brings.
"""

from __future__ import annotations

import string
from pathlib import Path

import gguf
import numpy as np

N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_FF = 128
N_CTX = 512

# SentencePiece marks a word's leading space with U+2581.
SPACE = "\u2581"
WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have "
    "from or one had by word but not what all were we when your can said there use an "
    "each which she do how their if will up other about out many then them these so some "
    "her would make like him into time has look two more write go see number no way could "
    "people my than first water been call who oil its now find long down day did get come "
    "made may part hello world model token server node shard ready answer question yes "
    "assistant user system say tell me please thank"
).split()
# ChatML: the template below writes these, and they must be single control tokens.
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TokenType = gguf.TokenType


def _vocab() -> tuple[list[str], list[float], list[int]]:
    tokens: list[str] = []
    scores: list[float] = []
    types: list[int] = []

    def add(text: str, score: float, kind: int) -> None:
        tokens.append(text)
        scores.append(score)
        types.append(kind)

    add("<unk>", 0.0, TokenType.UNKNOWN)
    add("<s>", 0.0, TokenType.CONTROL)
    add("</s>", 0.0, TokenType.CONTROL)
    add(IM_START, 0.0, TokenType.CONTROL)
    add(IM_END, 0.0, TokenType.CONTROL)
    for b in range(256):
        add(f"<0x{b:02X}>", 0.0, TokenType.BYTE)
    # Single characters first, then longer pieces with higher scores: SPM merges the pair
    # whose union scores highest, so a word is reached through its prefixes.
    seen: set[str] = set()
    pieces = [SPACE, *string.ascii_letters, *string.digits, *string.punctuation]
    for word in WORDS:
        # Every prefix of "▁word", so the merges can climb to the whole word.
        full = SPACE + word
        pieces += [full[:i] for i in range(2, len(full) + 1)]
    for piece in pieces:
        if piece in seen:
            continue
        seen.add(piece)
        add(piece, -1000.0 + len(piece), TokenType.NORMAL)
    return tokens, scores, types


def make_tiny_gguf(
    path: Path | str,
    *,
    seed: int = 0,
    n_embd: int = N_EMBD,
    n_layer: int = N_LAYER,
    n_ff: int = N_FF,
    n_ctx: int = N_CTX,
) -> Path:
    """Write the tiny model to `path` (a .gguf file; its folder must exist) and return it.

    Float32 weights from `seed`: the same seed gives the same file. ~1 MB, well under a
    second to write. Wider and deeper (bench/routing.py), it takes a measurable time to
    read a long prompt on a CPU; n_embd must be a multiple of the 4 heads.
    """
    path = Path(path)
    tokens, scores, types = _vocab()
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:
        # numpy's shape is ggml's reversed: (rows=out, cols=in) is ne = [in, out].
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("llmgw-tiny-test")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(n_embd // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_eot_token_id(tokens.index(IM_END))
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    w.add_tensor("token_embd.weight", weights(n_vocab, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", weights(n_vocab, n_embd))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", weights(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weights(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weights(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weights(n_embd, n_ff))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


if __name__ == "__main__":
    import sys

    target = Path(sys.argv[1])
    target.parent.mkdir(parents=True, exist_ok=True)
    print(make_tiny_gguf(target))
