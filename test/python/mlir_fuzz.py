"""Mutated `.mlir` inputs through `mirax-opt` (the fuzzer of test_fuzz_mlir.py and
`make fuzz`): each case is a file of test/lit, mutated a few times, run with the passes
of one of its RUN lines. A case passes when mirax-opt exits 0 or prints diagnostics
and exits non-zero; it fails on a signal (an upstream assertion or a crash) or a
Python traceback (an error escaping as an exception).

    python test/python/mlir_fuzz.py --cases 2000 --seed 1

Cases run in a worker process (one import of MLIR for many cases); a worker that dies
names the case that killed it and is restarted.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading

LIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lit")


def corpus():
    """[(file name, text, [mirax-opt argument lists from its RUN lines])]."""
    out = []
    for name in sorted(os.listdir(LIT)):
        if not name.endswith(".mlir"):
            continue
        text = open(os.path.join(LIT, name)).read()
        runs = []
        for line in text.splitlines():
            m = re.match(r"\s*//\s*RUN:\s*(?:not\s+)?%mirax-opt\s+%s\s+(.*)", line)
            if not m:
                continue
            cmd = m.group(1).split("|")[0].split("2>&1")[0]
            try:
                args = shlex.split(cmd)
            except ValueError:
                continue
            # (no IR dumps: megabytes on stderr for nothing the fuzzer checks)
            runs.append([a for a in args if a not in ("-verify-diagnostics", "--verify-diagnostics")
                         and not a.lstrip("-").startswith("mlir-print-ir")])
        if runs:
            out.append((name, text, runs))
    return out


MIRAX_OPS = ["mirax.exp", "mirax.add", "mirax.sum", "mirax.reshape", "mirax.broadcast_to", "mirax.matmul",
             "mirax.transpose", "mirax.take", "mirax.scatter_add", "mirax.constant", "mirax.astype",
             "mirax.max", "mirax.softmax", "mirax.conv", "mirax.cumsum", "mirax.select", "mirax.where"]
TYPES = ["f32", "f64", "i32", "i64", "i1", "f16", "bf16", "i8", "ui8", "index", "complex<f32>"]


def mutate(text: str, rng: random.Random) -> str:
    """One random edit of the text: lines dropped, duplicated or swapped, a number,
    type, op name or SSA name replaced, a token dropped, or the text cut short."""
    lines = text.splitlines(keepends=True)
    body = [i for i, l in enumerate(lines) if l.strip() and not l.lstrip().startswith("//")]
    kind = rng.randrange(9)
    if not body:
        return text
    i = rng.choice(body)
    if kind == 0:
        del lines[i]
    elif kind == 1:
        lines.insert(i, lines[i])
    elif kind == 2:
        j = rng.choice(body)
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 3:  # a number: shapes, attributes, constants
        nums = list(re.finditer(r"\d+", lines[i]))
        if nums:
            m = rng.choice(nums)
            new = str(rng.choice([0, 1, 2, 3, 7, 64, 2**31, -1, int(m.group()) + 1]))
            lines[i] = lines[i][:m.start()] + new + lines[i][m.end():]
    elif kind == 4:  # an element type
        ts = list(re.finditer(r"\b(f16|bf16|f32|f64|i1|i8|i16|i32|i64|ui8|index)\b", lines[i]))
        if ts:
            m = rng.choice(ts)
            lines[i] = lines[i][:m.start()] + rng.choice(TYPES) + lines[i][m.end():]
    elif kind == 5:  # an op name
        ops = list(re.finditer(r"mirax\.\w+", lines[i]))
        if ops:
            m = rng.choice(ops)
            lines[i] = lines[i][:m.start()] + rng.choice(MIRAX_OPS) + lines[i][m.end():]
    elif kind == 6:  # an SSA name
        vs = list(re.finditer(r"%\w+", lines[i]))
        if vs:
            m = rng.choice(vs)
            lines[i] = lines[i][:m.start()] + rng.choice(["%0", "%1", "%arg0", "%arg1", "%2"]) + lines[i][m.end():]
    elif kind == 7:  # a token
        toks = list(re.finditer(r"\S+", lines[i]))
        if toks:
            m = rng.choice(toks)
            lines[i] = lines[i][:m.start()] + lines[i][m.end():]
    else:
        cut = rng.randrange(len(text))
        return text[:cut]
    return "".join(lines)


def cases(n: int, seed: int):
    """n (case id, mirax-opt arguments, mutated text), reproducible from the seed."""
    rng = random.Random(seed)
    files = corpus()
    for k in range(n):
        name, text, runs = rng.choice(files)
        args = rng.choice(runs)
        for _ in range(rng.randint(1, 3)):
            text = mutate(text, rng)
        yield f"{seed}:{k}:{name}", args, text


# ---- the worker ------------------------------------------------------------------------

def worker():
    """Read cases (JSON lines) from stdin, run mirax-opt in this process on each, answer
    {"id", "rc", "traceback"} per case. Dies with the process on a signal."""
    from mirax import opt
    for line in sys.stdin:
        case = json.loads(line)
        print(json.dumps({"start": case["id"]}), flush=True)
        # (in the directory the parent removes: a worker killed mid-case leaves its file there)
        with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False, dir=os.environ.get("MIRAX_FUZZ_TMP")) as fh:
            fh.write(case["text"])
            path = fh.name
        out, err = io.StringIO(), io.StringIO()
        tb = None
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = opt.main([path] + case["args"])
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - what the fuzzer looks for
            import traceback
            rc, tb = -1, traceback.format_exc()
        finally:
            os.unlink(path)
        if tb is None and "Traceback (most recent call last)" in err.getvalue():
            tb = err.getvalue()[-3000:]
        print(json.dumps({"id": case["id"], "rc": rc, "traceback": tb, "stderr": err.getvalue()[-500:]}),
              flush=True)


def run_cases(case_list, timeout=120):
    """Run cases through workers; returns (number run, [failures]) where a failure is
    {"id", "args", "text", "why"}."""
    failures, done = [], 0
    run_cases.outcomes = {"ok": 0, "diagnosed": 0}
    pending = list(case_list)
    while pending:
        # the worker's stderr into a file, not a pipe: MLIR's C++ diagnostics and dumps go
        # to fd 2 directly, and a pipe nobody reads until the end filled up and blocked the
        # worker while this process waited on its stdout (a hang, not a failure)
        errf = tempfile.TemporaryFile("w+")
        scratch = tempfile.mkdtemp(prefix="mirax-fuzz-")
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=errf, text=True,
                             env=dict(os.environ, MIRAX_OPT_TRACEBACK="1", MIRAX_FUZZ_TMP=scratch))
        by_id = {c[0]: c for c in pending}

        def feed(p=p, todo=list(pending)):  # on a thread: the worker answers while we write
            try:
                for cid, args, text in todo:
                    p.stdin.write(json.dumps({"id": cid, "args": args, "text": text}) + "\n")
                p.stdin.close()
            except (BrokenPipeError, OSError):  # the worker died; the loop below sees why
                pass
        threading.Thread(target=feed, daemon=True).start()
        current, finished = None, set()
        for line in p.stdout:
            msg = json.loads(line)
            if "start" in msg:
                current = msg["start"]
                continue
            finished.add(msg["id"])
            done += 1
            run_cases.outcomes["ok" if msg["rc"] == 0 else "diagnosed"] += 1
            if msg["traceback"]:
                c = by_id[msg["id"]]
                failures.append({"id": c[0], "args": c[1], "text": c[2], "why": msg["traceback"]})
        try:
            rc = p.wait(timeout=timeout)
        finally:
            if p.poll() is None:  # (timed out: no worker outlives its run)
                p.kill()
                p.wait()
            shutil.rmtree(scratch, ignore_errors=True)
        errf.seek(0)
        err = errf.read()
        errf.close()
        pending = [c for c in pending if c[0] not in finished]
        if pending and current is not None and current not in finished:  # the worker died on it
            c = by_id[current]
            failures.append({"id": c[0], "args": c[1], "text": c[2],
                             "why": f"mirax-opt died (exit {rc}): {err[-1500:]}"})
            done += 1
            pending = [x for x in pending if x[0] != current]
        elif pending:
            raise RuntimeError(f"the fuzz worker stopped (exit {rc}): {err[-1500:]}")
    return done, failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--seed", type=int, default=random.randrange(2**31))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--save", help="write failing cases here (one .mlir per case)")
    a = ap.parse_args(argv)
    if a.worker:
        return worker()
    done, failures = run_cases(cases(a.cases, a.seed))
    o = run_cases.outcomes
    print(f"mlir fuzz: seed {a.seed}: {done} cases ({o['ok']} ran clean, {o['diagnosed']} diagnosed), "
          f"{len(failures)} failures")
    for f in failures:
        print(f"--- {f['id']}  mirax-opt {' '.join(f['args'])}\n{f['why'][-1200:]}")
        if a.save:
            os.makedirs(a.save, exist_ok=True)
            with open(os.path.join(a.save, f["id"].replace(":", "_")), "w") as fh:
                fh.write(f"// mirax-opt {' '.join(f['args'])}\n" + f["text"])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
