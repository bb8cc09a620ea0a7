"""The two knobs issue 29's tuner needs, each a feature of `dlperf run` on its own: the workers'
memory allocator (`--allocator`, preloaded by every launcher) and framework switches that are
environment variables (an `Option`'s `variables`, set by the launcher before the worker starts).

The real run here is TensorFlow with `--option onednn=off` (TensorFlow itself says oneDNN is
off); torch's ResNet-50 with jemalloc preloaded (the worker reports the library mapped into its
own process) is checked on the 1-process jemalloc run of tests/results/test_case_fields.py. The
rest check the pieces without measuring anything.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import pytest

from conftest import CUT_RESNET50_FLAGS, dlperf, dlperf_main, pinned_env
from dlperf import cli
from dlperf.commands._flags import case_from_args
from dlperf.errors import UsageError
from dlperf.history import reproduce
from dlperf.host import allocators
from dlperf.launchers import launch, registry
from dlperf.launchers.torch import Torchrun
from dlperf.spec import Case, SpecError, support
from dlperf.worker import identity
from dlperf.worker.support import Option

TINY = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2", "--warmup-steps", "1",
        "--steps", "2", "--repeats", "1"]


def installed(name: str) -> str:
    """The allocator's library here, or the test skips with one line."""
    path = allocators.available().get(name)
    if path is None:
        pytest.skip(f"{name} is not installed here (make allocators)")
    return path


def case(**fields) -> Case:
    return Case(**{"framework": "torch", "model": "resnet50", "batch_size": 2, **fields})


# ------------------------------------------------------------------------------------------------
# the allocator: a case field, a flag, the launchers' LD_PRELOAD
# ------------------------------------------------------------------------------------------------

@pytest.mark.parallel
def test_allocator_is_part_of_the_case_only_when_set():
    plain = case()
    assert "allocator" not in plain.identity()  # cases stored before it keep their keys
    assert case(allocator="").key() == plain.key()
    chosen = case(allocator="jemalloc")
    assert chosen.identity()["allocator"] == "jemalloc"
    assert len({plain.key(), chosen.key(), case(allocator="tcmalloc").key()}) == 3
    assert chosen.label().split()[-1] == "jemalloc" and "malloc" not in plain.label()


@pytest.mark.parallel
@pytest.mark.parametrize("value", ["mimalloc", None, "JEMALLOC"])
def test_an_unknown_allocator_is_one_line_naming_the_field(value):
    with pytest.raises(SpecError) as error:
        case(allocator=value)
    assert str(error.value).startswith("allocator: ") and "jemalloc, tcmalloc" in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parallel
def test_an_unknown_allocator_flag_is_exit_2():
    proc = dlperf_main("run", "--framework", "torch", *TINY, "--allocator", "mimalloc")
    assert proc.returncode == 2 and "--allocator" in proc.stderr


@pytest.mark.parallel
def test_the_flag_and_its_reproduction_round_trip():
    parser = cli.build_parser()
    args = parser.parse_args(["run", "--framework", "torch", *TINY, "--allocator", "tcmalloc"])
    built = case_from_args(args)
    assert built.allocator == "tcmalloc"
    flags = reproduce.run_flags(built.to_dict())
    assert flags[flags.index("--allocator") + 1] == "tcmalloc"
    again = case_from_args(parser.parse_args([*flags, "--repeats", "1"]))
    assert again.key() == built.key()


@pytest.mark.parallel
def test_a_missing_allocator_names_the_package_to_install():
    with pytest.raises(UsageError) as error:
        allocators.library("jemalloc", found={})
    assert str(error.value) == ("allocator: jemalloc is not installed on this machine "
                                "(Debian: apt-get install libjemalloc2)")


@pytest.mark.parallel
@pytest.mark.parametrize("name", allocators.ALLOCATORS)
def test_available_allocators_are_absolute_library_paths(name):
    path = installed(name)
    assert os.path.isabs(path) and os.path.isfile(path)
    assert os.path.basename(path).startswith(("libjemalloc.so", "libtcmalloc"))
    assert allocators.library(name) == path


@pytest.mark.parallel
def test_every_launcher_preloads_it_in_front_of_the_existing_value(tmp_path, monkeypatch):
    path = installed("jemalloc")
    monkeypatch.setenv("LD_PRELOAD", "/opt/mine.so")
    one = launch.local(case(allocator="jemalloc"), tmp_path / "case.json", tmp_path)
    assert one.env["LD_PRELOAD"] == f"{path}:/opt/mine.so"
    assert one.facts["allocator"] == {"name": "jemalloc", "library": path}
    several = case(allocator="jemalloc", devices=2)
    multi = registry.launcher_for(several)
    assert isinstance(multi, Torchrun)
    started = multi(several, tmp_path / "case.json", tmp_path)
    assert started.env["LD_PRELOAD"] == f"{path}:/opt/mine.so"
    assert started.facts["allocator"]["library"] == path
    plain = launch.local(case(), tmp_path / "case.json", tmp_path)
    assert "LD_PRELOAD" not in plain.env and "allocator" not in plain.facts


@pytest.mark.parallel
def test_the_worker_reads_the_allocators_mapped_into_it(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 12 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n"
        "7f01-7f02 r--p 00000000 08:01 13 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        "7f02-7f03 r-xp 00000000 08:01 14 /usr/lib/libtcmalloc_minimal.so.4.5.16\n"
        "7f03-7f04 rw-p 00000000 00:00 0 \n")
    assert identity.mapped_allocators(str(maps)) == [
        "/usr/lib/libtcmalloc_minimal.so.4.5.16", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"]
    assert identity.mapped_allocators(str(tmp_path / "absent")) == []


# The real torch run with jemalloc preloaded (the launcher's facts, the library mapped into the
# worker, the label) is the 1-process jemalloc run of tests/results/test_case_fields.py's
# test_a_jemalloc_two_process_case_is_scaled_over_the_jemalloc_one_process_result: the same tiny
# case, run once for both.


# ------------------------------------------------------------------------------------------------
# options that set environment variables
# ------------------------------------------------------------------------------------------------

@pytest.mark.parallel
def test_variables_for_an_undeclared_value_are_refused():
    with pytest.raises(ValueError, match="'maybe', which is not one of the option's values"):
        Option(("on", "off"), "help", variables={"maybe": {"X": "1"}})
    declared = Option(("on", "off"), "help", variables={"off": {"X": "0"}})
    assert declared.variables == {"off": {"X": "0"}}


@pytest.mark.parallel
def test_the_launcher_sets_an_options_variables_and_records_them(tmp_path):
    chosen = Case(framework="tensorflow", model="resnet50", batch_size=2, options="onednn=off")
    started = launch.local(chosen, tmp_path / "case.json", tmp_path, python=sys.executable)
    assert started.env["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert started.facts["option_variables"] == {"TF_ENABLE_ONEDNN_OPTS": "0"}
    plain = launch.local(dataclasses.replace(chosen, options=""), tmp_path / "c.json", tmp_path,
                         python=sys.executable)
    assert "TF_ENABLE_ONEDNN_OPTS" not in plain.env and "option_variables" not in plain.facts


@pytest.mark.parallel
def test_declared_variables_are_listed_with_the_options():
    from dlperf.commands.envs import support_table  # what `dlperf envs list --support` prints
    from rich.console import Console

    console = Console(width=400, record=True)
    console.print(support_table())
    text = console.export_text()
    for name in ("tensorflow", "mxnet"):
        for option_name, option in support(name).options.items():
            for variables in option.variables.values():
                for variable in variables:
                    assert variable in text, (name, option_name, variable)
    assert support("tensorflow").matrix()["options"]["onednn"]["variables"]["off"] == {
        "TF_ENABLE_ONEDNN_OPTS": "0"}


def test_tensorflow_runs_with_onednn_off(tmp_path):
    pinned_env("tensorflow")
    out = tmp_path / "result.json"
    proc = dlperf("run", "--framework", "tensorflow", *TINY, *CUT_RESNET50_FLAGS, "--option",
                  "onednn=off", "--json", str(out), "--db", str(tmp_path / "r.db"))
    result = json.loads(out.read_text())
    assert proc.returncode == 0 and result["status"] == "ok", (result["error"], proc.stderr)
    assert result["launch"]["option_variables"] == {"TF_ENABLE_ONEDNN_OPTS": "0"}
    # TensorFlow's own answer (IsMklEnabled reads the variable once, at import)
    assert result["env"]["worker"]["framework"]["onednn_enabled"] is False
    assert "onednn=off" in result["label"]
