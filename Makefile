# The README's commands. `make setup` is idempotent: it reinstalls only when pyproject.toml changed.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup envs browser run test clean cuda-locks

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[torch,onnxruntime,accuracy,test]'
	touch $(STAMP)

# A quick look at this machine (under 5 minutes on 2 CPU cores): ResNet-50 v1.5 and BERT-Base
# training at their standard shapes, bf16 autocast, 3 fresh-process repeats each, short windows.
run: setup
	-$(BIN)/dlperf run --framework torch --model resnet50 --batch-size 8 --precision amp-bf16 \
		--warmup-steps 6 --steps 10 --repeats 3 --json quick-resnet50.json
	-$(BIN)/dlperf run --framework torch --model bert-base --batch-size 4 --seq-len 128 \
		--precision amp-bf16 --warmup-steps 4 --steps 8 --repeats 3 --json quick-bert-base.json
	$(BIN)/dlperf results --last 2

# The framework environments the tests use, each from its pinned set in src/dlperf/envs/requirements.
# Cached under $DLPERF_ENVS (default ~/.cache/dlperf/envs): a no-op while the pins are unchanged.
TEST_ENVS ?= tensorflow tensorflow1 jax paddle mxnet mindspore oneflow
envs: setup
	$(BIN)/dlperf envs install $(TEST_ENVS)

# Debian's chromium: tests/test_report.py renders the HTML report in it (headless). Installed once.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

test: setup envs browser
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build src/*.egg-info

# Re-resolve every cuda lock from its .in file and fail if one moved (needs the package index;
# resolves metadata only where the index serves it). Not run by CI: `make test` checks the pins.
CUDA_LOCKS ?= torch tensorflow tensorflow1 jax paddle onnxruntime
cuda-locks: setup
	for fw in $(CUDA_LOCKS); do $(BIN)/dlperf envs lock $$fw --variant cuda || exit 1; done
	git diff --exit-code -- src/dlperf/envs/requirements/
