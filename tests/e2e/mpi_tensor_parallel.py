#!/usr/bin/env python3
# ===- mpi_tensor_parallel.py - infer under mpirun, one rank per process -=== #
#
# Multi-process tensor parallelism on the CPU backend (ranks meet over MPI on
# loopback) against the one-process runs of the same artifacts:
#
#   --case tp2 / tp4   `mpirun -np N infer logits|generate` of a tp=N
#                      artifact: logits within 1e-6 of the one-process
#                      (thread-per-rank) run and 1e-4 of tp=1, greedy and
#                      seeded sampled tokens identical; a launch of the wrong
#                      size is an error that says so.
#   --case rank-killed rank 1 is killed (SIGKILL) during a run: every rank
#                      ends within the deadline and the output names rank 1.
#   --case rank-hung   rank 1 stops (SIGSTOP) during a run: rank 0's step
#                      deadline (INFER_MPI_TIMEOUT) fires, names rank 1, and
#                      the launch is aborted.
#
# Exits 77 (ctest's skip) when mpirun is not installed.
#
# ===-------------------------------------------------------------------=== #

import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

SKIP = 77


def run(cmd, env=None, timeout=600):
    result = subprocess.run(cmd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(cmd)}\n"
                 f"{result.stdout}\n{result.stderr}")
    return result.stdout


def mpirun_env():
    env = dict(os.environ)
    # CI runs as root; OpenMPI refuses that unless told.
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    # Containers often forbid the cross-process memory copies (CMA) that
    # OpenMPI's shared-memory transport tries first.
    env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
    return env


def mpirun(n):
    return ["mpirun", "-np", str(n), "--oversubscribe"]


def read_logits(path):
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        info = json.loads(f.read(header_len))["logits"]
        begin, end = info["data_offsets"]
        f.seek(8 + header_len + begin)
        data = f.read(end - begin)
    return info["shape"], struct.unpack(f"<{len(data) // 4}f", data)


def max_rel_err(actual_path, reference_path):
    shape, actual = read_logits(actual_path)
    ref_shape, reference = read_logits(reference_path)
    if shape != ref_shape:
        sys.exit(f"{actual_path}: shape {shape}, reference {ref_shape}")
    scale = max(abs(x) for x in reference)
    return max(abs(a - b) for a, b in zip(actual, reference)) / scale


def check_close(actual, reference, tolerance, what):
    err = max_rel_err(actual, reference)
    print(f"{what}: max_rel_err={err:.3e} (tolerance {tolerance:.0e})")
    if not err <= tolerance:
        sys.exit(f"{what}: max relative error {err:.3e} exceeds {tolerance}")


def compile_artifacts(args, model, tps):
    out = {}
    for tp in tps:
        path = os.path.join(args.work, f"{os.path.basename(model)}-tp{tp}")
        if not os.path.isdir(path):
            run([args.infer, "compile", model, "-o", path, "--tp", str(tp)])
        out[tp] = path
    return out


def case_parity(args, n):
    env = mpirun_env()
    tokens = "1,5,9,33,100,7,300,2,17"
    models = [os.path.join(args.fixtures, "rand", "llama-gqa"),
              os.path.join(args.project_fixtures, "qwen2-bias-tied")]
    for model in models:
        name = os.path.basename(model)
        art = compile_artifacts(args, model, [1, n])
        files = {}
        for label, cmd in [
                ("tp1", [args.infer, "logits", art[1]]),
                ("threads", [args.infer, "logits", art[n]]),
                ("mpi", mpirun(n) + [args.infer, "logits", art[n]])]:
            files[label] = os.path.join(args.work, f"{name}-{n}-{label}.st")
            run(cmd + ["--token-ids", tokens, "-o", files[label],
                       "--threads", "1"], env=env)
        check_close(files["mpi"], files["threads"], 1e-6,
                    f"{name} tp={n}: {n} processes vs one process")
        check_close(files["mpi"], files["tp1"], 1e-4,
                    f"{name} tp={n}: {n} processes vs tp=1")

        generate = ["generate", "--token-ids", "1,5,9,33", "--token-ids",
                    "7,8", "--max-new-tokens", "12", "--ignore-eos", "--json",
                    "--threads", "1"]
        greedy1 = run([args.infer] + generate[:1] + [art[1]] + generate[1:])
        greedy = run(mpirun(n) + [args.infer] + generate[:1] + [art[n]] +
                     generate[1:], env=env)
        if greedy != greedy1:
            sys.exit(f"{name} tp={n}: greedy tokens differ from tp=1:\n"
                     f"{greedy}\nvs\n{greedy1}")
        sampled = generate + ["--temperature", "0.8", "--seed", "7"]
        one = run([args.infer] + sampled[:1] + [art[n]] + sampled[1:])
        many = run(mpirun(n) + [args.infer] + sampled[:1] + [art[n]] +
                   sampled[1:], env=env)
        if one != many:
            sys.exit(f"{name} tp={n}: sampled tokens differ from one "
                     f"process:\n{many}\nvs\n{one}")
        print(f"{name} tp={n}: greedy and sampled tokens identical")

    # One process per rank: a launch of another size says so.
    result = subprocess.run(
        mpirun(n + 1) + [args.infer, "logits", art[n], "--token-ids", "1,2",
                         "-o", os.path.join(args.work, "wrong.st")],
        env=env, capture_output=True, text=True, timeout=120)
    expected = (f"compiled for {n} tensor-parallel ranks but the launcher "
                f"started {n + 1} processes")
    if result.returncode == 0 or expected not in result.stderr:
        sys.exit(f"a launch of {n + 1} processes for tp={n}: exit "
                 f"{result.returncode}, stderr:\n{result.stderr}")
    print(f"{n + 1} processes for tp={n}: {expected}")


def pid_of_rank(rank, parent, deadline):
    """The pid of the infer process of `rank` under mpirun `parent`."""
    while time.monotonic() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().split(b"\0")
            except OSError:
                continue
            if (f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ and
                    os.path.basename(cmdline[0]) == b"infer" and
                    f"INFER_TEST_LAUNCH={parent}".encode() in environ):
                return int(pid)
        time.sleep(0.1)
    return None


def case_failure(args, sig):
    art = compile_artifacts(args, os.path.join(args.fixtures, "rand",
                                               "llama-gqa"), [2])
    env = mpirun_env()
    env["INFER_MPI_TIMEOUT"] = "3"
    env["INFER_MPI_JOIN_TIMEOUT"] = "10"
    # Marks this launch's processes, so a parallel test's are left alone.
    env["INFER_TEST_LAUNCH"] = str(os.getpid())
    # A long run: it is cut short long before it could finish.
    cmd = mpirun(2) + ["-x", "INFER_MPI_TIMEOUT", "-x",
                       "INFER_MPI_JOIN_TIMEOUT", "-x", "INFER_TEST_LAUNCH",
                       args.infer, "bench", art[2], "--input-len", "32",
                       "--output-len", "256", "--num-prompts", "4000",
                       "--threads", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    joined = threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if "tensor-parallel ranks joined" in line:
                joined.set()

    reader = threading.Thread(target=read)
    reader.start()
    # Rank 0 says so once every rank has loaded and made its backend; then
    # the run is in its steps (it cannot finish for minutes).
    if not joined.wait(120):
        proc.kill()
        reader.join()
        sys.exit("the ranks never joined:\n" + "".join(lines))
    ranks = [pid_of_rank(r, os.getpid(), time.monotonic() + 10)
             for r in (0, 1)]
    victim = ranks[1]
    if victim is None:
        proc.kill()
        sys.exit("no process of rank 1:\n" + "".join(lines))
    time.sleep(0.5)
    os.kill(victim, sig)
    hit = time.monotonic()
    hung = False
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        hung = True
        proc.kill()
    ended = time.monotonic() - hit
    # Whatever is left of the launch goes (the reader waits for its pipe).
    for pid in ranks:
        try:
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    reader.join()
    output = "".join(lines)
    if hung:
        sys.exit("the launch still ran 60 s after rank 1 was "
                 f"{'killed' if sig == signal.SIGKILL else 'stopped'}:\n" +
                 output)
    print(output)
    if proc.returncode == 0:
        sys.exit("the launch exited 0 although rank 1 failed")
    if sig == signal.SIGKILL:
        named = "process rank 1" in output or "rank 1 " in output
    else:
        named = "rank 1 did not" in output
    if not named:
        sys.exit("the output does not name rank 1")
    print(f"ended {ended:.1f} s after rank 1 failed, exit {proc.returncode}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--infer", required=True)
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--project-fixtures", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--case", required=True,
                        choices=["tp2", "tp4", "rank-killed", "rank-hung"])
    args = parser.parse_args()
    if not shutil.which("mpirun"):
        print("mpirun not found (apt-get install openmpi-bin): skipped")
        return SKIP
    os.makedirs(args.work, exist_ok=True)
    if args.case == "tp2":
        case_parity(args, 2)
    elif args.case == "tp4":
        case_parity(args, 4)
    elif args.case == "rank-killed":
        case_failure(args, signal.SIGKILL)
    else:
        case_failure(args, signal.SIGSTOP)
    return 0


if __name__ == "__main__":
    sys.exit(main())
