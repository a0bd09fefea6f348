# Two commands set up a fresh machine: `make run` (train CartPole-v1 with 8 local actors) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[all]"
	touch $(STAMP)

# the benchmarks' baselines (Stable-Baselines3 on torch): torch first, exactly as pinned, so nothing pulls another build
$(VENV)/.bench: $(STAMP)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[bench]"
	touch $@

run: $(STAMP)
	rm -rf runs/cartpole
	$(VENV)/bin/minionsrl train --env-id CartPole-v1 --actors 8 --total-timesteps 500000 --target-return 500 \
		--run-dir runs/cartpole
	cat runs/cartpole/summary.json | $(PY) -c "import json,sys; d=json.load(sys.stdin); d.pop('config'); print(json.dumps(d, indent=2))"

test: $(STAMP)
	$(VENV)/bin/ruff check minionsrl tests bench
	$(PY) -m pytest -q --durations=15

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check minionsrl tests bench

bench: $(VENV)/.bench
	$(PY) bench/cartpole.py
	$(PY) bench/sampling.py
	$(PY) bench/hopper.py
	$(PY) bench/backends.py
	$(PY) bench/cnn_runtime.py
	$(PY) bench/async_algos.py
	$(PY) bench/pong.py

clean:
	rm -rf $(VENV) runs *.egg-info
