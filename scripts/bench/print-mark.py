#!/usr/bin/env python3
"""What the python3.11 wrapper adds to a function's print: the same
one-line print with flush, N times, to /dev/null as it is, through the
wrapper's _CallOutput outside a call, and inside a call (where each line
gets its invocation's mark). Run from the repository root:

    python3 scripts/bench/print-mark.py [N]
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "runtimes", "python3.11"))
import sless_runtime  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000


def per_print(stream):
    started = time.perf_counter()
    for _ in range(N):
        print("called", file=stream, flush=True)
    return (time.perf_counter() - started) / N * 1e6


with open(os.devnull, "w") as devnull:
    wrapped = sless_runtime._CallOutput(devnull)
    plain = per_print(devnull)
    outside = per_print(wrapped)
    sless_runtime._current_call.set(sless_runtime._Call("0193a7c4-5b1e-7d2a-9c41-3f6d2e8b1a07"))
    inside = per_print(wrapped)
print(f"{N} prints: {plain:.2f} us each as they are, {outside:.2f} us through "
      f"the wrapper outside a call, {inside:.2f} us inside a call (marked)")
