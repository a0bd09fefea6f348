"""The learner on a CUDA device (``--device cuda``): the same log-probabilities as the NumPy rollout functions, the
same update as on the CPU, and a run billed as the GPU host. Marked ``gpu`` and skipped where JAX sees no CUDA
device (CI never has one); on a machine with one: ``pytest -m gpu``."""

from __future__ import annotations

import glob
import json

import numpy as np
import pytest

from minionsrl.config import learner_settings
from minionsrl.function.numpy_policy import PolicyArch, make_numpy_policy
from minionsrl.learner.batch import Batch
from minionsrl.learner.networks import init_params
from minionsrl.learner.ppo import ppo_loss

HOPPER = PolicyArch(11, 3, False, (64, 64))
PONG = PolicyArch(4 * 84 * 84, 6, True, (), "cnn", (4, 84, 84))


def _jax_sees_a_gpu() -> bool:
    if not glob.glob("/dev/nvidia[0-9]*"):  # no NVIDIA driver: JAX is not even asked
        return False
    import jax

    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:  # no CUDA plugin, or no device it can use
        return False


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _jax_sees_a_gpu(), reason="JAX sees no CUDA device here (CI never has one)")]


@pytest.fixture(scope="module")
def devices():
    """(cpu, gpu), with the learner's runtime set up as a run sets it up (full float32 matmuls)."""
    import jax

    from minionsrl.learner import runtime

    runtime.configure(2)  # 2: leave the pytest process's threads as they are
    return jax.devices("cpu")[0], jax.devices("gpu")[0]


def _weights(arch: PolicyArch, seed: int = 0) -> dict[str, np.ndarray]:
    """The initial weights moved off their initialisation (the heads start near zero, where any precision agrees)."""
    rng = np.random.default_rng(seed)
    return {k: (v + rng.normal(0.0, 0.05, v.shape)).astype(np.float32) for k, v in init_params(arch, seed).items()}


def _inputs(arch: PolicyArch, rows: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if arch.image:
        return (rng.integers(0, 256, (rows, *arch.obs_shape), dtype=np.uint8),
                rng.integers(0, arch.action_dim, rows).astype(np.float32))
    return (rng.standard_normal((rows, arch.obs_dim)).astype(np.float32),
            rng.standard_normal((rows, arch.action_dim)).astype(np.float32))


def _batch(arch: PolicyArch, rows: int) -> Batch:
    """A batch as functions record it: log-probabilities from the NumPy policy at the learner's initial weights."""
    obs, actions = _inputs(arch, rows)
    policy = make_numpy_policy(arch, init_params(arch, 0))
    logp = policy.log_prob(policy.forward(obs)[0], actions)
    r = np.random.default_rng(2)
    f32 = np.float32
    return Batch(obs, actions, logp, r.standard_normal(rows).astype(f32), r.standard_normal(rows).astype(f32),
                 r.standard_normal(rows).astype(f32))


@pytest.mark.parametrize(("arch", "rows"), [(HOPPER, 4096), (PONG, 256)], ids=["hopper-mlp", "pong-cnn"])
def test_the_gpu_learners_log_probabilities_are_the_functions_float32_ones(devices, arch, rows):
    """PPO's ratio is the learner's log-probability over the one a NumPy function recorded: at the behaviour policy
    it must be 1 to float32 rounding. With full float32 matmuls (the runtime's setting) the GPU's log-probabilities
    match NumPy's to that; TF32 (JAX's GPU default otherwise) misses by far more, which is why it is not used."""
    import jax

    from minionsrl.learner.engine import score

    _, gpu = devices
    params = _weights(arch)
    obs, actions = _inputs(arch, rows)
    policy = make_numpy_policy(arch, params)
    heads, values = policy.forward(obs)
    reference = policy.log_prob(heads, actions)
    on_gpu = jax.device_put({k: np.asarray(v) for k, v in params.items()}, gpu)
    logp, learner_values = score(arch, on_gpu, obs, actions)
    f32_error = float(np.max(np.abs(logp - reference)))
    assert f32_error <= 1e-4 * max(1.0, float(np.max(np.abs(reference)))), f32_error
    np.testing.assert_allclose(learner_values, values, rtol=1e-4, atol=1e-4)
    with jax.default_matmul_precision("tensorfloat32"):
        tf32_error = float(np.max(np.abs(score(arch, on_gpu, obs, actions)[0] - reference)))
    print(f"max |log-prob error| float32 {f32_error:.3g} tf32 {tf32_error:.3g}")  # `pytest -rA` shows it
    assert tf32_error > 10 * f32_error, (tf32_error, f32_error)


@pytest.mark.parametrize(("arch", "rows", "minibatch"), [(HOPPER, 4096, 1024), (PONG, 64, 32)],
                         ids=["hopper-mlp", "pong-cnn"])
def test_an_update_on_the_gpu_is_the_update_on_the_cpu(devices, arch, rows, minibatch):
    """The same compiled update (PPO's loss, Adam, clipping), the same batch and minibatch draw on each device:
    the weights, the optimiser's state and the statistics agree to float32 rounding, and the GPU's stay on it."""
    import jax

    from minionsrl.learner.engine import SGDEngine

    params = learner_settings(update_epochs=2, learning_rate=3e-4, minibatch_size=minibatch)
    engines = [SGDEngine(arch, init_params(arch, 0), params, ppo_loss, device) for device in devices]
    batch = _batch(arch, rows)
    stats = [engine.update(batch, np.random.default_rng(3)) for engine in engines]
    cpu, gpu = engines
    assert {d.platform for w in gpu.weights.values() for d in w.devices()} == {"gpu"}
    for k in cpu.weights:
        np.testing.assert_allclose(np.asarray(gpu.weights[k]), np.asarray(cpu.weights[k]), rtol=1e-4, atol=5e-5,
                                   err_msg=k)
    for a, b in zip(jax.tree.leaves(cpu.opt_state), jax.tree.leaves(gpu.opt_state), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-3, atol=1e-6)
    for k in ("policy_loss", "value_loss", "approx_kl"):  # (not clipfrac: a count, one ratio at 1.2 flips it)
        assert stats[1][k] == pytest.approx(stats[0][k], rel=1e-3, abs=1e-5), k


def test_a_run_with_device_cuda_learns_on_the_gpu_and_bills_the_gpu_host(tmp_path, capsys):
    """`train --device cuda`: rounds run, the learner's weights live on the GPU, and the ledger bills the learner
    as the catalogue's GPU host (so a GPU run's dollars say what its host costs)."""
    from minionsrl import cli

    run = tmp_path / "run"
    assert cli.main(["train", "--env-id", "CartPole-v1", "--device", "cuda", "--actors", "2", "--max-rounds", "3",
                     "--eval-episodes", "1", "--no-tensorboard", "--no-progress", "--run-dir", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == 3 and summary["learner_host"] == "p3.2xlarge"
    assert summary["config"]["device"] == "cuda"
