"""The trainer under torchrun: 2 processes, gloo on CPU, the micro preset (issue 7).

- Exact resume at the same world size: 200 steps in one go and 100 + a resume to 200
  give the same ``step_000200.bin``; at another world size the resume restores
  weights, m, v and says what is not exact.
- Signals to the recorded process (rank 0's worker): SIGUSR1 gives one checkpoint at one
  step and training goes on; SIGTERM gives one checkpoint at the last step and a clean
  exit of every rank and of torchrun. The console attaches (``--once``, ``--json``),
  checkpoints (``--checkpoint``), pivots (relaunching through run.toml's ``run.launch``,
  torchrun) and stops (``--stop``) the DDP run unchanged.
- SIGTERM to the torchrun agent (it forwards it to every worker): the ranks agree, one
  checkpoint, every worker exits cleanly.
- FlatAdamW under DDP: DDP's averaged gradient buckets land in ``p.grad``, the flat
  weights stay the parameters' storage; the rank-ordered comm hook used beyond two
  ranks gives the same mean. (Beyond two ranks, bit-exact resume was checked by hand
  with 4 ranks: too slow for 2 cores in CI.)
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch

from console.actions.supervise import launch_command, start_trainer
from rundir import inspect_checkpoint, load_run_config, read_trainer_record, write_run_config
from rundir.checkpoint import read_sidecar
from tests.trainer.trainer_runs import ROOT, events, run_trainer, step_lines, stop_process, wait_for, without_time

NPROC = 2
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={NPROC}",
            "-m", "trainer"]
CONSOLE = [sys.executable, "-m", "console"]


def torchrun_cmd(run_dir: Path, *flags: str) -> list[str]:
    return [*TORCHRUN, str(run_dir), *flags]


def run_torchrun(run_dir: Path, *flags: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(torchrun_cmd(run_dir, *flags), cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def start_torchrun(run_dir: Path, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(torchrun_cmd(run_dir, *flags), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def console(run_dir: Path, *flags: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([*CONSOLE, str(run_dir), *flags], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def last_step(run_dir: Path) -> int:
    lines = step_lines(run_dir)
    return lines[-1]["step"] if lines else 0


def assert_clean(result_or_stderr: str) -> None:
    """No worker failed: torchrun reports a failed worker with its error summary."""
    for bad in ("Failures:", "trainer failed", "RankDesync", "ChildFailedError"):
        assert bad not in result_or_stderr, result_or_stderr[-3000:]


def stop_recorded(run_dir: Path) -> None:
    """Teardown of a detached DDP run: SIGTERM its recorded rank-0 worker and wait for it."""
    record, _ = read_trainer_record(run_dir)
    if record is None:
        return
    try:
        proc = psutil.Process(record.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    except psutil.Error:
        pass


def test_resume_is_bit_exact_at_the_same_world_size_and_says_what_is_not_at_another(trainer_run):
    in_one_go = trainer_run("in-one-go")
    r = run_torchrun(in_one_go, "--max-steps", "200", "--eval-every", "0")     # no held-out eval here
    assert r.returncode == 0, r.stderr[-3000:]
    assert_clean(r.stderr)

    stopped = trainer_run("stopped")
    r = run_torchrun(stopped, "--max-steps", "100")
    assert r.returncode == 0, r.stderr[-3000:]
    r = run_torchrun(stopped, "--max-steps", "200")
    assert r.returncode == 0, r.stderr[-3000:]
    assert_clean(r.stderr)

    # The stopped run evaluated (rank 0 alone, at the checkpoint cadence) and trained the same.
    name = "step_000200.bin"
    assert (stopped / name).read_bytes() == (in_one_go / name).read_bytes()
    assert [e["step"] for e in events(stopped, "eval")] == [100, 200] and not events(in_one_go, "eval")
    assert without_time(step_lines(stopped)) == without_time(step_lines(in_one_go))
    [resume] = events(stopped, "resume")
    assert resume["from_step"] == 100 and resume["exact"] and resume["world_size"] == NPROC
    sidecar, _ = read_sidecar(stopped / "step_000100.json")
    assert sidecar.world_size == NPROC
    # Tokens count the global batch: every rank read its share of batch_size windows.
    config = load_run_config(stopped)
    assert step_lines(stopped)[-1]["tokens"] == 200 * config.optimizer.batch_size * config.model.block_size
    assert not (stopped / ".trainer.json").exists()

    # One process resumes the 2-process checkpoint: weights, m, v, samplers, bandit and
    # RNG are restored (the same arm, the same batch, the same loss up to rounding) and
    # the resume event says what is not exact.
    r = run_trainer(stopped, "--max-steps", "101", "--resume", "step_000100.bin")
    assert r.returncode == 0, r.stderr
    resume = events(stopped, "resume")[-1]
    assert resume["exact"] is False and resume["world_size"] == 1
    assert any("2 processes wrote it, 1 now" in f for f in resume["fresh"])
    assert "2 processes wrote it, 1 now" in (stopped / "trainer.log").read_text()
    ddp_101 = next(s for s in step_lines(in_one_go) if s["step"] == 101)
    one_101 = step_lines(stopped)[-1]
    assert one_101["step"] == 101 and one_101["arm"] == ddp_101["arm"]
    # DDP averaged the two shares' gradients: the full batch's gradient, up to rounding.
    assert abs(one_101["loss"] - ddp_101["loss"]) <= 1e-5 * abs(ddp_101["loss"])
    assert abs(one_101["grad_norm"] - ddp_101["grad_norm"]) <= 1e-4 * abs(ddp_101["grad_norm"])


def test_signals_to_the_recorded_process_and_the_console_checkpoint_pivot_and_stop(trainer_run):
    run = trainer_run("signalled")
    proc = start_torchrun(run, "--checkpoint-every", "100000")
    try:
        wait_for(lambda: last_step(run) >= 20, timeout=120, what="20 steps")
        record, _ = read_trainer_record(run)
        # The record names rank 0's worker, a child of the torchrun agent, not the agent.
        assert record is not None and record.pid != proc.pid
        assert record.rank == 0 and record.world_size == NPROC
        assert record.launcher_pid == proc.pid
        assert psutil.Process(record.pid).ppid() == proc.pid

        # The console attaches: the trainer is running, verified.
        r = console(run, "--json")
        assert r.returncode == 0, r.stderr
        trainer = json.loads(r.stdout)["trainer"]
        assert trainer["state"] == "running" and trainer["pid"] == record.pid, trainer
        r = console(run, "--once")
        assert r.returncode == 0 and f"running · pid {record.pid}" in r.stdout, r.stdout

        # SIGUSR1 (twice) to the recorded process: one checkpoint, at one step, and on.
        os.kill(record.pid, signal.SIGUSR1)
        os.kill(record.pid, signal.SIGUSR1)
        [usr1] = wait_for(lambda: events(run, "checkpoint"), what="the SIGUSR1 checkpoint")
        assert usr1["reason"] == "signal" and inspect_checkpoint(run / usr1["path"]).status == "complete"
        wait_for(lambda: last_step(run) >= usr1["step"] + 10, what="training after SIGUSR1")
        assert proc.poll() is None
        # The console's --checkpoint: the same, through verification.
        r = console(run, "--checkpoint")
        assert r.returncode == 0, r.stdout + r.stderr
        checkpoints = events(run, "checkpoint")
        assert len(checkpoints) == 2 and checkpoints[1]["step"] > usr1["step"]

        # SIGTERM to the recorded process: every rank stops at the same step, one checkpoint
        # there, every rank and torchrun exit 0.
        os.kill(record.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err[-3000:]
    assert_clean(err)
    assert not (run / ".trainer.json").exists()
    stopped_at = last_step(run)
    final = events(run, "checkpoint")[-1]
    assert final["step"] == stopped_at and final["reason"] == "signal"
    assert [e["step"] for e in events(run, "checkpoint")] == sorted({e["step"] for e in events(run, "checkpoint")})
    assert events(run, "stop")[-1]["reason"] == "signal"
    signalled = [e for e in events(run, "signal") if e["signal"] == "SIGTERM"]
    assert {e["step"] for e in signalled} == {stopped_at}

    # The pivot relaunches through run.toml's run.launch: torchrun again.
    config = load_run_config(run)
    config.run.launch = [*TORCHRUN, "{run_dir}", "--checkpoint-every", "100000"]
    write_run_config(run, config)
    assert launch_command(run)[:len(TORCHRUN)] == TORCHRUN
    child = start_trainer(run).child              # what the console's --start runs: detached, into trainer.log
    try:
        wait_for(lambda: last_step(run) > stopped_at + 10, timeout=120, what="the relaunched run training")
        r = console(run, "--pivot", "--cap", "prose=0.6", "--yes")
        assert r.returncode == 0, r.stdout + r.stderr
        assert child.wait(timeout=60) == 0         # the pivot's SIGTERM: every rank and torchrun exit 0
        [pivot] = events(run, "pivot")
        resumes = events(run, "resume")
        assert resumes[-1]["fresh_bandit"] and resumes[-1]["world_size"] == NPROC
        assert load_run_config(run).arms["prose"].cap == 0.6
        wait_for(lambda: last_step(run) >= pivot["step"] + 5, timeout=120, what="training after the pivot")
        record, _ = read_trainer_record(run)
        assert record is not None and record.world_size == NPROC
        # --stop: SIGTERM to the recorded process; the console sees it exit cleanly.
        r = console(run, "--stop")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "cleanly" in r.stdout, r.stdout
    finally:
        stop_recorded(run)
        stop_process(child)
    assert not (run / ".trainer.json").exists()
    assert events(run, "stop")[-1]["reason"] == "signal"
    assert events(run, "checkpoint")[-1]["step"] == last_step(run)
    assert "trainer failed" not in (run / "trainer.log").read_text()


def start_launcher(run_dir: Path, *flags: str) -> subprocess.Popen:
    """``andrea-train RUN --nproc 2``: this process is the workers' launcher (torchrun's agent)."""
    return subprocess.Popen([sys.executable, "-m", "trainer", str(run_dir), "--nproc", str(NPROC), *flags], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_launcher_passes_sigusr1_to_rank_0_and_a_stop_to_every_rank_and_exits_0(trainer_run):
    """SIGUSR1 and SIGTERM sent to the launcher (as scancel --full or --signal=B: reaches a batch
    script's exec'd process): one checkpoint and training goes on; then one checkpoint at one
    step, every worker and the launcher exit 0 (torchrun itself exits 1 after a SIGTERM)."""
    run = trainer_run("agent-signalled")
    proc = start_launcher(run, "--checkpoint-every", "100000")
    try:
        wait_for(lambda: last_step(run) >= 10, timeout=120, what="10 steps")
        workers = psutil.Process(proc.pid).children()
        assert len(workers) == NPROC
        record, _ = read_trainer_record(run)
        assert record.launcher_pid == proc.pid and record.pid in {w.pid for w in workers}
        # Each worker is in a session of its own: nothing sent to the launcher's reaches it.
        assert {os.getsid(w.pid) for w in workers} == {w.pid for w in workers}
        os.kill(proc.pid, signal.SIGUSR1)
        [usr1] = wait_for(lambda: events(run, "checkpoint"), what="the SIGUSR1 checkpoint")
        assert usr1["reason"] == "signal" and inspect_checkpoint(run / usr1["path"]).status == "complete"
        wait_for(lambda: last_step(run) >= usr1["step"] + 10, what="training after SIGUSR1")
        assert proc.poll() is None and all(w.is_running() for w in workers)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err[-3000:]          # 0 only if every worker exited 0
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive
    assert "Traceback" not in err and "trainer failed" not in err, err[-3000:]
    checkpoints = events(run, "checkpoint")
    assert [c["step"] for c in checkpoints] == [usr1["step"], last_step(run)]
    assert checkpoints[-1]["reason"] == "signal" and \
        inspect_checkpoint(run / checkpoints[-1]["path"]).status == "complete"
    assert events(run, "stop")[-1]["reason"] == "signal"
    assert {e["step"] for e in events(run, "signal") if e["signal"] == "SIGTERM"} == {last_step(run)}
    assert not (run / ".trainer.json").exists()
    assert f"stopped (signal) at step {last_step(run)}" in (run / "trainer.log").read_text()


@pytest.mark.parametrize("nproc", [1, NPROC])
def test_a_stop_that_reaches_every_process_again_and_again_still_ends_with_exit_0(trainer_run, nproc):
    """scancel of a job step signals every process of it (the launcher and, where the step's
    processes are tracked, its workers) while the launcher passes its own SIGTERM on: a worker
    gets the stop twice or more, maybe after its handlers are gone. SIGTERM sent to every
    process every few milliseconds until the run has exited: one final checkpoint, exit 0."""
    run = trainer_run(f"stormed-{nproc}")
    cmd = [sys.executable, "-m", "trainer", str(run), "--checkpoint-every", "100000",
           *(["--nproc", str(nproc)] if nproc > 1 else [])]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: read_trainer_record(run)[0] is not None and last_step(run) >= 10, timeout=120,
                 what="training")
        everyone = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children()]
        while proc.poll() is None:
            for target in everyone:
                try:
                    target.send_signal(signal.SIGTERM)
                except psutil.NoSuchProcess:
                    pass
            try:
                proc.wait(timeout=0.005)
            except subprocess.TimeoutExpired:
                pass
        _, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, err[-3000:]
    assert [c["reason"] for c in events(run, "checkpoint")] == ["signal"]
    assert events(run, "checkpoint")[-1]["step"] == last_step(run)


def test_a_worker_killed_fails_the_launcher(trainer_run):
    """A run that did not stop cleanly must not look as if it had: a worker killed by SIGKILL
    ends the launcher with a failure (the other worker is stopped)."""
    run = trainer_run("worker-killed")
    proc = start_launcher(run, "--checkpoint-every", "100000")
    try:
        wait_for(lambda: last_step(run) >= 10, timeout=120, what="10 steps")
        victim = next(w for w in psutil.Process(proc.pid).children() if w.pid != read_trainer_record(run)[0].pid)
        victim.kill()
        _, err = proc.communicate(timeout=120)
    finally:
        stop_process(proc)
    assert proc.returncode == 1, err[-3000:]
    assert "exited with code -9" in err


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_node(node: str, run_dir: Path, port: int, *flags: str) -> subprocess.Popen:
    """One node of two, simulated: a launcher (``--nnodes 2``, one process) in a UTS namespace
    whose host name is ``node``; the two meet at a c10d rendezvous on the loopback."""
    cmd = [sys.executable, "-m", "trainer", str(run_dir), "--nproc", "1", "--nnodes", "2",
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"sim-{port}", "--local-addr", "127.0.0.1", *flags]
    return subprocess.Popen(["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', node, *cmd], cwd=ROOT,
                            env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def console_on(node: str, run_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', node, *CONSOLE, str(run_dir),
                           *flags], cwd=ROOT, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="simulating two nodes needs unshare --uts, as root")
def test_two_nodes_checkpoint_from_the_other_node_stop_and_resume_exactly(trainer_run):
    """Two launchers with --nnodes 2, each on a "node" of its own (a UTS namespace with its own
    host name; the record names rank 0's). The console on the other node cannot verify or
    signal rank 0; its --checkpoint is a request in the shared directory, which rank 0 takes.
    A SIGTERM to the other node's launcher stops every rank at one step, and both launchers
    exit 0. Resumed on two nodes again, the run reaches the bytes of one that never stopped."""
    run = trainer_run("two-nodes")
    port = free_port()
    nodes = {name: start_node(name, run, port, "--checkpoint-every", "100000") for name in ("node0", "node1")}
    try:
        wait_for(lambda: read_trainer_record(run)[0] is not None and last_step(run) >= 10, timeout=180,
                 what="two nodes training")
        record, _ = read_trainer_record(run)
        assert record.world_size == 2 and record.host in nodes
        other = next(name for name in nodes if name != record.host)
        r = console_on(other, run, "--checkpoint", "--timeout", "120")
        assert r.returncode == 0, r.stderr
        assert "not verifiable from this host" in r.stderr and ".checkpoint_request.json" in r.stderr
        assert Path(r.stdout.strip()).exists() and not (run / ".checkpoint_request.json").exists()
        [requested] = [e for e in events(run, "signal") if e["signal"] == "checkpoint request"]
        nodes[other].send_signal(signal.SIGTERM)
        outs = {name: proc.communicate(timeout=120) for name, proc in nodes.items()}
    finally:
        for proc in nodes.values():
            stop_process(proc)
    for name, proc in nodes.items():
        assert proc.returncode == 0, f"{name}: {outs[name][1][-3000:]}"
    stopped_at = last_step(run)
    assert [c["step"] for c in events(run, "checkpoint")] == [requested["step"], stopped_at]

    steps = ("--max-steps", str(stopped_at + 50))
    port = free_port()
    nodes = {name: start_node(name, run, port, *steps) for name in ("node0", "node1")}
    try:
        outs = {name: proc.communicate(timeout=300) for name, proc in nodes.items()}
    finally:
        for proc in nodes.values():
            stop_process(proc)
    for name, proc in nodes.items():
        assert proc.returncode == 0, f"{name}: {outs[name][1][-3000:]}"
    resume = events(run, "resume")[-1]
    assert resume["from_step"] == stopped_at and resume["exact"] and resume["world_size"] == 2

    straight = trainer_run("straight")          # one node, two processes, never stopped
    r = subprocess.run([sys.executable, "-m", "trainer", str(straight), "--nproc", str(NPROC), *steps], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    name = f"step_{stopped_at + 50:06d}.bin"
    assert (run / name).read_bytes() == (straight / name).read_bytes()


def _ddp_flat_adamw(rank: int, init_file: str, queue) -> None:
    """One rank of the FlatAdamW + DDP check (world size 2, gloo, file rendezvous)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        _flat_adamw_check(rank, queue)
    finally:
        # As trainer.distributed.Ranks.close: the DDP models hold the group through reference
        # cycles; collected before the group is destroyed, or a gloo thread ends inside the
        # interpreter's finalization and the process aborts (SIGABRT).
        gc.collect()
        dist.destroy_process_group()
        gc.collect()


def _flat_adamw_check(rank: int, queue) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from rundir import RunConfig
    from trainer.distributed import _rank_ordered_mean
    from trainer.model import GPT
    from trainer.state import make_optimizer

    config = RunConfig.from_preset("micro")
    torch.manual_seed(0)
    model = GPT(config.model)
    optimizer = make_optimizer(model, config.optimizer)
    reference = GPT(config.model)
    reference.load_state_dict(model.state_dict())
    ddp = DistributedDataParallel(model)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 256, (4, 32), generator=g), torch.randint(0, 256, (4, 32), generator=g)
    _, loss = reference(x, y)                                  # the whole batch, one process
    loss.backward()
    full = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
    optimizer.zero_grad()
    _, loss = ddp(x[2 * rank:2 * rank + 2], y[2 * rank:2 * rank + 2])     # this rank's half
    loss.backward()
    grad = optimizer.gather_grad()
    # The rank-ordered hook (used beyond 2 ranks) gives the same mean, bit for bit here.
    model2 = GPT(config.model)
    model2.load_state_dict(reference.state_dict())
    optimizer2 = make_optimizer(model2, config.optimizer)
    ddp2 = DistributedDataParallel(model2)
    ddp2.register_comm_hook(None, _rank_ordered_mean)
    _, loss2 = ddp2(x[2 * rank:2 * rank + 2], y[2 * rank:2 * rank + 2])
    loss2.backward()
    hooked_equal = bool(torch.equal(optimizer2.gather_grad(), grad))
    optimizer.step(grad)
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(optimizer.weights) for _ in range(2)]
    dist.all_gather(gathered, optimizer.weights.clone())
    queue.put((rank, float((grad - full).abs().max()), float(full.abs().max()),
               bool(torch.equal(weights, optimizer.weights)), bool(torch.equal(gathered[0], gathered[1])),
               hooked_equal))


def test_flat_adamw_under_ddp_gets_the_averaged_gradient_in_its_flat_buffers(tmp_path):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=_ddp_flat_adamw, args=(rank, str(tmp_path / "rendezvous"), queue))
             for rank in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    results = sorted(queue.get() for _ in range(2))
    for rank, diff, scale, params_are_the_buffer, ranks_agree, hooked_equal in results:
        assert diff <= 1e-6 * max(scale, 1.0), (rank, diff, scale)    # the mean of the halves = the whole batch
        assert params_are_the_buffer and ranks_agree and hooked_equal


def test_every_rank_ends_its_process_group_threads_before_it_exits(trainer_run, tmp_path):
    """The teardown that aborted a rank at exit ("terminate called without an active
    exception", SIGABRT): a gloo worker thread that releases a finished collective after the
    interpreter has begun to finalize cannot take the GIL and is ended inside a C++
    destructor. The trainer must destroy its process group (joining gloo's threads) before
    it returns: nothing may keep the group alive past destroy_process_group()."""
    run = trainer_run("teardown")
    out = tmp_path / "threads"
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={NPROC}",
           "-m", "tests.trainer.ddp_teardown", str(out), str(run), "--max-steps", "20"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in range(NPROC):
        report = json.loads((out / f"rank{rank}.json").read_text())
        assert report["status"] == 0
        assert report["after"] == report["before"], f"rank {rank}: threads left: {report}"
        assert not any("gloo" in name for name in report["after"])
