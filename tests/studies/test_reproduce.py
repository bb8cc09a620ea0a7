"""`dlperf reproduce STUDY`: each study's CPU scale run at --tiny shapes (real workers, real
SQLite; the dlperf, NVIDIA and Dell EMC studies from their own sweep files, ResNet-50 cut to a
bottleneck a stage, the dlperf and NVIDIA ones narrowed to the cells the tests read, the cases
Dell EMC shares with NVIDIA measured once) to a report laid out like the published tables,
checked against the reference tables' rows and columns and against the stored results; the
refusals; every sweep file under sweeps/ loaded and validated (and named in docs/sweeps.md);
the report's precision columns."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
import yaml

from ceiling import slow_setup
from cpu_kind import check_bf16_refused, mxnet_bf16_refusal
from conftest import CUT_RESNET50, dlperf_main, gpus_listed, own_lock
from dlperf import reference
from dlperf.reference import render
from dlperf.report.ratios import ratio_text
from dlperf.store import Store
from dlperf.studies import reproduce
from dlperf.studies import sweep as sweep_mod

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = sorted((ROOT / "sweeps").glob("*.yaml"))
LOCK = own_lock("test_reproduce")
CELL_SPLIT = re.compile(r"(?<!\\) \| ")


def tables_of(text: str) -> dict[str, list[list[str]]]:
    """Each `## heading`'s Markdown table: header row then data rows, cells unescaped."""
    found: dict[str, list[list[str]]] = {}
    heading = None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:]
        elif line.startswith("| ") and heading is not None:
            cells = [c.replace("\\", "") for c in CELL_SPLIT.split(line[2:-2])]
            found.setdefault(heading, []).append(cells)
    return found


def stored(db: Path) -> list[dict]:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT result_json FROM runs WHERE result_json IS NOT NULL").fetchall()
    con.close()
    return [json.loads(row[0]) for row in rows]


def one(results: list[dict], **fields) -> dict:
    """The stored result whose case has every field given (``processes`` = devices x nnodes)."""
    found = [r for r in results
             if all((r["case"]["devices"] * r["case"]["nnodes"] if name == "processes"
                     else r["case"].get(name)) == value for name, value in fields.items())]
    assert len(found) == 1, (fields, [r["label"] for r in found])
    return found[0]


def by_label(rows: list[list[str]]) -> dict[str, list[str]]:
    """Data rows by their first cell, its note marks left off."""
    return {re.sub(r" \[\d+\]$", "", row[0]): row for row in rows[1:]}


def measured(cell: str) -> float:
    """The figure of a measured cell, `5.84 (0.000534×)`."""
    return float(cell.split(" ")[0].replace(",", ""))


def shown(value: float) -> float:
    """How far a figure may be from the value it shows: pairing's format writes whole numbers
    from 100 (half a unit off at most) and two decimals below."""
    return 0.5 if abs(value) >= 100 else 0.01


def check_layout(text: str, study: reproduce.Study) -> dict[str, list[list[str]]]:
    """Every reference table of the study, in its order, with its published label columns,
    every value column as `published` + `measured (ratio)`, every published row and value."""
    found = tables_of(text)
    titles = [t.title for t in study.reference_tables()]
    assert [h for h in found if h in titles] == titles, list(found)
    for table in study.reference_tables():
        rows = found[table.title]
        header = list(table.label_columns)
        for column in table.columns:
            header += [f"{render.with_unit(column.label, column.unit)}: published",
                       "measured (ratio)"]
        assert rows[0] == header
        assert len(rows) == 1 + len(table.rows)
        for row, cells in zip(table.rows, rows[1:]):
            assert [re.sub(r" \[\d+\]$", "", c) for c in cells[:len(row.label)]] == list(row.label)
            for i, values in enumerate(row.cells):
                published = re.sub(r" (\[\d+\])+$", "", cells[len(row.label) + 2 * i])
                assert published == " / ".join(
                    f"{'~' if c.approx else ''}{c.text}{f' {c.label}' if c.label else ''}"
                    for c in values)
    return found


# --- no framework: files, derivations, refusals ----------------------------------------------

@pytest.mark.parallel
@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_every_sweep_file_is_valid_and_documented(path):
    """Loaded and validated as `dlperf sweep FILE --dry-run` does (every case built), named
    after its file, and named in docs/sweeps.md."""
    loaded = sweep_mod.load(path)
    assert loaded.cases and loaded.name == path.stem
    assert not [note for note in loaded.notes if "matches no combination" in note]
    assert f"`{path.name}`" in (ROOT / "docs" / "sweeps.md").read_text()


@pytest.mark.parallel
@pytest.mark.parametrize("name", list(reproduce.STUDIES))
def test_each_study_has_its_cpu_sweep_and_published_shapes(name):
    study = reproduce.get(name)
    cpu = reproduce.plan(study, "cpu")
    assert cpu.sweep.path == ROOT / "sweeps" / f"{study.sweep_name}.yaml"
    assert all(case.device == "cpu" for case in cpu.sweep.cases)
    # the CPU's precisions only: a GPU precision stands translated (amp-fp16 -> amp-bf16)
    assert not {c.precision for c in cpu.sweep.cases} & set(reproduce.CPU_PRECISIONS)
    published = reproduce.plan(study, "published")
    assert published.sweep.name == f"{study.sweep_name}-published"
    assert published.sweep.cases and all(c.device == "cuda" for c in published.sweep.cases)
    tiny = reproduce.plan(study, "cpu", tiny=True)
    assert tiny.sweep.name == f"{study.sweep_name}-tiny"
    assert all(c.repeats == 1 and c.steps == 2 for c in tiny.sweep.cases)
    assert len(tiny.all_keys) == len(cpu.all_keys)  # the same matrix, smaller


@pytest.mark.parallel
def test_published_shapes_come_from_the_published_keys():
    cases = {c.label(): c for c in reproduce.published_cases(reproduce.get("dlperf"))}
    # ResNet-50 at 4 nodes x 8 GPUs and its 1-GPU baseline; TF 1.x AMP at 224 with and without XLA
    assert {"torch resnet50 train bs128 fp32 4n8d", "torch resnet50 train bs128 fp32",
            "tensorflow1 resnet50 train bs224 amp-fp16 compile 4n8d",
            "tensorflow1 resnet50 train bs224 amp-fp16 4n8d"} <= set(cases)
    # OneFlow's BERT with and without gradient clipping (the W/O clip row): two cases
    oneflow = [c for c in reproduce.published_cases(reproduce.get("dlperf"))
               if c.label() == "oneflow bert-base train bs96 fp32 4n8d"]
    assert sorted(c.knobs["clip_grad_norm"] for c in oneflow) == [0, 1]
    # a DALI cell has no dlperf counterpart
    assert not any(c.framework == "paddle" and c.batch_size == 196 for c in cases.values())
    dell = {c.label() for c in reproduce.published_cases(reproduce.get("dell-emc"))}
    assert {"mxnet resnet50 train bs64 fp32 8n4d", "caffe2 resnet50 train bs64 fp32 1n4d",
            "onnxruntime resnet50 infer bs64 int8", "onnxruntime resnet50 infer bs64 fp32"} <= dell
    nvidia = {c.label() for c in reproduce.published_cases(reproduce.get("nvidia-mxnet-rn50"))}
    # an inference speedup over TF32 needs the TF32 twin at the same batch
    assert {"mxnet resnet50 infer bs512 amp-fp16", "mxnet resnet50 infer bs512 tf32"} <= nvidia


@pytest.mark.parallel
@pytest.mark.parametrize("args,says", [
    (["nope"], "study: 'nope' is not one of dlperf, nvidia-mxnet-rn50, dell-emc"),
    (["dlperf", "--scale", "gpu"], "--scale: 'gpu' is not one of cpu, published"),
    (["dlperf", "-o", "report.txt"], "-o: report.txt must end in .md or .html"),
    (["dlperf", "--framework", "caffe2"], "--framework: caffe2 is not measured by study dlperf"),
    (["dlperf", "--scale", "published", "--sweep", "x.yaml"], "--sweep: the published scale"),
    (["dell-emc", "--sweep", "missing.yaml"], "--sweep: missing.yaml does not exist"),
], ids=["study", "scale", "suffix", "framework", "sweep-published", "sweep-missing"])
def test_bad_input_is_one_line(args, says, tmp_path):
    db = tmp_path / "never.db"
    proc = dlperf_main("reproduce", *args, "--db", str(db), cwd=tmp_path, env=LOCK)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert not db.exists()


@pytest.mark.parallel
def test_the_published_scale_names_what_this_machine_lacks(tmp_path):
    db = tmp_path / "never.db"
    proc = dlperf_main("reproduce", "dlperf", "--scale", "published", "--db", str(db),
                       env={**LOCK, "SLURM_JOB_ID": "", "SLURM_JOB_NUM_NODES": ""})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "--scale published: study dlperf needs" in line
    assert "4 nodes (not inside a Slurm allocation)" in line
    if len(gpus_listed()) < 8:
        assert "8 NVIDIA GPUs per node" in line
    assert not db.exists()
    # --dry-run still lists the study's own shapes, and says what is lacking
    listed = dlperf_main("reproduce", "dlperf", "--scale", "published", "--dry-run", "--db",
                         str(db), env={**LOCK, "SLURM_JOB_ID": "", "SLURM_JOB_NUM_NODES": ""})
    assert listed.returncode == 0, listed.stderr
    assert "torch resnet50 train bs128 fp32 4n8d" in listed.stdout
    assert "this machine cannot run them: they need" in listed.stdout + listed.stderr
    assert not db.exists()


# --- each study, measured at --tiny ----------------------------------------------------------

def reproduced(tmp_path_factory, name: str, *args: str,
               reused: Path | None = None) -> tuple[Path, str, list[dict]]:
    """`dlperf reproduce NAME --tiny ARGS`: its database, its Markdown report, what it stored.
    Through dlperf's main in this process: its workers are still fresh processes, and a harness
    interpreter of its own (~2 s of CPU) checks nothing test_fuzz_cli does not. With
    ``reused``, the runs of that database that are cases of this reproduction are stored first
    (:func:`copy_runs`) and it runs with --resume: it measures only the others."""
    root = tmp_path_factory.mktemp(name)
    db, out = root / "r.db", root / "report.md"
    copied = 0
    if reused is not None:
        sweep = Path(args[args.index("--sweep") + 1])
        plan = reproduce.plan(reproduce.get(name), "cpu", sweep, tiny=True)
        copied = copy_runs(reused, db, plan.sweep.name, plan.all_keys)
        assert copied, f"no run of {reused} is a case of {name}"
        args = (*args, "--resume")
    proc = dlperf_main("reproduce", name, "--tiny", *args, "--db", str(db), "-o", str(out),
                       timeout=600, env=LOCK)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not copied or f"{copied} taken from the database" in proc.stdout, proc.stdout
    return db, out.read_text(), stored(db)


def copy_runs(source: Path, db: Path, sweep: str, keys: frozenset[str]) -> int:
    """Store in ``db``, as runs of ``sweep``, the finished runs of ``source`` whose case is one
    of ``keys`` (their case, environment, repeats and result as they are), through the store's
    own writes: what `dlperf reproduce --resume` then takes as measured (it resumes by sweep
    name and case key). How many were copied."""
    copied = 0
    with Store(source, readonly=True) as old, Store(db) as new:
        for row in old.runs("result_json IS NOT NULL"):
            if row["case_key"] not in keys:
                continue
            run_id = new.start_run(row["case_key"], row["label"], json.loads(row["case_json"]),
                                   old.decode(row, "env_json"), sweep)
            for index, repeat in enumerate(old.repeats(row["id"])):
                new.add_repeat(run_id, index, repeat)
            new.finish_run(run_id, {**old.decode(row), "run_id": run_id})
            copied += 1
    return copied


def narrowed_sweep(root: Path, study: str, precisions: list[str] | None = None,
                   exclude: tuple[dict, ...] = ()) -> Path:
    """The study's own CPU sweep file (sweeps/reproduce-STUDY.yaml: its name, defaults,
    exclusions and includes as they are) with fewer cells: only ``precisions`` on its matrix's
    precision axis, and ``exclude`` added; and ResNet-50 cut to a bottleneck a stage
    (CUT_RESNET50: the tables' rows, columns and figures are what is checked, not the network's
    depth; an MXNet run of it at --tiny shapes ~3.3 CPU-s instead of ~5.2). Every case
    left is one of the study's own cells (its framework, model, task, precision, batch and
    processes, which the report pairs with the published values), and the report names the
    knob beside the study's; the cells left out are laid out with their published values and
    `not measured`, as any cell without a measurement."""
    loaded = yaml.safe_load((ROOT / "sweeps" / f"reproduce-{study}.yaml").read_text())
    if precisions is not None:
        assert set(precisions) < set(loaded["matrix"]["precision"])
        loaded["matrix"]["precision"] = precisions
    assert not set(CUT_RESNET50) & set(loaded["defaults"])
    loaded["defaults"] = {**loaded["defaults"], **CUT_RESNET50}
    loaded["exclude"] = [*loaded.get("exclude", []), *exclude]
    path = root / f"reproduce-{study}.yaml"
    path.write_text(yaml.safe_dump(loaded, sort_keys=False))
    return path


@pytest.fixture(scope="module")
@slow_setup("four torch cases, each in fresh worker processes (three under torchrun): the torch "
            "cells the tests read, ResNet-50 fp32 on 1 and 2 processes (throughput, speedup, "
            "the v1.0 report's rows) and BERT fp32 at both batches on 2 processes (bsz=32, "
            "bsz=max); the study's amp-bf16 and 1-process BERT cells are asserted nowhere")
def dlperf_study(tmp_path_factory):
    sweep = narrowed_sweep(tmp_path_factory.mktemp("dlperf-sweep"), "dlperf", ["fp32"],
                           ({"model": "bert-base", "devices": 1},))
    db, text, results = reproduced(tmp_path_factory, "dlperf", "--framework", "torch",
                                   "--sweep", str(sweep))
    return db, text, results, sweep


@pytest.mark.spans_cores
def test_dlperf_tables_laid_out_as_published(dlperf_study):
    db, text, results, _ = dlperf_study
    study = reproduce.get("dlperf")
    assert "Scale: cpu" in text and "--tiny" in text
    found = check_layout(text, study)
    resnet = by_label(found[study.reference_tables()[0].title])
    fp32_2 = one(results, framework="torch", model="resnet50", precision="fp32", processes=2)
    fp32_1 = one(results, framework="torch", model="resnet50", precision="fp32", processes=1)
    # DLPerf's 32 GPUs pair with 2 processes: throughput and speedup, with their ratios
    for label in ("NGC PyTorch", "PyTorch"):
        row = resnet[label]
        assert measured(row[3]) == pytest.approx(fp32_2["throughput"]["median"], rel=0.01)
        speedup = fp32_2["throughput"]["median"] / fp32_1["throughput"]["median"]
        assert measured(row[5]) == pytest.approx(speedup, rel=0.01)
        # measured / published beside the figure
        assert row[3].endswith(f"({fp32_2['throughput']['median'] / float(row[2]):.3g}×)")
    assert resnet["OneFlow"][3].startswith("not measured")
    # BERT's two batch columns per precision: bsz=max pairs with the larger batch measured
    bert = by_label(found[study.reference_tables()[1].title])
    big = one(results, model="bert-base", precision="fp32", processes=2, batch_size=4)
    small = one(results, model="bert-base", precision="fp32", processes=2, batch_size=2)
    assert measured(bert["NGC PyTorch"][3]) == pytest.approx(big["throughput"]["median"],
                                                              rel=0.01)
    assert measured(bert["NGC PyTorch"][5]) == pytest.approx(small["throughput"]["median"],
                                                              rel=0.01)
    assert "MXNet W/O clip" in bert and "TensorFlow 2.x" in bert
    # the v1.0 report's rows: 1 GPU and 32 GPUs measured, 8 and 16 without a counterpart
    rows = found[study.reference_tables()[2].title][1:]
    assert [row[0:2] for row in rows] == [["1", "1"], ["1", "8"], ["2", "16"], ["4", "32"]]
    torch_column = 2 + 2 * 3 + 1  # NGC PyTorch's measured column
    assert measured(rows[0][torch_column]) == pytest.approx(fp32_1["throughput"]["median"],
                                                             rel=0.01)
    assert rows[1][torch_column].startswith("not measured")
    assert "Paired: devices" in text and "32 GPUs (4×8) → 2 processes" in text


@pytest.mark.spans_cores
def test_dlperf_report_as_html_from_what_is_stored(dlperf_study, tmp_path):
    """--resume with everything stored measures nothing and writes the report again."""
    db, _, results, sweep = dlperf_study
    out = tmp_path / "report.html"
    proc = dlperf_main("reproduce", "dlperf", "--tiny", "--framework", "torch", "--sweep",
                       str(sweep), "--resume", "--db", str(db), "-o", str(out), timeout=300,
                       env=LOCK)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "0 case(s) measured now" in proc.stdout
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<table>") == 8
    assert "<script" not in page and "http" not in page.split("</style>")[0]
    assert len(stored(db)) == len(results)


#: the inference batch sizes measured of the study's 1 to 8, and those left `not measured`
INFER_BATCHES = (1, 8)
UNMEASURED_BATCHES = [2, 4]


@pytest.fixture(scope="module")
@slow_setup("eight MXNet cases (training on 1 and 2 processes, inference at batch 1 and 8 of "
            "the study's 1 to 8, fp32 and amp-bf16), each in fresh worker processes")
def nvidia_study(tmp_path_factory):
    # inference at the ends of the study's batch range: every inference assertion has two rows
    # to check, and the rows between (2, 4) are checked laid out and `not measured`
    sweep = narrowed_sweep(tmp_path_factory.mktemp("nvidia-sweep"), "nvidia-mxnet-rn50",
                           exclude=({"task": "infer", "batch_size": UNMEASURED_BATCHES},))
    return reproduced(tmp_path_factory, "nvidia-mxnet-rn50", "--sweep", str(sweep))


@pytest.mark.spans_cores
def test_nvidia_training_and_inference_tables(nvidia_study):
    db, text, results = nvidia_study
    study = reproduce.get("nvidia-mxnet-rn50")
    found = check_layout(text, study)
    train = by_label(found[study.reference_tables()[0].title])
    fp1 = one(results, task="train", precision="fp32", processes=1)
    fp2 = one(results, task="train", precision="fp32", processes=2)
    # TF32 is fp32 on a CPU: its throughput and its weak scaling (8 GPUs: 2 processes)
    assert measured(train["1"][4]) == pytest.approx(fp1["throughput"]["median"], rel=0.01)
    assert measured(train["8"][10]) == pytest.approx(
        fp2["throughput"]["median"] / fp1["throughput"]["median"], rel=0.01)
    assert "precision amp-fp16 → amp-bf16, tf32 → fp32" in text
    refusal = mxnet_bf16_refusal()
    if refusal is not None:  # a CPU without MXNet's bf16 kernels (AVX2): every amp cell says so
        for result in results:
            if result["case"]["precision"] == "amp-bf16":
                check_bf16_refused(result, refusal)
        for row in ("1", "8"):
            for column in (2, 6, 8):  # amp throughput, precision speedup, amp weak scaling
                assert train[row][column].startswith("unsupported"), train[row]
        infer = by_label(found[study.reference_tables()[3].title])
        for batch in INFER_BATCHES:
            assert all(cell.startswith("unsupported") for cell in infer[str(batch)][2::2]), batch
        unmeasured(infer)
        assert "no bf16 kernel" in text
        assert train["4"][2].startswith("not measured") and infer["16"][2].startswith("not measured")
        return
    amp1 = one(results, task="train", precision="amp-bf16", processes=1)
    amp2 = one(results, task="train", precision="amp-bf16", processes=2)
    assert measured(train["1"][2]) == pytest.approx(amp1["throughput"]["median"], rel=0.01)
    # the precision speedup divides the row's two throughput cells
    assert measured(train["1"][6]) == pytest.approx(
        amp1["throughput"]["median"] / fp1["throughput"]["median"], rel=0.01)
    # weak scaling at the table's largest count (8 GPUs) is the 2-process speedup; 4 has none
    assert measured(train["8"][8]) == pytest.approx(
        amp2["throughput"]["median"] / amp1["throughput"]["median"], rel=0.01)
    assert train["4"][2].startswith("not measured")
    infer = by_label(found[study.reference_tables()[3].title])
    for batch in INFER_BATCHES:
        amp = one(results, task="infer", precision="amp-bf16", batch_size=batch)
        fp = one(results, task="infer", precision="fp32", batch_size=batch)
        row = infer[str(batch)]
        assert measured(row[2]) == pytest.approx(amp["throughput"]["median"], rel=0.01)
        # avg, then p50 ... p99, each beside its speedup over the baseline (TF32 -> fp32)
        for column, stat in zip((6, 10, 14, 18, 22), ("mean", "p50", "p90", "p95", "p99")):
            assert measured(row[column]) == pytest.approx(amp["latency_ms"][stat], rel=0.01)
            assert measured(row[column + 2]) == pytest.approx(
                fp["latency_ms"][stat] / amp["latency_ms"][stat], rel=0.01)
    assert infer["16"][2].startswith("not measured") and infer["512"][2].startswith("not measured")
    unmeasured(infer)


def unmeasured(infer: dict[str, list[str]]) -> None:
    """The inference rows between the measured batch sizes: laid out, every cell not measured."""
    for batch in UNMEASURED_BATCHES:
        assert all(cell.startswith("not measured") for cell in infer[str(batch)][2::2]), batch


@pytest.mark.spans_cores
def test_report_precision_columns_and_baseline(nvidia_study):
    """`dlperf report`: a training AMP-over-FP32 column, avg and p95 latency beside p50, p90 and
    p99, and the speedups' baseline precision chosen by --baseline-precision."""
    db, _, results = nvidia_study
    sweep = "reproduce-nvidia-mxnet-rn50-tiny"
    text = dlperf_main("report", "--db", str(db), "--sweep", sweep, check=True).stdout
    amp1 = one(results, task="train", precision="amp-bf16", processes=1)
    fp1 = one(results, task="train", precision="fp32", processes=1)
    section = text[text.index("· cpu · amp-bf16"):]
    header = next(l for l in section.splitlines() if l.startswith("| nodes |"))
    names = [c.strip() for c in header.strip("|").split("|")]
    first = next(l for l in section.splitlines() if l.startswith("| 1 | 1 | 4 |"))
    values = dict(zip(names, (c.strip() for c in first.strip("|").split("|"))))
    refusal = mxnet_bf16_refusal()
    if refusal is None:
        expected = amp1["throughput"]["median"] / fp1["throughput"]["median"]
        assert values["throughput vs fp32"] == f"{ratio_text(expected)}×"
    else:  # refused on this CPU (AVX2): no ratio is shown, the row says why
        check_bf16_refused(amp1, refusal)
        assert "throughput vs fp32" not in names and values["status"].startswith("unsupported")
    infer = text[text.index("— infer"):]
    header = next(l for l in infer.splitlines() if "p95 ms" in l)
    for name in ("avg ms", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "avg speedup vs fp32",
                 "p95 speedup vs fp32"):
        assert f"| {name} |" in header
    other = dlperf_main("report", "--db", str(db), "--sweep", sweep, "--baseline-precision",
                        "amp-bf16", check=True).stdout
    assert "p95 speedup vs amp-bf16" in other and "speedup vs fp32" not in other
    # a training ratio over a baseline that was measured only
    assert ("throughput vs amp-bf16" in other) == (refusal is None)


@pytest.fixture(scope="module")
@slow_setup("six cases (MXNet ResNet-50 fp32 and amp-bf16 on 1 and 2 processes over its "
            "kvstore, ONNX Runtime int8 and fp32), four of them measured in fresh worker "
            "processes: the two fp32 ones are nvidia_study's runs of the same cases")
def dell_study(tmp_path_factory, nvidia_study):
    # the study's own cases, its ResNet-50 cut (narrowed_sweep). MXNet fp32 at batch 4 on 1 and
    # 2 processes is a cell of both studies, the same case at --tiny (the same key): measured
    # once, by nvidia_study, and stored here before the rest is measured (--resume). They were
    # 11 of this fixture's 26 worker CPU-s (3 + 8: the 2-process run is four MXNet
    # interpreters, kvstore scheduler and server beside the ranks).
    sweep = narrowed_sweep(tmp_path_factory.mktemp("dell-sweep"), "dell-emc")
    found = reproduced(tmp_path_factory, "dell-emc", "--framework", "mxnet,onnxruntime",
                       "--sweep", str(sweep), reused=nvidia_study[0])
    assert len(found[2]) == 6, [r["label"] for r in found[2]]
    return found


@pytest.mark.spans_cores
def test_dell_emc_scaling_fp16_and_int8(dell_study):
    db, text, results = dell_study
    study = reproduce.get("dell-emc")
    found = check_layout(text, study)
    scaling, fp16, int8 = (found[t.title] for t in study.reference_tables())
    mxnet = by_label(scaling)["MXNet"]
    one_fp32 = one(results, framework="mxnet", precision="fp32", processes=1)
    two_fp32 = one(results, framework="mxnet", precision="fp32", processes=2)
    assert measured(mxnet[2]) == pytest.approx(
        two_fp32["throughput"]["median"] / one_fp32["throughput"]["median"], rel=0.01)
    refusal = mxnet_bf16_refusal()
    if refusal is None:
        # FP16 over FP32 as the study ran it: at twice the batch, the range over configurations
        gains = [100 * (one(results, framework="mxnet", precision="amp-bf16", processes=n)
                        ["throughput"]["median"]
                        / one(results, framework="mxnet", precision="fp32", processes=n)
                        ["throughput"]["median"] - 1) for n in (1, 2)]
        bounds = {row[0]: measured(row[2]) for row in fp16[1:]}
        # as shown: two decimals below 100 %, whole percents from 100 % (pairing's format)
        assert bounds["lowest"] == pytest.approx(min(gains), abs=shown(min(gains)))
        assert bounds["highest"] == pytest.approx(max(gains), abs=shown(max(gains)))
    else:  # a CPU without MXNet's bf16 kernels (AVX2): the FP16 gain is refused, saying why
        for n in (1, 2):
            check_bf16_refused(one(results, framework="mxnet", precision="amp-bf16",
                                   processes=n), refusal)
        assert all(row[2].startswith(("unsupported", "not measured")) for row in fp16[1:]), fp16
        assert "no bf16 kernel" in text
    int8_result = one(results, framework="onnxruntime", precision="int8")
    fp32_result = one(results, framework="onnxruntime", precision="fp32")
    assert measured(int8[1][2]) == pytest.approx(
        int8_result["throughput"]["median"] / fp32_result["throughput"]["median"], rel=0.01)
    assert "framework tensorrt → onnxruntime" in text
    assert by_label(scaling)["TensorFlow"][2].startswith("not measured")


def test_wide_deep_beside_hugectr_from_a_sweep_of_ones_own(tmp_path):
    """`--sweep FILE` gives the CPU scale's cases: Wide & Deep at one of DLPerf's vocabularies
    (the rows the test reads: the one measured, the others `not measured`), its step time and
    memory beside OneFlow's and HugeCTR's published columns."""
    sweep = tmp_path / "wd.yaml"
    sweep.write_text("name: wd\ndefaults: {framework: torch, model: wide-deep, device: cpu, "
                     "batch_size: 64}\nmatrix:\n  vocab_size: [3200000]\n")
    db, out = tmp_path / "r.db", tmp_path / "wd.md"
    # through dlperf's main in this process: its worker is still a fresh process
    proc = dlperf_main("reproduce", "dlperf-wide-deep", "--sweep", str(sweep), "--tiny", "--db",
                       str(db), "-o", str(out), timeout=300, env=LOCK)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text()
    table = check_layout(text, reproduce.get("dlperf-wide-deep"))
    rows = by_label(table[reference.table("dlperf-readme-2021/wide-deep").title])
    results = stored(db)
    small = next(r for r in results if r["case"]["knobs"]["vocab_size"] == 3200000)
    row = rows["3200000"]
    assert measured(row[2]) == pytest.approx(small["iteration_ms"], rel=0.01)
    assert measured(row[4]) == measured(row[2])  # torch stands beside OneFlow and HugeCTR
    assert measured(row[6].replace(",", "")) == pytest.approx(
        small["memory"]["peak_host_bytes"] / 2**20, rel=0.01)
    assert rows["6400000"][2].startswith("not measured")
    assert rows["51200000"][4].startswith("not measured")
    assert "framework hugectr → torch" in text or "hugectr → torch" in text
