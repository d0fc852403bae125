#!/usr/bin/python3
"""PyTorch reference for fanout's Llama: HF `LlamaForCausalLM` (eager attention), fp32.

This file documents the math fanout must match (DESIGN.md section 3 and 5) and
writes reference results for fanout's C++ tests. Run it with Debian's PyTorch
(`/usr/bin/python3`); it needs only torch and numpy.

The model, for token ids x[B,T] (all math in float32 unless noted):

    h = embed_tokens.weight[x]                                   # [B,T,C]
    for each layer:
        a = rmsnorm(h, input_layernorm.weight)
        q = a @ q_proj.weight.T  -> [B,H ,T,D]    (C -> H*D)
        k = a @ k_proj.weight.T  -> [B,KV,T,D]    (C -> KV*D)
        v = a @ v_proj.weight.T  -> [B,KV,T,D]
        q, k = rope(q), rope(k)                    # rotate_half form, positions 0..T-1
        k, v = repeat_kv(k), repeat_kv(v)          # query head j uses kv head j // (H/KV)
        s = q @ k^T * D^-0.5, masked to keys <= query position, softmax over keys
        h = h + (s @ v -> [B,T,H*D]) @ o_proj.weight.T
        m = rmsnorm(h, post_attention_layernorm.weight)
        h = h + (silu(m @ gate_proj.weight.T) * (m @ up_proj.weight.T)) @ down_proj.weight.T
    logits = rmsnorm(h, norm.weight) @ W.T,  W = lm_head.weight, or embed_tokens.weight if tied

    rmsnorm(x, w) = w * (x * rsqrt(mean(x^2 over the last dim) + rms_norm_eps))
    rope: inv_freq[i] = 1 / theta^(2i/D) (i < D/2), angle[t, j] = t * inv_freq[j mod D/2],
          rope(x) = x * cos(angle) + rotate_half(x) * sin(angle),
          rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])
          (so element j is paired with element j + D/2, NOT with its neighbour j+1)

Loss: targets are given already shifted (logits[b,t] predicts targets[b,t]);
    loss_sum = sum over (b,t) with targets != ignore_index of -log_softmax(logits[b,t])[targets[b,t]]
    count    = number of such positions
    loss     = loss_sum / count    (torch's reduction='mean'; NaN when count == 0, as in torch)

Subcommands (see `--help` of each): init, forward, train, count, save-hf.
"""

import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

# ----------------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------------

PRESETS = {
    # DESIGN.md section 3; all: rms_norm_eps 1e-5, rope_theta 10000, untied lm_head.
    "tiny": dict(vocab_size=259, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024),
    "small": dict(vocab_size=8192, hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
                  num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=2048),
    "seed": dict(vocab_size=50000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                 num_attention_heads=12, num_key_value_heads=3, max_position_embeddings=2048),
}
for _p in PRESETS.values():
    _p.update(rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)


class LlamaConfig:
    """HF config.json keys, with HF LlamaConfig's defaults for the optional ones."""

    def __init__(self, d):
        self.raw = dict(d)
        try:
            self.vocab_size = int(d["vocab_size"])
            self.hidden_size = int(d["hidden_size"])
            self.intermediate_size = int(d["intermediate_size"])
            self.num_hidden_layers = int(d["num_hidden_layers"])
            self.num_attention_heads = int(d["num_attention_heads"])
        except KeyError as e:
            raise ValueError(f"config is missing required key {e.args[0]!r}") from None
        self.num_key_value_heads = int(d.get("num_key_value_heads") or self.num_attention_heads)
        self.head_dim = int(d.get("head_dim") or self.hidden_size // self.num_attention_heads)
        self.max_position_embeddings = int(d.get("max_position_embeddings", 2048))
        self.rms_norm_eps = float(d.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(d.get("rope_theta", 10000.0))
        self.tie_word_embeddings = bool(d.get("tie_word_embeddings", False))
        self.initializer_range = float(d.get("initializer_range", 0.02))

        for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "num_key_value_heads", "head_dim"):
            if getattr(self, key) <= 0:
                raise ValueError(f"config: {key} must be positive")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("config: num_attention_heads must be a multiple of num_key_value_heads")
        if self.head_dim % 2:
            raise ValueError("config: head_dim must be even for RoPE")
        if d.get("rope_scaling"):
            raise ValueError("config: rope_scaling is not supported")
        if d.get("attention_bias") or d.get("mlp_bias"):
            raise ValueError("config: attention_bias / mlp_bias are not supported")
        if d.get("hidden_act", "silu") != "silu":
            raise ValueError("config: only hidden_act 'silu' is supported")

    @property
    def n_rep(self):
        return self.num_attention_heads // self.num_key_value_heads

    def to_json_dict(self, torch_dtype="float32"):
        out = dict(self.raw)
        out["architectures"] = ["LlamaForCausalLM"]
        out["model_type"] = "llama"
        out["torch_dtype"] = torch_dtype
        return out


def parameter_count(cfg):
    """Closed form (equals sum of numel over named_parameters())."""
    C, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    qd = cfg.num_attention_heads * cfg.head_dim
    kvd = cfg.num_key_value_heads * cfg.head_dim
    per_layer = 2 * C + C * qd + 2 * C * kvd + qd * C + 3 * C * I
    heads = cfg.vocab_size * C * (1 if cfg.tie_word_embeddings else 2)
    return heads + L * per_layer + C


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------

def _compute_dtype(dtype):
    """HF upcasts RMSNorm and softmax to float32. For float64 (used only by the
    self-checks) we keep float64 instead of downcasting, so finite differences work."""
    return torch.promote_types(dtype, torch.float32)


class LlamaRMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x):
        input_dtype = x.dtype
        h = x.to(_compute_dtype(input_dtype))
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * h.to(input_dtype)


def rope_cos_sin(seq_len, head_dim, theta, dtype, device=None):
    """cos, sin of shape [T, D] on device (default: the CPU). In fp32 this is HF
    LlamaRotaryEmbedding's computation: inv_freq and the angles t * inv_freq in float32,
    cos/sin in float32 (on a GPU, as HF does there: on the device, autocast off)."""
    cd = _compute_dtype(dtype)
    if device is not None and torch.device(device).type != "cpu":
        with torch.autocast(torch.device(device).type, enabled=False):
            return _rope_cos_sin(seq_len, head_dim, theta, dtype, cd, device)
    return _rope_cos_sin(seq_len, head_dim, theta, dtype, cd, device)


def _rope_cos_sin(seq_len, head_dim, theta, dtype, cd, device):
    arange = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device)
    inv_freq = 1.0 / (theta ** (arange.to(cd) / head_dim))
    positions = torch.arange(seq_len, dtype=torch.int64, device=device).to(cd)
    freqs = torch.outer(positions, inv_freq)          # [T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)            # [T, D]: angle of element j is freqs[j mod D/2]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    """cat(-x2, x1) over the two halves of the last dim."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    """q: [B,H,T,D], k: [B,KV,T,D], cos/sin: [T,D]."""
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def repeat_kv(x, n_rep):
    """[B,KV,T,D] -> [B,KV*n_rep,T,D]; output head j is input head j // n_rep."""
    if n_rep == 1:
        return x
    b, kv, t, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, n_rep, t, d).reshape(b, kv * n_rep, t, d)


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        C, H, KV, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(C, H * D, bias=False)
        self.k_proj = nn.Linear(C, KV * D, bias=False)
        self.v_proj = nn.Linear(C, KV * D, bias=False)
        self.o_proj = nn.Linear(H * D, C, bias=False)
        self.scaling = D ** -0.5

    def forward(self, x, cos, sin):
        cfg = self.cfg
        B, T, _ = x.shape
        H, KV, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)    # [B,H,T,D]
        k = self.k_proj(x).view(B, T, KV, D).transpose(1, 2)   # [B,KV,T,D]
        v = self.v_proj(x).view(B, T, KV, D).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = repeat_kv(k, cfg.n_rep)
        v = repeat_kv(v, cfg.n_rep)

        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling          # [B,H,T,T]
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))                    # key s > query t
        probs = F.softmax(scores, dim=-1, dtype=_compute_dtype(q.dtype)).to(q.dtype)
        out = torch.matmul(probs, v)                                          # [B,H,T,D]
        out = out.transpose(1, 2).reshape(B, T, H * D)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, I = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(C, I, bias=False)
        self.up_proj = nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        # Registration order = HF's, so named_parameters() lists tensors in HF order.
        self.self_attn = LlamaAttention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, h, cos, sin):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin)
        h = h + self.mlp(self.post_attention_layernorm(h))
        return h


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        cos, sin = rope_cos_sin(input_ids.shape[1], self.cfg.head_dim, self.cfg.rope_theta, h.dtype,
                                h.device)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.norm(h)


class LlamaForCausalLM(nn.Module):
    """Parameter names equal HF's; with tie_word_embeddings there is no lm_head.weight
    and the output projection uses model.embed_tokens.weight."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(
            cfg.hidden_size, cfg.vocab_size, bias=False)

    def output_weight(self):
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, input_ids):
        return F.linear(self.model(input_ids), self.output_weight())   # [B,T,V]

    @torch.no_grad()
    def init_weights(self, seed):
        """torch.manual_seed(seed), then in named_parameters() order: norms = 1,
        every matrix / embedding ~ N(0, initializer_range = 0.02)."""
        torch.manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(mean=0.0, std=self.cfg.initializer_range)


def loss_terms(logits, targets, ignore_index=-100):
    """(loss, loss_sum, count) of the token cross-entropy; see the module docstring."""
    V = logits.shape[-1]
    flat_logits = logits.reshape(-1, V).to(_compute_dtype(logits.dtype))
    flat_targets = targets.reshape(-1).long()
    counted = flat_targets != ignore_index
    bad = counted & ((flat_targets < 0) | (flat_targets >= V))
    if bool(bad.any()):
        raise ValueError(f"targets hold ids outside [0, {V}) that are not ignore_index {ignore_index}")
    loss_sum = F.cross_entropy(flat_logits, flat_targets, ignore_index=ignore_index, reduction="sum")
    count = int(counted.sum())
    loss = loss_sum / count if count > 0 else loss_sum * float("nan")
    return loss, loss_sum, count


# ----------------------------------------------------------------------------------------------
# Checkpoints and batches
# ----------------------------------------------------------------------------------------------

def read_config(path_or_preset):
    if path_or_preset in PRESETS and not os.path.exists(path_or_preset):
        return LlamaConfig(PRESETS[path_or_preset])
    with open(path_or_preset) as f:
        return LlamaConfig(json.load(f))


def _read_checkpoint_tensors(ckpt_dir):
    single = os.path.join(ckpt_dir, "model.safetensors")
    index = os.path.join(ckpt_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return safetensors_io.load(single)[0]
    if os.path.exists(index):   # HF sharded checkpoint
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            tensors.update(safetensors_io.load(os.path.join(ckpt_dir, shard))[0])
        return tensors
    raise FileNotFoundError(f"{ckpt_dir}: no model.safetensors")


def load_checkpoint(ckpt_dir, dtype=torch.float32):
    """config.json + model.safetensors (F32/BF16/F16 -> dtype) -> LlamaForCausalLM."""
    cfg = read_config(os.path.join(ckpt_dir, "config.json"))
    model = LlamaForCausalLM(cfg).to(dtype)
    tensors = _read_checkpoint_tensors(ckpt_dir)
    if cfg.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)   # HF sometimes stores the tied copy too
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(tensors))
    unexpected = sorted(set(tensors) - set(params))
    if missing or unexpected:
        raise ValueError(f"{ckpt_dir}: checkpoint does not match config "
                         f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
    with torch.no_grad():
        for name, p in params.items():
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"{ckpt_dir}: {name} has shape {list(t.shape)}, expected {list(p.shape)}")
            if not t.is_floating_point():
                raise ValueError(f"{ckpt_dir}: {name} is not a floating-point tensor")
            p.copy_(t.to(dtype))
    return model


def save_checkpoint(model, out_dir, dtype="f32"):
    os.makedirs(out_dir, exist_ok=True)
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    tensors = {name: p.detach().to(torch_dtype).contiguous() for name, p in model.named_parameters()}
    safetensors_io.save(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.cfg.to_json_dict({"f32": "float32", "bf16": "bfloat16"}[dtype]), f, indent=2)
        f.write("\n")


def load_batch(path, cfg, suffix=""):
    """input_ids / targets (I32 or I64, [B,T]) -> int64 tensors, checked against the config."""
    tensors, _ = safetensors_io.load(path)
    names = ("input_ids" + suffix, "targets" + suffix)
    if not all(n in tensors for n in names):
        if suffix:
            return load_batch(path, cfg, "")
        raise ValueError(f"{path}: needs tensors 'input_ids' and 'targets'")
    ids, targets = (tensors[n] for n in names)
    if ids.dtype not in (torch.int32, torch.int64) or targets.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{path}: input_ids/targets must be I32 or I64")
    if ids.dim() != 2 or tuple(ids.shape) != tuple(targets.shape):
        raise ValueError(f"{path}: input_ids and targets must both be [B,T], got "
                         f"{list(ids.shape)} and {list(targets.shape)}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab_size):
        raise ValueError(f"{path}: input_ids outside [0, {cfg.vocab_size})")
    return ids.long(), targets.long()


# ----------------------------------------------------------------------------------------------
# Subcommands
# ----------------------------------------------------------------------------------------------

def cmd_init(args):
    cfg = read_config(args.config)
    model = LlamaForCausalLM(cfg)
    model.init_weights(args.seed)
    save_checkpoint(model, args.out, args.dtype)
    print(f"wrote {args.out} ({parameter_count(cfg)} parameters, {args.dtype})")


def forward_backward(model, ids, targets, ignore_index):
    model.zero_grad(set_to_none=True)
    logits = model(ids)
    loss, loss_sum, count = loss_terms(logits, targets, ignore_index)
    loss.backward()
    return logits, loss, loss_sum, count


def cmd_forward(args):
    model = load_checkpoint(args.checkpoint)
    ids, targets = load_batch(args.batch, model.cfg)
    logits, loss, loss_sum, count = forward_backward(model, ids, targets, args.ignore_index)
    out = {
        "logits": logits.detach().float().contiguous(),
        "loss": loss.detach().float().reshape(1),
        "loss_sum": loss_sum.detach().float().reshape(1),
        "count": torch.tensor([count], dtype=torch.int32),
    }
    for name, p in model.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        out["grad." + name] = g.detach().float().contiguous()
    safetensors_io.save(args.out, out, {"format": "pt", "ignore_index": str(args.ignore_index)})
    print(f"loss {loss.item():.9g} (sum {loss_sum.item():.9g} over {count} tokens) -> {args.out}")


def make_adamw(model, lr, beta1, beta2, eps, weight_decay):
    """torch.optim.AdamW, weight decay only on tensors with >= 2 dims. Per parameter p with
    gradient g at step t (1-based), torch 1.13's single-tensor path does, in this order:
        p  *= 1 - lr * weight_decay                    (decay group only; 0 for the others)
        m   = beta1 * m + (1 - beta1) * g
        v   = beta2 * v + (1 - beta2) * g * g
        p  -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    """
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps, foreach=False)


def clip_grad_norm(model, max_norm):
    """torch.nn.utils.clip_grad_norm_: total = || (||g_i||_2)_i ||_2 over all gradients,
    coef = min(max_norm / (total + 1e-6), 1), every gradient *= coef (always, even when
    coef == 1). Returns the pre-clip total. max_norm <= 0 disables clipping."""
    return torch.nn.utils.clip_grad_norm_(model.parameters(),
                                          max_norm if max_norm > 0 else float("inf"))


def cmd_train(args):
    model = load_checkpoint(args.checkpoint)
    opt = make_adamw(model, args.lr, args.beta1, args.beta2, args.eps, args.weight_decay)
    os.makedirs(args.out, exist_ok=True)
    lines = []
    for k in range(args.steps):
        ids, targets = load_batch(args.batch, model.cfg, suffix=f"_{k}")
        _, loss, _, _ = forward_backward(model, ids, targets, args.ignore_index)
        grad_norm = clip_grad_norm(model, args.clip)
        opt.step()
        rec = {"step": k + 1, "loss": loss.item(), "grad_norm": grad_norm.item()}
        lines.append(json.dumps(rec))
        print(json.dumps(rec))
    with open(os.path.join(args.out, "metrics.jsonl"), "w") as f:
        f.write("".join(line + "\n" for line in lines))
    save_checkpoint(model, args.out, "f32")
    # AdamW state, for optimizer parity tests: exp_avg.<name>, exp_avg_sq.<name>, step.
    state = {}
    for name, p in model.named_parameters():
        st = opt.state.get(p, {})
        state["exp_avg." + name] = st.get("exp_avg", torch.zeros_like(p)).detach().float().contiguous()
        state["exp_avg_sq." + name] = st.get("exp_avg_sq", torch.zeros_like(p)).detach().float().contiguous()
    state["step"] = torch.tensor([args.steps], dtype=torch.int64)
    safetensors_io.save(os.path.join(args.out, "adamw_state.safetensors"), state, {"format": "pt"})


def cmd_count(args):
    print(parameter_count(read_config(args.config)))


def cmd_save_hf(args):
    cfg = read_config(os.path.join(args.checkpoint, "config.json"))
    tensors = _read_checkpoint_tensors(args.checkpoint)
    model = load_checkpoint(args.checkpoint)       # validates names and shapes
    if args.dtype == "same":
        out = {name: tensors[name] for name, _ in model.named_parameters()}
        dtypes = {t.dtype for t in out.values()}
        torch_dtype = "bfloat16" if dtypes == {torch.bfloat16} else "float32"
    else:
        td = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
        out = {name: tensors[name].to(td).contiguous() for name, _ in model.named_parameters()}
        torch_dtype = {"f32": "float32", "bf16": "bfloat16"}[args.dtype]
    os.makedirs(args.out, exist_ok=True)
    safetensors_io.save(os.path.join(args.out, "model.safetensors"), out, {"format": "pt"})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg.to_json_dict(torch_dtype), f, indent=2)
        f.write("\n")
    print(f"wrote {args.out}")


def build_parser():
    ap = argparse.ArgumentParser(prog="llama_ref.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("init", help="random weights -> DIR/config.json + DIR/model.safetensors")
    p.add_argument("--config", required=True, help="HF config.json (or preset name tiny/small/seed)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.set_defaults(fn=cmd_init)

    p = sub.add_parser("forward", help="logits, loss and every gradient -> OUT.safetensors")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--batch", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ignore-index", type=int, default=-100)
    p.set_defaults(fn=cmd_forward)

    p = sub.add_parser("train", help="K AdamW steps with clipping -> OUT_DIR")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--batch", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    # Defaults are torch.optim.AdamW's; pass them explicitly when comparing with fanout.
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip", type=float, default=1.0, help="max total grad norm; <= 0 disables")
    p.add_argument("--out", required=True)
    p.add_argument("--ignore-index", type=int, default=-100)
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("count", help="print the parameter count")
    p.add_argument("--config", required=True, help="HF config.json (or preset name tiny/small/seed)")
    p.set_defaults(fn=cmd_count)

    p = sub.add_parser("save-hf", help="re-save a checkpoint (format tests)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", choices=["same", "f32", "bf16"], default="same")
    p.set_defaults(fn=cmd_save_hf)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    torch.use_deterministic_algorithms(True)
    try:
        args.fn(args)
    except (ValueError, OSError, KeyError) as e:
        print(f"llama_ref: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
