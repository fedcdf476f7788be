"""A real SLURM cluster on this machine, for the tests (the project's shared recipe).

Needs root and Debian's ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them). Started
once per test session by the ``slurm`` fixture and shut down after it.

The cluster is private to the process that starts it: its configuration, state, spool,
pid and log files live in a directory of its own, its daemons listen on free ports, and
``SLURM_CONF`` (set in this process's environment, so inherited by every ``sbatch``,
``scontrol``, console and job it starts) points at it. Another cluster on the machine (a
developer's, another test session's) is neither used nor disturbed; ``munged`` is shared.

Three nodes: this host, in the default partition ``debug``, and two simulated nodes
``n1`` and ``n2`` in the partition ``two``. Each simulated node is a ``slurmd`` of its own
in a UTS namespace of its own, whose host name is the node's name, on a port of its own
(``NodeAddr=127.0.0.1``): a job step there sees the node's host name, as on a machine of its
own. (Debian's build lacks ``--enable-multiple-slurmd``, which lets several slurmd share
one host name and ``slurmd -N`` choose the node; separate UTS namespaces need no such
build.) Processes, files and the network stay shared: ranks on the two nodes meet over
the loopback.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_DIR = Path("/run/munge")
TWO_NODES = ("n1", "n2")            # the simulated nodes, in partition TWO_PARTITION
TWO_PARTITION = "two"
UP = ("idle", "mixed", "allocated")
_previous_conf: dict[str, str | None] = {}     # SLURM_CONF before start(), by cluster directory


def missing() -> str | None:
    """Why no cluster can be started here, or None."""
    if os.geteuid() != 0:
        return "SLURM tests start a cluster and need root"
    for tool in ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged"):
        if not Path(tool).exists():
            return f"{tool} is not installed (apt-get install slurm-wlm munge)"
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    return None


def node_states() -> dict[str, str]:
    """Every node's state, by name (empty when the scheduler does not answer)."""
    r = subprocess.run(["sinfo", "-a", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True)
    if r.returncode != 0:
        return {}
    return dict(line.split()[:2] for line in r.stdout.splitlines() if len(line.split()) >= 2)


def nodes_up(nodes: tuple[str, ...], timeout: float = 60.0) -> bool:
    """Every node named is up, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = node_states()
        if all(states.get(node, "").rstrip("*~#") in UP for node in nodes):
            return True
        time.sleep(0.5)
    return False


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _munge_running() -> bool:
    try:
        token = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        return token.returncode == 0 and subprocess.run(["unmunge"], input=token.stdout, capture_output=True,
                                                        timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _start_munge() -> None:
    if _munge_running():
        return
    MUNGE_DIR.mkdir(parents=True, exist_ok=True)
    if not MUNGE_KEY.exists():
        MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
        MUNGE_KEY.write_bytes(os.urandom(1024))
    shutil.chown(MUNGE_KEY, "munge", "munge")
    shutil.chown(MUNGE_DIR, "munge", "munge")
    MUNGE_KEY.chmod(0o400)
    subprocess.run(["/usr/sbin/munged", "--force"], check=True, capture_output=True)


def _config(home: Path, host: str, ports: list[int]) -> str:
    controller, *slurmds = ports
    simulated = "\n".join(f"NodeName={node} NodeAddr=127.0.0.1 Port={port} CPUs={os.cpu_count()} RealMemory=20000 "
                          "State=UNKNOWN" for node, port in zip(TWO_NODES, slurmds[1:]))
    return f"""ClusterName=andrea{controller}
SlurmctldHost={host}
SlurmctldPort={controller}
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation={home}/state
SlurmdSpoolDir={home}/spool/%n
SlurmctldPidFile={home}/slurmctld.pid
SlurmdPidFile={home}/slurmd-%n.pid
SlurmctldLogFile={home}/slurmctld.log
SlurmdLogFile={home}/slurmd-%n.log
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
KillWait=30
NodeName={host} Port={slurmds[0]} CPUs={os.cpu_count()} RealMemory=20000 State=UNKNOWN
{simulated}
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName={TWO_PARTITION} Nodes={",".join(TWO_NODES)} MaxTime=INFINITE State=UP
"""


def start() -> Path:
    """Start this process's cluster (munged too, if none runs) and point ``SLURM_CONF`` at
    it; returns its directory."""
    host = socket.gethostname()
    home = Path(tempfile.mkdtemp(prefix="andrea-slurm-"))
    for sub in ("state", *(f"spool/{node}" for node in (host, *TWO_NODES))):
        (home / sub).mkdir(parents=True)
    conf = home / "slurm.conf"
    conf.write_text(_config(home, host, _free_ports(2 + len(TWO_NODES))))
    (home / "cgroup.conf").unlink(missing_ok=True)       # 22.05: without one slurmd starts
    _previous_conf[str(home)] = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    _start_munge()
    daemons = [["/usr/sbin/slurmctld"], ["/usr/sbin/slurmd"]]
    daemons += [["unshare", "--uts", "sh", "-c", f"hostname {node} && exec /usr/sbin/slurmd"] for node in TWO_NODES]
    for daemon in daemons:
        subprocess.run(daemon, check=True, capture_output=True)
    if not nodes_up((host, *TWO_NODES)):
        raise RuntimeError(f"the SLURM nodes did not come up within 60 s (see {home}/*.log)")
    return home


def stop(home: Path) -> None:
    """Shut this process's cluster down (slurmctld and every slurmd), wait for its daemons to
    exit, and remove its files. munged stays: other clusters may use it."""
    import psutil

    pids = []
    for pid_file in home.glob("*.pid"):
        try:
            pids.append(psutil.Process(int(pid_file.read_text().split()[0])))
        except (OSError, ValueError, IndexError, psutil.Error):
            continue
    subprocess.run(["scontrol", "shutdown"], capture_output=True)
    _, alive = psutil.wait_procs(pids, timeout=30)
    for proc in alive:                      # a daemon that did not hear the shutdown
        proc.terminate()
    psutil.wait_procs(alive, timeout=10)
    shutil.rmtree(home, ignore_errors=True)
    previous = _previous_conf.pop(str(home), None)
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous
