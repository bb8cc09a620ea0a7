"""What MindSpore says it is: version and the commit it ships in its package
(``mindspore/.commit_id``: ``__commit_id__ = '[sha1]:...,[branch]:...'``)."""

import os
import re

import mindspore


def build_info():
    # type: () -> dict
    path = os.path.join(os.path.dirname(mindspore.__file__), ".commit_id")
    text = ""
    if os.path.isfile(path):
        with open(path) as handle:
            text = handle.read().strip()
    sha = re.search(r"\[sha1\]:([0-9a-f]+)", text)
    return {"version": mindspore.__version__, "git": sha.group(1) if sha else None,
            "build": text or None}
