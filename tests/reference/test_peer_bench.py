#!/usr/bin/python3
"""Tests of peer_bench.py (the PyTorch peer of `fanout bench --peers`), CPU only.

Run: /usr/bin/python3 tests/reference/test_peer_bench.py
The last line is "N passed, M failed"; exit status 1 on any failure. About 40 s on two
cores (several short gloo runs, in fp32 and --precision bf16).
"""

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peer_bench  # noqa: E402

PY = sys.executable
SCRIPT = os.path.join(HERE, "peer_bench.py")
SMALL = ["--config", "tiny", "--batch-size", "4", "--seq-len", "16", "--steps", "2", "--warmup", "1"]
FIELDS = ["peer", "torch", "mode", "backend", "nproc", "device", "precision", "batch_size",
          "seq_len", "steps", "tokens_per_s", "step_s", "threads_per_process", "final_loss"]


def run(args, timeout=120):
    return subprocess.run([PY, SCRIPT] + args, capture_output=True, text=True, timeout=timeout)


def last_json(proc):
    assert proc.returncode == 0, f"rc {proc.returncode}: {proc.stderr[-2000:]}"
    lines = proc.stdout.strip().splitlines()
    assert lines, "no stdout"
    return json.loads(lines[-1])


def check_fields(res, mode, nproc, backend, precision="fp32"):
    for k in FIELDS:
        assert k in res, f"missing {k}"
    assert res["peer"] == "pytorch" and res["precision"] == precision, res
    assert res["mode"] == mode and res["nproc"] == nproc and res["backend"] == backend, res
    assert res["device"] == "cpu" and res["batch_size"] == 4 and res["seq_len"] == 16
    assert res["steps"] == 2 and res["threads_per_process"] == 1, res
    assert res["tokens_per_s"] > 0 and res["step_s"] > 0
    assert abs(res["tokens_per_s"] * res["step_s"] - 4 * 16) < 1e-6 * 4 * 16, res
    assert math.isfinite(res["final_loss"]) and 4.0 < res["final_loss"] < 7.0, res


def marked_pids(marker):
    """pids of live processes whose command line contains marker (not zombies)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmd and state != "Z":
            out.append(int(d))
    return out


def worker_pids(marker):
    res = {}
    for pid in marked_pids(marker):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if env.get(peer_bench.WORKER_ENV.encode()) == b"1":
            res[int(env[b"RANK"])] = pid
    return res


def wait_until(cond, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def long_ddp(marker):
    """A ddp run that lasts long enough to be interrupted; marker tags its processes."""
    out = os.path.join(tempfile.gettempdir(), f"peer_bench_{marker}.json")
    args = ["--config", "tiny", "--batch-size", "4", "--seq-len", "16", "--steps", "100000",
            "--warmup", "0", "--mode", "ddp", "--nproc", "2", "--json", out]
    return subprocess.Popen([PY, SCRIPT] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def kill_leftovers(marker):
    for pid in marked_pids(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ----------------------------------------------------------------------------------------------

results = {}


def test_single_and_ddp_agree():
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "r.json")
        single = last_json(run(SMALL + ["--mode", "single", "--nproc", "3", "--json", js]))
        check_fields(single, "single", 1, "none")
        with open(js) as f:
            assert json.load(f) == single
    ddp = last_json(run(SMALL + ["--mode", "ddp", "--nproc", "2", "--backend", "gloo"]))
    check_fields(ddp, "ddp", 2, "gloo")
    assert ddp["rows_per_rank"] == 2
    # Same init, same rows, averaged gradients: the loss of the last step agrees.
    assert abs(ddp["final_loss"] - single["final_loss"]) < 1e-4, (ddp, single)
    results["single"], results["ddp"] = single, ddp


def test_bf16_single_and_ddp_agree_and_track_fp32():
    single = last_json(run(SMALL + ["--mode", "single", "--precision", "bf16"]))
    check_fields(single, "single", 1, "none", "bf16")
    ddp = last_json(run(SMALL + ["--mode", "ddp", "--nproc", "2", "--precision", "bf16"]))
    check_fields(ddp, "ddp", 2, "gloo", "bf16")
    # bf16 matmuls on 2-row vs 4-row batches round differently: agree at bf16 scale
    # (measured 1e-4 apart; a loss ~4.8 has a bf16 ulp of 0.03).
    assert abs(ddp["final_loss"] - single["final_loss"]) < 5e-3, (ddp, single)
    if "single" in results:   # fp32 after 3 steps from the same init: bf16 tracks it (5e-4)
        assert abs(single["final_loss"] - results["single"]["final_loss"]) < 2e-2, single


class Tiny:
    """The tiny model, its optimizer and a 4 x 32 batch, in this process (1 thread)."""

    def __init__(self, precision):
        import torch
        import llama_ref
        torch.set_num_threads(1)
        self.cfg = llama_ref.read_config("tiny")
        self.args = argparse.Namespace(device="cpu", precision=precision)
        self.model = peer_bench.build_model(self.cfg, "cpu")
        self.opt = peer_bench.make_optimizer(self.model, 1e-3)
        self.ids, self.targets = peer_bench.synthetic_batch(self.cfg, 4, 32)

    def step_fn(self):
        return peer_bench.make_step(self.args, self.cfg, self.model, self.opt, self.ids,
                                    self.targets)


def linear_output_dtypes(model):
    """{name: dtype} filled by forward hooks on every nn.Linear."""
    import torch
    seen = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            m.register_forward_hook(lambda mod, i, o, name=name: seen.__setitem__(name, o.dtype))
    return seen


def test_bf16_autocast_takes_effect_on_cpu():
    import torch
    for precision, want in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        t = Tiny(precision)
        seen = linear_output_dtypes(t.model)
        step = t.step_fn()
        losses = [step().item() for _ in range(4)]
        # The 7 projections of every layer compute in the working precision (the lm_head,
        # an F.linear, is checked by make_step itself: it raises unless the logits are)...
        assert len(seen) == 7 * t.cfg.num_hidden_layers, seen
        assert set(seen.values()) == {want}, (precision, seen)
        # ...while weights, gradients and AdamW state stay fp32 (bf16-mixed).
        for p in t.model.parameters():
            assert p.dtype == torch.float32 and p.grad.dtype == torch.float32, precision
        for st in t.opt.state.values():
            assert all(v.dtype == torch.float32 for v in st.values() if torch.is_tensor(v))
        # The same batch every step: the loss must fall (measured 5.60 -> 4.83 in bf16).
        assert all(math.isfinite(x) for x in losses), losses
        assert losses[-1] < losses[0] - 0.3, (precision, losses)


def test_autocast_inside_holds_in_another_thread():
    # nn.DataParallel runs replicas in worker threads, where the caller's autocast state
    # (thread-local) is absent; autocast_inside must bring bf16 along itself.
    import torch
    t = Tiny("bf16")
    out = {}

    def forward(key, net):
        with torch.no_grad():
            out[key] = net(t.ids[:1, :8]).dtype

    with peer_bench.autocast("cpu", "bf16"):
        for key, net in (("plain", t.model),
                         ("wrapped", peer_bench.autocast_inside(t.model, "cpu", "bf16"))):
            th = threading.Thread(target=forward, args=(key, net))
            th.start()
            th.join()
    assert out == {"plain": torch.float32, "wrapped": torch.bfloat16}, out
    assert peer_bench.autocast_inside(t.model, "cpu", "fp32") is t.model


def test_ddp_default_backend_and_uneven_batch():
    # 5 rows over 2 ranks: DistributedSampler pads to 6 (3 rows each); tokens/s counts 5 rows.
    args = ["--config", "tiny", "--batch-size", "5", "--seq-len", "8", "--steps", "1",
            "--warmup", "0", "--mode", "ddp", "--nproc", "2"]
    res = last_json(run(args))
    assert res["backend"] == "gloo" and res["rows_per_rank"] == 3, res
    assert abs(res["tokens_per_s"] * res["step_s"] - 5 * 8) < 1e-6 * 40, res


def test_sampler_rows_match_distributed_sampler():
    from torch.utils.data import DistributedSampler
    for B in (1, 4, 5, 7, 16):
        for world in (1, 2, 3, 4, 8):
            for rank in range(world):
                want = list(DistributedSampler(range(B), num_replicas=world, rank=rank,
                                               shuffle=False))
                got = peer_bench.sampler_rows(B, rank, world)
                assert got == want, (B, world, rank, got, want)


def test_usage_errors_exit_2_with_one_line():
    cases = [
        ["--config", "nope", "--mode", "single"],
        ["--config", "tiny", "--mode", "dp", "--nproc", "2"],
        ["--config", "tiny", "--mode", "ddp", "--nproc", "2", "--backend", "nccl"],
        ["--config", "tiny", "--mode", "ddp", "--nproc", "1", "--backend", "nccl",
         "--device", "cuda"],
        ["--config", "tiny", "--mode", "single", "--nproc", "0"],
        ["--config", "tiny", "--mode", "single", "--seq-len", "5000"],
        ["--config", "tiny", "--mode", "bogus"],
        ["--config", "tiny", "--mode", "single", "--precision", "fp16"],
        ["--config", "tiny", "--mode", "ddp", "--nproc", "2", "--precision", "BF16"],
    ]
    with tempfile.TemporaryDirectory() as tmp:
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump({"vocab_size": 10, "hidden_size": 8}, f)
        cases.append(["--config", bad, "--mode", "single"])
        defaults = {"--batch-size": "4", "--seq-len": "16", "--steps": "1", "--warmup": "0"}
        for extra in cases:
            args = list(extra)
            for k, v in defaults.items():
                if k not in extra:
                    args += [k, v]
            p = run(args)
            if extra[-2:] == ["--device", "cuda"] and p.returncode == 0:
                continue   # a machine with a GPU: that case is valid there
            assert p.returncode == 2, (extra, p.returncode, p.stderr)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("peer_bench: error:"), (extra, p.stderr)
            assert p.stdout == "", (extra, p.stdout)


def test_compile_runs_or_exits_2_naming_the_torch_without_it():
    # fanout bench --peers skips its torch.compile row with this line on torch < 2.
    import torch
    for mode in (["--mode", "single"], ["--mode", "ddp", "--nproc", "2"]):
        p = run(SMALL + mode + ["--compile"])
        if hasattr(torch, "compile"):
            res = last_json(p)
            assert res["compile"] is True and res["mode"] == mode[1], res
            continue
        assert p.returncode == 2, (mode, p.returncode, p.stderr)
        want = f"peer_bench: error: --compile needs PyTorch >= 2.0 (this is {torch.__version__})"
        assert p.stderr.strip().splitlines() == [want], (mode, p.stderr)
        assert p.stdout == "", (mode, p.stdout)
    # nn.DataParallel is never compiled: refused before torch is asked anything.
    p = run(SMALL + ["--mode", "dp", "--nproc", "2", "--device", "cuda", "--compile"])
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.strip().splitlines() == [
        "peer_bench: error: --compile is not supported with --mode dp"], p.stderr
    if "single" in results:   # without --compile the JSON says so too
        assert results["single"]["compile"] is False, results["single"]


def test_failed_worker_stops_the_others():
    marker = uuid.uuid4().hex
    p = long_ddp(marker)
    try:
        assert wait_until(lambda: len(worker_pids(marker)) == 2, 30), "workers did not start"
        time.sleep(1.0)
        os.kill(worker_pids(marker)[1], signal.SIGKILL)
        _, err = p.communicate(timeout=30)
        assert p.returncode == 1, (p.returncode, err)
        assert "rank 1 exited with signal 9" in err, err
        assert wait_until(lambda: not marked_pids(marker), 10), "workers linger"
    finally:
        p.kill()
        kill_leftovers(marker)


def test_ctrl_c_stops_the_workers():
    marker = uuid.uuid4().hex
    p = long_ddp(marker)
    try:
        assert wait_until(lambda: len(worker_pids(marker)) == 2, 30), "workers did not start"
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
        assert p.returncode == 130, (p.returncode, err)
        assert wait_until(lambda: not marked_pids(marker), 10), "workers linger"
    finally:
        p.kill()
        kill_leftovers(marker)


def test_killed_launcher_takes_the_workers_along():
    marker = uuid.uuid4().hex
    p = long_ddp(marker)
    try:
        assert wait_until(lambda: len(worker_pids(marker)) == 2, 30), "workers did not start"
        p.kill()   # SIGKILL: no cleanup in the launcher; PR_SET_PDEATHSIG must do it
        p.wait(timeout=30)   # not communicate(): orphans would hold the pipes open
        assert wait_until(lambda: not marked_pids(marker), 10), "workers outlived the launcher"
    finally:
        p.kill()
        kill_leftovers(marker)


def main():
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]
    passed = failed = 0
    for name, fn in tests:
        t0 = time.monotonic()
        try:
            fn()
            passed += 1
            print(f"ok   {name} ({time.monotonic() - t0:.1f} s)")
        except Exception:
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
