"""A stand-in for somebody's official training script, for `dlperf external` tests.

Prints per-step lines of both kinds dlperf reads: a rate ("imgs_per_sec : R") and a step counter
with a timestamp in the line ("[T] step N"). The rates and the printed timestamps are fixed, so
the throughput dlperf derives from them is known exactly; the real time between lines follows
FAKE_STEP_S (seconds per step, default 0.05), for the arrival-time rule.

FAKE_FAIL=crash exits 3 after two steps; FAKE_FAIL=oom prints an out-of-memory error and exits 1;
FAKE_FAIL=hang sleeps for a minute.
"""

import os
import sys
import time

RATES = [100.0, 200.0, 400.0, 400.0, 200.0]  # the first is the warm-up step
STAMP_STEP_S = 0.25  # printed timestamps advance by this per step
BATCH = 32


def main():
    step_s = float(os.environ.get("FAKE_STEP_S", "0.05"))
    fail = os.environ.get("FAKE_FAIL", "")
    print("fake_train: starting, batch %d" % BATCH, flush=True)
    if fail == "hang":
        time.sleep(60)
    for step, rate in enumerate(RATES):
        time.sleep(step_s)
        print("[%.3f] step %d loss %.3f imgs_per_sec : %.1f"
              % (1000.0 + STAMP_STEP_S * step, step, 2.3 - 0.1 * step, rate), flush=True)
        if fail == "crash" and step == 1:
            print("Traceback: something broke", flush=True)
            sys.exit(3)
        if fail == "oom" and step == 1:
            print("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
            sys.exit(1)
    print("fake_train: done", flush=True)


if __name__ == "__main__":
    main()
