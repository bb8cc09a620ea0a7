"""``python tests/profile_worker.py CASES.json OUT_DIR``: run each case through the worker's own
``run`` (``dlperf.worker.__main__.run``: build, warm-up, the timed window, then the profiled
steps of ``worker/profile.py``) in this one process, case i's trace to OUT_DIR/i/, and write the
results to OUT_DIR/results.json. For the profile tests: one framework start-up for several
profiled cases. Valid Python 3.7 (the tensorflow1 environment)."""

import json
import os
import sys


def main():
    # type: () -> None
    from dlperf.worker.__main__ import run

    with open(sys.argv[1]) as handle:
        cases = json.load(handle)
    out = []
    for index, case in enumerate(cases):
        folder = os.path.join(sys.argv[2], str(index))
        os.makedirs(folder)
        out.append(run(case, folder))
        print("profiled: %s %s -> %s %s" % (case["model"], case["precision"],
                                            out[-1].get("status"), out[-1].get("error") or ""))
        sys.stdout.flush()
    with open(os.path.join(sys.argv[2], "results.json"), "w") as handle:
        json.dump(out, handle)


if __name__ == "__main__":
    main()
