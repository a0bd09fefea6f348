# Two commands set up a fresh machine: `make run` (train CartPole-v1 with 8 local actors) and `make test`.
# `make run` installs the core only (JAX, Gymnasium, TensorBoard's writer, matplotlib: what the demo imports);
# `make test` installs every extra the suite exercises ([all]: Ray, Lithops, MuJoCo, Atari, W&B, pytest…).
# Separate stamps, so `make run` then `make test` on one venv adds the extras, and either works first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
CORE   := $(VENV)/.installed-core
ALL    := $(VENV)/.installed-all

.PHONY: run test test-unit lint bench clean

# ranges in pyproject.toml, the exact tested versions in constraints.txt
PIP_INSTALL := $(PY) -m pip install -q -c constraints.txt

$(PY):
	$(PYTHON) -m venv $(VENV)

# the core: `pip install -e .`; a venv that already has [all] has the core (its stamp is touched there too)
$(CORE): pyproject.toml constraints.txt | $(PY)
	$(PIP_INSTALL) -e .
	touch $(CORE)

# everything the test suite needs
# (a venv made before pygame-ce replaced pygame loses pygame first: both install pygame/)
$(ALL): pyproject.toml constraints.txt | $(PY)
	$(PY) -m pip uninstall -q -y pygame 2>/dev/null || true
	$(PIP_INSTALL) -e ".[all]"
	touch $(ALL) $(CORE)

# the benchmarks' baselines (Stable-Baselines3 on torch): torch first, exactly as pinned, so nothing pulls another build
$(VENV)/.bench: $(ALL)
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) -e ".[bench]"
	touch $@

# the run ends with its summary and the next steps, last on screen (the whole summary: runs/cartpole/summary.json)
run: $(CORE)
	rm -rf runs/cartpole
	$(VENV)/bin/minionsrl train --env-id CartPole-v1 --actors 8 --total-timesteps 500000 --target-return 500 \
		--run-dir runs/cartpole

test: $(ALL)
	$(VENV)/bin/ruff check minionsrl tests bench examples
	$(PY) -m pytest -q --durations=15

# the unit tier (~2 minutes on 2 cores): no slow learning tests, no integration tests (docs/INTERNALS.md, "Test tiers")
test-unit: $(ALL)
	$(PY) -m pytest -q -m "not slow and not integration"

lint: $(ALL)
	$(VENV)/bin/ruff check minionsrl tests bench examples

bench: $(VENV)/.bench
	$(PY) bench/classic_control.py cartpole
	$(PY) bench/sampling.py
	$(PY) bench/hopper.py
	$(PY) bench/sampling.py backends
	$(PY) bench/cnn_runtime.py
	$(PY) bench/experiment.py bench/specs/async-algos-cartpole.yaml bench/specs/async-algos-hopper.yaml
	$(PY) bench/pong.py

clean:
	rm -rf $(VENV) runs *.egg-info
