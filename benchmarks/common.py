"""What every benchmark shares: process CPU and memory readings, percentiles, the printed table,
the JSON result file, and starting server processes on loopback.

CPU and memory come from /proc (Linux), so the figures cover every process of a shape, not only
the driver's own."""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import resource
import signal
import socket
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from devtools.processes import ServerProcess, rollgate_cmd  # noqa: F401 - re-exported

RESULTS_DIR = Path(__file__).resolve().parent / "results"
_CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- process readings ----------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 0; utime, stime are fields 11, 12.
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def total_cpu_seconds(pids: Iterable[int]) -> float:
    return sum(cpu_seconds(p) for p in pids)


def _status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmRSS") / 1024


def peak_rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmHWM") / 1024


def raise_fd_limit(want: int = 65536) -> int:
    """Raise the open-files limit to `want` (the hard limit too where allowed, e.g. as root), else
    as far as the hard limit goes; return the new soft limit. Server processes started afterwards
    inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return want
        except (ValueError, OSError):
            pass  # not privileged: stay under the hard limit
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def error_key(outcome: str, message: str) -> str:
    """An error message with session ids and ports blanked, so equal failures count together."""
    message = re.sub(r"/sessions/[^/\s]+", "/sessions/{id}", message)
    message = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:{port}", message)
    return f"{outcome}: {message[:200]}"


# --- statistics and reporting ---------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of repeated runs (the honest summary on a shared machine)."""
    ordered = sorted(values)
    return {"median": ordered[len(ordered) // 2], "min": ordered[0], "max": ordered[-1], "runs": len(ordered)}


def machine() -> dict[str, Any]:
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    cpu = platform.processor() or ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "ram_gb": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def print_table(rows: list[dict[str, Any]], columns: Sequence[str], title: str = "") -> None:
    """A plain aligned table on stdout (benchmarks are command-line tools: print is their output)."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    if title:
        print(f"\n{title}")
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))


def run_command(name: str) -> str:
    """The command that produced a result: the benchmark module that runs (a result file may be
    named after its geometry), its arguments with the home directory written `~`."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0].endswith(".py") else None
    module = script.stem if script is not None else name
    home = str(Path.home())
    args = [a.replace(home, "~") if home != "/" else a for a in sys.argv[1:]]
    return " ".join([Path(sys.executable).name, "-m", f"benchmarks.{module}", *args])


def write_results(name: str, payload: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    doc = {
        "benchmark": name,
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": run_command(name),
        **payload,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


# --- server processes -----------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc(ServerProcess):
    """A named server process whose log goes to `log_dir/NAME.log` (devtools.processes)."""

    def __init__(
        self,
        name: str,
        args: list[str],
        port: int,
        *,
        env: dict[str, str] | None = None,
        health_path: str = "/healthz",
        log_dir: Path | None = None,
    ):
        log_path = (log_dir / f"{name}.log") if log_dir else None
        super().__init__(args, port, name=name, env=env, log_path=log_path, health_path=health_path)


def exit_on_sigterm() -> None:
    """SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so `finally` blocks stop the servers."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def python_cmd(*args: str) -> list[str]:
    return [sys.executable, *args]
