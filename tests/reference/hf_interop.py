#!/usr/bin/python3
"""Checkpoints both ways between fanout and HF transformers' LlamaForCausalLM.

  fanout-to-hf: a fanout checkpoint loads in LlamaForCausalLM.from_pretrained; its
      logits on the first batch of a token file equal `fanout eval --logits` (the
      max abs difference printed) and so does the loss.
  hf-to-fanout: a LlamaForCausalLM made and saved by transformers (save_pretrained,
      safetensors) loads in `fanout eval` with the same loss.

`--impl transformers` (the default) is the real library: the check the GPU machine
runs. `--impl ref` stands llama_ref.py (this folder's restatement of the same
model with torch alone) in its place, so the plumbing runs where transformers is
not installed. One line per direction; exit 0 when both are within tolerance, 1
when not, 2 when the implementation cannot be imported.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def write_tokens(path, n, vocab, seed):
    """An llm.c token file (magic 20240520, version 1, uint16 ids) of n random ids."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=n, dtype=np.int64).astype(np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, n
    with open(path, "wb") as f:
        f.write(header.tobytes() + ids.tobytes())
    return ids.astype(np.int64)


def fanout_eval(args, ckpt, data, logits_path):
    cmd = [args.fanout, "eval", "--checkpoint", ckpt, "--data", data, "--batch-size", str(args.batch),
           "--seq-len", str(args.seq_len), "--max-batches", "1", "--devices", args.device,
           "--precision", args.precision, "--json", "--logits", logits_path]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if r.returncode != 0:
        raise RuntimeError(f"fanout eval failed ({r.returncode}): {r.stderr.strip()}")
    loss = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])["loss"]
    return loss, np.load(logits_path)


class Impl:
    """The other side: HF transformers, or llama_ref standing in for it."""

    def __init__(self, name):
        self.name = name
        if name == "transformers":
            import transformers  # noqa: F401  (ImportError: exit 2)
            self.tf = transformers
        else:
            import llama_ref
            self.ref = llama_ref

    def load(self, ckpt):
        if self.name == "transformers":
            m = self.tf.LlamaForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32,
                                                         attn_implementation="eager")
            return m.eval()
        return self.ref.load_checkpoint(ckpt).eval()

    @torch.no_grad()
    def logits(self, model, ids):
        out = model(torch.from_numpy(ids))
        return (out.logits if hasattr(out, "logits") else out).float().numpy()

    def save_random(self, out_dir, cfg, seed):
        if self.name == "transformers":
            torch.manual_seed(seed)
            model = self.tf.LlamaForCausalLM(self.tf.LlamaConfig(**cfg))
            model.save_pretrained(out_dir, safe_serialization=True)
            return
        model = self.ref.LlamaForCausalLM(self.ref.LlamaConfig(cfg))
        model.init_weights(seed)
        self.ref.save_checkpoint(model, out_dir)


def loss_of(logits, targets):
    t = torch.from_numpy(logits).reshape(-1, logits.shape[-1]).double()
    return float(torch.nn.functional.cross_entropy(t, torch.from_numpy(targets).reshape(-1)))


def first_batch(ids, B, T):
    """llm.c's first window: B*T+1 tokens, inputs then targets shifted by one."""
    window = ids[: B * T + 1]
    return window[:-1].reshape(B, T), window[1:].reshape(B, T)


def report(direction, logit_diff, loss_a, loss_b, args):
    ok = abs(loss_a - loss_b) <= args.loss_tol and (logit_diff is None or logit_diff <= args.logit_tol)
    logits = "" if logit_diff is None else f"logits max |d| {logit_diff:.3g}, "
    print(f"{direction}: {'ok' if ok else 'MISMATCH'}: {logits}loss fanout {loss_a:.6f} vs "
          f"{args.impl} {loss_b:.6f} (|d| {abs(loss_a - loss_b):.3g})")
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fanout", required=True, help="the fanout binary")
    ap.add_argument("--checkpoint", required=True, help="a fanout checkpoint directory")
    ap.add_argument("--impl", choices=["transformers", "ref"], default="transformers")
    ap.add_argument("--device", default="cpu:0", help="fanout's device")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--logit-tol", type=float, default=1e-3)
    ap.add_argument("--loss-tol", type=float, default=1e-4)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args(argv)
    try:
        impl = Impl(args.impl)
    except ImportError as e:
        print(f"{args.impl} cannot be imported: {e}")
        return 2
    with open(os.path.join(args.checkpoint, "config.json")) as f:
        vocab = int(json.load(f)["vocab_size"])
    ok = True
    with tempfile.TemporaryDirectory(prefix="fanout-hf-") as tmp:
        data = os.path.join(tmp, "tokens.bin")
        ids = write_tokens(data, args.batch * args.seq_len + 1, vocab, 7)
        inputs, targets = first_batch(ids, args.batch, args.seq_len)

        # fanout -> HF: the same logits and loss.
        loss_f, logits_f = fanout_eval(args, args.checkpoint, data, os.path.join(tmp, "f.npy"))
        logits_h = impl.logits(impl.load(args.checkpoint), inputs)
        ok &= report("fanout-to-hf", float(np.abs(logits_f - logits_h).max()), loss_f,
                     loss_of(logits_h, targets), args)

        # HF -> fanout: a model transformers made and saved; the same loss.
        cfg = {"vocab_size": vocab, "hidden_size": 64, "intermediate_size": 160,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
               "tie_word_embeddings": False}
        hf_dir = os.path.join(tmp, "hf")
        impl.save_random(hf_dir, cfg, 11)
        loss_f, logits_f = fanout_eval(args, hf_dir, data, os.path.join(tmp, "h.npy"))
        logits_h = impl.logits(impl.load(hf_dir), inputs)
        ok &= report("hf-to-fanout", float(np.abs(logits_f - logits_h).max()), loss_f,
                     loss_of(logits_h, targets), args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
