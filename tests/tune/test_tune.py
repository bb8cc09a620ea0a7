"""dlperf tune: a real search of tiny ResNet-50s within a budget, killed and resumed, confirmed
by interleaved runs, every trial stored; its space only what each backend declares."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import CUT_RESNET50_FLAGS, dlperf_main, load, pinned_env
from dlperf import spec
from dlperf.spec import Case
from dlperf.store import Store
from dlperf.tune import budget, confirm, knobs, settings, stored

# two timed steps, not three: every run of the tunes below is a fresh worker whose import is
# most of its ~2.5 CPU-s, and a step of this cut ResNet-50 at batch 2 ~0.1 s (one core); the
# tunes check the search, not the rates
TINY = ["--model", "resnet50", "--image-size", "32", "--batch-size", "2",
        "--warmup-steps", "1", "--steps", "2"]


def stored_trials(db):
    """(study, number, state) of every stored trial, read as any SQLite reader would."""
    if not os.path.exists(db):
        return []
    with sqlite3.connect(db) as con:
        try:
            return con.execute("SELECT study, number, state FROM tune_trials "
                               "ORDER BY number").fetchall()
        except sqlite3.OperationalError:  # the tables are not there yet
            return []


def test_torch_tune_killed_resumed_confirmed_and_reused(tmp_path, tagged):
    """One search, killed after its first trial and resumed by the same command: the trials
    before the kill are kept, numbering goes on, the budget counts what was spent, the best is
    at least the default and is confirmed in interleaved pairs; `--config best` runs it.
    ResNet-50 cut to a bottleneck a stage, as the paddle tune's: the search, its resumption and
    its reuse are what is checked, not the network (a torch run of it ~5-6 CPU-s, not ~8)."""
    db, out = tmp_path / "tune.db", tmp_path / "tune.json"
    command = [sys.executable, "-m", "dlperf.cli", "tune", "--framework", "torch", *TINY,
               *CUT_RESNET50_FLAGS, "--search", "threads,option.memory_format", "--budget",
               "150s", "--pairs", "2", "--trials", "2", "--db", str(db), "--json", str(out)]
    # its temporary files in the test's folder: a SIGKILLed harness cannot remove them
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    deadline = time.monotonic() + 300
    while not stored_trials(db) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert first.poll() is None, first.communicate()[0][-3000:]
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    before = stored_trials(db)
    assert before and before[0][1:] == (0, "complete")  # the default, never pruned
    assert not out.exists()

    # resumed through dlperf's main in this process: its runs are still fresh workers, and a
    # second harness interpreter (~1.5 s of CPU) checks nothing test_fuzz_cli does not
    again = dlperf_main(*command[3:], timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resuming after {len(before)} trials" in again.stdout
    after = stored_trials(db)
    assert after[:len(before)] == before  # nothing measured before the kill is lost or changed
    assert [row[1] for row in after] == list(range(len(after)))
    assert len({row[0] for row in after}) == 1

    outcome = load(out)
    declared = {"threads", "option.memory_format"}
    assert set(outcome["knobs"]) == declared
    assert outcome["default"]["settings"] == {"threads": None, "option.memory_format": ""}
    best = outcome["best"]
    assert best["throughput"] >= outcome["default"]["throughput"]
    assert best["changes_math"] == [] and outcome["best_fixed"] is None
    if best["trial"] != 0:  # confirmed against the default, interleaved
        assert best["ab"]["pairs"] >= 1 and best["ab"]["pairs_asked"] == 2
        assert best["ab"]["ratio"] is not None
    assert outcome["search_s"] <= outcome["budget_s"] + 60  # one run's overrun at most
    with Store(db, readonly=True) as store:
        studies = store.tune_studies()
        assert len(studies) == 1 and studies[0]["outcome"] == outcome
        trials = store.tune_trials(studies[0]["study"])
        # every measured rung is an ordinary stored run of the tuned case
        for trial in trials:
            for rung in trial["rungs"]:
                result = store.results("id=?", (rung["run_id"],))[0]
                case = Case.from_dict(result["case"])
                assert settings.of_case(case, sorted(declared)) == trial["settings"]
                assert result["case"]["repeats"] == rung["repeats"]

    # the same command again shows the finished study, measuring nothing
    shown = dlperf_main(*command[3:])
    assert shown.returncode == 0 and "holds a finished tune" in shown.stdout
    assert stored_trials(db) == after

    # --config best measures the configuration the tune found
    reused = dlperf_main("run", "--framework", "torch", *TINY, *CUT_RESNET50_FLAGS, "--repeats",
                         "1", "--config", "best", "--db", str(db), "--json",
                         str(tmp_path / "best.json"), timeout=600)
    assert reused.returncode == 0, reused.stderr[-2000:]
    case = Case.from_dict(load(tmp_path / "best.json")["case"])
    assert settings.of_case(case, sorted(declared)) == best["settings"]


def test_paddle_tune_within_its_trials(tmp_path, tagged):
    """Another framework through the same search: its declared knobs only, stored."""
    pinned_env("paddle")
    db, out = tmp_path / "tune.db", tmp_path / "tune.json"
    # through dlperf's main in this process, as the torch tune's resume: workers stay fresh
    # ResNet-50 cut to a bottleneck a stage: the search is what is checked, not the network
    done = dlperf_main("tune", "--framework", "paddle", *TINY, *CUT_RESNET50_FLAGS,
                       "--search", "threads",
                       "--trials", "2", "--pairs", "2", "--budget", "120s", "--db", str(db),
                       "--json", str(out), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    outcome = load(out)
    assert set(outcome["knobs"]) == {"threads"}
    assert outcome["default"]["throughput"] > 0
    # two configurations measured (a proposal of one already measured is stored, not counted)
    assert sum(outcome["trials"].values()) == 2 and len(stored_trials(db)) >= 2


@pytest.mark.parallel
def test_the_space_is_what_each_backend_declares():
    """No knob, and no value, that the backend does not declare for the device and task."""
    for framework in spec.frameworks():
        declared = spec.support(framework)
        model = "resnet50" if "resnet50" in declared.models else declared.models[0]
        task = "train" if "train" in declared.tasks else declared.tasks[0]
        precision = declared.precisions["cpu"][task][0]
        case = Case(framework=framework, model=model, task=task, batch_size=4,
                    precision=precision, device="cpu")
        found = {knob.name: knob for knob in knobs.space(case)}
        for name, knob in found.items():
            assert len(knob.values) > 1 and knob.values[0] == settings.of_case(case, [name])[name]
            if name == "precision":
                assert set(knob.values) <= set(declared.precisions["cpu"][task])
            elif name == "compile":
                assert set(declared.modes_for(task)) == {False, True}
            elif name.startswith("option."):
                option = declared.options[name[len("option."):]]
                assert set(knob.values) == {"", *option.values}
            else:
                assert name in ("threads", "allocator", "batch_size"), name
        assert ("compile" in found) == (set(declared.modes_for(task)) == {False, True})
        assert {n[7:] for n in found if n.startswith("option.")} == {
            name for name, option in declared.options.items() if option.applies_to(model)}
        # every configuration of the space is a valid case of this framework
        for knob in found.values():
            for value in knob.values:
                settings.apply(case, {knob.name: value})


@pytest.mark.parallel
def test_an_option_is_searched_only_for_the_models_it_changes():
    """torch's memory_format is a layout of images: searched for ResNet-50, never for BERT."""
    names = {model: {knob.name for knob in knobs.space(
        Case(framework="torch", model=model, batch_size=2, device="cpu"))}
        for model in ("resnet50", "bert-base")}
    assert "option.memory_format" in names["resnet50"]
    assert "option.memory_format" not in names["bert-base"]


@pytest.mark.parallel
def test_budget_parsing_and_bad_input(tmp_path):
    assert budget.parse("20m") == 1200 and budget.parse("1h30m") == 5400
    assert budget.parse("90s") == 90 and budget.parse("120") == 120
    assert budget.text(3900) == "1h05m" and budget.text(75) == "1m15s"
    # the confirmation: as many pairs as asked when they fit, fewer when not, never below two
    assert confirm.affordable_pairs([20.0], 500.0, 4) == 4
    assert confirm.affordable_pairs([20.0], 60.0, 4) == 3
    assert confirm.affordable_pairs([20.0, 20.0], 60.0, 4) == 2 == \
        confirm.affordable_pairs([20.0], 5.0, 4)
    # a pair costs the default's run and the candidate's own: tensorflow1's XLA (120 s a run
    # against the default's 40) confirmed 1 pair of 4 when every run was priced at the typical
    xla = confirm.pair_s([40.0, 41.0, 39.0], [118.0, 122.0])
    assert xla == 160.0 and confirm.pair_s([], [50.0]) == 100.0
    assert confirm.pair_s([], []) is None and confirm.cost_s([None], 4) == 0.0
    assert confirm.affordable_pairs([xla], 400.0, 4) == 2
    # the search keeps a third of a 20-minute budget, or the two pairs' cost where that is more
    assert confirm.reserve_s([xla], 4, 1200.0) == 400.0
    assert confirm.reserve_s([xla, 80.0], 4, 1200.0) == 480.0
    assert confirm.reserve_s([xla], 2, 7200.0) == 320.0
    # never more than half the budget: a slow machine still searches
    assert confirm.reserve_s([xla], 4, 300.0) == 150.0
    db = str(tmp_path / "t.db")
    cases = [
        (["--framework", "torch", "--budget", "30s"], "--budget: '30s' is too small for one trial"),
        (["--framework", "torch", "--budget", "soon"], "--budget: 'soon' must be a duration"),
        (["--framework", "nosuch"], "invalid choice: 'nosuch'"),
        (["--framework", "torch", "--search", "threads,warp_speed"],
         "--search: 'warp_speed' is not a knob torch declares here"),
        (["--framework", "torch", "--pairs", "1"], "--pairs: 1 must be between 2 and 100"),
    ]
    for flags, message in cases:
        refused_tune(flags, message, db)


def refused_tune(flags: list[str], message: str, db: str) -> None:
    """`dlperf tune FLAGS` is one line with ``message``, exit 2, and no trial stored."""
    done = dlperf_main("tune", *flags, *TINY, "--db", db)
    assert done.returncode == 2, (flags, done.stdout, done.stderr)
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not os.path.exists(db) or stored_trials(db) == []


def test_a_knob_another_framework_does_not_declare_is_refused(tmp_path):
    """JAX declares no compile knob: refused before anything runs. Not `parallel`: the check
    comes after the one that jax's environment is installed (`make test-quick` has none)."""
    refused_tune(["--framework", "jax", "--search", "compile"],
                 "--search: 'compile' is not a knob jax declares here", str(tmp_path / "t.db"))


@pytest.mark.parallel
def test_config_best_without_a_tune_is_one_line(tmp_path):
    db = tmp_path / "empty.db"
    with Store(db):
        pass
    case = Case(framework="torch", model="resnet50", batch_size=2, knobs={"image_size": 32})
    with Store(db, readonly=True) as store, pytest.raises(Exception) as error:
        stored.best_settings(store, case)
    assert "has no finished tune of torch resnet50 train" in str(error.value)
    assert f"--db {db}" in str(error.value)


def test_the_best_is_chosen_among_trials_the_budget_cut_short_too():
    """A trial the pruner kept but the budget could not repeat is a candidate (the confirmation
    judges it); one the pruner dropped, a failed one or a repeated configuration is not."""
    from dlperf.tune import search

    default = {"compile": False, "batch_size": 8}
    trials = [
        search.Trial(0, dict(default), "complete", 20.0),
        search.Trial(1, {"compile": True, "batch_size": 8}, "pruned", 48.0,
                     error=search.BUDGET_PRUNED),
        search.Trial(2, {"compile": False, "batch_size": 16}, "pruned", 60.0),
        search.Trial(3, {"compile": True, "batch_size": 16}, "failed", None, error="unsupported"),
        search.Trial(4, {"compile": True, "batch_size": 32}, "complete", 90.0,
                     error="same configuration as trial 9"),
    ]
    assert search.best(trials, default).number == 1
    assert search.best(trials, default, ("batch_size",)).number == 1
    assert search.best(trials[:1] + trials[2:], default).number == 0


@pytest.mark.parallel  # nothing is measured: a declared-impossible configuration never runs
def test_a_pair_the_backend_declares_impossible_is_left_out_unmeasured(tmp_path):
    """MXNet's amp-bf16 needs oneDNN: the space names the pair, the case is refused with the
    backend's reason, and a search proposing it stores a refused trial and starts no run."""
    from dlperf.tune import search
    from dlperf.worker.support import Option

    case = Case(framework="mxnet", model="resnet50", batch_size=4, device="cpu",
                knobs={"image_size": 32})
    space = knobs.space(case)
    assert {"precision", "option.onednn"} <= {knob.name for knob in space}
    assert knobs.left_out(case, space) == [
        "option.onednn=off with precision amp-bf16: runs in fp32 only, not amp-bf16: oneDNN "
        "has MXNet's only bf16 kernels, so amp-bf16 needs onednn=on"]
    impossible = settings.apply(case, {"precision": "amp-bf16", "option.onednn": "off"})
    assert spec.declared_refusal(impossible).startswith("option onednn=off runs in fp32 only")
    for fine in ({"precision": "amp-bf16", "option.onednn": "on"},
                 {"precision": "fp32", "option.onednn": "off"}):
        assert spec.declared_refusal(settings.apply(case, fine)) is None
    assert knobs.left_out(Case(framework="torch", model="resnet50", batch_size=4,
                               device="cpu"), space[:0]) == []
    with pytest.raises(ValueError, match="precisions for 'maybe'"):
        Option(("on", "off"), "why", precisions={"maybe": (("fp32",), "no")})
    # a search whose configuration is refused: one stored trial, no run, no time
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.start_tune_study("s", "base", impossible.to_dict(), {}, 60.0)
        plan = search.Plan(study="s", case=impossible, knobs=space,
                           budget=budget.Budget(60.0), reserve_s=lambda trials: 0.0)
        found = search.Search(plan, store, env={}, say=lambda line: None)
        found.replay([])
        trials = found.run()
        assert [(t.state, t.value, t.wall_s) for t in trials] == [("refused", None, 0.0)]
        assert trials[0].error.startswith("declared: option onednn=off runs in fp32 only")
        # Optuna learns it as the worst value, so TPE does not propose it again and again
        assert [t.value for t in found.study.trials] == [search.REFUSED_VALUE]
        assert list(store.runs()) == []
    assert stored_trials(str(db)) == [("s", 0, "refused")]


def test_a_trial_never_runs_into_the_confirmation_s_share(tmp_path):
    """A trial's run is bounded by the budget left less the confirmation's reserve: a trial
    slower than its estimate times out instead of leaving the best unconfirmed."""
    from dlperf.tune import search

    case = Case(framework="torch", model="resnet50", batch_size=2, device="cpu",
                knobs={"image_size": 32}, warmup_steps=1, steps=3, repeats=1)
    with Store(tmp_path / "t.db") as store:
        plan = search.Plan(study="s", case=case, knobs=knobs.space(case),
                           budget=budget.Budget(100.0), reserve_s=lambda trials: 98.0)
        found = search.Search(plan, store, env={}, say=lambda line: None)
        result, ran = found.measure(plan.default, 1, found.slow_cap_s(plan.default))
    assert ran.timeout_s <= 2.0
    assert result["status"] == "timeout", result.get("error")


def test_a_configuration_far_slower_than_the_default_is_stopped(tmp_path, monkeypatch):
    """A repeat running past SLOW_FACTOR x the default's (at least the floor) is stopped and
    the trial pruned with why, instead of spending the budget on a configuration that cannot
    be the best. The floor is lowered to 1 s here, so a real torch worker runs past it."""
    from dlperf.tune import search

    monkeypatch.setattr(search, "SLOW_FLOOR_S", 1.0)
    monkeypatch.setattr(search, "COMPILED_FLOOR_S", 3.0)
    case = Case(framework="torch", model="resnet50", batch_size=2, device="cpu",
                knobs={"image_size": 32}, warmup_steps=1, steps=3, repeats=1)
    space = knobs.space(case)
    with Store(tmp_path / "t.db") as store:
        store.start_tune_study("s", "base", case.to_dict(), {}, 300.0)
        plan = search.Plan(study="s", case=case, knobs=space, budget=budget.Budget(300.0),
                           reserve_s=lambda trials: 0.0)
        found = search.Search(plan, store, env={}, say=lambda line: None)
        assert found.slow_cap_s() is None  # nothing to compare with before the default
        rung = {"rung": 0, "repeats": 1, "repeats_so_far": 1, "value": 50.0, "run_id": None,
                "wall_s": 0.1}
        found.replay([{"number": 0, "settings": plan.default, "state": "complete",
                       "value": 50.0, "rungs": [rung], "error": None, "wall_s": 0.1}])
        assert found.slow_cap_s() == 1.0  # 5 x 0.1 s is under the floor
        # a repeat is a fixed number of steps: batch 40 computes 20x batch 2's samples
        assert found.slow_cap_s({**plan.default, "batch_size": 40}) == pytest.approx(10.0)
        # compiling where the default does not: the start-up is not throughput
        assert found.slow_cap_s({**plan.default, "compile": True}) == search.COMPILED_FLOOR_S
        trial = search.Trial(1, {**plan.default, "threads": 1}, "failed")
        error = found.rung(trial, 1, [])
    assert error is not None and error.startswith(search.SLOWER), error
    assert "ran past" in error and trial.rungs == []
    # a screening value under 1/5 of the default's 50 samples/s cannot be the best either
    assert found.far_slower(10.5) is None
    assert found.far_slower(9.5).startswith(search.SLOWER + " the default: 9.50 samples/s")
