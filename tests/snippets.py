"""Several in-interpreter checks in one framework interpreter: one start-up and import of the
framework instead of one per check. Each check's code runs as ``__main__`` in a namespace of its
own, in the order given; what it printed is kept by its name, and one that raised printed
``FAILED`` and its traceback, which :func:`snippet_output` shows in its own test's failure."""

from __future__ import annotations

import json
import subprocess

from dlperf import envs

#: the interpreter's program: ``%(setup)s`` once, ``%(before_each)s`` before each check
RUNNER = """
import contextlib, io, json, sys, traceback
%(setup)s
out = {}
for name, code in json.loads(sys.argv[1]).items():
    buf = io.StringIO()
    %(before_each)s
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(code, name, "exec"), {"__name__": "__main__"})
    except BaseException:
        buf.write("FAILED\\n" + traceback.format_exc())
    out[name] = buf.getvalue()
print("SNIPPETS=" + json.dumps(out))
"""


def run_snippets(python: str, snippets: dict[str, str], *, timeout: float, setup: str = "",
                 before_each: str = "pass") -> dict[str, str]:
    """What each of ``snippets`` printed, all run by ``python`` (a framework environment's
    interpreter) in one process, with the worker's environment."""
    program = RUNNER % {"setup": setup, "before_each": before_each}
    proc = subprocess.run([python, "-c", program, json.dumps(snippets)], capture_output=True,
                          text=True, timeout=timeout, env=envs.worker_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("SNIPPETS="))
    return json.loads(line.split("=", 1)[1])


def snippet_output(printed: dict[str, str], name: str) -> str:
    """What check ``name`` printed; its traceback as the failure where it raised."""
    out = printed[name]
    assert not out.startswith("FAILED"), out[-3000:]
    return out
