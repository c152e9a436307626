#!/usr/bin/env python3
"""Where a multi-rank run's idle CPU time goes: threads waiting for a core while another core idles.

Reads a `perf sched record` file (root, or kernel.perf_event_paranoid <= -1) taken while `strata train` runs, and
prints for each CPU its idle share, and for each thread name (`strata-comm` for the communication threads, Note
[Thread names]; `exe` for the ranks' compute threads) how many times it waited to run (woken, preempted or
yielding), how long in all it stayed runnable without running, and how much of that the other CPUs sat idle: time
the scheduler left a runnable thread queued behind a busy core. Note [Giving way to communication] came from this reading.

  perf sched record -o /tmp/sched.data -- sleep 3     # during training
  python3 bench/sched_waits.py /tmp/sched.data
"""

import argparse
import collections
import re
import subprocess
import sys

EVENT = re.compile(r"\s*\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s+(.*)")
SWITCH_PREV = re.compile(r"prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+)")
SWITCH_NEXT = re.compile(r"next_comm=(.*) next_pid=(\d+)")
WAKING = re.compile(r"comm=(.*) pid=(\d+) prio=")


def read_events(path):
    script = subprocess.run(["perf", "script", "-i", path, "-F", "cpu,time,event,trace"], check=True,
                            capture_output=True, text=True).stdout
    for line in script.splitlines():
        match = EVENT.match(line)
        if match:
            yield int(match[1]), float(match[2]), match[3], match[4]


def overlap(start, end, intervals):
    """Seconds of [start, end] covered by the sorted, disjoint `intervals`."""
    total = 0.0
    for a, b in intervals:
        if b <= start:
            continue
        if a >= end:
            break
        total += min(end, b) - max(start, a)
    return total


def union(intervals):
    merged = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [tuple(x) for x in merged]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="perf sched record output")
    args = parser.parse_args()

    switches = collections.defaultdict(list)  # cpu -> [(time, next pid)]
    woken = {}  # pid -> time of its wake-up
    waits = []  # (runnable from, ran at, cpu, thread name)
    for cpu, time, event, trace in read_events(args.data):
        if event == "sched_switch":
            previous = SWITCH_PREV.search(trace)
            previous_pid = int(previous[1])
            if previous[2].startswith("R") and previous_pid != 0:  # preempted or yielded (not the idle task)
                woken[previous_pid] = time
            else:  # went to sleep: a wake-up seen while it still ran is void
                woken.pop(previous_pid, None)
            match = SWITCH_NEXT.search(trace)
            name, pid = match[1], int(match[2])
            switches[cpu].append((time, pid))
            if pid in woken:
                waits.append((woken.pop(pid), time, cpu, name))
        elif event in ("sched_waking", "sched_wakeup", "sched_wakeup_new"):
            match = WAKING.search(trace)
            woken.setdefault(int(match[2]), time)
    if not switches:
        sys.exit(f"{args.data}: no sched_switch events (record with `perf sched record`)")

    # A CPU idles from a switch to pid 0 (the idle task) until its next switch.
    idle = {cpu: [(t, t2) for (t, pid), (t2, _) in zip(events, events[1:]) if pid == 0]
            for cpu, events in switches.items()}
    for cpu in sorted(idle):
        events = switches[cpu]
        window = events[-1][0] - events[0][0]
        seconds = sum(b - a for a, b in idle[cpu])
        print(f"cpu {cpu}: idle {seconds:.3f} s of {window:.3f} s ({100 * seconds / max(window, 1e-9):.0f}%)")

    idle_elsewhere = {cpu: union([iv for other, ivs in idle.items() if other != cpu for iv in ivs]) for cpu in idle}
    count, runnable, stranded = collections.Counter(), collections.Counter(), collections.Counter()
    for start, end, cpu, name in waits:
        if name.startswith("perf"):  # the recorder itself
            continue
        key = name.split("/")[0] if name.startswith(("ksoftirqd", "kworker", "migration")) else name
        count[key] += 1
        runnable[key] += end - start
        stranded[key] += overlap(start, end, idle_elsewhere[cpu])
    print(f"{'thread':<18} {'waits':>9} {'runnable s':>11} {'of it, another cpu idle s':>26}")
    for key, seconds in runnable.most_common(8):
        print(f"{key:<18} {count[key]:>9} {seconds:>11.3f} {stranded[key]:>26.3f}")


if __name__ == "__main__":
    main()
