"""A real SLURM cluster on this machine, for the tests (the project's shared recipe).

Needs root and Debian's ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them). Started
once per test session by the ``slurm`` fixture and shut down after it; a cluster that
was already running (a developer's) is used as it is and left running.

Three nodes: this host, in the default partition ``debug``, and two simulated nodes
``n1`` and ``n2`` in the partition ``two`` (hidden: ``sinfo`` shows it with ``-a``, and a
job names it; so a plain ``sinfo`` still sees one node's state). Each simulated node is a ``slurmd`` of its own
in a UTS namespace of its own, whose host name is the node's name, listening on a port of
its own (``NodeAddr=127.0.0.1``): a job step there sees the node's host name, as on a
machine of its own. (Debian's build lacks ``--enable-multiple-slurmd``, which would let
several slurmd share one host name; separate UTS namespaces need no such build.) Processes,
files and the network stay shared: ranks on the two nodes meet over the loopback.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

CONF = Path("/etc/slurm/slurm.conf")
DIRS = ("/etc/slurm", "/var/spool/slurmctld", "/var/spool/slurmd", "/var/log/slurm", "/run/munge")
MUNGE_KEY = Path("/etc/munge/munge.key")
TWO_NODES = ("n1", "n2")            # the simulated nodes, in partition TWO_PARTITION
TWO_PARTITION = "two"
FIRST_SIMULATED_PORT = 6819         # slurmd of this host: 6818, SLURM's default


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


UP = ("idle", "mixed", "allocated")


def node_states() -> dict[str, str]:
    """Every node's state, by name (empty when the scheduler does not answer)."""
    r = subprocess.run(["sinfo", "-a", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True)
    if r.returncode != 0:
        return {}
    return dict(line.split()[:2] for line in r.stdout.splitlines() if len(line.split()) >= 2)


def node_idle(timeout: float = 60.0, nodes: tuple[str, ...] | None = None) -> bool:
    """Every node (or those named) is up, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = node_states()
        wanted = nodes or tuple(states)
        if states and all(states.get(node, "").rstrip("*~#") in UP for node in wanted):
            return True
        time.sleep(0.5)
    return False


def has_two_nodes() -> bool:
    """The running cluster has the two simulated nodes (one started by an older recipe may not)."""
    return all(node in node_states() for node in TWO_NODES)


def start() -> bool:
    """Start munged, slurmctld and the slurmd daemons; True when this call started them."""
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0 and node_idle(5):
        return False
    host = socket.gethostname()
    simulated = "\n".join(f"NodeName={node} NodeAddr=127.0.0.1 Port={FIRST_SIMULATED_PORT + i} CPUs={os.cpu_count()} "
                          "RealMemory=20000 State=UNKNOWN" for i, node in enumerate(TWO_NODES))
    for d in DIRS:
        os.makedirs(d, exist_ok=True)
    if not MUNGE_KEY.exists():
        MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
        MUNGE_KEY.write_bytes(os.urandom(1024))
    shutil.chown(MUNGE_KEY, "munge", "munge")
    shutil.chown("/run/munge", "munge", "munge")
    MUNGE_KEY.chmod(0o400)
    CONF.write_text(f"""ClusterName=local
SlurmctldHost={host}
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
KillWait=30
NodeName={host} CPUs={os.cpu_count()} RealMemory=20000 State=UNKNOWN
{simulated}
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName={TWO_PARTITION} Nodes={",".join(TWO_NODES)} MaxTime=INFINITE State=UP Hidden=YES
""")
    Path("/etc/slurm/cgroup.conf").unlink(missing_ok=True)   # 22.05: without it slurmd starts
    for node in (host, *TWO_NODES):
        os.makedirs(f"/var/spool/slurmd/{node}", exist_ok=True)
    daemons = [["/usr/sbin/munged", "--force"], ["/usr/sbin/slurmctld"], ["/usr/sbin/slurmd"]]
    daemons += [["unshare", "--uts", "sh", "-c", f"hostname {node} && exec /usr/sbin/slurmd"] for node in TWO_NODES]
    for daemon in daemons:
        subprocess.run(daemon, check=True, capture_output=True)
    if not node_idle(nodes=(host, *TWO_NODES)):
        raise RuntimeError("the SLURM nodes did not become idle within 60 s (see /var/log/slurm)")
    return True


def stop() -> None:
    subprocess.run(["scontrol", "shutdown"], capture_output=True)
    subprocess.run(["pkill", "-x", "munged"], capture_output=True)
