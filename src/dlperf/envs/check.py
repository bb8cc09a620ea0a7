"""``dlperf envs check``: prove a framework's environment works end to end.

Imports the framework with the environment's interpreter, then runs one tiny real training case
(ResNet-50 v1.5 at image 32, batch 2, two measured steps) through the real runner and worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlperf import runner
from dlperf.envs import manage, registry, selection
from dlperf.spec import Case, frameworks

TINY_CASE = dict(model="resnet50", batch_size=2, knobs={"image_size": 32, "num_classes": 10},
                 warmup_steps=2, steps=2, repeats=1, timeout_s=900.0)


@dataclass
class CheckReport:
    framework: str
    python: str
    import_ok: bool
    version: str  # or the import error
    result: dict[str, Any] | None  # the tiny case's result object, if it ran
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.import_ok and self.result is not None and self.result["status"] == "ok"


def check(name: str, device: str = "auto") -> CheckReport:
    """``name``: a framework (its pinned environment) or a version environment ``FW==X``."""
    env = name if selection.is_version_env(name) else ""
    if env:
        name = selection.VERSION_ENV.fullmatch(env).group(1)  # type: ignore[union-attr]
        registry.get(name)  # an unknown framework: one line
        python = selection.version_env_python(env)  # UsageError when not installed
    else:
        python = manage.interpreter(name)  # UsageError when not installed
    base = registry.get(name)
    fw = base if base.main or env else manage.select(name)  # the variant python belongs to
    label = env or name
    ok, version = manage.import_version(python, fw)
    if not ok:
        return CheckReport(label, python, False, version, None)
    if name not in frameworks():
        return CheckReport(label, python, True, version, None,
                           f"no dlperf backend package for {name} yet")
    case = Case(framework=name, device=device, env=env, **TINY_CASE)  # type: ignore[arg-type]
    result = runner.run_case(case)
    if result["status"] == "unsupported":
        # a framework whose step is always compiled (JAX: jax.jit) refuses compile=false
        case = Case(framework=name, device=device, compile=True, env=env,
                    **TINY_CASE)  # type: ignore
        result = runner.run_case(case)
    return CheckReport(label, python, ok, version, result)
