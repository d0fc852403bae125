#!/usr/bin/python3
"""PyTorch peer benchmark for `fanout bench --peers`: training tokens/s of plain PyTorch
on the same Llama (llama_ref.py's HF-exact model), config and global batch.

Modes:
  single  one process, one device, the whole batch.
  ddp     N processes (this script re-executed with torchrun's env vars RANK, WORLD_SIZE,
          LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT=<free port>),
          torch.distributed over loopback, DistributedDataParallel with default buckets,
          each rank its DistributedSampler(shuffle=False) share of the B rows.
          The script also runs as a worker under torchrun itself (RANK/WORLD_SIZE set).
  dp      nn.DataParallel over N CUDA devices, loss on the gathered logits on device 0
          (the faithful form; fanout's "dp" mode).

--compile wraps the model (single) or the DDP module (ddp) in torch.compile (PyTorch >= 2;
not with dp).

Every mode: AdamW(lr, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on >= 2-D tensors only),
clip_grad_norm_(1.0), synthetic random tokens (fixed seed, the same every step).

Precision (--precision):
  fp32  everything in float32 (the default).
  bf16  Lightning's "bf16-mixed": fp32 master weights, fp32 AdamW state and fp32 gradients
        (so DDP reduces fp32, as in fp32 mode); the forward and the loss run under
        torch.autocast(device, dtype=torch.bfloat16), the backward outside it. Autocast
        runs the matmuls (every nn.Linear, the attention products) in bf16; llama_ref's
        RMSNorm, softmax and the cross-entropy (on logits cast to float) stay fp32. In dp
        mode autocast is also entered inside the replicated module, because
        nn.DataParallel's worker threads re-enter autocast with CUDA's default dtype
        (float16), not the caller's. Every step checks that the logits came out in the
        working precision (a RuntimeError, exit 1, if autocast did not take effect).

Timing: W untimed warm-up steps, a barrier (and CUDA synchronize), then S timed steps on
rank 0; tokens/s = B * T * S / elapsed (the global batch, whatever the mode).

Threads: on CPU every process uses 1 thread (torch.set_num_threads(1), OMP/OpenBLAS/MKL
env = 1), as torchrun does with nproc > 1 and as fanout counts one device = one core;
--mode single on CPU also uses 1 thread. The JSON reports it as "threads_per_process".

The last line on stdout is one JSON object:
  {"peer": "pytorch", "torch", "mode", "backend", "nproc", "device", "precision", "batch_size",
   "seq_len", "steps", "tokens_per_s", "step_s", "threads_per_process", "final_loss", ...}
(backend is "none" for single and dp; nproc is 1 for single). Errors in the arguments or the
environment (bad config, nccl without GPUs, dp on CPU, bf16 on a GPU without bf16, --compile
on a PyTorch without torch.compile, ...): one line on stderr, exit 2; `fanout bench --peers`
skips that peer with this line.
A failed worker: exit 1, the other workers are terminated. Ctrl-C / SIGTERM: workers are
terminated, exit 130 / 143. Workers also die with the launcher (PR_SET_PDEATHSIG).
"""

import argparse
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))

WORKER_ENV = "FANOUT_PEER_BENCH_WORKER"     # set by the launcher for its workers
RESULT_ENV = "FANOUT_PEER_BENCH_RESULT"     # where rank 0 writes its JSON
PARENT_ENV = "FANOUT_PEER_BENCH_PARENT"     # launcher pid, for the orphan check
INIT_TIMEOUT_S = 300
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


class UsageError(Exception):
    """Bad arguments, config or environment: exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        print(f"peer_bench: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser():
    ap = OneLineParser(
        prog="peer_bench.py",
        description="PyTorch peer benchmark for fanout bench --peers (training tokens/s).",
        epilog="On CPU every process runs with 1 thread (torch.set_num_threads(1), as torchrun "
               "does per process), --mode single included: one device = one core, as fanout "
               "counts it. Reported as threads_per_process. The last stdout line is the JSON "
               "result; errors: one stderr line, exit 2.")
    ap.add_argument("--config", required=True, help="preset tiny/small/seed or an HF config.json")
    ap.add_argument("--batch-size", type=int, required=True, help="global rows per step (B)")
    ap.add_argument("--seq-len", type=int, required=True, help="tokens per row (T)")
    ap.add_argument("--steps", type=int, required=True, help="timed steps (S)")
    ap.add_argument("--warmup", type=int, required=True, help="untimed steps first (W)")
    ap.add_argument("--mode", choices=["ddp", "dp", "single"], required=True)
    ap.add_argument("--nproc", type=int, default=1,
                    help="ddp: processes; dp: CUDA devices; single: ignored (1). Default 1")
    ap.add_argument("--backend", choices=["gloo", "nccl"], default=None,
                    help="ddp only; default nccl on cuda, gloo on cpu")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="fp32, or bf16: fp32 weights/optimizer/gradients, forward and loss "
                         "under torch.autocast(bfloat16) (Lightning's bf16-mixed). Default fp32")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (PyTorch >= 2; single and ddp)")
    ap.add_argument("--json", default=None, help="also write the JSON result here")
    return ap


def check_args(a):
    """Checks that need no torch (exit 2 on failure)."""
    for name in ("batch_size", "seq_len", "steps", "nproc"):
        if getattr(a, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name)}")
    if a.warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {a.warmup}")
    if not math.isfinite(a.lr) or a.lr <= 0:
        raise UsageError(f"--lr must be positive, got {a.lr}")
    if a.mode == "single":
        a.nproc = 1
    if a.mode == "ddp":
        if a.backend is None:
            a.backend = "nccl" if a.device == "cuda" else "gloo"
        if a.backend == "nccl" and a.device != "cuda":
            raise UsageError("--backend nccl needs --device cuda")
    else:
        if a.backend is not None and a.mode == "single":
            pass   # harmless: no process group in single mode
        a.backend = "none"
    if a.mode == "dp" and a.device != "cuda":
        raise UsageError("--mode dp is nn.DataParallel over CUDA devices: it needs --device cuda")
    if a.mode == "dp" and a.compile:
        raise UsageError("--compile is not supported with --mode dp")


def limit_threads(device):
    """Before torch is imported: one thread per process on CPU."""
    if device == "cpu":
        for k in THREAD_ENV:
            os.environ[k] = "1"


def load_config(spec):
    import llama_ref   # noqa: E402  (imports torch)
    try:
        cfg = llama_ref.read_config(spec)
    except FileNotFoundError:
        raise UsageError(f"--config {spec!r}: no such preset (tiny, small, seed) or file") from None
    except (ValueError, OSError, TypeError, AttributeError) as e:
        raise UsageError(f"--config {spec!r}: {e}") from None
    return cfg


def check_env(a, cfg):
    """Checks that need torch (exit 2 on failure)."""
    import torch
    if a.seq_len > cfg.max_position_embeddings:
        raise UsageError(f"--seq-len {a.seq_len} exceeds max_position_embeddings "
                         f"{cfg.max_position_embeddings}")
    if a.precision == "bf16" and not hasattr(torch, "autocast"):
        raise UsageError(f"--precision bf16 needs torch.autocast (PyTorch >= 1.10; this is "
                         f"{torch.__version__})")
    if a.compile and not hasattr(torch, "compile"):
        raise UsageError(f"--compile needs PyTorch >= 2.0 (this is {torch.__version__})")
    if a.device == "cuda":
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device available"
                             + (" (nccl needs GPUs)" if a.backend == "nccl" else ""))
        if a.precision == "bf16" and not torch.cuda.is_bf16_supported():
            raise UsageError("--precision bf16: this CUDA device does not support bfloat16")
        n = torch.cuda.device_count()
        if a.mode in ("ddp", "dp") and n < a.nproc:
            raise UsageError(f"--nproc {a.nproc} needs {a.nproc} CUDA devices, found {n}")
    if a.mode == "ddp":
        import torch.distributed as dist
        if not dist.is_available():
            raise UsageError("torch.distributed is not available in this PyTorch build")
        if a.backend == "nccl" and not dist.is_nccl_available():
            raise UsageError("--backend nccl: this PyTorch build has no NCCL")
        if a.backend == "gloo" and not dist.is_gloo_available():
            raise UsageError("--backend gloo: this PyTorch build has no Gloo")


# ----------------------------------------------------------------------------------------------
# The training step (shared by every mode)
# ----------------------------------------------------------------------------------------------

def make_optimizer(model, lr):
    """AdamW, weight decay 0.1 on >= 2-D tensors only, betas (0.9, 0.95); torch's default
    implementation choice otherwise (foreach on CUDA in 2.x)."""
    import torch
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def synthetic_batch(cfg, B, T):
    """Random ids and targets, fixed seed, identical on every rank (all tokens counted)."""
    import torch
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    targets = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    return ids, targets


def sampler_rows(B, rank, world):
    """torch.utils.data.DistributedSampler(shuffle=False, drop_last=False) indices of a rank:
    pad to a multiple of world by repeating from the start, then every world-th index."""
    indices = list(range(B))
    total = math.ceil(B / world) * world
    pad = total - B
    if pad:
        indices += (indices * math.ceil(pad / B))[:pad]
    return indices[rank:total:world]


def autocast(device, precision):
    """The forward's precision context: nothing for fp32, autocast to bfloat16 for bf16."""
    import torch
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device, dtype=torch.bfloat16)


def autocast_inside(model, device, precision):
    """model, or a wrapper whose forward enters autocast itself. For nn.DataParallel: its
    replica threads (parallel_apply) re-enter torch.cuda.amp.autocast(enabled=...) whose
    dtype defaults to float16, so the caller's bf16 would silently become fp16 there."""
    import torch
    if precision == "fp32":
        return model

    class AutocastForward(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            with autocast(device, precision):
                return self.inner(*args)

    return AutocastForward(model)


def make_step(a, cfg, model, opt, ids, targets):
    """One training step: returns the step function (which returns the detached loss)."""
    import torch
    import torch.nn.functional as F
    V = cfg.vocab_size
    params = [p for group in opt.param_groups for p in group["params"]]
    want = torch.bfloat16 if a.precision == "bf16" else torch.float32

    def step():
        opt.zero_grad(set_to_none=True)
        # bf16: forward and loss under autocast, backward outside (as Lightning's bf16-mixed).
        with autocast(a.device, a.precision):
            logits = model(ids)
            # Mean over this process's tokens (torch's usual reduction='mean'); under DDP the
            # gradients are then averaged over ranks. fanout normalises by the global token
            # count instead; for equal-sized, unpadded rows (all tokens counted) they coincide.
            loss = F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1))
        if logits.dtype != want:   # autocast silently off (or fp16) would mislabel the figures
            raise RuntimeError(f"--precision {a.precision}: the logits are {logits.dtype}, "
                               f"expected {want}")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.detach()

    return step


def train_loop(a, cfg, model, opt, ids, targets, sync, barrier):
    """W warm-up + S timed steps. Returns (elapsed seconds of the timed steps, last loss)."""
    step = make_step(a, cfg, model, opt, ids, targets)
    for _ in range(a.warmup):
        step()
    barrier()
    sync()
    t0 = time.perf_counter()
    loss = None
    for _ in range(a.steps):
        loss = step()
    sync()
    elapsed = time.perf_counter() - t0
    return elapsed, loss


def result_json(a, cfg, elapsed, final_loss, threads, nproc, extra=None):
    import torch
    import llama_ref
    tokens = a.batch_size * a.seq_len * a.steps
    out = {
        "peer": "pytorch",
        "torch": torch.__version__,
        "mode": a.mode,
        "backend": a.backend,
        "nproc": nproc,
        "device": a.device,
        "precision": a.precision,
        "batch_size": a.batch_size,
        "seq_len": a.seq_len,
        "steps": a.steps,
        "tokens_per_s": tokens / elapsed if elapsed > 0 else float("inf"),
        "step_s": elapsed / a.steps,
        "threads_per_process": threads,
        "final_loss": final_loss,
        "warmup": a.warmup,
        "config": a.config,
        "parameters": llama_ref.parameter_count(cfg),
        "compile": bool(a.compile),
    }
    if extra:
        out.update(extra)
    return out


def set_threads(a):
    import torch
    if a.device == "cpu":
        torch.set_num_threads(1)
    return torch.get_num_threads()


def build_model(cfg, device):
    import llama_ref
    model = llama_ref.LlamaForCausalLM(cfg)
    model.init_weights(1)
    return model.to(device)


# ----------------------------------------------------------------------------------------------
# single and dp: in this process
# ----------------------------------------------------------------------------------------------

def run_local(a, cfg):
    import torch
    threads = set_threads(a)
    dev = torch.device("cuda:0" if a.device == "cuda" else "cpu")
    model = build_model(cfg, dev)
    opt = make_optimizer(model, a.lr)
    net = model
    if a.mode == "dp":
        # Faithful nn.DataParallel: scatter rows, replicate every call, gather the logits
        # on device 0 and compute the loss there.
        net = torch.nn.DataParallel(autocast_inside(model, a.device, a.precision),
                                    device_ids=list(range(a.nproc)))
    elif a.compile:
        net = torch.compile(model)
    ids, targets = (t.to(dev) for t in synthetic_batch(cfg, a.batch_size, a.seq_len))
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    elapsed, loss = train_loop(a, cfg, net, opt, ids, targets, sync, lambda: None)
    return result_json(a, cfg, elapsed, loss.item(), threads, a.nproc)


# ----------------------------------------------------------------------------------------------
# ddp: worker (one rank)
# ----------------------------------------------------------------------------------------------

def die_with_parent():
    """Linux: SIGTERM this worker when the launcher dies (even by SIGKILL)."""
    parent = os.environ.get(PARENT_ENV)
    if not parent:
        return
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != int(parent):   # the launcher died before prctl
        os._exit(1)


def run_worker(a):
    """One DDP rank; env as torchrun sets it. Rank 0 writes (or prints) the result."""
    import datetime
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cfg = load_config(a.config)
    threads = set_threads(a)
    if a.device == "cuda":
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    dist.init_process_group(a.backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=INIT_TIMEOUT_S))
    try:
        model = build_model(cfg, dev)   # same seed everywhere; DDP also broadcasts rank 0's
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if a.device == "cuda" else None)
        net = torch.compile(ddp) if a.compile else ddp
        opt = make_optimizer(ddp.module, a.lr)
        ids, targets = synthetic_batch(cfg, a.batch_size, a.seq_len)
        rows = torch.tensor(sampler_rows(a.batch_size, rank, world))
        ids, targets = ids[rows].to(dev), targets[rows].to(dev)
        sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
        elapsed, loss = train_loop(a, cfg, net, opt, ids, targets, sync, dist.barrier)
        # Outside the clock: the mean of the ranks' losses (= the global mean for equal rows).
        loss = loss.clone().reshape(1)
        dist.all_reduce(loss)
        final_loss = loss.item() / world
        if rank == 0:
            res = result_json(a, cfg, elapsed, final_loss, threads, world,
                              {"rows_per_rank": len(rows)})
            path = os.environ.get(RESULT_ENV)
            if path:
                with open(path, "w") as f:
                    json.dump(res, f)
            else:   # started by torchrun: report here
                emit(res, a.json)
        dist.barrier()
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------
# ddp: launcher
# ----------------------------------------------------------------------------------------------

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def stop_workers(procs, grace_s=3.0):
    """SIGTERM every live worker, then SIGKILL whatever is left after grace_s."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        try:
            p.terminate()
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    for p in live:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                p.kill()
            except OSError:
                pass
            p.wait()


def launch_ddp(a, argv):
    tmpdir = tempfile.mkdtemp(prefix="peer_bench_")
    result_path = os.path.join(tmpdir, "result.json")
    port = free_port()
    procs = []

    def on_signal(signum, frame):
        raise Interrupted(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        for rank in range(a.nproc):
            env = dict(os.environ)
            env.update({
                "RANK": str(rank), "WORLD_SIZE": str(a.nproc),
                "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(a.nproc),
                "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                WORKER_ENV: "1", PARENT_ENV: str(os.getpid()),
            })
            if rank == 0:
                env[RESULT_ENV] = result_path
            if a.device == "cpu" or a.nproc > 1:   # torchrun: OMP_NUM_THREADS=1 per process
                for k in THREAD_ENV:
                    env[k] = "1"
            # Own session: a terminal Ctrl-C reaches only this launcher, which stops the
            # workers; their stdout goes to our stderr so the JSON stays the last stdout line.
            procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__)] + list(argv),
                env=env, stdout=sys.stderr.fileno(), start_new_session=True))
        failed = None
        while True:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed = bad[0]
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(0.05)
        if failed:
            stop_workers(procs)
            r, c = failed
            how = f"signal {-c}" if c < 0 else f"code {c}"
            print(f"peer_bench: error: ddp rank {r} exited with {how}", file=sys.stderr)
            return None, 1
        try:
            with open(result_path) as f:
                return json.load(f), 0
        except (OSError, ValueError) as e:
            print(f"peer_bench: error: rank 0 left no result ({e})", file=sys.stderr)
            return None, 1
    except Interrupted as e:
        for s in old:
            signal.signal(s, signal.SIG_IGN)   # a second Ctrl-C must not cut the cleanup short
        stop_workers(procs)
        print(f"peer_bench: interrupted ({signal.Signals(e.signum).name}); workers stopped",
              file=sys.stderr)
        return None, 128 + e.signum
    finally:
        stop_workers(procs)
        for s, h in old.items():
            signal.signal(s, h)
        try:
            os.remove(result_path)
        except OSError:
            pass
        try:
            os.rmdir(tmpdir)
        except OSError:
            pass


# ----------------------------------------------------------------------------------------------

def emit(res, json_path):
    line = json.dumps(res)
    if json_path:
        with open(json_path, "w") as f:
            f.write(line + "\n")
    print(line, flush=True)


def failure_line(e):
    """One line for an exception: its type and the first lines of its message that say
    something (torch.compile's wrap the cause on a second line and then advice)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("Set TORCHDYNAMO_VERBOSE")][:2]
    return (f"{type(e).__name__}: " + " / ".join(lines))[:400]


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    is_worker = os.environ.get(WORKER_ENV) == "1"
    under_torchrun = (not is_worker and a.mode == "ddp"
                      and "RANK" in os.environ and "WORLD_SIZE" in os.environ
                      and "MASTER_ADDR" in os.environ)
    if is_worker:
        die_with_parent()
    try:
        check_args(a)
        limit_threads(a.device)
        sys.path.insert(0, HERE)
        if is_worker or under_torchrun:
            if under_torchrun:
                a.nproc = int(os.environ["WORLD_SIZE"])
                cfg = load_config(a.config)
                check_env(a, cfg)
            run_worker(a)
            return 0
        cfg = load_config(a.config)
        check_env(a, cfg)
    except UsageError as e:
        print(f"peer_bench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

    if a.mode == "ddp":
        res, rc = launch_ddp(a, argv)
        if rc:
            return rc
    else:
        try:
            res = run_local(a, cfg)
        except KeyboardInterrupt:
            print("peer_bench: interrupted", file=sys.stderr)
            return 130
        except Exception as e:  # PyTorch's own failure: the traceback, then one line for fanout
            traceback.print_exc()
            print(f"peer_bench: error: {failure_line(e)}", file=sys.stderr)
            return 1
    try:
        emit(res, a.json)
    except OSError as e:
        print(f"peer_bench: error: cannot write --json file: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
