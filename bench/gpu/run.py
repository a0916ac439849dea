"""The GPU machine's calls, one driver: each call is one sequence of parts under one time budget (bench/gpu/README.md
lists the calls in order, with their carries and limits).

    python3 bench/gpu/run.py learner --bundle .bundle/learner/p0   # the learner on the machine's own torch (no vLLM)
    python3 bench/gpu/run.py receive .bundle/vllm/pI               # a part of the vLLM bundle (all but the last)
    python3 bench/gpu/run.py vllm --bundle .bundle/vllm/pN         # its last part, then vLLM on CUDA

- Python's standard library only here; every part runs in its own process (a new session: a part over its time is
  killed with what it started) with the project's bundle on PYTHONPATH, under `min(its cap, the time left)`; a part
  that does not get its `need` is skipped. The budget (`--budget`) holds the whole call, packing included.
- It writes at most three files under $OUT, whatever happens: `summary.json` (each part's status, seconds and
  limit, and what it measured, rewritten after every part), `<sequence>.log` (this driver's lines and the tail of
  each part that failed) and `<sequence>.tar.gz` (every part's log and JSON, nvidia-smi's log, the stage's files).
- Work files live in $A5_GPU_WORK (default /tmp/a5-gpu): each call's own in `<work>/<sequence>` (emptied when the
  call starts, so nothing of an earlier call is read or packed as this one's), each bundle's parts in
  `<work>/bundle_<learner|vllm>`, and the random-weights model in `<work>/qwen`, which stays while the machine is warm
  (a later call reuses it once its writing completed).
- A part's limit keeps back the least time the essential parts after it need (`Part.essential`): an optional part
  (vLLM's eager timing, its GRPO step) gets what is left, and is skipped when that is too little.
- `--dry-run`: the CPU rehearsal (tests/test_gpu_sequence.py): tiny sizes, the CPU, this environment's packages,
  every cap and the budget scaled by DRY_SCALE (the CPU pays for process starts the GPU machine does not).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
DRY_SCALE = 4.0
PACK_S = 10  # kept back from the budget for packing the outputs
BUDGETS = {"learner": 330, "vllm": 300, "receive": 120}  # seconds of one call (its run's timeout_s is ~70 s more)
# what each sequence imports after installing its bundle (on the GPU machine; a dry run's hand-made bundle: a5core)
IMPORTS = {"learner": ["a5core", "math_verify", "torchao", "dvclive"], "vllm": ["vllm", "a5core", "math_verify"]}


@dataclass
class Part:
    """One step of a sequence: its commands (run one after another in one time limit), its cap and the least time
    it needs, and the JSON it leaves in the work folder (merged into the summary)."""

    name: str
    commands: list[list[str]]
    cap_s: float
    need_s: float
    result: Path | None = None
    smi: bool = False  # log nvidia-smi while it runs (`<work>/nvidia_smi_<name>.csv`)
    cwd: Path | None = None  # where its commands run (default: the work folder)
    essential: bool = True  # the parts before it keep back its `need_s`


@dataclass
class Call:
    """One call's state: where things go, its clock, and the summary so far."""

    sequence: str
    out: Path
    shared: Path  # $A5_GPU_WORK: the model and the bundles' parts, kept across calls while the machine is warm
    work: Path  # this call's own folder, `<shared>/<sequence>`
    dry: bool
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    summary: dict = field(default_factory=dict)

    @property
    def scale(self) -> float:
        return DRY_SCALE if self.dry else 1.0

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started) - PACK_S

    def say(self, line: str) -> None:
        stamp = f"[{time.monotonic() - self.started:6.1f} s] "
        print(stamp + line, flush=True)
        with (self.out / f"{self.sequence}.log").open("a") as f:
            f.write(stamp + line + "\n")

    def save(self) -> None:
        self.summary["elapsed_s"] = round(time.monotonic() - self.started, 1)
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1, default=str) + "\n")


def environment(call: Call, site: Path) -> dict:
    """The parts' environment: offline, the bundle first on PYTHONPATH; for vLLM, no `expandable_segments` in
    PYTORCH_CUDA_ALLOC_CONF (vLLM's sleep mode refuses it: the summary records what was dropped)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    alloc = [o for o in env.get("PYTORCH_CUDA_ALLOC_CONF", "").split(",") if o.strip()]
    kept = [o for o in alloc if not o.replace(" ", "").startswith("expandable_segments:")]
    if call.sequence == "vllm" and kept != alloc:
        call.summary["dropped_from_PYTORCH_CUDA_ALLOC_CONF"] = sorted(set(alloc) - set(kept))
        env["PYTORCH_CUDA_ALLOC_CONF"] = ",".join(kept)
    env |= {
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_HOST_IP": "127.0.0.1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(site), str(ROOT), os.environ.get("PYTHONPATH", "")) if x)
    return env


def kill(proc: subprocess.Popen) -> None:
    """A command's whole process session (what it started too): SIGTERM, 5 s for the command to end, then SIGKILL to
    whatever of the session is left (also after a command that ended by itself: nothing it left keeps GPU memory)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            continue


def smi_logger(call: Call, part: Part) -> subprocess.Popen | None:
    """nvidia-smi's memory and utilization every 0.5 s into the work folder (None without nvidia-smi)."""
    if not shutil.which("nvidia-smi"):
        return None
    query = "--query-gpu=timestamp,memory.used,memory.total,utilization.gpu"
    log = (call.work / f"nvidia_smi_{part.name}.csv").open("w")
    cmd = ["nvidia-smi", query, "--format=csv,noheader,nounits", "-lms", "500"]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def run_part(call: Call, part: Part, env: dict, reserve_s: float = 0.0) -> str:
    """Run one part under its limit (its cap, or the time left less `reserve_s` for the essential parts after it);
    its status: ok, failed (rc N), timeout, or skipped (no time)."""
    limit = min(part.cap_s * call.scale, call.left() - reserve_s)
    record = call.summary.setdefault("parts", {}).setdefault(part.name, {})
    if limit < part.need_s * call.scale:
        record.update(status="skipped: no time", left_s=round(call.left(), 1))
        call.say(f"{part.name}: skipped, {call.left():.0f} s left and it needs {part.need_s * call.scale:.0f} s")
        call.save()
        return "skipped"
    record["limit_s"] = round(limit, 1)
    call.say(f"{part.name}: started, limit {limit:.0f} s")
    log, t0, status = call.work / "logs" / f"{part.name}.log", time.monotonic(), "ok"
    if part.result is not None:
        part.result.unlink(missing_ok=True)  # what it reports is what it wrote, never an earlier call's
    smi = smi_logger(call, part) if part.smi else None
    with log.open("w") as f:
        for cmd in part.commands:
            f.write(f"$ {' '.join(cmd)}\n")
            f.flush()
            proc = subprocess.Popen(
                cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=part.cwd or call.work, start_new_session=True
            )
            try:
                rc = proc.wait(max(1.0, limit - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                rc = None
            kill(proc)
            if rc is None:
                status = "timeout"
                break
            if rc != 0:
                status = f"failed (rc {rc})"
                break
    if smi is not None:
        kill(smi)
    record.update(status=status, seconds=round(time.monotonic() - t0, 1))
    if part.result is not None and part.result.exists():
        record["result"] = json.loads(part.result.read_text())
    call.say(f"{part.name}: {status} in {record['seconds']} s")
    if status != "ok":
        tail = log.read_text(errors="replace").splitlines()[-30:]
        call.say(f"{part.name}: the last lines of its log:\n    " + "\n    ".join(tail))
    call.save()
    return status


def prepare(*args: str) -> list[str]:
    return [PY, str(ROOT / "bench" / "gpu" / "prepare.py"), *args]


def receive_command(call: Call, bundle: Path, site: Path, imports: list[str], kind: str) -> list[str]:
    """`kind`'s bundle (learner, vllm): its parts gather in their own folder, so the two never meet."""
    cmd = [PY, str(ROOT / "tools" / "offline_bundle.py"), "receive", str(bundle.resolve())]
    cmd += ["--stage", str(call.shared / f"bundle_{kind}"), "--target", str(site), "--python", PY]
    return cmd + ["--imports", *(["a5core"] if call.dry else imports)]


def model_part(call: Call, size: str) -> Part:
    """The random-weights folder (kept while the machine is warm: a later call finds it, once its writing completed)."""
    folder, done = call.shared / "qwen", call.shared / "qwen.complete"
    if done.exists():
        return Part("model", [[PY, "-c", f"print('reusing {folder}')"]], 10, 1)
    write = prepare("model", "--out", str(folder), "--size", size)
    return Part("model", [write, [PY, "-c", f"open({str(done)!r}, 'w').write('{size}')"]], 90, 20)


def grpo_part(
    call: Call, name: str, backend: str, steps: int, size: str, cap: float, need: float, essential: bool = True
) -> list[Part]:
    """The real GRPO stage (`stages/grpo.py` through the launcher) for `steps` steps of the full profile on this GPU,
    then its summary: the time split and peak memory per step against the plan for this card."""
    run = call.work / name
    data = run / "data" / "prepared"
    (run / "data" / "external" / "math").mkdir(parents=True, exist_ok=True)
    for f in (ROOT / "tests" / "fixtures" / "math").glob("*.jsonl"):
        shutil.copy(f, run / "data" / "external" / "math" / f.name)
    params = run / "params.yaml"
    split = [str(data / f) for f in ("train.parquet", "validation.parquet", "sft.parquet", "report.json")]
    stage = [PY, "-m", "a5core.stage.launch", str(ROOT / "stages" / "grpo.py"), "--params", str(params)]
    stage += ["--run", "step", "--model", str(call.shared / "qwen"), "--train", split[0], "--validation", split[1]]
    stage += ["--out", str(run / "model"), "--metrics", str(run / "metrics.json"), "--live", str(run / "live")]
    stage += ["--logs", str(run / "logs"), "--scratch", str(run / "scratch"), "--record", str(run / "record")]
    prepare_math = [PY, str(ROOT / "stages" / "prepare_math.py"), "--params", str(params), "--train", split[0]]
    prepare_math += ["--validation", split[1], "--sft", split[2], "--report", split[3], "--record", str(run / "pm")]
    setup = prepare("params", "--out", str(params), "--size", size, "--backend", backend, "--steps", str(steps))
    summary = call.work / f"{name}.json"
    read = prepare("grpo-summary", "--run", str(run), "--params", str(params), "--model", str(call.shared / "qwen"))
    read += ["--out", str(summary), "--smi", str(call.work / f"nvidia_smi_{name}.csv")]
    return [
        Part(name, [setup, prepare_math, stage], cap, need, smi=True, cwd=run, essential=essential),
        Part(f"{name}_summary", [read], 30, 5, result=summary, essential=essential),
    ]


def learner_parts(call: Call, bundle: Path, site: Path) -> list[Part]:
    size = "tiny" if call.dry else "full"
    rollouts = "8" if call.dry else "64"
    flags = ["--dry-run"] if call.dry else []
    distributed = [PY, str(ROOT / "bench" / "gpu_budget.py"), "--tokenizer", str(call.shared / "qwen")]
    distributed += ["--out", str(call.work / "distributed.json"), "--parts", "distributed", "--rollouts", rollouts]
    numerics = prepare("numerics", "--model", str(call.shared / "qwen"), "--size", size)
    return [  # the probe first: the machine's facts come back even if the install fails
        Part("probe", [prepare("probe", "--out", str(call.work / "probe.json"))], 20, 3, call.work / "probe.json"),
        Part(
            "install",
            [receive_command(call, bundle, site, IMPORTS["learner"], "learner")],
            60,
            5,
            site / "a5-bundle.json",
        ),
        model_part(call, size),
        *grpo_part(call, "grpo", "hf", 2, size, 230, 60),
        Part("numerics", [numerics + ["--out", str(call.work / "numerics.json")]], 45, 15, call.work / "numerics.json"),
        Part("distributed", [distributed + flags], 60, 20, call.work / "distributed.json"),
    ]


def vllm_parts(call: Call, bundle: Path | None, site: Path) -> list[Part]:
    size = "tiny" if call.dry else "full"
    check = [PY, str(ROOT / "bench" / "vllm_check.py"), "--model", str(call.shared / "qwen")]
    if call.dry:
        check += ["--prompts", "4", "--n", "2", "--max-tokens", "16", "--cycles", "1", "--greedy-prompts", "2"]
        check += ["--greedy-tokens", "8", "--perturb", "0.05"]
    else:  # the full profile's rollout batch: 32 prompts x 8 samples of up to 1,024 tokens
        check += ["--layout", "one_gpu", "--prompts", "32", "--n", "8", "--max-tokens", "1024", "--cycles", "2"]
        check += ["--greedy-prompts", "4", "--greedy-tokens", "32"]
    probe = prepare("probe", "--vllm", "--out", str(call.work / "probe.json"))
    receive = [receive_command(call, bundle, site, IMPORTS["vllm"], "vllm")] if bundle else []
    parts = [Part("install", receive, 90, 10, site / "a5-bundle.json")] if bundle else []
    graphs, eager = call.work / "vllm_check.json", call.work / "vllm_eager.json"
    return parts + [  # the probe after the install: it imports vLLM
        Part("probe", [probe], 30, 5, call.work / "probe.json"),
        model_part(call, size),
        Part("vllm_check", [check + ["--out", str(graphs)]], 240, 60, graphs),
        Part(
            "vllm_eager",
            [check + ["--eager", "--parts", "timing", "--out", str(eager)]],
            150,
            60,
            eager,
            essential=False,
        ),
        *grpo_part(call, "grpo_vllm", "vllm", 1, size, 200, 90, essential=False),
    ]


def pack(call: Call) -> None:
    """Everything of this call's folder but the stages' weights, checkpoints and data, as one tar.gz under $OUT."""
    skip = {"model", "scratch", "data"}
    with tarfile.open(call.out / f"{call.sequence}.tar.gz", "w:gz") as tar:
        for path in sorted(call.work.rglob("*")):
            rel = path.relative_to(call.work)
            if path.is_file() and not skip & set(rel.parts) and path.stat().st_size < 8 * 2**20:
                tar.add(path, arcname=str(rel))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sequence", choices=["learner", "receive", "vllm"])
    p.add_argument("part", nargs="?", type=Path, help="receive: one part's folder of the vLLM bundle")
    p.add_argument("--bundle", type=Path, help="learner: the learner bundle's part; vllm: the vLLM bundle's last part")
    p.add_argument("--budget", type=float, help="seconds for the whole call (default: BUDGETS)")
    p.add_argument(
        "--dry-run", action="store_true", help="the CPU rehearsal at tiny sizes (tests/test_gpu_sequence.py)"
    )
    args = p.parse_args(argv)
    if (args.sequence == "learner" and args.bundle is None) or (args.sequence == "receive" and args.part is None):
        p.error("learner needs --bundle (the learner bundle's part); receive needs a part's folder")
    out, shared = Path(os.environ.get("OUT", "/tmp/a5-gpu-out")), Path(os.environ.get("A5_GPU_WORK", "/tmp/a5-gpu"))
    site, work = Path(os.environ.get("A5_SITE", "/tmp/site")), shared / args.sequence
    shutil.rmtree(work, ignore_errors=True)  # this call's own folder: nothing of an earlier call is read or packed
    for folder in (out, work / "logs"):
        folder.mkdir(parents=True, exist_ok=True)
    scale = DRY_SCALE if args.dry_run else 1.0
    call = Call(args.sequence, out, shared, work, args.dry_run, (args.budget or BUDGETS[args.sequence]) * scale)
    call.summary = {"sequence": args.sequence, "dry_run": args.dry_run, "budget_s": call.budget_s, "parts": {}}
    env = environment(call, site)
    if args.sequence == "receive":
        parts = [Part("receive", [receive_command(call, args.part, site, IMPORTS["vllm"], "vllm")], 100, 5)]
    elif args.sequence == "learner":
        parts = learner_parts(call, args.bundle, site)
    else:
        parts = vllm_parts(call, args.bundle, site)
    call.say(f"{args.sequence}: {len(parts)} parts in {call.budget_s:.0f} s; work {work}, outputs {out}")
    failed, skipped = [], []
    for i, part in enumerate(parts):
        reserve = sum(p.need_s for p in parts[i + 1 :] if p.essential) * call.scale
        status = run_part(call, part, env, reserve)
        (skipped if status == "skipped" else failed if status != "ok" else []).append(part.name)
        if status != "ok" and part.name in ("install", "receive"):  # nothing after it can run
            break
    call.summary |= {"failed": failed, "skipped": skipped}
    call.save()
    pack(call)
    call.say(f"{args.sequence}: done in {time.monotonic() - call.started:.0f} s; failed: {failed or 'none'}, "
             f"skipped for time: {skipped or 'none'}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
