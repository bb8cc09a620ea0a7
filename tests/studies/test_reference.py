"""The published reference data (`dlperf reference`, src/dlperf/reference/): every file passes the
schema, every value has a unit and a source, spot values are the ones transcribed from the
studies, the tables agree with themselves where a study publishes a figure twice (a speedup and
the throughputs it is the ratio of), a malformed file is refused naming file and field, and the
command lists, shows and refuses as documented."""

from __future__ import annotations

import fnmatch
import json
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

from conftest import dlperf, dlperf_main
from dlperf import reference
from dlperf.reference import QUANTITIES, UNITS, ReferenceFileError, one
from dlperf.reference.parse import read

# reads data files and starts no framework: `make test` runs it beside another
pytestmark = pytest.mark.parallel

ROOT = Path(__file__).resolve().parents[2]
FILES = reference.files()
README_TABLES = ("dlperf-readme-2020/resnet50", "dlperf-readme-2021/resnet50")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_file_passes_the_schema(path: Path) -> None:
    study, tables = read(path)
    assert path.name == f"{study.id}.yaml"
    assert study.title and study.authors and study.version and study.date
    for table in tables:
        assert table.id.startswith(study.id + "/")
        assert table.hardware["gpu"] and table.hardware["count"] and table.hardware["interconnect"]
        assert table.software, table.id
        assert table.source.location, table.id


def test_the_shipped_files_cover_the_seed_studies_and_ship_as_package_data() -> None:
    seeds = {t.study.seed for t in reference.load()}
    assert {"000_b0bc3f44eda1942b.txt", "001_180f71fb1fa20301.txt", "002_a5cbda6dc62da346.txt",
            "003_d0ed6dc307d592ec.txt"} <= seeds
    ids = [t.id for t in reference.load()]
    assert len(ids) == len(set(ids))
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["dlperf.reference"]
    assert FILES and all(any(fnmatch.fnmatch(p.name, pat) for pat in patterns) for p in FILES)


def test_every_value_has_a_unit_and_a_source() -> None:
    values = reference.values()
    assert len(values) > 800
    for value in values:
        table = reference.table(value.table)
        assert value.unit in UNITS and value.quantity in QUANTITIES, value
        assert table.source.location in value.source and table.study.title in value.source
        assert (value.value is not None) == (value.status == "ok"), value
        assert all(value.footnotes), value
        if value.keys.get("nodes") is not None and "gpus_per_node" in value.keys:
            assert value.keys["gpus"] == value.keys["nodes"] * value.keys["gpus_per_node"]


@pytest.mark.parametrize("table", README_TABLES)
def test_oneflow_resnet50_fp32_at_4n8g_as_both_readme_versions_publish_it(table: str) -> None:
    keys = {"framework": "oneflow", "model": "resnet50", "precision": "fp32", "nodes": 4,
            "gpus_per_node": 8}
    throughput = one("throughput", [table], **keys)
    speedup = one("speedup", [table], **keys)
    assert (throughput.value, throughput.unit, throughput.text) == (12411.97, "img/s", "12411.97")
    assert (speedup.value, speedup.unit) == (31.21, "x")
    amp = one("speedup", [table], **{**keys, "precision": "amp-fp16"})
    assert amp.text == "22.50"  # the published spelling, not the float's


def test_spot_values_of_each_study() -> None:
    assert one("throughput", framework="oneflow", model="resnet50", precision="fp32", gpus=1,
               batch_size=128).value == 397.64
    tf_xla = one("throughput", ["dlperf-readme-2021/resnet50"], framework="tensorflow1",
                 xla=True)
    assert (tf_xla.value, tf_xla.keys["batch_size"], tf_xla.label) == (29171.69, 224, "w/XLA")
    assert "bsz=224" in tf_xla.footnotes[0] and "out of memory" in tf_xla.footnotes[0]
    assert one("throughput", ["dlperf-readme-2021/bert-base"], framework="mxnet",
               grad_clip=False, largest_batch=True, precision="fp32").keys["batch_size"] == 64
    hugectr = reference.lookup("step-time", framework="hugectr", vocab_size=51200000)
    assert [(v.status, v.value, v.text) for v in hugectr] == [("oom", None, "OOM")]
    assert one("max-classes", framework="oneflow", gpus=8).value == 13500000
    t4 = one("latency", ["nvidia-mxnet-rn50/infer-t4"], statistic="p95", batch_size=256)
    assert (t4.value, t4.unit) == (167.01, "ms")
    a100 = one("latency-speedup", ["nvidia-mxnet-rn50/infer-dgxa100"], statistic="avg",
               batch_size=1)
    assert (a100.value, a100.keys["baseline"]) == (1.9, "tf32")
    dgx2 = one("speedup", ["nvidia-mxnet-rn50/train-dgx2"], precision="fp32", gpus=16)
    assert dgx2.value == 15.19
    assert one("speedup", framework="mxnet", precision="fp32", gpus=32,
               in_tables=["dell-emc-v100/fig2-scaling"]).value == 29.43
    assert one("precision-speedup", framework="tensorrt", precision="int8").approx
    efficiency = {v.keys["model"]: v.value for v in reference.lookup(
        "scaling-efficiency", gpus=512)}
    assert efficiency == {"inception-v3": 90, "resnet101": 90, "vgg16": 68}


def test_readme_speedups_are_the_reports_throughput_ratios() -> None:
    """The README's 32-GPU speedups over the report's 1-GPU throughput: a transcription slip
    in either file shows as a ratio that does not match (the README rounds to 0.01; NGC MXNet's
    32-GPU throughput differs between README and report, footnoted, and is compared with the
    README's own)."""
    checked = 0
    for speedup in reference.lookup("speedup", in_tables=README_TABLES):
        keys = {k: v for k, v in speedup.keys.items() if k not in ("nodes", "gpus_per_node",
                                                                     "gpus")}
        ones = reference.lookup("throughput", in_tables=["dlperf-report-v1/resnet50-fp32",
                                                         "dlperf-report-v1/resnet50-amp"],
                                gpus=1, **keys)
        if speedup.value is None or not ones:
            continue
        at32 = one("throughput", [speedup.table], **speedup.keys)
        assert ones[0].value is not None and at32.value is not None
        assert at32.value / ones[0].value == pytest.approx(speedup.value, rel=0.005), speedup
        checked += 1
    assert checked >= 24


def test_nvidia_weak_scaling_and_precision_speedup_follow_from_the_throughputs() -> None:
    stale = 0
    for name in ("train-dgxa100", "train-dgx1", "train-dgx2"):
        table = f"nvidia-mxnet-rn50/{name}"
        for value in reference.lookup(in_tables=[table]):
            if value.quantity == "speedup":
                base = one("throughput", [table], precision=value.keys["precision"], gpus=1)
                here = one("throughput", [table], precision=value.keys["precision"],
                           gpus=value.keys["gpus"])
                assert here.value / base.value == pytest.approx(value.value, rel=0.01), value
            elif value.quantity == "precision-speedup":
                amp, baseline = (one("throughput", [table], precision=p, gpus=value.keys["gpus"])
                                 for p in ("amp-fp16", value.keys["baseline"]))
                ratio = amp.value / baseline.value
                if any("does not follow" in note for note in value.footnotes):
                    stale += 1  # published as is, its mismatch footnoted
                    assert ratio != pytest.approx(value.value, rel=0.01)
                else:
                    assert ratio == pytest.approx(value.value, rel=0.01), value
    assert stale == 1


def test_wide_deep_memory_ratio_is_oneflow_over_hugectr() -> None:
    table = ["dlperf-readme-2021/wide-deep"]
    for ratio in reference.lookup("memory-ratio", in_tables=table):
        oneflow = one("memory", table, framework="oneflow", vocab_size=ratio.keys["vocab_size"])
        hugectr = one("memory", table, framework="hugectr", vocab_size=ratio.keys["vocab_size"])
        if ratio.status == "none":
            assert hugectr.status == "oom"
            continue
        assert 100 * oneflow.value / hugectr.value == pytest.approx(ratio.value, abs=0.51)


def test_lookup_refuses_an_unknown_key_and_one_says_what_matched() -> None:
    with pytest.raises(ReferenceFileError, match="unknown key 'fw'"):
        reference.lookup(fw="oneflow")
    with pytest.raises(ReferenceFileError, match=r"^3 published throughput values match.*"
                                                 r"dlperf-readme-2020/resnet50.*dlperf-report-v1"):
        one("throughput", framework="oneflow", model="resnet50", precision="fp32", gpus=32)


def _mutated(tmp_path: Path, change) -> Path:
    """A copy of one shipped file with ``change`` applied to its parsed data."""
    source = reference.DATA_DIR / "horovod-readme-2018.yaml"
    data = yaml.safe_load(source.read_text())
    change(data)
    folder = tmp_path / "ref"
    folder.mkdir()
    (folder / source.name).write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def _cell(data):
    data["tables"][0]["rows"][1]["cells"][0] = "ninety"


def _key(data):
    data["tables"][0]["keys"]["gpu_count"] = 512


def _unit(data):
    del data["tables"][0]["columns"][0]["unit"]


def _cells(data):
    data["tables"][0]["rows"][2]["cells"].append(1)


def _plot(data):
    del data["tables"][0]["source"]["read_off_plot"]


def _hardware(data):
    del data["study"]["hardware"]["interconnect"]


@pytest.mark.parametrize("change, field", [
    (_cell, "tables[0].rows[1].cells[0]: expected a finite number"),
    (_key, "tables[0].keys.gpu_count: unknown key"),
    (_unit, "tables[0].columns[0].unit: a column states both"),
    (_cells, "tables[0].rows[2].cells: expected a list of 1 cells"),
    (_plot, "tables[0].source.read_off_plot: expected true or false"),
    (_hardware, "tables[0].hardware: must state interconnect"),
], ids=["cell", "key", "unit", "cells", "read_off_plot", "hardware"])
def test_a_malformed_file_is_refused_naming_file_and_field(tmp_path: Path, change,
                                                           field: str) -> None:
    folder = _mutated(tmp_path, change)
    with pytest.raises(ReferenceFileError) as error:
        reference.load(folder)
    assert str(error.value).startswith("reference file horovod-readme-2018.yaml: ")
    assert field in str(error.value) and "\n" not in str(error.value)
    proc = dlperf_main("reference", "--dir", str(folder))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and field in proc.stderr


def test_the_shipped_file_unchanged_loads_from_another_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ref"
    folder.mkdir()
    shutil.copy(reference.DATA_DIR / "horovod-readme-2018.yaml", folder)
    assert [t.id for t in reference.load(folder)] == ["horovod-readme-2018/scaling-efficiency"]


def test_cli_lists_every_table() -> None:
    proc = dlperf("reference", check=True)
    assert "dlperf-readme-2021/resnet50" in proc.stdout and "Dell" not in proc.stderr
    listed = json.loads(dlperf("reference", "list", "--format", "json", check=True).stdout)
    assert [row["id"] for row in listed] == [t.id for t in reference.load()]
    assert {"id", "study", "what", "rows"} <= set(listed[0])
    markdown = dlperf_main("reference", "--format", "md", check=True).stdout
    assert "| dell-emc-v100/fig2-scaling | Deep Learning at Scale on NVIDIA V100" in markdown


def test_cli_shows_a_table_as_published() -> None:
    shown = dlperf("reference", "show", "dlperf-readme-2021/resnet50", "--format", "md",
                   check=True).stdout
    assert "| OneFlow | OneFlow-Benchmark | 12411.97 | 31.21 | 33141.02 | 22.50 |" in shown
    assert "| PaddlePaddle | PaddleCV | 9348.17 | 26.50 | [3]10633.22 / 11617.57 w/DALI |" in shown
    assert "- [1] TensorFlow 1.x AMP: bsz=224" in shown
    assert "- seed: ../shared/seeds/000_b0bc3f44eda1942b.txt" in shown
    assert "- read off a plot: no" in shown
    data = json.loads(dlperf_main("reference", "show", "dell-emc-v100/table1-v100-pcie-vs-sxm2",
                                  "--format", "json", check=True).stdout)
    clock = [v for v in data["values"] if v["keys"].get("case") == "max-clock"]
    assert [(v["keys"]["device"], v["value"], v["unit"]) for v in clock] == [
        ("V100-PCIe", 1380, "MHz"), ("V100-SXM2", 1530, "MHz")]
    terminal = dlperf_main("reference", "show", "nvidia-mxnet-rn50/infer-t4", check=True).stdout
    assert "167.01" in terminal and "where: Inference performance: NVIDIA T4" in terminal


@pytest.mark.parametrize("args, says", [
    (("show", "dlperf-readme-2021/resnet-50"), "no reference table 'dlperf-readme-2021/resnet-50'"
                                               "; known: dell-emc-v100/table1"),
    (("show",), "show: which table? ID is one of dell-emc-v100/table1"),
    (("list", "dlperf-readme-2021/resnet50"), "list takes no ID"),
], ids=["unknown-id", "no-id", "list-with-id"])
def test_cli_refuses_in_one_line(args: tuple[str, ...], says: str) -> None:
    proc = dlperf_main("reference", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and says in proc.stderr
    assert "dlperf-readme-2021/resnet50" in proc.stderr or args[0] == "list"
