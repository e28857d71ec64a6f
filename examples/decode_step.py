"""One decode step of two models built from dualops ops, timed per mode and per op.

* ``mla``: a DeepSeek-V3-shaped decoder layer: MLA decode on a paged latent cache (bf16 or a
  quantized format of the op schema), a router (sigmoid or softmax, top-k), grouped GEMMs for the
  routed experts (bf16 or fp8 blockwise), a shared expert.
* ``gqa``: a GQA model's attention block (incremental flash attention on a paged K/V cache).

Random weights, nothing downloaded. Realistic sizes by default (h_q 128, d_qk 576, 256 experts,
top-8, hidden 7168, expert dim 2048); ``--size small`` / ``--size tiny`` for small GPUs and the
CPU backends (reference, ascend_sim).

    python examples/decode_step.py --mode all                      # one GPU, every mode, both models
    python examples/decode_step.py --size small --backend reference --mode eager
    torchrun --nproc-per-node 2 examples/decode_step.py --size small --tp 2 --check
    torchrun --nproc-per-node 2 examples/decode_step.py --size small --ep 2 --check
    python examples/decode_step.py --size tiny --check-backends reference,ascend_sim

Modes: eager; compile (torch.compile(fullgraph=True)); graph (one CUDA graph per step, the MLA plan
made on the host before each replay and copied into the graph's plan buffer); graph-device-plan
(the plan made on the GPU inside the graph: no host work but the replay).
See docs/decode_step.md."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dualops  # noqa: E402
from decode_layers import SIZES, GqaLayer, Init, MlaMoeLayer, Timer, mla_formats, start_lengths  # noqa: E402
from decode_moe import shard  # noqa: E402

MODES = ("eager", "compile", "graph", "graph-device-plan")
MODELS = ("mla", "gqa")


def parity(actual: torch.Tensor, expected: torch.Tensor, name: str, atol=None, budget=None, cos_eps=None):
    """The one place the example applies dualops' parity method (docs/parity.md); budget: the
    rounding budget the reference computes for the call (``return_budget=True``)."""
    return dualops.testing.assert_close_parity(actual, expected, atol=atol, cos_eps=cos_eps, budget=budget,
                                               name=name)


def step_parity(actual: torch.Tensor, expected: torch.Tensor, name: str, budget=None):
    """Parity of a layer's output: the residual stream plus the layer's contributions, summed in
    bf16. Where they cancel, a one-rounding difference upstream becomes a large relative error of a
    small element, so the absolute bound is two bf16 roundings (2 * 2^-8) of the stream's largest
    value. Each backend rounds the softmax weights, the attention output and the projections'
    inputs to bf16 at its own points, so the cosine bound is that of a relative RMS difference of
    four bf16 roundings (1 - cos ~ r^2 / 2 with r = 4 * 2^-8); the relative bound stays. budget:
    per element, what the step's discontinuities make of one rounding upstream (fp8_sensitivity)."""
    return parity(actual, expected, name, atol=2 * 2.0 ** -8 * float(expected.float().abs().max()),
                  cos_eps=(4 * 2.0 ** -8) ** 2 / 2, budget=budget)


def fp8_sensitivity(model: str, cfg, want: torch.Tensor, *, device, backend, seed=0, forced_ids=None, trials=2):
    """Per element, the largest change of the step's output ``want`` (that of Step(model, cfg,
    device=device, backend=backend, seed=seed) with forced_ids) when its input moves by one bf16
    rounding (each element times 1 +- 2^-8, random signs), on ``backend``. With fp8 experts the
    expert inputs are rounded to e4m3 in 1x128 blocks scaled by their largest value: a
    rounding-level difference upstream, as two backends make, can move an activation across an e4m3
    rounding boundary or change a block's scale, and the output then moves by a fraction of an e4m3
    step, far beyond two bf16 roundings of the output. This measures that on the same weights and
    inputs (the parity method's principle: the bound is computed by the reference, for these
    inputs); where nothing is quantized it is about one bf16 rounding."""
    gen = torch.Generator().manual_seed(seed + 1)
    worst = torch.zeros(want.shape, dtype=torch.float32, device=want.device)
    for _ in range(trials):
        step = Step(model, cfg, device=device, backend=backend, seed=seed)
        sign = torch.randint(0, 2, step.x.shape, generator=gen).to(step.x.device) * 2 - 1
        step.x = (step.x.float() * (1 + sign * 2.0 ** -8)).to(step.x.dtype)
        out, _, _ = step.eager(forced_ids=forced_ids)
        worst = torch.maximum(worst, (out.float() - want.float()).abs())
    return worst


class Step:
    """One model's decode step on this process: the layer (this rank's heads, experts and requests),
    its input hidden states and the per-request lengths, on the host and on the device."""

    def __init__(self, model: str, cfg, *, device, backend=None, seed=0, tp_group=None, ep_group=None):
        world = dist.get_world_size(ep_group) if ep_group is not None else 1
        rank = dist.get_rank(ep_group) if ep_group is not None else 0
        self.rows = shard(cfg.batch, world, rank)  # expert parallelism splits the requests (data-parallel attention)
        init = Init(seed, device, gen_device="cpu" if cfg.hidden <= 1024 else None)
        self.model, self.cfg, self.device, self.backend = model, cfg, torch.device(device), backend
        if model == "mla":
            self.layer = MlaMoeLayer(cfg, init, batch_range=self.rows, tp_group=tp_group, ep_group=ep_group,
                                     backend=backend)
            hidden = cfg.hidden
        else:
            self.layer = GqaLayer(cfg, init, batch_range=self.rows, tp_group=tp_group, backend=backend)
            hidden = cfg.gqa_hidden
        self.x = init.randn(f"{model}.x", (cfg.batch, hidden))[self.rows[0]:self.rows[1]].contiguous()
        self.start = start_lengths(cfg, seed)[self.rows[0]:self.rows[1]].clone()
        self.lens_host = self.start.clone()
        self.lens = self.start.to(self.device)
        self.plan_device = {"ascend_sim": "ascend_sim"}.get(backend, self.device)

    def reset(self, lens=None):
        """Back to the starting lengths (or the given ones): the next step rewrites the same slots."""
        self.lens_host.copy_(self.start if lens is None else lens)
        self.lens.copy_(self.lens_host)

    def advance(self):
        self.lens_host += 1
        self.lens.add_(1)

    def host_plan(self):
        if self.model != "mla":
            return None
        return self.layer.plan(self.lens_host + 1, device=self.plan_device)

    def eager(self, timer=None, forced_ids=None):
        """One step; returns (output [rows, hidden], expert ids, router scores)."""
        if timer is not None:
            timer.start()
        plan = self.host_plan()
        if timer is not None:
            timer.lap("MLA plan (host)" if plan is not None else "step set-up")
        out = self.layer(self.x, self.lens, plan, timer, forced_ids)
        if timer is not None:
            timer.stop()
        self.advance()
        return out

    def compiled(self, compile_backend: str):
        fn = torch.compile(lambda x, lens, plan: self.layer(x, lens, plan), fullgraph=True,
                           backend=compile_backend)

        def run():
            plan = self.host_plan()
            out = fn(self.x, self.lens, plan.pack() if plan is not None else None)
            self.advance()
            return out
        return run

    def graph(self, device_plan: bool):
        """A replay function of one CUDA graph of the whole step. device_plan: the MLA plan is made
        inside the graph (get_mla_metadata(on_device=True)); else made on the host before each replay
        and copied into the graph's plan buffer."""
        if self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {self.device}")
        static_plan = None
        if self.model == "mla" and not device_plan:
            static_plan = self.host_plan().pack().to(self.device)

        def body():
            plan = static_plan
            if self.model == "mla" and device_plan:
                plan = self.layer.plan(self.lens + 1, on_device=True)
            return self.layer(self.x, self.lens, plan)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: lazy set-up (workspaces, kernel attributes) outside the capture
            body()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = body()

        def run():
            if static_plan is not None:
                packed = self.host_plan().pack()
                if packed.numel() != static_plan.numel():
                    raise RuntimeError(f"the host plan holds {packed.numel()} ints, the captured one "
                                       f"{static_plan.numel()}")
                static_plan.copy_(packed, non_blocking=True)
            graph.replay()
            self.advance()
            return out
        return run

    def runner(self, mode: str, compile_backend: str = "inductor"):
        """A function running one step in ``mode``; it returns (output, expert ids, router scores)."""
        if mode == "eager":
            return self.eager
        if mode == "compile":
            return self.compiled(compile_backend)
        return self.graph(device_plan=mode == "graph-device-plan")


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _warm_runner(step: Step, mode: str, *, warmup: int, compile_backend: str):
    """The step's runner in ``mode`` after ``warmup`` steps, with the lengths back at the start."""
    step.reset()
    run = step.runner(mode, compile_backend)
    for _ in range(warmup):
        run()
    step.reset()
    _sync(step.device)
    return run


def time_mode(step: Step, mode: str, *, warmup: int, iters: int, compile_backend: str) -> float:
    """Mean milliseconds per step (the lengths grow by one token per step, as in decoding)."""
    run = _warm_runner(step, mode, warmup=warmup, compile_backend=compile_backend)
    t0 = time.perf_counter()
    for _ in range(iters):
        run()
    _sync(step.device)
    return (time.perf_counter() - t0) * 1e3 / iters


def time_ops(step: Step, *, iters: int) -> dict[str, float]:
    """Mean milliseconds of each op of an eager step (events between the ops)."""
    step.reset()
    step.eager()
    timer = Timer(step.device)
    step.reset()
    for _ in range(iters):
        step.eager(timer)
    return {k: v / iters for k, v in timer.totals.items()}


def profile_mode(step: Step, mode: str, *, iters: int, compile_backend: str, rows: int = 12) -> str:
    """torch.profiler's table of ``iters`` steps in ``mode`` (after a warm-up): the operators and,
    on a GPU, the kernels that take the most time (device time on a GPU, CPU time otherwise), to
    see where one mode's step differs from another's."""
    from torch.profiler import ProfilerActivity, profile

    cuda = step.device.type == "cuda"
    run = _warm_runner(step, mode, warmup=2, compile_backend=compile_backend)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(iters):
            run()
        _sync(step.device)
    sort = "device_time_total" if cuda else "cpu_time_total"
    return f"{step.model}, {mode}: {iters} steps, by {sort}\n" + prof.key_averages().table(
        sort_by=sort, row_limit=rows, max_name_column_width=60)


def table(model: str, modes: dict[str, float], ops: dict[str, float]) -> str:
    lines = [f"| {model} | ms / step |", "|---|---|"]
    lines += [f"| {m} | {ms:.3f} |" for m, ms in modes.items()]
    total = sum(ops.values())
    lines += ["", f"| {model}: op (eager) | ms | share of step |", "|---|---|---|"]
    lines += [f"| {name} | {ms:.3f} | {100 * ms / total:.1f} % |" for name, ms in ops.items()]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- checks


def check_sharded(model: str, cfg, *, device, backend, tp_group, ep_group, seed=0):
    """This rank's part of the sharded step against the same step in one process (built here in full)."""
    single = Step(model, cfg, device=device, backend=backend, seed=seed)
    want, ids, scores = single.eager()
    part = Step(model, cfg, device=device, backend=backend, seed=seed, tp_group=tp_group, ep_group=ep_group)
    r0, r1 = part.rows
    got, _, got_scores = part.eager(forced_ids=None if ids is None else ids[r0:r1])
    if scores is not None:
        parity(got_scores.to(torch.bfloat16), scores[r0:r1].to(torch.bfloat16), f"{model} router scores")
    return step_parity(got, want[r0:r1], f"{model} step output")


def check_backends(model: str, cfg, backends: list[str], *, device, seed=0):
    """The same step on each backend against the first one's (the cross-hardware check). Each
    backend runs on its own device: cuda on the GPU, ascend_sim on the CPU, reference on ``device``."""
    results = []
    first = None
    for b in backends:
        dev = {"cuda": "cuda", "ascend_sim": "cpu"}.get(b, device)
        out, ids, scores = Step(model, cfg, device=dev, backend=b, seed=seed).eager(
            forced_ids=None if first is None or first[1] is None else first[1].to(dev))
        if first is None:
            first = (out, ids, scores)
            continue
        if scores is not None:
            parity(scores.to(torch.bfloat16), first[2].to(scores.device, torch.bfloat16),
                   f"{model} router scores, {b} vs {backends[0]}")
        budget = None
        if model == "mla" and cfg.moe_dtype == "fp8":
            budget = fp8_sensitivity(model, cfg, first[0], device=first[0].device, backend=backends[0],
                                     seed=seed, forced_ids=first[1]).to(out.device)
        results.append((b, step_parity(out, first[0].to(out.device), f"{model} step output, {b} vs {backends[0]}",
                                       budget=budget)))
    return results


# ------------------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=(*MODELS, "all"), default="all")
    p.add_argument("--mode", choices=(*MODES, "all"), default="eager",
                   help="all: every mode the device has (graphs need CUDA)")
    p.add_argument("--size", choices=tuple(SIZES), default="full")
    p.add_argument("--small", action="store_const", const="small", dest="size", help="same as --size small")
    p.add_argument("--backend", default=None, help="dualops backend (default: by device)")
    p.add_argument("--device", default=None,
                   help="default: cuda when there is a GPU and --backend names no CPU backend, else cpu")
    p.add_argument("--kv-format", choices=mla_formats(), default="bf16", help="MLA cache format")
    p.add_argument("--moe-dtype", choices=("bf16", "fp8"), default="bf16")
    p.add_argument("--moe-layout", choices=("contiguous", "masked"), default="contiguous")
    p.add_argument("--router", choices=("sigmoid", "softmax"), default="sigmoid")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--context", type=int, default=None, help="mean cached tokens per request")
    p.add_argument("--tp", type=int, default=1, help="shard attention heads over this many processes")
    p.add_argument("--ep", type=int, default=1, help="shard experts (and requests) over this many processes")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile-backend", default="inductor")
    p.add_argument("--profile", action="store_true",
                   help="also print torch.profiler's top operators / kernels of each mode's step")
    p.add_argument("--check", action="store_true", help="check the sharded step against one process")
    p.add_argument("--check-backends", default=None, help="comma-separated backends to compare, first = baseline")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def setup(args):
    """(device, tp group, ep group); starts torch.distributed under torchrun (NCCL on GPUs, else gloo)."""
    gpu = torch.cuda.is_available() and args.backend not in ("reference", "ascend_sim")
    device = torch.device(args.device or ("cuda" if gpu else "cpu"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    for name in ("batch", "context", "iters"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1, got {getattr(args, name)}")
    for name in ("tp", "ep"):
        if getattr(args, name) not in (1, world):
            raise ValueError(f"--{name} must be 1 or the number of processes ({world}), got {getattr(args, name)}")
    if args.tp > 1 and args.ep > 1:
        raise ValueError("--tp and --ep shard the same processes; give one of them")
    if world == 1:
        return device, None, None
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    group = dist.group.WORLD
    return device, group if args.tp > 1 else None, group if args.ep > 1 else None


def main(argv=None):
    args = parse_args(argv)
    device, tp_group, ep_group = setup(args)
    rank = dist.get_rank() if dist.is_initialized() else 0
    cfg = SIZES[args.size]
    if args.ep > (args.batch or cfg.batch):
        raise ValueError(f"--ep {args.ep} splits the requests over {args.ep} processes: give at least as many "
                         f"requests (--batch), got {args.batch or cfg.batch}")
    cfg = dataclasses.replace(cfg, kv_format=args.kv_format, moe_dtype=args.moe_dtype, moe_layout=args.moe_layout,
                              router=args.router, batch=args.batch or cfg.batch, context=args.context or cfg.context,
                              steps=args.warmup + args.iters + 1)
    models = MODELS if args.model == "all" else (args.model,)
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"# decode step, size {args.size}, {cfg}, backend {args.backend or 'by device'}, device {device}, "
        f"tp {args.tp}, ep {args.ep}")
    try:
        for model in models:
            if args.check_backends:
                for b, c in check_backends(model, cfg, args.check_backends.split(","), device=device, seed=args.seed):
                    say(f"{model}: {b} agrees with {args.check_backends.split(',')[0]}: {c}")
                continue
            if args.check:
                c = check_sharded(model, cfg, device=device, backend=args.backend, tp_group=tp_group,
                                  ep_group=ep_group, seed=args.seed)
                print(f"{model} rank {rank}: sharded step matches one process: {c}")
                continue
            step = Step(model, cfg, device=device, backend=args.backend, seed=args.seed, tp_group=tp_group,
                        ep_group=ep_group)
            modes = MODES if args.mode == "all" else (args.mode,)
            if args.mode == "all" and device.type != "cuda":
                modes = ("eager", "compile")
            times = {m: time_mode(step, m, warmup=args.warmup, iters=args.iters,
                                  compile_backend=args.compile_backend) for m in modes}
            say(table(model, times, time_ops(step, iters=args.iters)))
            if args.profile:
                for m in modes:
                    say(profile_mode(step, m, iters=min(args.iters, 5), compile_backend=args.compile_backend))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
