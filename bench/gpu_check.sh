#!/usr/bin/env bash
# Issue 25's checks on a machine with a CUDA device, in at most two calls (bench/learner_round.py gpu says what each measures).
# From the repository root there, with the wheels it lacks in .whl/ and $OUT a folder whose files come back:
#   bash bench/gpu_check.sh smoke COMMIT   # facts, the `gpu` tests, Hopper and Pong importable (about 1 min)
#   bash bench/gpu_check.sh main COMMIT    # the update CPU vs GPU, Hopper-v5 1M steps x 3 seeds, Pong (about 8 min)
#   bash bench/gpu_check.sh curve COMMIT   # facts, the `gpu` tests, then Pong's curve for PONG_MINUTES (one call)
# Every stage has its own time limit and a failed one does not stop the next; results are packed after each.
# A dry run on a machine without a GPU: GPU=cpu PY=.venv/bin/python NO_WHEELS=1 LEARNER_SIZES="--sizes a"
# HOPPER_STEPS=20000 PONG_MINUTES=0.3 OUT=/tmp/x bash bench/gpu_check.sh main
set -u
gpu=${GPU:-cuda}
stage=${1:?smoke or main}
commit=${2:-unknown}
out=${OUT:?OUT: the folder whose files come back}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
PY=${PY:-python3}
log=$out/log-$stage.txt
note() { echo "== $(date +%T) $*" | tee -a "$log"; }
pack() { tar czf "$out/runs-$stage.tgz" -C /tmp/gpu-runs . 2>/dev/null; }
mkdir -p /tmp/gpu-runs
if [ -z "${NO_WHEELS:-}" ]; then
  note "install the wheels"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$log" 2>&1 || note "wheel install failed"
fi

hopper() {  # DEVICE SEED: the MuJoCo preset, 8 actors, 1M steps, one 10-episode evaluation at the end (BENCHMARKS §2)
  local dir=/tmp/gpu-runs/hopper-$1-s$2
  date +%s.%N >"$dir.start"
  timeout 200 $PY -m minionsrl train --env-id Hopper-v5 --preset auto --actors 8 --seed "$2" \
    --total-timesteps "${HOPPER_STEPS:-1000000}" --eval-every 0 --no-tensorboard --no-progress --device "$1" \
    --run-dir "$dir" >"$dir.log" 2>&1
  local rc=$?
  date +%s.%N >"$dir.end"
  note "hopper $1 seed $2 exited $rc"
}

pong() {  # the GPU learner's Pong for PONG_MINUTES; its rows and log come back
  note "pong, GPU learner, ${PONG_MINUTES:-2} min"
  timeout "${PONG_LIMIT_S:-170}" $PY bench/pong.py --minutes "${PONG_MINUTES:-2}" --device "$gpu" >>"$log" 2>&1
  note "pong exited $?"
  cp bench/out/pong.jsonl /tmp/gpu-runs/ 2>/dev/null; cp -r bench/out/pong-run-* /tmp/gpu-runs/ 2>/dev/null
  rm -rf /tmp/gpu-runs/pong-run-*/checkpoints; cp bench/out/pong.jsonl "$out/" 2>/dev/null; pack
}

if [ "$stage" = smoke ] || [ "$stage" = curve ]; then
  note facts
  timeout 60 $PY bench/learner_round.py gpu facts --out "$out" --commit "$commit" >>"$log" 2>&1
  nvidia-smi >>"$log" 2>&1
  note "gpu tests"
  timeout "${TESTS_LIMIT_S:-240}" $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -rA \
    >>"$log" 2>&1
  note "pytest exited $?"
  for env in ALE/Pong-v5 Hopper-v5; do  # (Hopper needs the mujoco wheels, which the curve stage does not carry)
    timeout 60 $PY -c "import gymnasium as g, ale_py; g.register_envs(ale_py); g.make('$env').reset(seed=0)" \
      >>"$log" 2>&1
    note "$env builds: exit $?"
  done
  if [ "$stage" = curve ]; then pong; fi
else
  note "learner update, CPU vs GPU"
  timeout 400 $PY bench/learner_round.py gpu learner --out "$out" ${LEARNER_SIZES:-} >>"$log" 2>&1
  note "hopper: cuda and cpu learners side by side, seed 1"
  hopper "$gpu" 1 & hopper cpu 1 & wait; pack
  note "hopper: cuda, seeds 2 and 3 side by side"
  hopper "$gpu" 2 & hopper "$gpu" 3 & wait; pack
  pong
fi
note done
