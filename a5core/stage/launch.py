"""Run a training stage on the `distributed` section's processes: `python -m a5core.stage.launch stages/<x>.py <args>`.

- One process on one node (`nproc: 1`, `nnodes: 1`): the script replaces this process (os.execv), exactly the
  command without the launcher: today's single-process path.
- Otherwise torchrun (`python -m torch.distributed.run`): `--nproc-per-node nproc --nnodes nnodes`, c10d rendezvous
  at the `Placement`'s endpoint (port 0 on one node: any free port). When a rank fails, the last line names its host,
  rank and cause (the signal's name, or its error) from torchrun's failure summary (`RootCause`), under the tracebacks.
- Several nodes in a SLURM allocation (`SLURM_JOB_ID`, more than one node; node 0 runs `dvc repro` in the batch
  script): `srun` starts one torchrun per node (`--kill-on-bad-exit`: a rank that fails on any node stops every node's
  ranks), meeting at this node on a free port, with a rendezvous id per job and stage, as torchtitan's multi-node
  script does; the stage then fails with one line naming the node that failed (from srun's own error line) and the rank
  and cause (from that node's torchrun summary).
- Several nodes without a scheduler: node 0's launcher starts the same command on each host of A5_HOSTS over `ssh`
  (DeepSpeed's launcher does the same; $A5_REMOTE_SHELL replaces `ssh -o BatchMode=yes`), in the same directory with
  the same interpreter, so every node must see the repository and the environment at the same paths. The first node
  to fail stops the others. Without hosts, start the stage's command on each other node yourself.
What changes results (`nproc`, `nnodes`, `strategy`) is read from the stage's `--params` file (default params.yaml)
and validated first; where the processes run (`Placement`: SLURM's variables, A5_HOSTS, A5_RDZV_ENDPOINT) from the
environment, so it is in no stage's params and no checkpoint's fingerprint: moving to other nodes reruns nothing, and
a killed stage resumes there.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from a5core.config.sections import load_section
from a5core.model.distributed import DistributedConfig
from a5core.run.checkpoint import REQUEUE


@dataclass(frozen=True)
class Placement:
    """Where a stage's processes run, from the environment at launch (never a params value: it would key DVC's cache).

    A5_RDZV_ENDPOINT: node 0's host:port for torchrun's c10d rendezvous (default localhost:0: one node, any free port).
    A5_HOSTS: the other nodes (ssh names, separated by spaces or commas), nnodes - 1 of them."""

    rdzv_endpoint: str = "localhost:0"
    hosts: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Placement:
        hosts = tuple(h for h in env.get("A5_HOSTS", "").replace(",", " ").split() if h)
        return cls(env.get("A5_RDZV_ENDPOINT", "localhost:0"), hosts)

    def problems(self, nnodes: int) -> list[str]:
        host, _, port = self.rdzv_endpoint.rpartition(":")
        if not host or not port.isdigit():
            return [f"A5_RDZV_ENDPOINT {self.rdzv_endpoint!r} must be host:port"]
        if nnodes > 1 and (int(port) == 0 or host in ("localhost", "127.0.0.1")):
            return ["distributed.nnodes > 1 needs A5_RDZV_ENDPOINT at node 0's address and a fixed port (node0:29400)"]
        if self.hosts and len(self.hosts) != nnodes - 1:
            return [f"A5_HOSTS names the other nodes: {nnodes - 1} for nnodes {nnodes}, not {len(self.hosts)}"]
        return []


@dataclass(frozen=True)
class Slurm:
    """The SLURM allocation this launch runs in (SLURM's variables in the batch script, on node 0)."""

    job_id: str
    nodes: int  # SLURM_JOB_NUM_NODES
    head: str  # this node, the batch host: the rendezvous's host (SLURMD_NODENAME)
    cpus_per_task: str | None = None  # srun no longer inherits sbatch's --cpus-per-task (SLURM 22.05+): passed on

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Slurm | None:
        """The allocation, or None outside SLURM. The rendezvous's host is the allocation's first node, where srun
        puts task 0: this node in a batch script (SLURMD_NODENAME); under `salloc`, whose shell runs on the login
        node, the first host of SLURM_JOB_NODELIST (`scontrol show hostnames`, as torchtitan's script reads it)."""
        if "SLURM_JOB_ID" not in env:
            return None
        nodes = int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 1)
        head = env.get("SLURMD_NODENAME") or first_host(env.get("SLURM_JOB_NODELIST", ""))
        return cls(env["SLURM_JOB_ID"], nodes, head, env.get("SLURM_CPUS_PER_TASK"))

    def problems(self, nnodes: int, endpoint: str | None = None) -> list[str]:
        """What stops a launch in this allocation (`endpoint`: A5_RDZV_ENDPOINT, which names the host itself)."""
        if not self.head and not endpoint:
            return [f"SLURM job {self.job_id}: no node to meet at (no SLURMD_NODENAME, no SLURM_JOB_NODELIST that "
                    "scontrol can expand): set A5_RDZV_ENDPOINT=<first node>:<port>"]  # fmt: skip
        if self.nodes != nnodes:
            return [
                f"distributed.nnodes is {nnodes} but SLURM job {self.job_id} has {self.nodes} nodes: set "
                f"distributed.nnodes to {self.nodes} (-S distributed.nnodes={self.nodes}) or sbatch --nodes={nnodes}"
            ]
        return []

    def srun(self, cfg: DistributedConfig, script: list[str], endpoint: str) -> list[str]:
        """srun with one task per node, each a torchrun of `script` meeting at `endpoint` (this node's host:port)."""
        argv = ["srun", f"--nodes={cfg.nnodes}", f"--ntasks={cfg.nnodes}", "--ntasks-per-node=1"]
        argv += ["--kill-on-bad-exit=1", "--export=ALL", f"--chdir={os.getcwd()}"]
        if self.cpus_per_task:
            argv.append(f"--cpus-per-task={self.cpus_per_task}")
        torchrun = command(cfg, script, Placement(endpoint), run=f"slurm{self.job_id}")
        return [*argv, sys.executable, "-m", "a5core.stage.launch", NODE, *torchrun]  # `node_main` on each node


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list (`gpu[01-02]` -> gpu01), by `scontrol show hostnames`; "" without one."""
    if not nodelist:
        return ""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.split() else ""


def command(cfg: DistributedConfig, script: list[str], where: Placement = Placement(), run: str = "") -> list[str]:
    """The argv that runs `script` (a stage script and its arguments) on the section's processes, meeting at
    `where`'s rendezvous; `run` prefixes the rendezvous id (a SLURM job's)."""
    if cfg.nproc * cfg.nnodes == 1:
        return [sys.executable, *script]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={cfg.nnodes}",
        f"--nproc-per-node={cfg.nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={where.rdzv_endpoint}",
        f"--rdzv-id={run + '-' if run else ''}{rdzv_id(script)}",
        "--",  # the script's own flags follow (torchrun would take --run for its --run-path)
        *script,
    ]


def rdzv_id(script: list[str]) -> str:
    """The rendezvous id: the same on every node (they run the same command), distinct per stage (grpo@a, grpo@b)."""
    return f"{Path(script[0]).stem}-{hashlib.sha256(' '.join(script).encode()).hexdigest()[:12]}"


def params_path(script: list[str]) -> str:
    """The stage's `--params` value (its default: params.yaml)."""
    for i, arg in enumerate(script):
        if arg == "--params" and i + 1 < len(script):
            return script[i + 1]
        if arg.startswith("--params="):
            return arg.split("=", 1)[1]
    return "params.yaml"


FOLLOWER = "A5_LAUNCH_NODE"  # set on the other nodes: they run their torchrun and start nothing more


def remote(host: str, argv: list[str]) -> list[str]:
    """The command that runs `argv` on `host`, in this directory (the same path on every node)."""
    shell = shlex.split(os.environ.get("A5_REMOTE_SHELL", "ssh -o BatchMode=yes"))
    return [*shell, host, f"cd {shlex.quote(os.getcwd())} && {FOLLOWER}={shlex.quote(host)} exec {shlex.join(argv)}"]


def fan_out(hosts: tuple[str, ...], argv: list[str]) -> int:
    """Run `argv` here and on every host; when one fails, stop the rest. Returns the first nonzero exit status."""
    procs = [subprocess.Popen(remote(h, argv)) for h in hosts] + [subprocess.Popen(argv)]

    def stop(*_):
        for p in procs:
            if p.poll() is None:
                p.terminate()

    signal.signal(signal.SIGTERM, lambda *_: (stop(), sys.exit(143)))
    while any(p.poll() is None for p in procs) and not any(p.poll() for p in procs):
        time.sleep(0.5)
    failed = next((p.returncode for p in procs if p.poll()), 0)
    if failed:
        stop()
    for p in procs:
        p.wait()
    return failed


SRUN_ERROR = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.+)")
ROOT_CAUSE = "Root Cause (first observed failure):"  # torchrun's failure summary: this block names the first failure
FIELD = re.compile(r"\s+(time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)")


def failure_cause(exitcode: str, traceback: list[str]) -> str:
    """What ended a failed rank, from torchrun's `exitcode` and `traceback` fields: the error its error file recorded
    (the last line of the traceback: a5core.stage.entry writes one), even when a signal then ended the process (a
    process group's teardown can abort a rank that is exiting on its error), else the signal that killed it, else its
    exit code."""
    found = re.match(r"\s*(-?\d+)", exitcode)
    code = int(found.group(1)) if found else None
    error = exception_line(traceback)
    if error and not error.startswith(("To enable traceback", "Signal ")):  # torchrun's texts when no file was written
        error = re.sub(r"^(?:\w+\.)+(?=\w+: )", "", error)  # `pkg.mod.ValueError: x` -> `ValueError: x`
        return error.removeprefix("StageFailed: ")  # a5core.stage.entry's one line, as it is
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}" if code is not None else "no exit code reported"


def exception_line(traceback: list[str]) -> str:
    """The exception's own first line in a traceback as torchrun's summary indents it (frames at 4 spaces, their code
    at 6, the exception at 2): the first line after the last frame, not a note printed below it (CUDA's "Compile with
    TORCH_USE_CUDA_DSA ..."); with no frame, the first line."""
    lines = [line for line in traceback if line.strip() and not line.strip().startswith("Traceback (most recent")]
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith('File "')]
    rest = lines[frames[-1] + 1 :] if frames else lines
    rest = [line for line in rest if len(line) - len(line.lstrip()) < 6] if frames else rest  # the frame's code
    return rest[0].strip() if rest else ""


class RootCause:
    """Reads torchrun's stderr line by line (`feed`) for its failure summary's root-cause block: `found` is then
    (host, rank, cause), the first block's."""

    def __init__(self) -> None:
        self.inside, self.key, self.fields, self.found = False, "", {}, None

    def feed(self, line: str) -> None:
        text = line.rstrip("\n")
        if self.found:
            return
        if text.strip() == ROOT_CAUSE:
            self.inside, self.key, self.fields = True, "", {}
            return
        if not self.inside:
            return
        if text.startswith("====="):  # the summary's last line
            cause = failure_cause(self.fields.get("exitcode", [""])[0], self.fields.get("traceback", []))
            rank = self.fields.get("rank", [""])[0].split(" (")[0]
            self.found, self.inside = (self.fields.get("host", [""])[0], rank, cause), False
            return
        field = FIELD.match(text) if self.key != "traceback" else None  # the last field: the rest is its text
        if field:
            self.key = field.group(1)
            self.fields[self.key] = [field.group(2)]
        elif self.key:  # a traceback's further lines
            self.fields[self.key].append(text)


def pass_through(stream, feed: Callable[[str], None]) -> None:
    """Copy a child's `stream` (its stderr, bytes) to ours as it comes, progress bars' carriage returns included, and
    `feed` it each whole line."""
    decode, pending = codecs.getincrementaldecoder("utf-8")(errors="replace").decode, ""
    out = getattr(sys.stderr, "buffer", None)  # the bytes as they came (a replaced stderr takes text)
    while chunk := os.read(stream.fileno(), 65536):
        if out is not None:
            sys.stderr.flush()
            out.write(chunk)
            out.flush()
        else:
            sys.stderr.write(chunk.decode(errors="replace"))
            sys.stderr.flush()
        *lines, pending = (pending + decode(chunk)).split("\n")
        pending = pending[-65536:]  # a line of carriage returns only (a progress bar) is not kept whole
        for line in lines:
            feed(line + "\n")
    pending += decode(b"", final=True)
    if pending:
        feed(pending)


RESEND_S = 10.0  # how often SIGUSR1 is passed on again to ranks that have not ended


def _ignore_preemption() -> None:
    """In torchrun's process, before it starts: SIGUSR1 is its ranks' (passed on to them by `run_torchrun`), and would
    otherwise end torchrun itself (its default action)."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def pass_on_preemption(proc: subprocess.Popen, signalled: list[int]) -> None:
    """From now on a SIGUSR1 here goes to `proc`'s children (torchrun's ranks: each in a session of its own), which
    checkpoint at their next step boundary and exit REQUEUE (a5core.run.checkpoint); `signalled` notes it."""

    def to_ranks(*_) -> None:
        if REQUEUE not in signalled:  # again every RESEND_S while torchrun runs: a rank that had not yet taken the
            threading.Thread(target=resend, daemon=True).start()  # signal when it came (it ignored it) gets it later
        signalled.append(REQUEUE)
        with contextlib.suppress(psutil.Error):
            for rank in psutil.Process(proc.pid).children():
                with contextlib.suppress(psutil.Error):
                    rank.send_signal(signal.SIGUSR1)

    def resend() -> None:
        while proc.poll() is None:
            time.sleep(RESEND_S)
            to_ranks()

    signal.signal(signal.SIGUSR1, to_ranks)


def run_torchrun(argv: list[str], stage: str) -> int:
    """Run torchrun on this node, its stderr passed through; SIGTERM is passed on (torchrun stops its ranks, which
    first checkpoint if they reach a step boundary within its 30 s), a terminal's SIGINT reaches it directly: either
    then exits 143 or 130, with no failure line; SIGUSR1 is passed on to the ranks (`pass_on_preemption`): they
    checkpoint at their next step boundary and it exits REQUEUE. When it fails: one last line naming the host, the rank
    and the cause from torchrun's own summary (the signal's name, or the rank's error), under the tracebacks."""
    signalled: list[int] = []
    signal.signal(signal.SIGINT, lambda *_: signalled.append(130))  # the terminal sent it to torchrun too: wait
    signal.signal(signal.SIGTERM, lambda *_: signalled.append(143))  # passed on below, once torchrun runs
    early: list[int] = []
    signal.signal(signal.SIGUSR1, lambda *_: early.append(REQUEUE))  # passed on below, once torchrun runs
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, preexec_fn=_ignore_preemption)
    signal.signal(signal.SIGTERM, lambda *_: (signalled.append(143), proc.send_signal(signal.SIGTERM)))
    if 143 in signalled:  # it came before torchrun started
        proc.send_signal(signal.SIGTERM)
    pass_on_preemption(proc, signalled)
    if early:  # it came before torchrun started
        os.kill(os.getpid(), signal.SIGUSR1)
    summary = RootCause()
    pass_through(proc.stderr, summary.feed)
    code = proc.wait()
    if code and REQUEUE in signalled:
        sys.stderr.write(f"preempted: {stage}: every rank checkpointed (above); rerunning continues from there\n")
        return REQUEUE
    if code and signalled:  # stopped from outside (Ctrl-C, scancel, a time limit): the ranks said where; no failure
        return signalled[0]
    if code < 0:  # torchrun itself killed by a signal: the shell's convention, 128 + its number
        sys.stderr.write(f"error: {stage}: torchrun was killed by {signal.Signals(-code).name}\n")
        return 128 - code
    if code:
        if summary.found:
            host, rank, cause = summary.found
            where = f"on {host}, rank {rank}: {cause}"
        else:
            where = f"(torchrun exited with {code})"
        sys.stderr.write(f"error: {stage} failed {where}; torchrun stopped the other ranks\n")
    return code


def run_srun(argv: list[str], stage: str) -> int:
    """Run srun, passing its output through and SIGTERM/SIGINT on to it (srun signals every task); when it fails, one
    line naming the node whose rank failed first (srun's first "srun: error: <node>: task <k>: ..." line)."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    # srun ends a step on SIGTERM; a single SIGINT only makes it print the tasks' status (it wants two in a second)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: proc.send_signal(signal.SIGTERM))
    preempted: list[int] = []  # srun passes SIGUSR1 on to its tasks, each node's launcher (`node_main`): to the ranks
    signal.signal(signal.SIGUSR1, lambda *_: (preempted.append(REQUEUE), proc.send_signal(signal.SIGUSR1)))
    failures, summary = [], RootCause()  # srun's error lines; the failed node's torchrun summary

    def feed(line: str) -> None:
        summary.feed(line)
        found = SRUN_ERROR.match(line.strip())
        if found:
            failures.append(found.groups())

    pass_through(proc.stderr, feed)
    code = proc.wait()
    if code and preempted:
        sys.stderr.write(f"preempted: {stage}: every node's ranks checkpointed (above); rerunning continues there\n")
        return REQUEUE
    if code:  # srun's first error line: the task that failed first (the others were stopped after it)
        first = failures[0] if failures else None
        where = f"on node {first[0]} (task {first[1]}: {first[2]})" if first else f"(srun exited with {code})"
        if first and summary.found:  # the node from srun, the rank and the cause from that node's torchrun
            where = f"on node {first[0]}, rank {summary.found[1]}: {summary.found[2]}"
        sys.stderr.write(f"error: {stage} failed {where}; srun stopped every node's ranks\n")
    return code


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


NODE = "--node"  # `python -m a5core.stage.launch --node <torchrun argv>`: one node's share of an srun launch


def node_main(torchrun: list[str]) -> None:
    """One node's task of an srun launch: its torchrun (`run_torchrun`: SIGUSR1, which srun passes on, goes to the
    ranks; a failure's last line names the rank), exiting with torchrun's status."""
    script = torchrun[torchrun.index("--") + 1] if "--" in torchrun else torchrun[-1]
    sys.exit(run_torchrun(torchrun, Path(script).name))


def preempt(pid: int) -> list[int]:
    """Ask the training stages running as or under process `pid` (a batch script's `dvc exp run`) to checkpoint and
    stop: SIGUSR1 to the topmost processes of its tree that take the signal (a stage's process, or its launcher, which
    passes it on), none that it would kill (DVC, a shell). Returns their pids. `python -m a5core.stage.launch
    --preempt PID` (scripts/slurm/requeue.sh)."""
    sent, todo = [], [psutil.Process(pid)]
    while todo:
        proc = todo.pop()
        with contextlib.suppress(psutil.Error):
            if takes_sigusr1(proc.pid):
                proc.send_signal(signal.SIGUSR1)
                sent.append(proc.pid)
            else:
                todo += proc.children()
    return sent


def takes_sigusr1(pid: int) -> bool:
    """Whether process `pid` has a handler for SIGUSR1 (bit 10 of /proc/<pid>/status's SigCgt mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGUSR1 - 1) & 1)
    return False


def main(argv: list[str] | None = None) -> None:
    script = list(sys.argv[1:] if argv is None else argv)
    if script[:1] == [NODE]:
        node_main(script[1:])
    if script[:1] == ["--preempt"] and len(script) == 2 and script[1].isdigit():
        sent = preempt(int(script[1]))
        said = f"SIGUSR1 to the stage process(es) {sent}: each checkpoints at its next step boundary and stops"
        print(f"a5: {said if sent else 'no training stage runs under ' + script[1]}", file=sys.stderr, flush=True)
        sys.exit(0 if sent else 1)
    if not script or not script[0].endswith(".py"):
        sys.exit(
            "usage: python -m a5core.stage.launch stages/<stage>.py [--flag value ...] | --preempt PID | "
            "--node <torchrun command>"
        )
    cfg = load_section(DistributedConfig, "distributed", params_path(script))
    slurm = Slurm.from_env() if cfg.nnodes > 1 and "A5_HOSTS" not in os.environ else None
    if slurm is not None:
        given = os.environ.get("A5_RDZV_ENDPOINT")
        if slurm.problems(cfg.nnodes, given):
            sys.exit("error: " + "; ".join(slurm.problems(cfg.nnodes, given)))
        endpoint = given or f"{slurm.head}:{_free_port()}"  # a port free on the batch host at launch
        sys.stdout.flush()
        sys.exit(run_srun(slurm.srun(cfg, script, endpoint), Path(script[0]).name))
    where = Placement.from_env() if cfg.nproc * cfg.nnodes > 1 else Placement()  # one process meets no one
    if where.problems(cfg.nnodes):
        sys.exit("error: " + "; ".join(where.problems(cfg.nnodes)))
    argv_out = command(cfg, script, where)
    sys.stdout.flush()
    if where.hosts and FOLLOWER not in os.environ:
        sys.exit(fan_out(where.hosts, argv_out))
    if cfg.nproc * cfg.nnodes == 1:
        os.execv(argv_out[0], argv_out)
    sys.exit(run_torchrun(argv_out, Path(script[0]).name))


if __name__ == "__main__":
    main()
