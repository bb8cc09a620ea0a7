# The README's commands. `make setup` is idempotent: it reinstalls only when pyproject.toml or the
# lock of dlperf's own environment changed.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# dlperf's own environment, complete and hashed (`dlperf envs lock dlperf` from dlperf.in beside it)
OWN_LOCK := src/dlperf/envs/requirements/dlperf.txt

.PHONY: setup lint envs horovod horovod-envs version-envs test-envs test-packages test-prepare browser slurm allocators run run-more test test-quick clean cuda-locks fidelity gpu-check

# PyTorch's CPU build (the lock's torch==X+cpu) is on PyTorch's own index, not on the public one.
# The lock looks in /opt/wheels (the project's machines mirror it there; a missing directory is
# only a warning); elsewhere name the index, e.g.
#   make setup TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Unset, pip's own configuration decides, so a machine with a mirror never waits on an index it
# cannot reach. The lock's hashes are checked either way: the same file from either place.
TORCH_INDEX_URL ?=
TORCH_INDEX := $(if $(strip $(TORCH_INDEX_URL)),--extra-index-url $(strip $(TORCH_INDEX_URL)))

setup: $(STAMP)

# Every package (pip and setuptools included) from the hashed lock, wheels only; then dlperf
# itself, editable, with the lock's setuptools and without touching the dependencies.
$(STAMP): pyproject.toml $(OWN_LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes --only-binary=:all: $(TORCH_INDEX) -r $(OWN_LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# A quick look at this machine (under 5 minutes on 2 CPU cores from a fresh clone, installation
# included): ResNet-50 v1.5 training, fp32 vs bf16 autocast, fresh-process repeats until the 95 %
# interval of the median is within 2 % (`--repeats auto`: at least 3; no repeat started after
# 45 s) each with a steady-state warm-up and windows of at least 12 steps and 6 s; the bf16
# speedup from `dlperf compare` (Welch's test); an HTML report of the cases. Image 64
# keeps it quick (a step takes half the time of image 112's; the numbers are not comparable with
# 224). `make run-more` does the same and adds BERT-Base, fp32 vs amp-bf16 (about 5 min more).
QUICK_DB := quick.db
QUICK_RESNET := --framework torch --model resnet50 --image-size 64 --batch-size 16 --steps 12 \
	--min-duration 6 --repeats auto --max-time 45 --profile --profile-steps 2 --db $(QUICK_DB)
QUICK_BERT := --framework torch --model bert-base --seq-len 32 --batch-size 4 --steps 8 \
	--min-duration 6 --repeats 3 --profile --profile-steps 2 --db $(QUICK_DB)
QUICK_COMPARE := $(BIN)/dlperf compare --test welch
QUICK_REPORT := $(BIN)/dlperf report --db $(QUICK_DB) --format html -o quick-report.html

run: setup
	rm -f $(QUICK_DB) quick-*.json
	-$(BIN)/dlperf run $(QUICK_RESNET) --precision fp32 --json quick-resnet50-fp32.json
	-$(BIN)/dlperf run $(QUICK_RESNET) --precision amp-bf16 --json quick-resnet50-amp-bf16.json
	-$(QUICK_COMPARE) quick-resnet50-fp32.json quick-resnet50-amp-bf16.json
	$(QUICK_REPORT)
	@echo "report: $(CURDIR)/quick-report.html"

run-more: run
	-$(BIN)/dlperf run $(QUICK_BERT) --precision fp32 --json quick-bert-fp32.json
	-$(BIN)/dlperf run $(QUICK_BERT) --precision amp-bf16 --json quick-bert-amp-bf16.json
	-$(QUICK_COMPARE) quick-bert-fp32.json quick-bert-amp-bf16.json
	$(QUICK_REPORT)
	@echo "report: $(CURDIR)/quick-report.html"

# Mistakes found without running anything, the first step of `make test`: ruff (pyflakes and
# syntax errors) over src, tests and benchmarks, and mypy over the harness side (the worker side,
# Python 3.7 with `# type:` comments, is read for its types only). Both are configured in
# pyproject.toml and come from the lock.
lint: setup
	$(BIN)/ruff check
	$(BIN)/mypy

# The framework environments the tests use, each from its pinned set in src/dlperf/envs/requirements.
# Cached under $DLPERF_ENVS (default ~/.cache/dlperf/envs): a no-op while the pins are unchanged.
# Two installs at a time (each framework has its own install lock), the largest first, each
# through uv (docs/envs.md: from empty caches the eight took 89-103 s and 162-189 CPU-s against
# pip's 127-142 s and 228-256 CPU-s on a bare 2-core Zen 4, interleaved, 2026-12-07); xargs
# exits non-zero if any install failed.
TEST_ENVS ?= mindspore oneflow caffe2 tensorflow tensorflow1 jax paddle mxnet
ENV_JOBS ?= 2
envs: setup
	printf '%s\n' $(TEST_ENVS) | xargs -P $(ENV_JOBS) -n 1 $(BIN)/dlperf envs install

# Debian's chromium: tests/report/test_report.py renders the HTML report in it (headless). Installed once.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# Debian's Slurm and MUNGE: tests/launchers/test_slurm_sweep.py starts a real one-host cluster from them
# (munged, slurmctld, two slurmd node names) in a temporary directory. Installed once; no service
# is enabled or started here.
slurm:
	command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || { \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge; }

# Debian's jemalloc and tcmalloc (minimal): tests/worker/test_allocator_options.py runs a worker with one
# preloaded (`dlperf run --allocator`). Installed once, only when the dynamic linker's cache lacks one.
allocators:
	/sbin/ldconfig -p | grep -q 'libjemalloc\.so\.2 ' && \
		/sbin/ldconfig -p | grep -q 'libtcmalloc_minimal\.so\.4 ' || { \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjemalloc2 \
			libtcmalloc-minimal4; }

# Debian's cmake, g++ and Open MPI: Horovod compiles from its source archive (PyPI has no wheel)
# into the framework's own <fw>+horovod environment, with its MPI controller when Open MPI is
# there; and ccache, through which Horovod's CMake compiles where it is installed, so the builds
# share what they compile alike (docs/envs.md). Installed once, only when a tool is missing.
horovod:
	command -v cmake >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1 && \
		command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && \
		command -v ccache >/dev/null 2>&1 || { \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ make \
			libopenmpi-dev openmpi-bin ccache; }

# Horovod built into tensorflow1+horovod, mxnet+horovod and torch+horovod (`dlperf envs install
# NAME --horovod`), each its own environment (none needs the plain one); cached like them (a
# no-op while the pins are unchanged), the compiler's output in <envs>/<fw>+horovod/install.log.
# Each word is a lane, its builds (comma-separated) one after another, ENV_JOBS lanes at a time:
# MXNet's after torch's, both compiled as C++17 (the registry's cxx), so MXNet's takes 68 of its
# 72 objects from ccache (docs/envs.md); TensorFlow 1's (the old C++ ABI) shares none, beside them.
HOROVOD_ENVS ?= torch,mxnet tensorflow1
horovod-envs: setup horovod
	printf '%s\n' $(HOROVOD_ENVS) | xargs -P $(ENV_JOBS) -I LANE sh -c \
		'for env in $$(echo LANE | tr , " "); do $(BIN)/dlperf envs install --horovod $$env || exit 1; done'

# The version environments tests/envs/test_env_versions.py runs (it reads this list): their
# first install (34 and 41 s on a bare Zen 4 with pip; jax's 19.5 s with uv, pip resolving its
# lock and uv downloading and byte-compiling) is
# install work, not a test's: `make test` does it beside its first phases, before Horovod's
# builds (below; a test that needs one first waits on its install lock, and its idle core is
# what the install then runs on), so a test's time no longer depends on whether the environment
# was already there.
TEST_VERSION_ENVS ?= jax==0.9.2 tensorflow==2.20.0
version-envs: setup
	printf '%s\n' $(TEST_VERSION_ENVS) | sed -e 's/^\(.*\)==\(.*\)$$/\1 --version \2/' \
		| xargs -P $(ENV_JOBS) -L 1 $(BIN)/dlperf envs install

# `make test`'s environments before its first test: the plain ones, two at a time. The version
# environments and Horovod's builds are not among them: `make test` installs them beside its
# first phases (below).
test-envs: envs

# `make test`'s preparation, two things at a time where neither needs the other: the Debian
# packages (one apt-get after another: they share dpkg's lock) beside dlperf's own environment
# (pip: one core for its minute; side by side both cores were 95 % busy, where pip alone kept
# them 50 % busy on a bare Zen 4; installing the packages only tests use beside the
# environments' queue instead, the Horovod builds waiting only for the compilers, made the
# preparation no shorter there: about 500 s against 475), then lint (mypy: one core) beside
# the framework environments' installs, their lines interleaved as they come (make's -O would
# hold an install queue's seven minutes of lines until it ends).
TEST_PACKAGES := horovod browser slurm allocators
test-packages:
	for target in $(TEST_PACKAGES); do $(MAKE) --no-print-directory $$target || exit 1; done

test-prepare:
	$(MAKE) --no-print-directory -j2 setup test-packages
	$(MAKE) --no-print-directory -j2 lint test-envs

# The tests in three phases, all of which always run; any failing fails `make test`:
# 1. those marked `parallel` (they start no framework and assert nothing about time) on
#    PARALLEL_JOBS pytest-xdist processes, two to a core: the others fill the cores while one
#    waits on a child it started (a deadline it must see, a refusal's interpreter). Alone on a
#    2-core Zen 5 (2026-12-08, interleaved runs): this phase 124 and 120 s at 2 processes, 114
#    and 106 at 3, then 109 and 107 at 3, 105 and 105 at 4; `make test-quick` 102 and 100 s at
#    2, 88 and 88 at 3, then 91 and 89 at 3, 87 and 82 at 4;
# 2. the framework tests, TEST_JOBS units at a time (a file's tests on one process, so that its
#    module fixtures are made once; one framework's tests from every file together, so that its
#    libraries are read from disk once: tests/work_units.py), each xdist process pinned to its own slice
#    of the CPUs (DLPERF_TEST_SHARE_CPUS, tests/conftest.py): every framework sizes its pools by
#    the affinity mask, so two tests side by side never share a core; most of a tiny case is
#    single-threaded work (imports, graph building, compiles) that this runs two at a time; a
#    test marked `spans_cores` (a multi-process job, a rank per core) gets every CPU back while
#    it runs, beside the other process's one-core test. Four processes, two to a core, fill the
#    cores (98 % busy) but did not shorten the phase on a 2-core Zen 4 (1310 s against 1325, from
#    empty test caches) and ran a test out of memory: the phase is CPU-bound. Nor did taking
#    the ten tests that mostly wait (a --rdzv-timeout they must reach, a peer made late: 142 s
#    of wall time for 52 s of CPU alone) out to a process of their own beside it: 1397 s for the
#    other 405 against 1404 s for all 415 (empty caches, a bare 2-core Zen 4, 2026-12-05).
#    The tests marked `horovod` (tests/horovod_phase.py: those using a <fw>+horovod environment)
#    are dealt last while Horovod's builds (below) are under way, next once they have ended (one
#    process at a time: half their time is waits for a peer), and each waits for the builds
#    before its timeout starts;
# 3. those marked `whole_machine` (readings of the host's idle CPU or timing, a neighbour a
#    test makes itself) one at a time on every CPU.
# Horovod's three builds (`horovod-envs`: about 400 CPU-s of compiling from empty caches), after
# the version environments (`version-envs`, 75 s of pip), run beside phases 1 and 2 at idle CPU
# priority (SCHED_IDLE where `chrt --idle` may set it, else nice 19, which took 10 % of two
# busy loops beside it where SCHED_IDLE took nothing measured):
# they get the cycles those phases leave (about 15 % of the framework phase's: its waits on peers
# and timeouts), where before they held both cores for about 350 s of the preparation. From a
# bare 2-core Zen 4 (2026-12-05) that took make test from 2192 s to 2018 s: the preparation
# 500 s -> 228, the framework phase 1397 s -> 1357 for 36 tests fewer, the builds done 18 min
# into it; the 36, as a phase of their own after it, took 139 s, 40 % of it idle (their waits
# for a peer). Dealt last in the framework phase instead (one phase fewer; a test waits only
# where the builds are late) they took the same 143 s at its end, the other tests' units having
# ended on both processes within 18 s of each other: 2045 s in all, the same within the noise
# of two runs (2000 s with the version environments in the same lane first: the preparation
# 230 s -> 184, the builds ending in the phase's last minutes). The machine is 85-100 % busy from
# the first test to the last framework unit, so what is left to gain is CPU work removed, not
# cycles filled. Two rearrangements measured no gain (2026-12-05, the same Zen 4): the builds
# first in the lane and the version environments left to their tests' fixture, 2144 s (the
# installs' 74 CPU-s in the CPU-bound framework phase, the builds still ending 22 min into it);
# the parallel phase beside lint and the environments' installs, 272 s against about 266 s one
# after the other (a diagnostic). Their log follows phase 2;
# a test that skips for want of a Horovod environment under `make test` fails
# (DLPERF_TEST_BUILDS_DONE: the file the builds' exit status is written to when they end).
# First, dlperf's sources and tests are byte-compiled: where PYTHONDONTWRITEBYTECODE is set (the
# project's machines set it) no process writes its bytecode, so every `dlperf` process the tests
# start compiled the harness from source again (the parallel phase: 113 s -> 97 s).
# PYTEST_ARGS goes to all three (e.g. PYTEST_ARGS="-k report"; a phase it leaves empty passes).
# pytest-timeout fails a test that runs past 10 minutes (pyproject.toml), tests/ceiling.py one past
# its kind's ceiling (pyproject.toml) unless marked slow with its reason, and each phase lists
# its 60 slowest tests.
TEST_JOBS ?= 2
PARALLEL_JOBS ?= $(shell echo $$((2 * $(TEST_JOBS))))
PYTEST_ARGS ?=
AT_IDLE_PRIORITY := $(shell chrt --idle 0 true >/dev/null 2>&1 && echo chrt --idle 0 || echo nice -n 19)
test: test-prepare
	$(BIN)/python -m compileall -q src tests
	builds=$$(mktemp); ended=$$builds.ended; { $(AT_IDLE_PRIORITY) $(MAKE) --no-print-directory \
		version-envs horovod-envs >$$builds 2>&1; echo $$? >$$builds.rc; mv $$builds.rc $$ended; } & lane=$$!; \
	$(BIN)/python -m pytest -q -n $(PARALLEL_JOBS) -m parallel --ignore=tests/gpu $(PYTEST_ARGS); parallel=$$?; \
	DLPERF_TEST_BUILDS_DONE=$$ended DLPERF_TEST_SHARE_CPUS=1 $(BIN)/python -m pytest -q -n $(TEST_JOBS) \
		--dist loadfile -m "not parallel and not whole_machine" --ignore=tests/gpu $(PYTEST_ARGS); \
	shared=$$?; wait $$lane; built=$$(cat $$ended); \
	echo "--- the version environments and Horovod's builds ($(AT_IDLE_PRIORITY)), beside the phases above: exit $$built"; \
	cat $$builds; rm -f $$builds $$ended; test $$built -eq 0 || shared=1; \
	$(BIN)/python -m pytest -q -m "whole_machine and not parallel" $(PYTEST_ARGS); whole=$$?; \
	for code in $$parallel $$shared $$whole; do test $$code -eq 0 -o $$code -eq 5 || exit 1; done

# The inner loop (CONTRIBUTING): only the tests marked `parallel` (the harness, the store, the
# reports, the statistics, the structure, the refusals: they start no framework, need no framework
# environment and measure nothing) and not `slow` (those wait for `make test`), on PARALLEL_JOBS
# processes, with an empty folder of environments (DLPERF_ENVS): a test that needs an installed
# framework fails here instead of passing where one happens to be. Nothing to install first but
# `setup` (an allocator's tests skip where it is missing; those needing the package index, where
# it cannot be reached). The fuzzed commands (tests/commands/test_fuzz_inputs.py) draw
# QUICK_FUZZ_EXAMPLES inputs each, not 300 (derandomized all the same): at 300 they were 100 of
# the loop's 225 s of tests on a 2-core Zen 3. `make test` before pushing: it runs all 300.
QUICK_FUZZ_EXAMPLES ?= 60
test-quick: setup lint
	$(BIN)/python -m compileall -q src tests
	envs=$$(mktemp -d) && DLPERF_ENVS=$$envs DLPERF_FUZZ_EXAMPLES=$(QUICK_FUZZ_EXAMPLES) \
		$(BIN)/python -m pytest -q -n $(PARALLEL_JOBS) \
		-m "parallel and not slow" --ignore=tests/gpu $(PYTEST_ARGS); code=$$?; rm -rf "$$envs"; \
		test $$code -eq 0 -o $$code -eq 5

# dlperf against each framework's reference loops (benchmarks/fidelity.py): every framework
# whose environment is installed (the others are listed as skipped), its same-recipe loop
# (benchmarks/handwritten/) and its independent loop (benchmarks/independent/), interleaved pairs
# in fresh processes, one table printed and written as JSON and Markdown. Not part of `make
# test`: it measures, so run it alone on a quiet machine. Empty FIDELITY_IMAGE / FIDELITY_BATCH:
# image 64, batch 8 (MindSpore 32, 4); FIDELITY_FRAMEWORKS: a subset, e.g. "torch jax";
# FIDELITY_LOOPS: same-recipe, independent or both (empty: both); FIDELITY_MIN_SECONDS: every
# side's timed window at least this long (empty: 0).
FIDELITY_PAIRS ?= 4
FIDELITY_FRAMEWORKS ?=
FIDELITY_IMAGE ?=
FIDELITY_BATCH ?=
FIDELITY_LOOPS ?=
FIDELITY_MIN_SECONDS ?=
FIDELITY_JSON ?= fidelity.json
FIDELITY_MD ?= fidelity.md
FIDELITY_ARGS ?=
fidelity: setup
	$(BIN)/python benchmarks/fidelity.py --pairs $(FIDELITY_PAIRS) \
		$(foreach fw,$(FIDELITY_FRAMEWORKS),--framework $(fw)) \
		$(if $(strip $(FIDELITY_IMAGE)),--image-size $(FIDELITY_IMAGE)) \
		$(if $(strip $(FIDELITY_BATCH)),--batch-size $(FIDELITY_BATCH)) \
		$(if $(strip $(FIDELITY_LOOPS)),--loops $(strip $(FIDELITY_LOOPS))) \
		$(if $(strip $(FIDELITY_MIN_SECONDS)),--min-seconds $(FIDELITY_MIN_SECONDS)) \
		--json $(FIDELITY_JSON) --markdown $(FIDELITY_MD) $(FIDELITY_ARGS)

clean:
	rm -rf $(VENV) build src/*.egg-info

# Re-resolve every cuda lock from its .in file and fail if one moved (needs the package index;
# resolves metadata only where the index serves it). Not run by CI: `make test` checks the pins.
CUDA_LOCKS ?= torch tensorflow tensorflow1 jax paddle onnxruntime
cuda-locks: setup
	for fw in $(CUDA_LOCKS); do $(BIN)/dlperf envs lock $$fw --variant cuda || exit 1; done
	git diff --exit-code -- src/dlperf/envs/requirements/

# The short GPU check, for a borrowed GPU machine (often a quarter of an hour, start-up
# included): the GPU tests in tests/gpu/check_order.py's order, what never ran on a GPU first;
# a test that would start after GPU_CHECK_S seconds is skipped with the command that runs it
# alone. Its results are one file to bring back (JUnit XML, GPU_CHECK_OUT). CONTRIBUTING says
# what the machine needs.
GPU_CHECK_S ?= 420
GPU_CHECK_OUT ?= gpu-check.xml
gpu-check: setup
	DLPERF_GPU_CHECK_S=$(GPU_CHECK_S) $(BIN)/python -m pytest -q -p no:cacheprovider tests/gpu \
		-o timeout=$(GPU_CHECK_S) --junitxml=$(GPU_CHECK_OUT) $(PYTEST_ARGS)
