"""Each architecture's layout as data: the module names of its embedding, blocks, norms and projections, and
its RMSNorm convention, keyed by config.model_type. Read by the adapter (model/adapters.py), which answers
every architecture question from it, and by the light forward (model/quick.py), which must not import
torch."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    embed: str  # token embedding module (its output enters the residual stream; Gemma scales it inside)
    blocks: str  # ModuleList of decoder blocks
    attn: str  # attention module of block {}
    mlp: str  # MLP module of block {}
    down_proj: str  # last linear map of the MLP of block {}: input = key, output = value
    final_norm: str
    unembed: str
    parallel: bool  # attention and MLP read the same block input (GPT-J, NeoX with parallel residual)
    conv1d: bool = False  # GPT-2 Conv1D: weight stored as (d_ff, d_model)
    # Gemma 2/3 normalise each sub-layer's output before adding it to the residual stream.
    post_attn_norm: str | None = None
    post_mlp_norm: str | None = None
    ln_attn: str | None = None  # norm before attention
    # the module whose input is the residual the MLP reads (site resid_mid): its pre-norm, or the MLP itself in a
    # family without one (OLMo 2 normalises only the MLP's output)
    ln_mlp: str | None = None
    o_proj: str | None = None  # attention's output projection W_O of block {} (PMET's MHSA update)
    # RMSNorm convention: output = (norm_offset + w) * x / rms(x). Gemma stores w - 1 (offset 1), Llama w (offset 0).
    norm_offset: float = 0.0


FAMILIES: dict[str, Family] = {
    "gpt2": Family(
        "gpt2", "transformer.wte", "transformer.h", "transformer.h.{}.attn", "transformer.h.{}.mlp",
        "transformer.h.{}.mlp.c_proj", "transformer.ln_f", "lm_head", parallel=False, conv1d=True,
        ln_attn="transformer.h.{}.ln_1", ln_mlp="transformer.h.{}.ln_2", o_proj="transformer.h.{}.attn.c_proj",
    ),
    "gptj": Family(
        "gptj", "transformer.wte", "transformer.h", "transformer.h.{}.attn", "transformer.h.{}.mlp",
        "transformer.h.{}.mlp.fc_out", "transformer.ln_f", "lm_head", parallel=True,
        ln_attn="transformer.h.{}.ln_1", ln_mlp="transformer.h.{}.ln_1", o_proj="transformer.h.{}.attn.out_proj",
    ),
    "gpt_neox": Family(
        "gpt_neox", "gpt_neox.embed_in", "gpt_neox.layers", "gpt_neox.layers.{}.attention",
        "gpt_neox.layers.{}.mlp", "gpt_neox.layers.{}.mlp.dense_4h_to_h", "gpt_neox.final_layer_norm",
        "lm_head|embed_out", parallel=True,
        ln_attn="gpt_neox.layers.{}.input_layernorm", ln_mlp="gpt_neox.layers.{}.post_attention_layernorm",
        o_proj="gpt_neox.layers.{}.attention.dense",
    ),
    "llama": Family(
        "llama", "model.embed_tokens", "model.layers", "model.layers.{}.self_attn", "model.layers.{}.mlp",
        "model.layers.{}.mlp.down_proj", "model.norm", "lm_head", parallel=False,
        ln_attn="model.layers.{}.input_layernorm", ln_mlp="model.layers.{}.post_attention_layernorm",
        o_proj="model.layers.{}.self_attn.o_proj",
    ),
    "gemma": Family(
        "gemma", "model.embed_tokens", "model.layers", "model.layers.{}.self_attn", "model.layers.{}.mlp",
        "model.layers.{}.mlp.down_proj", "model.norm", "lm_head", parallel=False,
        post_attn_norm="model.layers.{}.post_attention_layernorm",
        post_mlp_norm="model.layers.{}.post_feedforward_layernorm",
        ln_attn="model.layers.{}.input_layernorm", ln_mlp="model.layers.{}.pre_feedforward_layernorm",
        o_proj="model.layers.{}.self_attn.o_proj", norm_offset=1.0,
    ),
    # Gemma 1: Llama's layout (no sandwich norms) with Gemma's RMSNorm 1 + w and scaled embeddings
    "gemma1": Family(
        "gemma1", "model.embed_tokens", "model.layers", "model.layers.{}.self_attn", "model.layers.{}.mlp",
        "model.layers.{}.mlp.down_proj", "model.norm", "lm_head", parallel=False,
        ln_attn="model.layers.{}.input_layernorm", ln_mlp="model.layers.{}.post_attention_layernorm",
        o_proj="model.layers.{}.self_attn.o_proj", norm_offset=1.0,
    ),
    # GPT-Neo: GPT-2's names but nn.Linear (not Conv1D) and the attention one module deeper
    "gpt_neo": Family(
        "gpt_neo", "transformer.wte", "transformer.h", "transformer.h.{}.attn", "transformer.h.{}.mlp",
        "transformer.h.{}.mlp.c_proj", "transformer.ln_f", "lm_head", parallel=False,
        ln_attn="transformer.h.{}.ln_1", ln_mlp="transformer.h.{}.ln_2",
        o_proj="transformer.h.{}.attn.attention.out_proj",
    ),
    # Phi-1/1.5/2: attention and MLP read one LayerNorm's output (parallel), a biased head
    "phi": Family(
        "phi", "model.embed_tokens", "model.layers", "model.layers.{}.self_attn", "model.layers.{}.mlp",
        "model.layers.{}.mlp.fc2", "model.final_layernorm", "lm_head", parallel=True,
        ln_attn="model.layers.{}.input_layernorm", ln_mlp="model.layers.{}.input_layernorm",
        o_proj="model.layers.{}.self_attn.dense",
    ),
    # OLMo 2: no pre-norms; each sub-layer's output is normalised before it is added (as Gemma's post-norms, w)
    "olmo2": Family(
        "olmo2", "model.embed_tokens", "model.layers", "model.layers.{}.self_attn", "model.layers.{}.mlp",
        "model.layers.{}.mlp.down_proj", "model.norm", "lm_head", parallel=False,
        post_attn_norm="model.layers.{}.post_attention_layernorm",
        post_mlp_norm="model.layers.{}.post_feedforward_layernorm",
        ln_mlp="model.layers.{}.mlp", o_proj="model.layers.{}.self_attn.o_proj",
    ),
}

# config.model_type -> family
MODEL_TYPES = {
    "gpt2": "gpt2",
    "gptj": "gptj",
    "gpt_neox": "gpt_neox",
    "gpt_neo": "gpt_neo",
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "llama",
    "qwen3": "llama",
    "phi3": "llama",  # fused qkv and gate-up projections; the names editkit reads are Llama's
    "olmo": "llama",  # LayerNorm without parameters
    "stablelm": "llama",  # LayerNorm; use_parallel_residual shares the input norm (adapter_for)
    "phi": "phi",
    "olmo2": "olmo2",
    "gemma": "gemma1",
    "gemma2": "gemma",
    "gemma3_text": "gemma",
    "gemma3": "gemma",
}
