#!/usr/bin/python3
"""PyTorch reference for RoPE scaling (HF config.json `rope_scaling`), for fanout's tests.

HF transformers' inverse frequencies (modeling_rope_utils.py), restated here with
torch only (transformers is not installed where the tests run):

    default: inv_freq = 1 / base^(arange(0, dim, 2) / dim)          (float32 in HF)
    linear:  inv_freq / factor
    llama3 (`_compute_llama3_parameters`, Llama 3.1/3.2):
        low_freq_wavelen  = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 pi / inv_freq
        wavelen > low_freq_wavelen  -> inv_freq / factor
        wavelen < high_freq_wavelen -> inv_freq
        otherwise smooth = (old_context_len / wavelen - low_freq_factor)
                           / (high_freq_factor - low_freq_factor)
                  inv = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    attention_factor is 1 for all three (cos and sin are not rescaled).

Then LlamaRotaryEmbedding: freqs = positions x inv_freq, emb = cat(freqs, freqs),
rope(x) = x cos(emb) + rotate_half(x) sin(emb).

Subcommands:
    inv-freq --config CFG --out OUT.json      inv_freq in float64 and in float32 (HF's dtype)
    rope --config CFG --input IN --pos-offset P --out OUT
                                              y = rope(x) and dx = d<y, dy>/dx in float64, for
                                              x, dy [B,T,H,D] read from IN.safetensors
    init / forward                            llama_ref.py's, with the config's rope_scaling
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402
import safetensors_io  # noqa: E402


def rope_type(scaling):
    if not scaling:
        return "default"
    return scaling.get("rope_type", scaling.get("type", "default"))


def default_inv_freq(base, dim, dtype):
    """HF's _compute_default_rope_parameters (its .float() is `dtype` here)."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim))


def llama3_inv_freq(inv_freq, scaling):
    """HF's _compute_llama3_parameters on a default inv_freq tensor."""
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]

    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor

    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def inv_freq_for(cfg, dtype):
    """ROPE_INIT_FUNCTIONS[rope_type](config) for the types fanout supports."""
    inv_freq = default_inv_freq(cfg.rope_theta, cfg.head_dim, dtype)
    kind = rope_type(cfg.rope_scaling)
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / cfg.rope_scaling["factor"]
    if kind == "llama3":
        return llama3_inv_freq(inv_freq, cfg.rope_scaling)
    raise ValueError(f"config: rope_scaling type {kind!r} is not implemented here")


def cos_sin(cfg, positions, dtype):
    """LlamaRotaryEmbedding.forward: cos, sin [T, D] for positions [T]."""
    inv_freq = inv_freq_for(cfg, dtype)
    freqs = torch.outer(positions.to(dtype), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class ScaledConfig(llama_ref.LlamaConfig):
    """llama_ref's config with rope_scaling (or transformers 5's rope_parameters) kept."""

    def __init__(self, d):
        d = dict(d)
        scaling = d.pop("rope_scaling", None)
        params = d.pop("rope_parameters", None)
        if scaling is None and params and rope_type(params) != "default":
            scaling = params
        if params and "rope_theta" not in d and "rope_theta" in params:
            d["rope_theta"] = params["rope_theta"]
        super().__init__(d)
        self.raw["rope_scaling"] = scaling
        self.rope_scaling = scaling
        if rope_type(scaling) not in ("default", "linear", "llama3"):
            raise ValueError(f"config: rope_scaling type {rope_type(scaling)!r} is not supported")


def scaled_model_forward(self, input_ids):
    """llama_ref.LlamaModel.forward with the scaled cos/sin (HF: float32 angles)."""
    h = self.embed_tokens(input_ids)
    positions = torch.arange(input_ids.shape[1], dtype=torch.int64)
    cd = llama_ref._compute_dtype(h.dtype)
    cos, sin = cos_sin(self.cfg, positions, cd)
    cos, sin = cos.to(h.dtype), sin.to(h.dtype)
    for layer in self.layers:
        h = layer(h, cos, sin)
    return self.norm(h)


llama_ref.LlamaConfig = ScaledConfig
llama_ref.LlamaModel.forward = scaled_model_forward


def cmd_inv_freq(args):
    cfg = llama_ref.read_config(args.config)
    out = {
        "rope_type": rope_type(cfg.rope_scaling),
        "inv_freq_f64": inv_freq_for(cfg, torch.float64).tolist(),
        "inv_freq_f32": inv_freq_for(cfg, torch.float32).tolist(),
    }
    with open(args.out, "w") as f:
        json.dump(out, f)
    print(f"{len(out['inv_freq_f64'])} frequencies ({out['rope_type']}) -> {args.out}")


def cmd_rope(args):
    cfg = llama_ref.read_config(args.config)
    tensors, _ = safetensors_io.load(args.input)
    x = tensors["x"].to(torch.float64).requires_grad_(True)     # [B,T,H,D]
    dy = tensors["dy"].to(torch.float64)
    B, T, H, D = x.shape
    positions = torch.arange(args.pos_offset, args.pos_offset + T, dtype=torch.int64)
    cos, sin = cos_sin(cfg, positions, torch.float64)            # [T,D]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    y = x * cos + llama_ref.rotate_half(x) * sin
    (y * dy).sum().backward()
    safetensors_io.save(args.out, {"y": y.detach().float().contiguous(),
                                   "dx": x.grad.float().contiguous()})
    print(f"rope [{B},{T},{H},{D}] at positions {args.pos_offset}.. -> {args.out}")


def build_parser():
    ap = llama_ref.build_parser()
    ap.prog = "llama3_rope_ref.py"
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    p = sub.add_parser("inv-freq", help="inv_freq (float64 and float32) -> OUT.json")
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_inv_freq)
    p = sub.add_parser("rope", help="rope forward and backward of IN's x, dy -> OUT.safetensors")
    p.add_argument("--config", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--pos-offset", type=int, default=0)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_rope)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    torch.use_deterministic_algorithms(True)
    try:
        args.fn(args)
    except (ValueError, OSError, KeyError) as e:
        print(f"llama3_rope_ref: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
