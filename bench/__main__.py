"""Run the benchmarks and write bench/results/<name>.json (``make bench``).

python -m bench                 everything (a few minutes on 2 cores)
python -m bench --quick         fewer runs and calls, for a smoke check
python -m bench --smoke         --quick, results to a scratch directory, every benchmark
                                run even when one fails; exit 1 naming those that
                                failed (make bench-smoke, in CI: a benchmark cannot rot)
python -m bench --only scale    one benchmark
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench import benchmarks, hostile_files
from bench.harness import Workspace, write_result
from bench.stop_time import stop_time

FULL = {
    "runs": 7,
    "calls": 2000,
    "cold_runs": 5,
    "restarts": 20,
    "flips": 40,
    "scale_calls": 200,
    "allocations": 100_000,
    "idle_seconds": 60.0,
    "stops": 10,
    "bound_calls": 2000,
    "bound_rounds": 3,
    "hostile_calls": 2000,
    "hostile_rounds": 3,
}
QUICK = {
    "runs": 2,
    "calls": 300,
    "cold_runs": 2,
    "restarts": 5,
    "flips": 10,
    "scale_calls": 30,
    "allocations": 5_000,
    "idle_seconds": 10.0,
    "stops": 3,
    "bound_calls": 300,
    "bound_rounds": 1,
    "hostile_calls": 300,
    "hostile_rounds": 1,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer runs, for a smoke check")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="--quick into a scratch directory; run every benchmark, exit 1 if one failed",
    )
    parser.add_argument("--only", action="append", help="run only this benchmark (repeatable)")
    parser.add_argument(
        "--allocations", type=int, help="Allocates in the memory benchmark (default: 100000)"
    )
    args = parser.parse_args()
    args.quick = args.quick or args.smoke
    n = dict(QUICK if args.quick else FULL)
    if args.allocations:
        n["allocations"] = args.allocations
    plan = {
        "allocate_round_trip": lambda ws: benchmarks.allocate_round_trip(
            ws, int(n["runs"]), int(n["calls"])
        ),
        "cold_start": lambda ws: benchmarks.cold_start(ws, int(n["cold_runs"])),
        "kubelet_restart": lambda ws: benchmarks.kubelet_restart(ws, int(n["restarts"])),
        "health_change": lambda ws: benchmarks.health_change(ws, int(n["flips"])),
        "slice_publish": lambda ws: benchmarks.slice_publish(ws, int(n["flips"])),
        "scale_4096": lambda ws: benchmarks.scale(ws, 4096, int(n["scale_calls"])),
        "memory": lambda ws: benchmarks.memory(ws, int(n["allocations"])),
        "idle_cpu": lambda ws: benchmarks.idle_cpu(ws, n["idle_seconds"]),
        "stop_time": lambda ws: stop_time(ws, int(n["stops"])),
        "worker_liveness": benchmarks.worker_liveness,
        "memory_bound": lambda ws: benchmarks.memory_bound(
            ws, int(n["bound_calls"]), int(n["bound_rounds"])
        ),
        "hostile_files": lambda ws: hostile_files.hostile_files(
            ws, int(n["hostile_calls"]), int(n["hostile_rounds"])
        ),
    }
    scratch = Path(tempfile.mkdtemp(prefix="dh-bench-smoke-")) if args.smoke else None
    failed: list[str] = []
    for name, run in plan.items():
        if args.only and name not in args.only:
            continue
        ws = Workspace()
        started = time.perf_counter()
        try:
            result = run(ws)
        except Exception:
            if not args.smoke:
                raise
            failed.append(name)
            print(f"== {name} FAILED after {time.perf_counter() - started:.1f} s", flush=True)
            traceback.print_exc()
            continue
        finally:
            ws.close()
        result["quick"] = args.quick
        result["seconds"] = round(time.perf_counter() - started, 1)
        path = write_result(name, result, scratch)
        print(f"== {name} ({result['seconds']} s) -> {path}")
        print(
            json.dumps(
                {
                    k: v
                    for k, v in result.items()
                    if k
                    in (
                        "goal",
                        "goals",
                        "results",
                    )
                },
                indent=1,
                default=str,
            )[:3000]
        )
    if failed:
        sys.exit(f"benchmarks failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
