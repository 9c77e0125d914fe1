"""A GGUF of ADR-0042's model's shape, as the evidence file describes it, without its weights:
the tensor table of a 105 GiB ``qwen3next`` file (48 layers of which every fourth is full
attention with 2 KV heads of 256, the rest Gated DeltaNet; 512 experts of which 10 are routed,
a shared expert; the n-gram table ``per_layer_token_embd`` of about 30 GB), the file extended
to its full length as a sparse file (no disk is used for the weights).

The sizes the record gives are kept (KV cache 24 KiB a token, ~0.46 GiB of recurrent state at
4 slots, ~74 GB of routed experts, ~6B active parameters); what it does not give (the
embedding width, the Gated DeltaNet's heads) follows Qwen3-Next, scaled to those sizes."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType
N_LAYER, N_EMBD, N_VOCAB, N_EXPERT, N_FF_EXP, N_FF_SHEXP = 48, 3072, 151936, 512, 512, 512
HEADS, HEADS_KV, HEAD_DIM, INTERVAL = 16, 2, 256, 4
SSM_STATE, SSM_GROUPS, SSM_INNER, SSM_CONV = 128, 16, 6144, 4
NGRAM_ROWS, NGRAM_WIDTH = 13_000_000, 4096
SERVING_FLAGS = [
    # ADR-0042's serving script v3 (the evidence file's flags), on both GPUs
    *("-ngl", "999", "-ncmoe", "48", "-ot", "per_layer_token_embd=CPU", "-c", "131072"),
    *("-fa", "auto", "-b", "2048", "-ub", "2048"),
]
MEASURED_VRAM_GIB = 14.7
"""The record's VRAM resident over both cards without caches."""


def _tensors() -> list[tuple[str, tuple[int, ...], Q]]:
    """(name, ggml shape ne0 first, type) of every tensor."""
    out: list[tuple[str, tuple[int, ...], Q]] = [
        ("token_embd.weight", (N_EMBD, N_VOCAB), Q.Q6_K),
        ("per_layer_token_embd.weight", (NGRAM_WIDTH, NGRAM_ROWS), Q.Q4_K),
        ("output_norm.weight", (N_EMBD,), Q.F32),
        ("output.weight", (N_EMBD, N_VOCAB), Q.Q6_K),
    ]
    for i in range(N_LAYER):
        b = f"blk.{i}"
        out += [(f"{b}.attn_norm.weight", (N_EMBD,), Q.F32)]
        out += [(f"{b}.post_attention_norm.weight", (N_EMBD,), Q.F32)]
        if (i + 1) % INTERVAL == 0:
            out += [
                (f"{b}.attn_q.weight", (N_EMBD, 2 * HEADS * HEAD_DIM), Q.Q8_0),
                (f"{b}.attn_k.weight", (N_EMBD, HEADS_KV * HEAD_DIM), Q.Q8_0),
                (f"{b}.attn_v.weight", (N_EMBD, HEADS_KV * HEAD_DIM), Q.Q8_0),
                (f"{b}.attn_output.weight", (HEADS * HEAD_DIM, N_EMBD), Q.Q8_0),
            ]
        else:
            qkvz = 2 * SSM_GROUPS * SSM_STATE + 2 * SSM_INNER
            out += [
                (f"{b}.ssm_in.weight", (N_EMBD, qkvz), Q.Q8_0),
                (
                    f"{b}.ssm_conv1d.weight",
                    (SSM_CONV, SSM_INNER + 2 * SSM_GROUPS * SSM_STATE),
                    Q.F32,
                ),
                (f"{b}.ssm_out.weight", (SSM_INNER, N_EMBD), Q.Q8_0),
            ]
        out += [
            (f"{b}.ffn_gate_inp.weight", (N_EMBD, N_EXPERT), Q.F32),
            (f"{b}.ffn_gate_exps.weight", (N_EMBD, N_FF_EXP, N_EXPERT), Q.Q4_K),
            (f"{b}.ffn_up_exps.weight", (N_EMBD, N_FF_EXP, N_EXPERT), Q.Q4_K),
            (f"{b}.ffn_down_exps.weight", (N_FF_EXP, N_EMBD, N_EXPERT), Q.Q6_K),
            (f"{b}.ffn_gate_shexp.weight", (N_EMBD, N_FF_SHEXP), Q.Q8_0),
            (f"{b}.ffn_up_shexp.weight", (N_EMBD, N_FF_SHEXP), Q.Q8_0),
            (f"{b}.ffn_down_shexp.weight", (N_FF_SHEXP, N_EMBD), Q.Q8_0),
        ]
    return out


def write_adr_shaped(path: Path) -> Path:
    """The sparse GGUF at *path*."""
    w = gguf.GGUFWriter(path, "qwen3next")
    w.add_block_count(N_LAYER)
    w.add_context_length(262144)
    w.add_embedding_length(N_EMBD)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_full_attention_interval(INTERVAL)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(10)
    w.add_ssm_conv_kernel(SSM_CONV)
    w.add_ssm_state_size(SSM_STATE)
    w.add_ssm_group_count(SSM_GROUPS)
    w.add_ssm_inner_size(SSM_INNER)
    w.add_ssm_time_step_rank(SSM_INNER // SSM_STATE)
    data = 0
    for name, ne, qtype in _tensors():
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        nbytes = int(np.prod(ne)) // block * size
        w.add_tensor_info(name, tuple(reversed(ne)), np.dtype(np.float32), nbytes, raw_dtype=qtype)
        data += -(-nbytes // 32) * 32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with path.open("r+b") as f:
        f.seek(0, 2)
        start = -(-f.tell() // 32) * 32
        f.truncate(start + data)
    return path
