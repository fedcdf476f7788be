"""A real one-node SLURM cluster on this machine, for the tests (the project's shared recipe).

Needs root and Debian's ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them). Started
once per test session by the ``slurm`` fixture and shut down after it; a cluster that
was already running (a developer's) is used as it is and left running.
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


def node_idle(timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() in ("idle", "mixed", "allocated"):
            return True
        time.sleep(0.5)
    return False


def start() -> bool:
    """Start munged, slurmctld and slurmd; True when this call started them."""
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0 and node_idle(5):
        return False
    host = socket.gethostname()
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
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
KillWait=30
NodeName={host} CPUs={os.cpu_count()} RealMemory=20000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    Path("/etc/slurm/cgroup.conf").unlink(missing_ok=True)   # 22.05: without it slurmd starts
    for daemon in (["/usr/sbin/munged", "--force"], ["/usr/sbin/slurmctld"], ["/usr/sbin/slurmd"]):
        subprocess.run(daemon, check=True, capture_output=True)
    if not node_idle():
        raise RuntimeError("the SLURM node did not become idle within 60 s (see /var/log/slurm)")
    return True


def stop() -> None:
    subprocess.run(["scontrol", "shutdown"], capture_output=True)
    subprocess.run(["pkill", "-x", "munged"], capture_output=True)
