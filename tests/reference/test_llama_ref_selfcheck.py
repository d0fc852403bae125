#!/usr/bin/python3
"""Self-check of the PyTorch reference (llama_ref.py, safetensors_io.py).

Run: /usr/bin/python3 tests/reference/test_llama_ref_selfcheck.py
Plain asserts; the last line is "N passed, M failed"; exit status 1 on any failure.

The model is checked three independent ways: against a naive loop-by-loop
implementation written from the HF formulas (float64, logits and every gradient),
against finite differences (torch.autograd.gradcheck and directional central
differences, float64), and against hand-computed conventions (rotate_half, RoPE
pairs, GQA head sharing, RMSNorm, the loss).
"""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import traceback

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llama_ref as L  # noqa: E402
import safetensors_io as st  # noqa: E402

PY = sys.executable

MICRO = dict(vocab_size=11, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)

TINY = dict(vocab_size=259, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
            rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)


def micro_model(seed=0, dtype=torch.float64, **overrides):
    cfg = L.LlamaConfig({**MICRO, **overrides})
    m = L.LlamaForCausalLM(cfg)
    m.init_weights(seed)
    with torch.no_grad():  # non-trivial norm weights so their gradients matter
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
            else:
                p.mul_(10.0)   # std 0.2: attention patterns far from uniform
    return m.to(dtype)


def random_batch(cfg, B, T, seed=1, n_ignored=3, ignore_index=-100):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    targets = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    flat = targets.view(-1)
    flat[torch.randperm(flat.numel(), generator=g)[:n_ignored]] = ignore_index
    return ids, targets


# ------------------------------------------------------------------------------------------
# An independent naive implementation (loops, explicit pair rotation, explicit softmax).
# ------------------------------------------------------------------------------------------

def naive_forward(P, cfg, ids):
    """P: dict HF-name -> tensor. Returns logits [B,T,V]. Written without reusing
    anything from llama_ref except the config."""
    B, T = ids.shape
    C, H, KV, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    n_rep = H // KV
    eps = cfg.rms_norm_eps

    def rmsnorm(x, w):   # x: [C]
        return w * (x / torch.sqrt((x * x).sum() / x.numel() + eps))

    def rope(x, t):      # x: [D] at position t; element j pairs with j + D/2
        half = D // 2
        out = []
        for j in range(D):
            i = j % half
            ang = t / (cfg.rope_theta ** (2.0 * i / D))
            c, s = math.cos(ang), math.sin(ang)
            if j < half:   # (x_j, x_{j+half}) rotated by ang
                out.append(x[j] * c - x[j + half] * s)
            else:
                out.append(x[j] * c + x[j - half] * s)
        return torch.stack(out)

    W_out = P["model.embed_tokens.weight"] if cfg.tie_word_embeddings else P["lm_head.weight"]
    all_logits = []
    for b in range(B):
        hs = [P["model.embed_tokens.weight"][ids[b, t]] for t in range(T)]
        for layer in range(cfg.num_hidden_layers):
            pre = f"model.layers.{layer}."
            a = [rmsnorm(h, P[pre + "input_layernorm.weight"]) for h in hs]
            q = [P[pre + "self_attn.q_proj.weight"] @ x for x in a]
            k = [P[pre + "self_attn.k_proj.weight"] @ x for x in a]
            v = [P[pre + "self_attn.v_proj.weight"] @ x for x in a]
            new_hs = []
            for t in range(T):
                heads = []
                for h in range(H):
                    g = h // n_rep          # GQA: adjacent query heads share kv head g
                    qt = rope(q[t][h * D:(h + 1) * D], t)
                    scores = []
                    for s in range(t + 1):  # causal: keys 0..t
                        ks = rope(k[s][g * D:(g + 1) * D], s)
                        scores.append((qt * ks).sum() / math.sqrt(D))
                    scores = torch.stack(scores)
                    w = torch.exp(scores - scores.max())
                    w = w / w.sum()
                    heads.append(sum(w[s] * v[s][g * D:(g + 1) * D] for s in range(t + 1)))
                attn = P[pre + "self_attn.o_proj.weight"] @ torch.cat(heads)
                new_hs.append(hs[t] + attn)
            hs = new_hs
            out = []
            for h_ in hs:
                m = rmsnorm(h_, P[pre + "post_attention_layernorm.weight"])
                gate = P[pre + "mlp.gate_proj.weight"] @ m
                up = P[pre + "mlp.up_proj.weight"] @ m
                act = gate / (1.0 + torch.exp(-gate)) * up
                out.append(h_ + P[pre + "mlp.down_proj.weight"] @ act)
            hs = out
        all_logits.append(torch.stack([W_out @ rmsnorm(h, P["model.norm.weight"]) for h in hs]))
    return torch.stack(all_logits)


def naive_loss(logits, targets, ignore_index=-100):
    total, n = 0.0, 0
    V = logits.shape[-1]
    for row, tgt in zip(logits.reshape(-1, V), targets.reshape(-1).tolist()):
        if tgt == ignore_index:
            continue
        mx = row.max()
        total = total + (mx + torch.log(torch.exp(row - mx).sum()) - row[tgt])
        n += 1
    return total / n


# ------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------

def test_safetensors_roundtrip():
    torch.manual_seed(0)
    tensors = {
        "f32": torch.randn(3, 5),
        "bf16": torch.tensor([1.0, -2.5, 3.140625, 1e-30, float("inf"), -0.0, 65504.0]).to(torch.bfloat16),
        "bf16_2d": torch.randn(4, 7).to(torch.bfloat16),
        "f16": torch.randn(2, 3).half(),
        "i32": torch.tensor([[1, -2], [2**31 - 1, -2**31]], dtype=torch.int32),
        "i64": torch.tensor([2**40, -7], dtype=torch.int64),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "odd": torch.arange(3, dtype=torch.uint8),   # 3 bytes: later tensors unaligned, still valid
    }
    meta = {"format": "pt", "note": "x"}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.safetensors")
        st.save(path, tensors, meta)
        raw = open(path, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        assert (8 + n) % 8 == 0, "header must be padded to a multiple of 8"
        assert raw[8:9] == b"{"
        header = json.loads(raw[8:8 + n])
        assert header["__metadata__"] == meta
        assert header["bf16"]["dtype"] == "BF16" and header["i32"]["dtype"] == "I32"
        assert header["f32"]["data_offsets"] == [0, 60]
        back, meta2 = st.load(path)
        assert meta2 == meta
        assert set(back) == set(tensors)
        for k, t in tensors.items():
            assert back[k].dtype == t.dtype and back[k].shape == t.shape, k
            if t.dtype == torch.bfloat16:   # bit-exact, including inf and -0
                assert torch.equal(back[k].view(torch.int16), t.view(torch.int16)), k
            else:
                assert torch.equal(back[k], t), k
        # bf16 bit patterns are what the spec says: upper 16 bits of the f32
        f = torch.tensor([1.0, -2.5], dtype=torch.float32)
        st.save(path, {"x": f.to(torch.bfloat16)})
        raw = open(path, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        assert raw[8 + n:] == bytes.fromhex("803f" + "20c0")
        # no metadata -> {}
        assert st.load(path)[1] == {}


def _write_raw(path, header, data):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def test_safetensors_rejects_bad_files():
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "bad.safetensors")
        cases = {
            "hole": ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
            "overlap": ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
            "past end": ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8),
            "size mismatch": ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8),
            "bad dtype": ({"a": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"\0"),
        }
        for what, (header, data) in cases.items():
            _write_raw(p, header, data)
            try:
                st.load(p)
            except st.SafetensorsError:
                continue
            raise AssertionError(f"accepted a file with {what}")
        with open(p, "wb") as f:   # header that does not start with '{'
            f.write(struct.pack("<Q", 4) + b"[1] ")
        try:
            st.load(p)
            raise AssertionError("accepted a header not starting with '{'")
        except st.SafetensorsError:
            pass
        with open(p, "wb") as f:   # absurd header length
            f.write(struct.pack("<Q", 200 * 1000 * 1000) + b"{}")
        try:
            st.load(p)
            raise AssertionError("accepted a 200 MB header length")
        except st.SafetensorsError:
            pass


def test_rotate_half_known_vector():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert torch.equal(L.rotate_half(x), torch.tensor([-3.0, -4.0, 1.0, 2.0]))
    x = torch.arange(1.0, 7.0)    # D=6: halves [1,2,3] [4,5,6]
    assert torch.equal(L.rotate_half(x), torch.tensor([-4.0, -5.0, -6.0, 1.0, 2.0, 3.0]))


def test_rope_pairs_and_frequencies():
    D, theta = 4, 10000.0
    cos, sin = L.rope_cos_sin(8, D, theta, torch.float64)
    # inv_freq = [1, 1/100]; angle of element j is t * inv_freq[j mod 2]
    assert torch.allclose(cos[0], torch.ones(4, dtype=torch.float64))
    assert torch.allclose(sin[0], torch.zeros(4, dtype=torch.float64))
    t = 5
    a0, a1 = t * 1.0, t / 100.0
    assert torch.allclose(cos[t], torch.tensor([math.cos(a0), math.cos(a1), math.cos(a0), math.cos(a1)],
                                               dtype=torch.float64))
    # rope at position t = block rotation of pairs (0,2) by a0 and (1,3) by a1
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    q, _ = L.apply_rotary_pos_emb(x.view(1, 1, 1, 4), x.view(1, 1, 1, 4), cos[t:t + 1], sin[t:t + 1])
    expect = torch.tensor([
        1 * math.cos(a0) - 3 * math.sin(a0),
        2 * math.cos(a1) - 4 * math.sin(a1),
        3 * math.cos(a0) + 1 * math.sin(a0),
        4 * math.cos(a1) + 2 * math.sin(a1)], dtype=torch.float64)
    assert torch.allclose(q.view(4), expect, atol=1e-12)
    # relative-position property: <rope(q,m), rope(k,n)> depends only on m - n
    torch.manual_seed(0)
    D = 8
    cos, sin = L.rope_cos_sin(32, D, theta, torch.float64)
    qv, kv = torch.randn(D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)

    def rot(x, p):
        return x * cos[p] + L.rotate_half(x) * sin[p]
    assert abs(float(rot(qv, 9) @ rot(kv, 4)) - float(rot(qv, 25) @ rot(kv, 20))) < 1e-10
    # the fp32 tables are HF's: angles computed in float32
    cos32, _ = L.rope_cos_sin(1024, 64, theta, torch.float32)
    inv = 1.0 / (theta ** (torch.arange(0, 64, 2, dtype=torch.int64).float() / 64))
    ang = (torch.arange(1024).float()[:, None] * inv[None, :])
    assert torch.equal(cos32[:, :32], ang.cos()) and torch.equal(cos32[:, 32:], ang.cos())


def test_repeat_kv_adjacent_heads_share():
    x = torch.stack([torch.full((2, 3), 10.0), torch.full((2, 3), 20.0)]).unsqueeze(0)  # [1,KV=2,T=2,D=3]
    y = L.repeat_kv(x, 3)
    assert y.shape == (1, 6, 2, 3)
    assert [float(y[0, h, 0, 0]) for h in range(6)] == [10, 10, 10, 20, 20, 20]


def test_gqa_matches_mha_with_duplicated_kv():
    """GQA with KV heads == MHA whose k/v weights repeat each kv head's rows n_rep times."""
    torch.manual_seed(3)
    gqa = micro_model(seed=3)
    cfg = gqa.cfg
    mha = L.LlamaForCausalLM(L.LlamaConfig({**MICRO, "num_key_value_heads": MICRO["num_attention_heads"]}))
    mha = mha.to(torch.float64)
    D, n_rep = cfg.head_dim, cfg.n_rep
    with torch.no_grad():
        src = dict(gqa.named_parameters())
        for name, p in mha.named_parameters():
            w = src[name]
            if name.endswith(("k_proj.weight", "v_proj.weight")):
                w = w.view(cfg.num_key_value_heads, 1, D, -1).expand(-1, n_rep, -1, -1).reshape(p.shape)
            p.copy_(w)
    ids, _ = random_batch(cfg, 2, 7)
    assert torch.allclose(gqa(ids), mha(ids), atol=1e-12)


def test_rmsnorm_known_value():
    n = L.LlamaRMSNorm(2, eps=0.0)
    with torch.no_grad():
        n.weight.copy_(torch.tensor([1.0, 2.0]))
    y = n(torch.tensor([[3.0, 4.0]]))
    r = math.sqrt((9 + 16) / 2)
    assert torch.allclose(y, torch.tensor([[3 / r, 8 / r]]))


def test_causality():
    m = micro_model(seed=4)
    ids, _ = random_batch(m.cfg, 1, 9, seed=5)
    ids2 = ids.clone()
    ids2[0, 6:] = (ids2[0, 6:] + 1) % m.cfg.vocab_size
    a, b = m(ids), m(ids2)
    assert torch.allclose(a[0, :6], b[0, :6], atol=1e-13)
    assert not torch.allclose(a[0, 6:], b[0, 6:])


def _compare_with_naive(overrides, B=2, T=6, ignore_index=-100):
    m = micro_model(seed=7, **overrides)
    cfg = m.cfg
    ids, targets = random_batch(cfg, B, T, seed=8, ignore_index=ignore_index)
    logits = m(ids)
    loss, loss_sum, count = L.loss_terms(logits, targets, ignore_index)
    loss.backward()
    P = {n: p.detach().clone().requires_grad_(True) for n, p in m.named_parameters()}
    nlogits = naive_forward(P, cfg, ids)
    nloss = naive_loss(nlogits, targets, ignore_index)
    nloss.backward()
    assert count == int((targets != ignore_index).sum())
    assert torch.allclose(logits, nlogits, atol=1e-12, rtol=1e-10), (logits - nlogits).abs().max()
    assert abs(loss.item() - nloss.item()) < 1e-12
    assert abs(loss_sum.item() - nloss.item() * count) < 1e-10
    for n, p in m.named_parameters():
        err = (p.grad - P[n].grad).abs().max().item()
        assert err < 1e-11, f"{n}: grad differs from the naive model by {err}"


def test_matches_naive_untied():
    _compare_with_naive({})


def test_matches_naive_tied():
    _compare_with_naive({"tie_word_embeddings": True}, ignore_index=0)


def test_matches_naive_explicit_head_dim_mqa():
    # head_dim != hidden/heads, a single kv head (MQA), different theta and eps
    _compare_with_naive({"head_dim": 6, "num_key_value_heads": 1, "rope_theta": 500.0, "rms_norm_eps": 1e-3})


def test_gradcheck_float64():
    """torch.autograd.gradcheck of the loss w.r.t. every parameter (finite differences)."""
    from torch.nn.utils.stateless import functional_call
    for tied in (False, True):
        m = micro_model(seed=11, vocab_size=7, hidden_size=8, intermediate_size=12, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
        ids, targets = random_batch(m.cfg, 2, 4, seed=12, n_ignored=2)
        names = [n for n, _ in m.named_parameters()]
        params = tuple(p.detach().clone().requires_grad_(True) for _, p in m.named_parameters())

        def f(*ps):
            logits = functional_call(m, dict(zip(names, ps)), (ids,))
            return L.loss_terms(logits, targets)[0]
        assert torch.autograd.gradcheck(f, params, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_directional_finite_difference():
    m = micro_model(seed=13)
    ids, targets = random_batch(m.cfg, 2, 8, seed=14)
    L.forward_backward(m, ids, targets, -100)
    torch.manual_seed(15)
    dirs = {n: torch.randn_like(p) for n, p in m.named_parameters()}
    analytic = sum(float((p.grad * dirs[n]).sum()) for n, p in m.named_parameters())
    h = 1e-5

    def loss_at(scale):
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.add_(scale * dirs[n])
            out = L.loss_terms(m(ids), targets)[0].item()
            for n, p in m.named_parameters():
                p.sub_(scale * dirs[n])
        return out
    numeric = (loss_at(h) - loss_at(-h)) / (2 * h)
    assert abs(numeric - analytic) < 1e-7 * max(1.0, abs(analytic)), (numeric, analytic)


def test_loss_terms():
    torch.manual_seed(16)
    logits = torch.randn(2, 5, 9)
    targets = torch.randint(0, 9, (2, 5))
    targets[0, 4] = targets[1, 0] = -100
    loss, s, n = L.loss_terms(logits, targets)
    assert n == 8
    ref = F.cross_entropy(logits.view(-1, 9), targets.view(-1), ignore_index=-100)
    assert abs(loss.item() - ref.item()) < 1e-6
    assert abs(s.item() / n - ref.item()) < 1e-6
    t2 = targets.clone()
    t2[t2 == -100] = 3
    t2[0, 1] = 3
    loss3, _, n3 = L.loss_terms(logits, t2, ignore_index=3)
    assert n3 == int((t2 != 3).sum())
    assert abs(loss3.item() - F.cross_entropy(logits.view(-1, 9), t2.view(-1), ignore_index=3).item()) < 1e-6
    nan_loss, s0, n0 = L.loss_terms(logits, torch.full((2, 5), -100))
    assert n0 == 0 and s0.item() == 0.0 and math.isnan(nan_loss.item())


def test_split_batch_sums_equal_global_mean():
    """DESIGN section 4's invariant: per-row-chunk (loss_sum, count) combine to the global loss."""
    m = micro_model(seed=17, dtype=torch.float64)
    ids, targets = random_batch(m.cfg, 5, 6, seed=18, n_ignored=9)
    full, _, _ = L.loss_terms(m(ids), targets)
    parts = [L.loss_terms(m(ids[a:b]), targets[a:b]) for a, b in ((0, 2), (2, 4), (4, 5))]
    total = sum(p[1] for p in parts) / sum(p[2] for p in parts)
    assert abs(total.item() - full.item()) < 1e-12


def test_parameter_counts():
    for overrides in ({}, {"tie_word_embeddings": True}, {"head_dim": 6}):
        m = micro_model(**overrides)
        assert sum(p.numel() for p in m.parameters()) == L.parameter_count(m.cfg)
    tiny = L.LlamaForCausalLM(L.LlamaConfig(TINY))
    assert sum(p.numel() for p in tiny.parameters()) == L.parameter_count(tiny.cfg)
    names = [n for n, _ in tiny.named_parameters()]
    assert names[0] == "model.embed_tokens.weight" and names[-1] == "lm_head.weight"
    assert "model.layers.3.self_attn.k_proj.weight" in names
    assert "model.layers.0.post_attention_layernorm.weight" in names
    assert tuple(tiny.model.layers[0].self_attn.k_proj.weight.shape) == (64, 128)   # [out, in]
    tied = L.LlamaForCausalLM(L.LlamaConfig({**TINY, "tie_word_embeddings": True}))
    assert "lm_head.weight" not in dict(tied.named_parameters())

    V, C, I, Ly, H, KV = 50000, 768, 3072, 12, 12, 3
    formula = V * C * 2 + Ly * (2 * C + C * C * 2 + 2 * C * (C // H * KV) + 3 * C * I) + C
    seed = L.parameter_count(L.read_config("seed"))
    assert seed == formula == 179448576, seed
    print(f"  seed preset parameter count: {seed}")


def test_adamw_and_clip_match_handwritten():
    """The optimizer math fanout must reproduce (see llama_ref.make_adamw / clip_grad_norm)."""
    lr, b1, b2, eps, wd, clip = 3e-3, 0.9, 0.95, 1e-8, 0.1, 0.05
    m = micro_model(seed=19, dtype=torch.float64)
    ref = {n: p.detach().clone() for n, p in m.named_parameters()}
    opt = L.make_adamw(m, lr, b1, b2, eps, wd)
    ids, targets = random_batch(m.cfg, 2, 6, seed=20)
    mom = {n: torch.zeros_like(p) for n, p in ref.items()}
    vel = {n: torch.zeros_like(p) for n, p in ref.items()}
    clipped = False
    for step in range(1, 4):
        L.forward_backward(m, ids, targets, -100)
        grads = {n: p.grad.detach().clone() for n, p in m.named_parameters()}
        norm = L.clip_grad_norm(m, clip)
        opt.step()
        # hand-written: recompute the gradient at the hand-written weights
        P = {n: t.clone().requires_grad_(True) for n, t in ref.items()}
        from torch.nn.utils.stateless import functional_call
        L.loss_terms(functional_call(m, P, (ids,)), targets)[0].backward()
        total = math.sqrt(sum(float(P[n].grad.norm()) ** 2 for n in P))
        assert abs(total - norm.item()) < 1e-9 * total
        coef = min(clip / (total + 1e-6), 1.0)
        clipped |= coef < 1.0
        for n in ref:
            assert torch.allclose(P[n].grad, grads[n], atol=1e-12)
            g = P[n].grad * coef
            decay = wd if ref[n].dim() >= 2 else 0.0
            w = ref[n] * (1 - lr * decay)
            mom[n] = b1 * mom[n] + (1 - b1) * g
            vel[n] = b2 * vel[n] + (1 - b2) * g * g
            w = w - (lr / (1 - b1 ** step)) * mom[n] / (vel[n].sqrt() / math.sqrt(1 - b2 ** step) + eps)
            ref[n] = w.detach()
    assert clipped, "the test should exercise clipping"
    for n, p in m.named_parameters():
        assert torch.allclose(p, ref[n], atol=1e-12, rtol=0), n


def _run(*args):
    r = subprocess.run([PY, os.path.join(HERE, "llama_ref.py"), *args], capture_output=True, text=True)
    assert r.returncode == 0, f"llama_ref.py {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_cli_end_to_end():
    cfg = dict(MICRO)
    with tempfile.TemporaryDirectory() as d:
        cfg_path = os.path.join(d, "micro.json")
        json.dump(cfg, open(cfg_path, "w"))
        assert _run("count", "--config", cfg_path).strip() == str(L.parameter_count(L.LlamaConfig(cfg)))
        _run("init", "--config", cfg_path, "--seed", "5", "--out", os.path.join(d, "ck"))
        _run("init", "--config", cfg_path, "--seed", "5", "--out", os.path.join(d, "ck16"), "--dtype", "bf16")
        conf = json.load(open(os.path.join(d, "ck", "config.json")))
        assert conf["architectures"] == ["LlamaForCausalLM"] and conf["model_type"] == "llama"
        w32, _ = st.load(os.path.join(d, "ck", "model.safetensors"))
        w16, _ = st.load(os.path.join(d, "ck16", "model.safetensors"))
        for n in w32:
            assert w32[n].dtype == torch.float32 and w16[n].dtype == torch.bfloat16
            assert torch.equal(w32[n].to(torch.bfloat16).view(torch.int16), w16[n].view(torch.int16))
        assert abs(w32["model.layers.0.mlp.up_proj.weight"].std().item() - 0.02) < 0.003
        assert torch.equal(w32["model.norm.weight"], torch.ones(16))

        ids, targets = random_batch(L.LlamaConfig(cfg), 3, 7, seed=21)
        batch = os.path.join(d, "batch.safetensors")
        st.save(batch, {"input_ids": ids.int(), "targets": targets.int(),
                        "input_ids_1": ids.flip(1).int(), "targets_1": targets.flip(1).int()})
        out = os.path.join(d, "fwd.safetensors")
        _run("forward", "--checkpoint", os.path.join(d, "ck"), "--batch", batch, "--out", out)
        res, _ = st.load(out)
        names = {n for n, _ in L.load_checkpoint(os.path.join(d, "ck")).named_parameters()}
        assert set(res) == {"logits", "loss", "loss_sum", "count"} | {"grad." + n for n in names}
        assert res["logits"].shape == (3, 7, 11) and res["count"].dtype == torch.int32
        assert int(res["count"][0]) == int((targets != -100).sum())
        # in-process fp32 gives bit-identical results (forward is deterministic)
        m = L.load_checkpoint(os.path.join(d, "ck"))
        logits, loss, _, _ = L.forward_backward(m, ids, targets, -100)
        assert torch.equal(res["logits"], logits.detach()) and res["loss"].item() == loss.item()

        tr = os.path.join(d, "train")
        _run("train", "--checkpoint", os.path.join(d, "ck"), "--batch", batch, "--steps", "3",
             "--lr", "1e-2", "--beta1", "0.9", "--beta2", "0.95", "--eps", "1e-8",
             "--weight-decay", "0.1", "--clip", "1.0", "--out", tr)
        metrics = [json.loads(line) for line in open(os.path.join(tr, "metrics.jsonl"))]
        assert [r["step"] for r in metrics] == [1, 2, 3]
        assert metrics[0]["loss"] == res["loss"].item()     # step 0 uses input_ids_0 -> falls back
        assert all(r["grad_norm"] > 0 for r in metrics)
        assert os.path.exists(os.path.join(tr, "config.json"))
        final, _ = st.load(os.path.join(tr, "model.safetensors"))
        assert set(final) == names and not torch.equal(final["model.norm.weight"], w32["model.norm.weight"])

        _run("save-hf", "--checkpoint", os.path.join(d, "ck"), "--out", os.path.join(d, "hf16"), "--dtype", "bf16")
        again, meta = st.load(os.path.join(d, "hf16", "model.safetensors"))
        assert meta == {"format": "pt"}
        assert all(torch.equal(again[n].view(torch.int16), w16[n].view(torch.int16)) for n in w16)

        # tied: no lm_head.weight in the file; its gradient lands on the embedding
        json.dump({**cfg, "tie_word_embeddings": True}, open(cfg_path, "w"))
        _run("init", "--config", cfg_path, "--seed", "5", "--out", os.path.join(d, "tied"))
        wt, _ = st.load(os.path.join(d, "tied", "model.safetensors"))
        assert "lm_head.weight" not in wt
        _run("forward", "--checkpoint", os.path.join(d, "tied"), "--batch", batch, "--out", out)
        res_t, _ = st.load(out)
        assert "grad.lm_head.weight" not in res_t and "grad.model.embed_tokens.weight" in res_t

        # a bad checkpoint is one clear error line and a non-zero exit
        r = subprocess.run([PY, os.path.join(HERE, "llama_ref.py"), "forward", "--checkpoint", d,
                            "--batch", batch, "--out", out], capture_output=True, text=True)
        assert r.returncode != 0 and r.stderr.startswith("llama_ref: error:")


def main():
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]
    passed = failed = 0
    for name, fn in tests:
        try:
            fn()
            passed += 1
            print(f"ok    {name}")
        except Exception:
            failed += 1
            print(f"FAIL  {name}")
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
