"""``python -m bench gpu``: the trainer as the production run uses it, on the device at hand.

On a CUDA machine (one prepared command, under 8 minutes): andrea-120m in bf16 with
``torch.compile`` for 400 steps, checkpoints and sample audits every 100 with the console
watching; the same 400 steps again as 200 and a resume; 150 eager steps with
``run.strict_determinism`` (and 75 + a resume); then the same model eager in bf16 and in fp32
(TF32) for comparison. It prints

- tokens/s and the median step time (steps whose boundary held no audit or checkpoint),
  and tokens/s over every step (audits and checkpoints included);
- MFU = 6·N·tokens/s over the device's peak dense bf16 FLOP/s, the peak named (a table of
  datasheet figures, or ``ANDREA_PEAK_TFLOPS``), and with attention's FLOPs (6N + 12·L·T·d);
- each background checkpoint's stall (the copy into pinned host buffers) and write time,
  against the synchronous final write of the same checkpoint, and the step time while a
  write is in flight;
- the trainer's peak GPU memory (its ``stop`` event);
- an exact-resume check on the device: the main run's N steps in one go against N/2 then a
  resume to N, ``step_N.bin`` compared byte for byte; when they differ, where and by how
  much; which kernels torch warned are not deterministic; then the same with strict
  determinism (every kernel deterministic, or an error naming the one that is not), and
  what strictness costs in tokens/s;
- the console: its CPU share while it watches the run train, and ``--once`` on the run
  (its text, wall and CPU time);
- the fused AdamW kernel over the flat buffers against ``torch.optim.AdamW(fused=True)`` on
  the device, bit for bit, and whether flash attention runs there.

On CPU the same path runs with the tiny preset and few steps (CI's test sets micro), compile off
(a cold Inductor compile costs a minute on 2 CPUs; ``ANDREA_GPU_COMPILE=1`` turns it on).
Settings: ``ANDREA_GPU_DEVICE=cpu`` (force CPU), ``ANDREA_GPU_PRESET``, ``ANDREA_GPU_STEPS``,
``ANDREA_PEAK_TFLOPS``, ``ANDREA_BENCH_DIR`` (where the run directories go: andrea-120m's
checkpoints are 1.46 GB each), ``ANDREA_BENCH_REPORT`` (a file the lines are also written to).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench.common import Result
from bench.gpu_runs import (
    History,
    TrainerRun,
    checkpoint_times,
    compare_checkpoints,
    console_once,
    first_difference,
    nondeterminism_warnings,
    run_trainer,
    speed,
    start_console,
    start_trainer,
    wait_trainer,
)

# Dense (no sparsity) bf16 tensor-core peaks, FLOP/s, from NVIDIA's datasheets. The first
# name contained in torch.cuda.get_device_name() wins: specific variants come first.
PEAK_BF16_FLOPS = (
    ("GH200", 989.4e12), ("H200 NVL", 835.5e12), ("H200", 989.4e12),
    ("H100 NVL", 835.5e12), ("H100 PCIe", 756.5e12), ("H100", 989.4e12),
    ("A100", 312e12), ("L40S", 362.05e12), ("L4", 121e12), ("B200", 2250e12),
)
MFU_TARGET = 0.40
STALL_TARGET = 0.10
CONSOLE_CPU_TARGET = 0.05
# The console's share of a core is judged over a window of at least this long: over the micro
# preset's 0.7 s on CPU its start-up frames alone came to 8-10%, whatever it then cost per line.
CONSOLE_WINDOW_MIN_S = 10.0


@dataclass(frozen=True)
class Plan:
    device: str                   # "cuda" or "cpu"
    device_name: str
    preset: str
    steps: int                    # the main run
    cadence: int                  # checkpoints and sample audits
    compare_steps: int            # the eager bf16 and fp32 runs
    compile: bool
    warmup: int                   # steps left out of the speed figures
    deadline_s: float
    peak: tuple[str, float] | None    # (what it is, FLOP/s)


def make_plan() -> Plan:
    import torch

    cuda = torch.cuda.is_available() and os.environ.get("ANDREA_GPU_DEVICE", "auto") != "cpu"
    env = os.environ.get
    if cuda:
        name = torch.cuda.get_device_name()
        plan = dict(device="cuda", device_name=name, preset="andrea-120m", steps=400, cadence=100, compare_steps=150,
                    compile=True, warmup=10, deadline_s=440.0)
    else:
        name = f"cpu ({os.cpu_count()} logical CPUs, 1 torch thread)"
        plan = dict(device="cpu", device_name=name, preset="tiny", steps=40, cadence=10, compare_steps=12,
                    compile=False, warmup=3, deadline_s=300.0)
    plan["preset"] = env("ANDREA_GPU_PRESET", plan["preset"])
    if env("ANDREA_GPU_STEPS"):
        plan["steps"] = int(env("ANDREA_GPU_STEPS"))
        plan["cadence"] = max(plan["steps"] // 4, 1)
    if env("ANDREA_GPU_COMPILE"):
        plan["compile"] = env("ANDREA_GPU_COMPILE") == "1"
    return Plan(**plan, peak=_peak(name if cuda else None))


def _peak(device_name: str | None) -> tuple[str, float] | None:
    if os.environ.get("ANDREA_PEAK_TFLOPS"):
        value = float(os.environ["ANDREA_PEAK_TFLOPS"]) * 1e12
        return f"{value / 1e12:g} TFLOP/s (ANDREA_PEAK_TFLOPS)", value
    for pattern, flops in PEAK_BF16_FLOPS if device_name else ():
        if pattern in device_name:
            return f"{flops / 1e12:g} TFLOP/s ({pattern}, dense bf16, NVIDIA datasheet)", flops
    return None


class Report:
    """Every line as it is known: on stderr at once (the bench's stdout comes at the end), and
    appended to ``ANDREA_BENCH_REPORT`` when set, so a run cut short still leaves its figures."""

    def __init__(self) -> None:
        self.path = Path(os.environ["ANDREA_BENCH_REPORT"]) if os.environ.get("ANDREA_BENCH_REPORT") else None
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        line = f"# gpu [{time.monotonic() - self.started:5.0f} s] {text}"
        print(line, file=sys.stderr, flush=True)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    def left(self, plan: Plan) -> float:
        return plan.deadline_s - (time.monotonic() - self.started)


def _new_run(root: Path, name: str, plan: Plan, **run: Any) -> Path:
    """A run directory with its run.toml (built-in arms), as ``andrea-train --preset`` makes one."""
    from rundir import RunConfig, write_run_config

    run_dir = root / name
    run_dir.mkdir(parents=True)
    config = RunConfig.from_preset(plan.preset, name=name, device=plan.device, **run)
    write_run_config(run_dir, config)
    return run_dir


def _n_params(plan: Plan) -> tuple[int, int, int, int]:
    from rundir import RunConfig

    model = RunConfig.from_preset(plan.preset).model
    return model.n_params(), model.n_layer, model.block_size, model.n_embd


def _speed_lines(report: Report, plan: Plan, label: str, run: TrainerRun, cadence: int) -> dict[str, Any]:
    history = History.read(run.run_dir)
    s = speed(history, plan.warmup, cadence)
    n, layers, block, width = _n_params(plan)
    figures: dict[str, Any] = {"speed": s, "history": history}
    text = (f"{label}: {s.tokens_per_s:,.0f} tokens/s, step {s.step_s * 1e3:.1f} ms (median of {s.steps} steps after "
            f"{plan.warmup}); {s.overall_tokens_per_s:,.0f} tokens/s over every step, audits and checkpoints "
            f"included; the first step took {s.first_step_s:.1f} s{' (compiling)' if 'compile' in label else ''}")
    report.say(text)
    if plan.peak is not None:
        mfu = 6 * n * s.tokens_per_s / plan.peak[1]
        with_attention = (6 * n + 12 * layers * block * width) * s.tokens_per_s / plan.peak[1]
        figures["mfu"] = mfu
        report.say(f"{label}: MFU {100 * mfu:.1f}% (6N = 6 x {n:,} FLOP/token at {s.tokens_per_s:,.0f} tokens/s over "
                   f"the peak {plan.peak[0]}); {100 * with_attention:.1f}% with attention's 12·L·T·d; "
                   f"over every step "
                   f"{100 * 6 * n * s.overall_tokens_per_s / plan.peak[1]:.1f}%")
    else:
        report.say(f"{label}: MFU not computed: no peak bf16 FLOP/s known for {plan.device_name} "
                   "(set ANDREA_PEAK_TFLOPS)")
    stop = history.named("stop")[-1] if history.named("stop") else {}
    if "cuda_peak_allocated" in stop:
        figures["peak_memory"] = stop["cuda_peak_allocated"]
        report.say(f"{label}: peak GPU memory {stop['cuda_peak_allocated'] / 2**30:.2f} GiB allocated, "
                   f"{stop['cuda_peak_reserved'] / 2**30:.2f} GiB reserved by torch's caching allocator")
    else:
        figures["peak_memory"] = None
    figures["max_rss"] = run.max_rss
    report.say(f"{label}: the trainer's peak RSS {run.max_rss / 2**20:,.0f} MiB")
    return figures


# -- the phases ---------------------------------------------------------------------------

def device_checks(report: Report, plan: Plan) -> list[Result]:
    """In this process: the fused update against torch's AdamW on the device; flash attention."""
    import warnings

    import torch

    from trainer.determinism import configure

    configure(1, plan.device)
    device = torch.device(plan.device)
    results = []
    # Each kernel against torch running the same kernel (a target); the foreach one also against
    # torch's single-tensor path (what the two share on CPU, and need not on CUDA: information).
    for kernel, kwargs, required in (("fused", {"fused": True}, True), ("foreach", {"foreach": True}, True),
                                     ("foreach", {"foreach": False}, False)):
        same = _adamw_identical(device, kernel, kwargs)
        reference = ", ".join(f"{k}={v}" for k, v in kwargs.items())
        report.say(f"AdamW over the flat buffers, {kernel} kernel, on {plan.device}: "
                   f"{'bit-identical to' if same else 'DIFFERS from'} torch.optim.AdamW({reference}) after 10 steps")
        results.append(Result("gpu", f"{kernel} flat AdamW == torch AdamW({reference}), {plan.device}", float(same), "",
                              target="identical" if required else "", met=same if required else None))
    if device.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q = torch.randn(8, 12, 1024, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
                flash = "runs (bf16, causal, forward and backward)"
            except RuntimeError as err:
                flash = f"does NOT run: {str(err).splitlines()[0]}"
        report.say(f"flash attention on {plan.device_name}: {flash}"
                   + "".join(f"; warned: {w.message}" for w in caught))
        del q
        torch.cuda.empty_cache()           # the trainers measured next have the device to themselves
    return results


def _adamw_identical(device: Any, kernel: str, torch_kwargs: dict[str, bool]) -> bool:
    import copy

    import torch

    from rundir import RunConfig
    from trainer.model import GPT
    from trainer.optim import FlatAdamW

    torch.manual_seed(3)
    config = RunConfig.from_preset("micro")
    c = config.optimizer
    ours_model = GPT(config.model).to(device)
    theirs_model = copy.deepcopy(ours_model)
    ours = FlatAdamW(ours_model, c, kernel=kernel)
    theirs = torch.optim.AdamW(theirs_model.parameters(), lr=c.lr, betas=(c.beta1, c.beta2), eps=c.eps,
                               weight_decay=c.weight_decay, **torch_kwargs)
    x = torch.randint(0, 256, (4, 32), device=device)
    for _ in range(10):
        ours.zero_grad()
        ours_model(x, x)[1].backward()
        ours.step(ours.gather_grad())
        theirs.zero_grad()
        theirs_model(x, x)[1].backward()
        theirs.step()
    return all(torch.equal(p, q) for p, q in zip(ours_model.parameters(), theirs_model.parameters()))


def main_run(report: Report, plan: Plan, root: Path, figures: dict[str, Any]) -> None:
    """bf16 (+ compile on CUDA), checkpoints and audits at the cadence, the console watching."""
    import psutil

    label = "bf16+compile" if plan.compile else "bf16"
    run_dir = _new_run(root, "main", plan, precision="bf16", compile=plan.compile, max_steps=plan.steps,
                       checkpoint_every=plan.cadence, sample_every=plan.cadence, keep_last=2)
    report.say(f"main run: {plan.preset} {label}, {plan.steps} steps, checkpoint and audit every {plan.cadence}, "
               f"the console watching ({run_dir})")
    console, stop = start_console(run_dir, root)
    watcher = psutil.Process(console.pid)
    marks: list[tuple[float, float]] = []            # (time, console CPU seconds) at the window's ends

    def mark() -> None:                               # from the warm-up's end to the last step line
        steps = len(History.read(run_dir).steps)
        if (steps > plan.warmup and not marks) or (steps >= plan.steps and len(marks) == 1):
            try:
                cpu = watcher.cpu_times()
            except psutil.Error:                      # the console died: its exit status says so below
                return
            marks.append((time.monotonic(), cpu.user + cpu.system))

    run = wait_trainer(start_trainer(run_dir), run_dir, timeout=max(report.left(plan), 30), meanwhile=mark)
    stop.touch()
    said = console.communicate(timeout=120)[0].split()
    console_rss = int(said[-1]) if console.returncode == 0 and said else None
    if not run.ok:
        raise RuntimeError(f"the trainer: {run.problem()}")
    figures["main"] = _speed_lines(report, plan, label, run, plan.cadence)
    figures["label"] = label
    _checkpoint_lines(report, figures["main"]["history"], figures)
    _gpu_figure_lines(report, figures["main"]["history"])
    if len(marks) == 2:
        (t_a, c_a), (t_b, c_b) = marks
        window = t_b - t_a
        share = (c_b - c_a) / window
        figures["console_cpu"] = (share, window)
        rss = f"peak RSS {console_rss / 2**20:.0f} MiB" if console_rss else f"it exited {console.returncode}"
        judged = "" if console_cpu_met(share, window) is not None else \
            f" (not judged against {CONSOLE_CPU_TARGET:.0%}: the window is under {CONSOLE_WINDOW_MIN_S:.0f} s)"
        report.say(f"console while the run trains ({(plan.steps - plan.warmup) / window:.1f} steps/s appended over "
                   f"{window:.1f} s): {100 * share:.2f}% of a core, {rss}{judged}")
    text, wall, cpu = console_once(run_dir)
    figures["once"] = (wall, cpu)
    report.say(f"console --once on the run: {wall:.2f} s wall, {cpu:.2f} s CPU; it printed:")
    for line in text.rstrip().splitlines():
        report.say(f"  | {line}")


def console_cpu_met(cpu: float, window: float) -> bool | None:
    """Whether the console's share of a core over ``window`` seconds met its target; None when
    the window is too short to judge."""
    return cpu < CONSOLE_CPU_TARGET if window >= CONSOLE_WINDOW_MIN_S else None


def _checkpoint_lines(report: Report, history: History, figures: dict[str, Any]) -> None:
    times = checkpoint_times(history)
    for row in times.background + times.synchronous:
        kind = "background" if row["background"] else "synchronous"
        report.say(f"checkpoint at step {row['step']} ({kind}): held the loop {row['stall_s'] * 1e3:.1f} ms, "
                   f"write+fsync {row['write_s']:.2f} s, waited {row['waited_s']:.2f} s for the previous write")
    if times.background and times.synchronous:
        stall = statistics.median(r["stall_s"] for r in times.background)
        sync = times.synchronous[-1]["stall_s"]
        figures["stall"] = (stall, sync, statistics.median(r["write_s"] for r in times.background))
        report.say(f"checkpoint stall: background {stall * 1e3:.1f} ms (median) against {sync:.2f} s for the "
                   f"synchronous write of the same checkpoint: {stall / sync:.3f}x")
    s = figures["main"]["speed"]
    if s.during_write_s is not None:
        report.say(f"step time while a background write is in flight: {s.during_write_s * 1e3:.1f} ms "
                   f"(median), {s.step_s * 1e3:.1f} ms otherwise")


def _gpu_figure_lines(report: Report, history: History) -> None:
    """What the step lines' GPU figures (NVML, every state_every steps) and the eval lines said."""
    rows = [row for row in history.steps.values() if "gpu_util" in row or "gpu_mem_used" in row]
    if rows:
        def median(key: str) -> str:
            values = [row[key] for row in rows if key in row]
            return f"{statistics.median(values):g}" if values else "-"
        peak_mem = max((row.get("gpu_mem_used", 0) for row in rows), default=0)
        report.say(f"GPU figures on {len(rows)} of {len(history.steps)} step lines: utilisation {median('gpu_util')}% "
                   f"(median), power {median('gpu_power_w')} W, temperature {median('gpu_temp_c')} C, memory used "
                   f"up to {peak_mem / 2**30:.1f} GiB")
    else:
        report.say(f"no GPU figures on the {len(history.steps)} step lines (none on CPU; see trainer.log on CUDA)")
    evals = history.named("eval")
    if evals:
        report.say(f"{len(evals)} eval lines: held-out loss {evals[0]['eval_loss']} at step {evals[0]['step']}, "
                   f"{evals[-1]['eval_loss']} at step {evals[-1]['step']} ({evals[-1]['windows']} windows)")


def comparison_runs(report: Report, plan: Plan, root: Path, figures: dict[str, Any]) -> None:
    """The same model eager: bf16 (when the main run compiled) and fp32 (TF32 on CUDA)."""
    runs = ([("bf16 eager", "bf16")] if plan.compile else []) + [("fp32 eager", "fp32")]
    for label, precision in runs:
        if report.left(plan) < 30:
            report.say(f"{label}: skipped, {report.left(plan):.0f} s left")
            continue
        run_dir = _new_run(root, label.replace(" ", "-"), plan, precision=precision, max_steps=plan.compare_steps,
                           checkpoint_every=plan.compare_steps, sample_every=plan.compare_steps, keep_last=1)
        run = run_trainer(run_dir, timeout=report.left(plan))
        if not run.ok:
            raise RuntimeError(f"{label}: the trainer: {run.problem()}")
        figures[label] = _speed_lines(report, plan, label, run, plan.compare_steps)
        shutil.rmtree(run_dir)


def exact_resume(report: Report, plan: Plan, root: Path, figures: dict[str, Any]) -> None:
    """The main run's N steps in one go against N/2 then a resume to N, in the same settings
    (audits and checkpoints do not change the trajectory, so the resumed run writes fewer)."""
    from rundir.layout import checkpoint_name

    n, half = plan.steps, plan.steps // 2
    straight = root / "main"
    settings = dict(precision="bf16", compile=plan.compile, max_steps=n, checkpoint_every=half, sample_every=half,
                    keep_last=1)
    report.say(f"exact resume: the main run's {n} steps in one go against {half} then a resume to {n}")
    resumed = _new_run(root, "exact-resumed", plan, **settings)
    runs = [run_trainer(resumed, "--max-steps", str(half), timeout=report.left(plan)),
            run_trainer(resumed, timeout=report.left(plan))]
    for run in runs:
        if not run.ok:
            raise RuntimeError(f"exact resume: the trainer: {run.problem()}")
    name = checkpoint_name(n)
    same = compare_checkpoints(straight / name, resumed / name)
    [resume] = History.read(resumed).named("resume")
    said = "exactly" if resume["exact"] else f"NOT exactly ({'; '.join(resume['fresh'])})"
    figures["exact"] = same.identical
    if same.identical:
        report.say(f"exact resume on {plan.device}: {name} byte-identical (the trainer said it resumed {said})")
    else:
        where = first_difference(History.read(straight), History.read(resumed), half)
        report.say(f"exact resume on {plan.device}: {name} DIFFERS: values differing {same.differing}, largest "
                   f"difference {same.max_abs}; first re-run step that differs: {where}; the trainer said it "
                   f"resumed {said}")
    warned = nondeterminism_warnings((root / "main.stderr").read_text(errors="replace"), *(r.stderr for r in runs))
    for line in warned:
        report.say(f"torch warned (not deterministic): {line}")
    if not warned:
        report.say("torch warned of no kernel without a deterministic implementation")
    shutil.rmtree(resumed)


def strict_determinism(report: Report, plan: Plan, root: Path, figures: dict[str, Any]) -> None:
    """On CUDA: run.strict_determinism = true, eager: whether every kernel has a deterministic
    implementation, whether the resume is then exact, and its speed (against bf16 eager)."""
    from rundir.layout import checkpoint_name

    if plan.device != "cuda":
        report.say("strict determinism: nothing to measure on CPU (always strict there)")
        return
    n, half = plan.compare_steps, plan.compare_steps // 2
    settings = dict(precision="bf16", strict_determinism=True, max_steps=n, checkpoint_every=half,
                    sample_every=half, keep_last=1)
    report.say(f"strict determinism (eager bf16): {n} steps in one go against {half} then a resume to {n}")
    straight = _new_run(root, "strict-straight", plan, **settings)
    resumed = _new_run(root, "strict-resumed", plan, **settings)
    for run_dir, flags in ((straight, ()), (resumed, ("--max-steps", str(half))), (resumed, ())):
        run = run_trainer(run_dir, *flags, timeout=report.left(plan))
        if not run.ok:
            raise RuntimeError(f"strict determinism: the trainer: {run.problem()}")
        if run_dir is straight:
            figures["bf16 strict"] = _speed_lines(report, plan, "bf16 eager, strict determinism", run, half)
    name = checkpoint_name(n)
    same = compare_checkpoints(straight / name, resumed / name)
    figures["strict exact"] = same.identical
    report.say(f"strict determinism: {name} " + ("byte-identical after the resume" if same.identical else
                                                f"DIFFERS after the resume: values differing {same.differing}"))
    for run_dir in (straight, resumed):
        shutil.rmtree(run_dir)


# -- the table ------------------------------------------------------------------------

def results(plan: Plan, figures: dict[str, Any]) -> list[Result]:
    cuda = plan.device == "cuda"
    out = []
    main = figures.get("main")
    if main:
        s, label = main["speed"], figures["label"]
        fp32 = figures.get("fp32 eager")
        base = fp32["speed"].tokens_per_s if fp32 else None
        out.append(Result("gpu", f"tokens/s, {plan.preset} {label}, {plan.device_name}", s.tokens_per_s, "tok/s",
                          base, "fp32 eager" if base else ""))
        if "bf16 eager" in figures:
            eager = figures["bf16 eager"]["speed"].tokens_per_s
            out.append(Result("gpu", f"tokens/s, {plan.preset} {label}", s.tokens_per_s, "tok/s", eager, "bf16 eager"))
        out.append(Result("gpu", f"step time, {plan.preset} {label}", s.step_s, "s"))
        if "mfu" in main:
            out.append(Result("gpu", f"MFU (6N over {plan.peak[0].split(' (')[0]}), {label}", 100 * main["mfu"], "%",
                              target=">= 40%" if cuda else "", met=main["mfu"] >= MFU_TARGET if cuda else None))
        if main["peak_memory"] is not None:
            out.append(Result("gpu", "peak GPU memory (allocated)", main["peak_memory"] / 2**30, "GiB"))
        else:
            out.append(Result("gpu", "the trainer's peak RSS", main["max_rss"] / 2**20, "MiB"))
    if "stall" in figures:
        stall, sync, write = figures["stall"]
        out.append(Result("gpu", "checkpoint stall, background" + (" (pinned)" if cuda else ""), stall, "s", sync,
                          "synchronous write", stall / sync, "<= 0.10x" if cuda else "",
                          stall / sync <= STALL_TARGET if cuda else None))
        out.append(Result("gpu", "checkpoint write+fsync, background", write, "s"))
    if "exact" in figures:
        out.append(Result("gpu", f"exact resume {plan.steps} vs {plan.steps // 2}+resume, {plan.device}",
                          float(figures["exact"]), "", target="byte-identical", met=figures["exact"]))
    if "bf16 strict" in figures:
        strict = figures["bf16 strict"]["speed"].tokens_per_s
        eager = figures["bf16 eager"]["speed"].tokens_per_s if "bf16 eager" in figures else None
        out.append(Result("gpu", "tokens/s, bf16 eager, strict determinism", strict, "tok/s", eager,
                          "bf16 eager, warnings only" if eager else ""))
    if "strict exact" in figures:
        out.append(Result("gpu", f"exact resume, strict determinism, {plan.device}", float(figures["strict exact"]), "",
                          target="byte-identical", met=figures["strict exact"]))
    if "console_cpu" in figures:
        cpu, window = figures["console_cpu"]
        met = console_cpu_met(cpu, window)
        out.append(Result("gpu", f"console CPU while the run trains ({window:.0f} s)", 100 * cpu, "% core",
                          target="" if met is None else f"< {CONSOLE_CPU_TARGET:.0%}", met=met))
    if "once" in figures:
        out.append(Result("gpu", "console --once on the run (wall)", figures["once"][0], "s"))
    return out


PHASES: tuple[tuple[str, float, Callable[..., None]], ...] = (
    ("main run", 60.0, main_run), ("exact resume", 60.0, exact_resume),
    ("strict determinism", 60.0, strict_determinism), ("comparison runs", 30.0, comparison_runs))


def run() -> list[Result]:
    import torch

    report = Report()
    plan = make_plan()
    report.say(f"device {plan.device_name}; torch {torch.__version__}, CUDA {torch.version.cuda}, Python "
               f"{sys.version.split()[0]}; peak bf16: {plan.peak[0] if plan.peak else 'unknown'}; "
               f"deadline {plan.deadline_s:.0f} s")
    out = device_checks(report, plan)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-gpu-", dir=os.environ.get("ANDREA_BENCH_DIR")) as tmp:
        for name, needs, phase in PHASES:
            if report.left(plan) < needs:
                report.say(f"{name}: SKIPPED, {report.left(plan):.0f} s left of {plan.deadline_s:.0f}")
                out.append(Result("gpu", f"{name}: skipped (out of time)", 0.0, "", met=False))
                continue
            try:
                phase(report, plan, Path(tmp), figures)
            except Exception as err:          # one phase failing still lets the others report
                report.say(f"{name}: FAILED: {type(err).__name__}: {err}")
                out.append(Result("gpu", f"{name}: failed ({type(err).__name__})", 0.0, "", met=False))
    report.say(f"done in {time.monotonic() - report.started:.0f} s")
    return out + results(plan, figures)
