"""The cost of one PPO learner update — torch eager (the project's ``PPO``), torch over one flat
parameter buffer with a fused clip+Adam, ``torch.compile`` of the loss, and JAX (``jit`` of ``lax.scan`` over
epochs and minibatches, optax) — side by side on one pinned core, to choose the learner framework by numbers.

Every path does CleanRL's PPO update on the same batch: clipped surrogate, clipped value loss, entropy bonus,
advantages normalised per minibatch, global grad-norm clip 0.5, Adam (eps 1e-5, lr 3e-4), ``update_epochs``
epochs of shuffled minibatches. All paths start from the same initial weights (the torch network's, converted
for JAX) and draw the same permutations (``np.random.default_rng(seed).permutation`` per epoch, as
``PPO.update`` does), so their final weights can be compared.

JAX is not a dependency of this project: the script makes its own virtual environment for it
(``bench/.venvs/jax``, git-ignored) with pinned versions and runs the JAX side there as a child process; the two
sides exchange the problem (weights, batch) through ``.npz`` files and results as JSON. Every timed child runs
under ``taskset -c 0``; torch with ``set_num_threads(1)``, XLA with ``--xla_cpu_multi_thread_eigen=false``.

    .venv/bin/python bench/learner_update.py [--repeats 5] [--cnn-repeats 3] [--reuse]
    .venv/bin/python bench/learner_update.py --sizes cnn-1k --paths eager,jax_im2col   # a subset, in minutes

A subset run (``--sizes``/``--paths`` narrowed) times only the update and renders its own subsection
(``bench/out/learner_update_subset.jsonl``) below the last full run's table, which it keeps. The ``jax_im2col``
paths write the CNN's convolutions as im2col + one matmul, as the NumPy rollout policy does, instead of
``lax.conv_general_dilated`` (slow inside ``lax.scan`` on XLA:CPU, jax-ml/jax issue 12868).

This file is also the children's entry point: ``python bench/learner_update.py --child {torch,jax} JSON``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
import numpy as np

JAX_VERSION, OPTAX_VERSION = "0.10.2", "0.2.8"
JAX_VENV = common.ROOT / "bench" / ".venvs" / "jax"
JAX_PYTHON = JAX_VENV / "bin" / "python"
WORK = common.OUT / "learner_update"
RESULTS = common.OUT / "learner_update.jsonl"
XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
PIN = ["taskset", "-c", "0"]
SEED = 0
HP = {"lr": 3e-4, "clip": 0.2, "ent_coef": 0.01, "vf_coef": 0.5, "max_grad_norm": 0.5, "eps": 1e-5}
SIZES: dict[str, dict[str, Any]] = {
    "mlp-4k": {"label": "(a) MLP, 4,096 samples, 10 epochs × 64 minibatches of 64", "net": "mlp", "n": 4096,
               "epochs": 10, "mb": 64},
    "mlp-32k": {"label": "(b) MLP, 32,768 samples, 10 epochs × 32 minibatches of 1,024", "net": "mlp",
                "n": 32768, "epochs": 10, "mb": 1024},
    "cnn-1k": {"label": "(c) Nature CNN, 1,024 samples, 4 epochs × 4 minibatches of 256", "net": "cnn", "n": 1024,
               "epochs": 4, "mb": 256},
}
PATHS = ("eager", "flat", "compile", "jax", "jax_unroll", "jax_im2col", "jax_im2col_unroll")
TORCH_PATHS = ("eager", "flat", "compile")
CNN_ONLY = ("jax_unroll", "jax_im2col", "jax_im2col_unroll")  # the MLP has no convolutions to rewrite
PATH_NAMES = {"eager": "torch eager (project `PPO`)", "flat": "torch flat buffer + fused clip/Adam",
              "compile": "torch.compile(loss)", "jax": "JAX jit(scan) + optax",
              "jax_unroll": "JAX jit(scan, unroll=True) + optax",
              "jax_im2col": "JAX im2col + matmul convs, jit(scan) + optax",
              "jax_im2col_unroll": "JAX im2col + matmul convs, jit(scan, unroll=True) + optax"}
FULL_COMMAND = ".venv/bin/python bench/learner_update.py"
SUBSET_RESULTS = common.OUT / "learner_update_subset.jsonl"  # --sizes/--paths runs: a subsection, not the table
NEW_N = {"even": 4160, "ragged": 4100}  # a round with more actors: 65 minibatches of 64; 64 of 64 or 65 rows


def weights_hash(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(arrays):
        h.update(k.encode())
        h.update(np.ascontiguousarray(arrays[k], dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


def max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max()) for k in a)


def permutations(n: int, epochs: int, seed: int = SEED) -> np.ndarray:
    """What ``PPO.update`` draws from ``np.random.default_rng(seed)``: one permutation per epoch."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(n) for _ in range(epochs)])


# -- torch side ----------------------------------------------------------------------------------


def torch_child(cfg: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.learner.networks import make_policy
    from minionsrl.learner.ppo import PPO, Batch, PPOParams, ppo_loss

    def problem(size: dict[str, Any]) -> tuple[Any, PPOParams, dict[str, torch.Tensor], Batch]:
        torch.manual_seed(SEED)
        if size["net"] == "mlp":
            arch = PolicyArch(11, 3, False, (64, 64))
        else:
            arch = PolicyArch(4 * 84 * 84, 6, True, (), "cnn", (4, 84, 84))
        net = make_policy(arch)
        gen = torch.Generator().manual_seed(SEED + 1)
        n = size["n"]
        with torch.no_grad():  # actions from the initial policy, so the first ratios are 1 (as after a rollout)
            if size["net"] == "mlp":
                obs = torch.randn(n, 11, generator=gen)
                actions = net.actor(obs) + net.log_std.exp() * torch.randn(n, 3, generator=gen)
            else:
                obs = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, generator=gen)
                probs = torch.softmax(net.actor(net._trunk(obs)), -1)
                actions = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            logp, _, values = net.evaluate(obs, actions)
        adv = torch.randn(n, generator=gen)
        batch = Batch(obs, actions, logp, adv, values + adv, values)
        params = PPOParams(learning_rate=HP["lr"], update_epochs=size["epochs"], minibatch_size=size["mb"],
                           clip_coef=HP["clip"], ent_coef=HP["ent_coef"], vf_coef=HP["vf_coef"],
                           max_grad_norm=HP["max_grad_norm"])
        init = {k: v.detach().clone() for k, v in net.state_dict().items()}
        return arch, params, init, batch

    def numpy_weights(net: Any) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}

    class FlatAdam:
        """Every parameter (and its gradient) a view of one flat buffer; clip + Adam as ~10 vector ops."""

        def __init__(self, net: Any, lr: float, eps: float, max_norm: float, betas=(0.9, 0.999)) -> None:
            ps = list(net.parameters())
            total = sum(p.numel() for p in ps)
            self.flat, self.grad = torch.empty(total), torch.zeros(total)
            self.m, self.v, self.buf = torch.zeros(total), torch.zeros(total), torch.empty(total)
            off = 0
            for p in ps:
                k = p.numel()
                self.flat[off:off + k].copy_(p.detach().reshape(-1))
                p.data = self.flat[off:off + k].view_as(p)
                p.grad = self.grad[off:off + k].view_as(p)
                off += k
            self.params, self.lr, self.eps, self.max_norm, self.betas, self.t = ps, lr, eps, max_norm, betas, 0

        def reset(self) -> None:
            self.grad.zero_()
            self.m.zero_()
            self.v.zero_()
            self.t = 0

        def zero_grad(self) -> None:
            self.grad.zero_()  # keep .grad defined: backward then accumulates in place into the views

        @torch.no_grad()
        def clip_and_step(self) -> None:
            b1, b2 = self.betas
            norm = torch.linalg.vector_norm(self.grad)
            self.grad.mul_((self.max_norm / (norm + 1e-6)).clamp_(max=1.0))  # as clip_grad_norm_
            self.t += 1
            self.m.lerp_(self.grad, 1 - b1)
            self.v.mul_(b2).addcmul_(self.grad, self.grad, value=1 - b2)
            torch.sqrt(self.v, out=self.buf)
            self.buf.div_(math.sqrt(1 - b2 ** self.t)).add_(self.eps)
            self.flat.addcdiv_(self.m, self.buf, value=-self.lr / (1 - b1 ** self.t))

    def flat_update(net: Any, opt: FlatAdam, batch: Batch, p: PPOParams, rng: np.random.Generator) -> dict:
        """``PPO.update``'s loop (same loss, statistics and minibatches) with the flat optimiser."""
        size = len(batch)
        chunks = max(1, round(size / p.minibatch_size))  # the project's default split (PPO.update)
        clipfracs = []
        approx_kl = old_approx_kl = pg_loss = v_loss = entropy = torch.zeros(())
        for _ in range(p.update_epochs):
            for idx in np.array_split(rng.permutation(size), chunks):
                out = ppo_loss(net, batch.select(torch.from_numpy(idx)), p)
                with torch.no_grad():
                    old_approx_kl = (-out.logratio).mean()
                    approx_kl = ((out.ratio - 1) - out.logratio).mean()
                    clipfracs.append(((out.ratio - 1.0).abs() > p.clip_coef).float().mean())
                pg_loss, v_loss, entropy = out.pg_loss, out.v_loss, out.entropy
                opt.zero_grad()
                out.loss.backward()
                opt.clip_and_step()
        return {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": entropy.item(),
                "old_approx_kl": old_approx_kl.item(), "approx_kl": approx_kl.item(),
                "clipfrac": torch.stack(clipfracs).mean().item()}

    compiled_loss = torch.compile(ppo_loss, dynamic=False)
    out: dict[str, Any] = {"torch": torch.__version__, "threads": torch.get_num_threads(),
                           "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR"), "sizes": {}}
    WORK.mkdir(parents=True, exist_ok=True)

    def one_size(key: str) -> dict[str, Any]:
        size = SIZES[key]
        arch, params, init, batch = problem(size)
        torch._dynamo.reset()  # each size's compile is timed on its own
        nets = {name: make_policy(arch) for name in cfg["paths"]}
        for net in nets.values():
            net.load_state_dict(init)
        flat_opt = FlatAdam(nets["flat"], HP["lr"], HP["eps"], HP["max_grad_norm"]) if "flat" in nets else None

        def run(name: str, b: Batch = batch) -> tuple[float, dict[str, np.ndarray], dict]:
            net = nets[name]
            net.load_state_dict(init)  # copies in place: flat views and compiled guards stay valid
            rng = np.random.default_rng(SEED)
            if name == "flat":
                flat_opt.reset()
                t0 = time.perf_counter()
                stats = flat_update(net, flat_opt, b, params, rng)
            else:
                ppo = PPO(net, params, loss=compiled_loss if name == "compile" else ppo_loss)
                t0 = time.perf_counter()
                stats = ppo.update(b, rng)
            return time.perf_counter() - t0, numpy_weights(net), stats

        res: dict[str, Any] = {"first_s": {}, "times_s": {n: [] for n in nets}, "hashes": {n: [] for n in nets},
                               "steps": size["epochs"] * (size["n"] // size["mb"])}
        finals: dict[str, dict[str, np.ndarray]] = {}
        for name in nets:  # first call: warm-up, and the compile for torch.compile
            dt, w, stats = run(name)
            res["first_s"][name] = dt
            finals[name] = w
            res.setdefault("stats", {})[name] = stats
        if flat_opt is not None:  # the gradients really stayed views of the flat buffer
            lo, hi = flat_opt.grad.data_ptr(), flat_opt.grad.data_ptr() + 4 * flat_opt.grad.numel()
            res["flat_grads_are_views"] = all(lo <= p.grad.data_ptr() < hi for p in flat_opt.params)
        names = list(nets)
        for rep in range(cfg["repeats"][key]):
            for name in names[rep % len(names):] + names[:rep % len(names)]:  # rotate the order
                dt, w, _ = run(name)
                res["times_s"][name].append(dt)
                res["hashes"][name].append(weights_hash(w))
        res["first_hash"] = {n: weights_hash(w) for n, w in finals.items()}
        res["max_diff_vs_eager"] = {n: max_diff(w, finals["eager"]) for n, w in finals.items()}
        npz = {f"init/{k}": v.numpy() for k, v in init.items()}
        npz.update({f"final/{k}": v for k, v in finals["eager"].items()})
        npz.update({"obs": batch.obs.numpy(), "actions": batch.actions.numpy(), "logprobs": batch.logprobs.numpy(),
                    "advantages": batch.advantages.numpy(), "returns": batch.returns.numpy(),
                    "values": batch.values.numpy()})

        if cfg.get("extras") and key == "mlp-4k":
            # torch.compile on other round sizes: only a new *minibatch* shape recompiles
            if "compile" in nets:
                for tag, n_new in NEW_N.items():
                    b2 = batch.select(torch.arange(n_new) % size["n"])
                    first, _, _ = run("compile", b2)
                    again, _, _ = run("compile", b2)
                    res[f"compile_new_n_{tag}"] = {"n": n_new, "first_s": first, "again_s": again}
            # Hessian-vector products by double backward (the curvature detector's method), full batch
            hvp_res: dict[str, Any] = {}
            for name in nets:
                net = nets[name]
                net.load_state_dict(init)
                ws = list(net.parameters())
                vs = [torch.randn(w.shape, generator=torch.Generator().manual_seed(7 + i)) for i, w in enumerate(ws)]
                loss_fn = compiled_loss if name == "compile" else ppo_loss
                try:
                    grad_s, setup_s, prod_s = [], [], []
                    hv = None
                    for _ in range(cfg["hvp_repeats"]):
                        t0 = time.perf_counter()
                        g = torch.autograd.grad(loss_fn(net, batch, params).loss, ws)
                        t1 = time.perf_counter()
                        g = torch.autograd.grad(loss_fn(net, batch, params).loss, ws, create_graph=True)
                        t2 = time.perf_counter()
                        hv = torch.autograd.grad(g, ws, grad_outputs=vs, retain_graph=True)
                        t3 = time.perf_counter()
                        grad_s.append(t1 - t0)
                        setup_s.append(t2 - t1)
                        prod_s.append(t3 - t2)
                    hvp_res[name] = {"ok": True, "grad_s": statistics.median(grad_s),
                                     "setup_s": statistics.median(setup_s), "product_s": statistics.median(prod_s)}
                    if name == "eager":
                        names_ = [k for k, _ in net.named_parameters()]
                        npz.update({f"hvp_v/{k}": v.numpy() for k, v in zip(names_, vs, strict=True)})
                        npz.update({f"hvp/{k}": h.numpy() for k, h in zip(names_, hv, strict=True)})
                except Exception as exc:  # reported in the table, not hidden
                    hvp_res[name] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
                    if name == "compile":  # the error names donated buffers: without them, the next obstacle
                        torch._functorch.config.donated_buffer = False
                        torch._dynamo.reset()
                        try:
                            g = torch.autograd.grad(compiled_loss(net, batch, params).loss, ws, create_graph=True)
                            torch.autograd.grad(g, ws, grad_outputs=vs)
                            hvp_res[name]["without_donated_buffers"] = "works"
                        except Exception as exc2:
                            hvp_res[name]["without_donated_buffers"] = (f"{type(exc2).__name__}: "
                                                                        f"{str(exc2).splitlines()[0][:200]}")
                        torch._functorch.config.donated_buffer = True
            res["hvp"] = hvp_res
        if cfg.get("save", True):  # the problem and eager's results, for the JAX child
            np.savez(WORK / f"{key}.npz", **npz)
        common.log(f"torch {key}: " + ", ".join(f"{n} {statistics.median(res['times_s'][n]):.3f}s"
                                                for n in nets if res["times_s"][n]))
        return res

    for key in cfg["sizes"]:
        out["sizes"][key] = one_size(key)
    return out


# -- JAX side ------------------------------------------------------------------------------------


def jax_child(cfg: dict[str, Any]) -> dict[str, Any]:
    t_import = time.perf_counter()
    import jax

    if cfg.get("cache_dir"):
        jax.config.update("jax_compilation_cache_dir", cfg["cache_dir"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    import jax.numpy as jnp
    import optax
    from jax import lax

    t_import = time.perf_counter() - t_import
    log2pi = math.log(2 * math.pi)
    convs = cfg["convs"]
    out: dict[str, Any] = {"jax": jax.__version__, "optax": optax.__version__, "devices": str(jax.devices()),
                           "xla_flags": os.environ.get("XLA_FLAGS"), "import_s": t_import,
                           "cache_dir": jax.config.jax_compilation_cache_dir, "sizes": {}}

    def to_jax(sd: dict[str, np.ndarray], net: str) -> dict[str, Any]:
        """Torch state dict (names and layouts) to the JAX pytree: x @ W, NHWC/HWIO convolutions."""
        if net == "mlp":
            tower = lambda t: [(sd[f"{t}.{i}.weight"].T, sd[f"{t}.{i}.bias"]) for i in (0, 2, 4)]  # noqa: E731
            return {"actor": tower("actor"), "critic": tower("critic"), "log_std": sd["log_std"]}
        dense = sd["dense.weight"]
        c = convs[-1][0]
        side = math.isqrt(dense.shape[1] // c)
        dense = dense.reshape(-1, c, side, side).transpose(0, 2, 3, 1).reshape(dense.shape[0], -1).T
        return {"conv": [(sd[f"conv.{i * 2}.weight"].transpose(2, 3, 1, 0), sd[f"conv.{i * 2}.bias"])
                         for i in range(len(convs))],
                "dense": (dense, sd["dense.bias"]), "actor": (sd["actor.weight"].T, sd["actor.bias"]),
                "critic": (sd["critic.weight"].T, sd["critic.bias"])}

    def from_jax(p: Any, net: str, like: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        p = jax.tree.map(np.asarray, p)
        if net == "mlp":
            sd = {"log_std": p["log_std"]}
            for t in ("actor", "critic"):
                for j, i in enumerate((0, 2, 4)):
                    sd[f"{t}.{i}.weight"], sd[f"{t}.{i}.bias"] = p[t][j][0].T, p[t][j][1]
            return sd
        sd = {}
        for i, (w, b) in enumerate(p["conv"]):
            sd[f"conv.{i * 2}.weight"], sd[f"conv.{i * 2}.bias"] = w.transpose(3, 2, 0, 1), b
        c = convs[-1][0]
        shape = like["dense.weight"].shape
        side = math.isqrt(shape[1] // c)
        sd["dense.weight"] = p["dense"][0].T.reshape(shape[0], side, side, c).transpose(0, 3, 1, 2).reshape(shape)
        sd["dense.bias"] = p["dense"][1]
        for h in ("actor", "critic"):
            sd[f"{h}.weight"], sd[f"{h}.bias"] = p[h][0].T, p[h][1]
        return sd

    def conv_im2col(x, w, stride: int):
        """A valid NHWC convolution as im2col + one matmul, as the NumPy policy's ``_conv_nhwc``: the k·k
        strided slices stacked in (kh, kw, C) order, then ``cols @ w`` with the HWIO kernel flattened."""
        k, _, c, n_out = w.shape
        b, h, wd, _ = x.shape
        ho, wo = (h - k) // stride + 1, (wd - k) // stride + 1
        cols = jnp.stack([x[:, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride, :]
                          for i in range(k) for j in range(k)], axis=3)  # (b, ho, wo, k·k, C)
        cols = cols.reshape(b * ho * wo, k * k * c)
        if cols.dtype != jnp.float32:  # the frames: gathered as uint8 (4× less to move), scaled after
            cols = cols.astype(jnp.float32) / 255.0
        return (cols @ w.reshape(k * k * c, n_out)).reshape(b, ho, wo, n_out)

    def make_update(net: str, mb_size: int, unroll: bool, im2col: bool = False):
        def evaluate(p, obs, actions):
            if net == "mlp":
                def tower(layers, x):
                    for w, b in layers[:-1]:
                        x = jnp.tanh(x @ w + b)
                    return x @ layers[-1][0] + layers[-1][1]
                head = tower(p["actor"], obs)
                log_std = jnp.broadcast_to(p["log_std"], head.shape)
                z = (actions - head) * jnp.exp(-log_std)
                logp = (-0.5 * z ** 2 - log_std - 0.5 * log2pi).sum(-1)
                ent = (0.5 + 0.5 * log2pi + log_std).sum(-1)
                return logp, ent, tower(p["critic"], obs)[:, 0]
            x = obs if im2col else obs.astype(jnp.float32) / 255.0
            for (w, b), (_, _, stride) in zip(p["conv"], convs, strict=True):
                if im2col:
                    x = jax.nn.relu(conv_im2col(x, w, stride) + b)
                else:
                    x = jax.nn.relu(lax.conv_general_dilated(x, w, (stride, stride), "VALID",
                                                             dimension_numbers=("NHWC", "HWIO", "NHWC")) + b)
            h = jax.nn.relu(x.reshape(x.shape[0], -1) @ p["dense"][0] + p["dense"][1])
            logits = jax.nn.log_softmax(h @ p["actor"][0] + p["actor"][1])
            logp = jnp.take_along_axis(logits, actions[:, None].astype(jnp.int32), -1)[:, 0]
            ent = -(jnp.exp(logits) * logits).sum(-1)
            return logp, ent, (h @ p["critic"][0] + p["critic"][1])[:, 0]

        def loss_fn(p, mb):
            newlogp, ent, newv = evaluate(p, mb["obs"], mb["actions"])
            logratio = newlogp - mb["logprobs"]
            ratio = jnp.exp(logratio)
            adv = mb["advantages"]
            adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)  # torch's std is unbiased
            c = HP["clip"]
            pg = jnp.maximum(-adv * ratio, -adv * jnp.clip(ratio, 1 - c, 1 + c)).mean()
            v_clipped = mb["values"] + jnp.clip(newv - mb["values"], -c, c)
            v_loss = 0.5 * jnp.maximum((newv - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2).mean()
            ent_m = ent.mean()
            loss = pg - HP["ent_coef"] * ent_m + HP["vf_coef"] * v_loss
            return loss, (pg, v_loss, ent_m, logratio, ratio)

        tx = optax.chain(optax.clip_by_global_norm(HP["max_grad_norm"]), optax.adam(HP["lr"], eps=HP["eps"]))

        def sgd_step(p, opt_state, mb):
            (_, (pg, v_loss, ent, logratio, ratio)), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, mb)
            updates, opt_state = tx.update(grads, opt_state, p)
            stats = {"policy_loss": pg, "value_loss": v_loss, "entropy": ent,
                     "old_approx_kl": (-logratio).mean(), "approx_kl": ((ratio - 1) - logratio).mean(),
                     "clipfrac": (jnp.abs(ratio - 1) > HP["clip"]).mean()}
            return optax.apply_updates(p, updates), opt_state, stats

        def update(p, opt_state, batch, perms):
            def step(carry, idx):
                p, opt_state, stats = sgd_step(*carry, jax.tree.map(lambda x: x[idx], batch))
                return (p, opt_state), stats

            def epoch(carry, perm):
                return lax.scan(step, carry, perm.reshape(-1, mb_size), unroll=unroll)

            (p, opt_state), stats = lax.scan(epoch, (p, opt_state), perms, unroll=unroll)
            last = {k: v[-1, -1] for k, v in stats.items()}
            last["clipfrac"] = stats["clipfrac"].mean()
            return p, opt_state, last

        return jax.jit(update), tx, loss_fn, jax.jit(sgd_step)

    def one_size(key: str, variant: str) -> dict[str, Any]:
        size = SIZES[key]
        data = np.load(WORK / f"{key}.npz")
        init_sd = {k[5:]: data[k] for k in data.files if k.startswith("init/")}
        final_sd = {k[6:]: data[k] for k in data.files if k.startswith("final/")}
        net = size["net"]
        p0 = jax.tree.map(jnp.asarray, to_jax(init_sd, net))
        obs = data["obs"] if net == "mlp" else data["obs"].transpose(0, 2, 3, 1)  # frames stored NHWC
        batch = {"obs": jnp.asarray(obs), "actions": jnp.asarray(data["actions"]),
                 **{k: jnp.asarray(data[k]) for k in ("logprobs", "advantages", "returns", "values")}}
        update, tx, loss_fn, sgd_step = make_update(net, size["mb"], unroll=variant.endswith("_unroll"),
                                                    im2col=variant.startswith("jax_im2col"))

        def run(b: dict, n: int) -> tuple[float, Any, dict]:
            opt_state = tx.init(p0)
            t0 = time.perf_counter()
            perms = permutations(n, size["epochs"]).astype(np.int32)
            p, _, stats = update(p0, opt_state, b, perms)
            stats = {k: float(v) for k, v in stats.items()}
            jax.block_until_ready(p)
            return time.perf_counter() - t0, p, stats

        res: dict[str, Any] = {"times_s": [], "hashes": []}
        if cfg.get("aot"):  # split tracing+lowering from XLA compilation (persistent-cache check)
            perms = permutations(size["n"], size["epochs"]).astype(np.int32)
            res["aot"] = {}
            for tag, n in (("n", size["n"]), ("new_n", NEW_N["even"])):
                b = batch if n == size["n"] else jax.tree.map(lambda x, n=n: x[np.arange(n) % size["n"]], batch)
                pr = permutations(n, size["epochs"]).astype(np.int32) if n != size["n"] else perms
                t0 = time.perf_counter()
                lowered = update.lower(p0, tx.init(p0), b, pr)
                t1 = time.perf_counter()
                compiled = lowered.compile()
                t2 = time.perf_counter()
                p, _, _ = compiled(p0, tx.init(p0), b, pr)
                jax.block_until_ready(p)
                t3 = time.perf_counter()
                res["aot"][tag] = {"n": n, "lower_s": t1 - t0, "compile_s": t2 - t1, "run_s": t3 - t2}
                if tag == "n":
                    res["aot_hash"] = weights_hash(from_jax(p, net, init_sd))
            if cfg["cache_dir"]:
                files = [f for f in Path(cfg["cache_dir"]).rglob("*") if f.is_file()]
                res["cache_files"], res["cache_bytes"] = len(files), sum(f.stat().st_size for f in files)
            return res
        first, p, stats = run(batch, size["n"])
        res["first_s"], res["stats"] = first, stats
        final = from_jax(p, net, init_sd)
        res["first_hash"] = weights_hash(final)
        res["max_diff_vs_eager"] = max_diff(final, final_sd)
        res["max_abs_weight"] = max(float(np.abs(v).max()) for v in final_sd.values())
        for _ in range(cfg["repeats"][key]):
            if sum(res["times_s"]) > cfg["path_budget_s"]:  # a very slow path: fewer repetitions
                break
            dt, p, _ = run(batch, size["n"])
            res["times_s"].append(dt)
            res["hashes"].append(weights_hash(from_jax(p, net, init_sd)))
        if cfg.get("extras") and key == "mlp-4k" and variant == "jax":
            n_new = NEW_N["even"]
            b2 = jax.tree.map(lambda x: x[np.arange(n_new) % size["n"]], batch)
            first_new, _, _ = run(b2, n_new)
            again_new, _, _ = run(b2, n_new)
            back, _, _ = run(batch, size["n"])
            res["new_n"] = {"n": n_new, "first_s": first_new, "again_s": again_new, "back_to_n_s": back}
            # HVP: forward-over-reverse, jax.jvp of jax.grad, on the full batch, same v as torch
            v = jax.tree.map(jnp.asarray, to_jax({k[6:]: data[k] for k in data.files if k.startswith("hvp_v/")}, net))

            def full_loss(q):
                return loss_fn(q, batch)[0]

            hvp = jax.jit(lambda q, t: jax.jvp(jax.grad(full_loss), (q,), (t,))[1])
            grad = jax.jit(jax.grad(full_loss))
            t0 = time.perf_counter()
            hv = jax.block_until_ready(hvp(p0, v))
            hvp_first = time.perf_counter() - t0
            jax.block_until_ready(grad(p0))
            hvp_s, grad_s = [], []
            for _ in range(cfg["hvp_repeats"]):
                t0 = time.perf_counter()
                jax.block_until_ready(hvp(p0, v))
                t1 = time.perf_counter()
                jax.block_until_ready(grad(p0))
                hvp_s.append(t1 - t0)
                grad_s.append(time.perf_counter() - t1)
            torch_hv = {k[4:]: data[k] for k in data.files if k.startswith("hvp/")}
            hv_sd = from_jax(hv, net, init_sd)
            res["hvp"] = {"first_s": hvp_first, "hvp_s": statistics.median(hvp_s), "grad_s": statistics.median(grad_s),
                          "max_diff_vs_torch": max_diff(hv_sd, torch_hv),
                          "max_abs_torch": max(float(np.abs(x).max()) for x in torch_hv.values())}
        if cfg.get("python_loop") and net == "cnn":
            # the same minibatches through one jitted SGD step called from Python: the per-step cost with no
            # loop inside the XLA program (tells a slow step from a slow loop body)
            perms = permutations(size["n"], size["epochs"]).astype(np.int32)
            idxs = [jnp.asarray(i) for i in perms.reshape(-1, size["mb"])]
            loop_s, loop_first, p = [], 0.0, p0
            for rep in range(1 + cfg["repeats"][key]):
                p, opt_state = p0, tx.init(p0)
                t0 = time.perf_counter()
                for idx in idxs:
                    p, opt_state, _ = sgd_step(p, opt_state, jax.tree.map(lambda x, idx=idx: x[idx], batch))
                jax.block_until_ready(p)
                if rep == 0:
                    loop_first = time.perf_counter() - t0
                else:
                    loop_s.append(time.perf_counter() - t0)
            res["python_loop"] = {"first_s": loop_first, "times_s": loop_s,
                                  "max_diff_vs_eager": max_diff(from_jax(p, net, init_sd), final_sd)}
        print(f"[{variant}] {key}: first {first:.2f}s, median {statistics.median(res['times_s']):.3f}s",
              file=sys.stderr, flush=True)
        return res

    for key in cfg["sizes"]:
        if cfg.get("aot"):
            variants = ["jax"]
        else:
            variants = [v for v in cfg.get("paths", PATHS) if v.startswith("jax")
                        and (SIZES[key]["net"] == "cnn" or v not in CNN_ONLY)]
        out["sizes"][key] = {v: one_size(key, v) for v in variants}
    return out


# -- start-up costs --------------------------------------------------------------------------------

_STARTUP_TORCH = r"""
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.set_num_threads(1)
w = [torch.nn.Parameter(torch.zeros(64, 64)), torch.nn.Parameter(torch.zeros(64))]
t2 = time.perf_counter()
opt = torch.optim.Adam(w, lr=3e-4, eps=1e-5, fused=True)
t3 = time.perf_counter()
torch.optim.Adam(w, lr=3e-4, eps=1e-5, fused=True)
t4 = time.perf_counter()
for p in w:
    p.grad = torch.ones_like(p)
opt.step()
t5 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "adam_first_s": t3 - t2, "adam_second_s": t4 - t3, "first_step_s": t5 - t4}))
"""

_STARTUP_JAX = r"""
import json, time
t0 = time.perf_counter()
import jax
t1 = time.perf_counter()
import jax.numpy as jnp
jnp.zeros(1).block_until_ready()
t2 = time.perf_counter()
import optax
t3 = time.perf_counter()
tx = optax.adam(3e-4, eps=1e-5)
s = tx.init({"w": jnp.zeros((64, 64))})
jax.block_until_ready(s)
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_op_s": t2 - t1, "optax_import_s": t3 - t2, "adam_init_s": t4 - t3}))
"""


def startup(repeats: int) -> dict[str, Any]:
    """Fresh processes, interleaved: bare interpreter, then importing each framework (wall and in-process)."""
    env_jax = {**os.environ, "XLA_FLAGS": XLA_FLAGS, "JAX_PLATFORMS": "cpu"}
    progs = {"python_torch_venv": ([common.PYTHON, "-c", "pass"], None),
             "python_jax_venv": ([str(JAX_PYTHON), "-c", "pass"], env_jax),
             "torch": ([common.PYTHON, "-c", _STARTUP_TORCH], None),
             "jax": ([str(JAX_PYTHON), "-c", _STARTUP_JAX], env_jax)}
    res: dict[str, list[dict[str, float]]] = {k: [] for k in progs}
    for _ in range(repeats):
        for name, (cmd, env) in progs.items():
            t0 = time.perf_counter()
            proc = subprocess.run([*PIN, *cmd], capture_output=True, text=True, check=True, env=env)
            row = {"wall_s": time.perf_counter() - t0}
            if proc.stdout.strip():
                row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
            res[name].append(row)
    return {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for name, rows in res.items()}


# -- installed size --------------------------------------------------------------------------------

_SIZE = r"""
import importlib.metadata as m, json, sys
out = {}
for dist in sys.argv[1:]:
    try:
        d = m.distribution(dist)
    except m.PackageNotFoundError:
        continue
    out[dist] = sum(f.locate().stat().st_size for f in (d.files or []) if f.locate().is_file())
print(json.dumps(out))
"""
TORCH_DISTS = ["torch", "sympy", "mpmath", "networkx", "jinja2", "MarkupSafe", "fsspec", "filelock",
               "typing_extensions"]
JAX_DISTS = ["jax", "jaxlib", "ml_dtypes", "opt_einsum", "scipy", "optax", "absl-py"]


def installed_sizes() -> dict[str, Any]:
    def dists(python: Path | str, names: list[str]) -> dict[str, int]:
        proc = subprocess.run([str(python), "-c", _SIZE, *names], capture_output=True, text=True, check=True)
        return json.loads(proc.stdout)

    def du(path: Path) -> int:
        proc = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True)
        return int(proc.stdout.split()[0]) * 1024

    site_torch = next((common.ROOT / ".venv" / "lib").glob("python3*/site-packages"))
    site_jax = next((JAX_VENV / "lib").glob("python3*/site-packages"))
    return {"du": {"torch": du(site_torch / "torch"), "jax": du(site_jax / "jax"), "jaxlib": du(site_jax / "jaxlib")},
            "torch_dists": dists(common.PYTHON, TORCH_DISTS), "jax_dists": dists(JAX_PYTHON, JAX_DISTS),
            "jax_site_packages": du(site_jax)}


# -- orchestration ---------------------------------------------------------------------------------


def ensure_jax_venv() -> dict[str, Any]:
    """Create bench/.venvs/jax (if missing) and pip-install the pinned jax, jaxlib and optax there."""
    t0 = time.perf_counter()
    created = not JAX_PYTHON.exists()
    if created:
        subprocess.run([sys.executable, "-m", "venv", str(JAX_VENV)], check=True)
    subprocess.run([str(JAX_PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    f"jax=={JAX_VERSION}", f"jaxlib=={JAX_VERSION}", f"optax=={OPTAX_VERSION}"], check=True)
    return {"created": created, "seconds": time.perf_counter() - t0}


def child(kind: str, cfg: dict[str, Any], env: dict[str, str] | None = None, timeout: float = 900) -> dict[str, Any]:
    python = JAX_PYTHON if kind == "jax" else Path(common.PYTHON)
    t0 = time.perf_counter()
    proc = subprocess.run([*PIN, str(python), str(Path(__file__).resolve()), "--child", kind, json.dumps(cfg)],
                          cwd=common.ROOT, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} child failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = time.perf_counter() - t0
    return result


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from minionsrl.function.numpy_policy import NATURE_CONVS

    record: dict[str, Any] = {"started": time.time(), "args": vars(args), "command": common.reproduce_command()}
    record["jax_venv"] = ensure_jax_venv()
    common.log(f"JAX venv ready ({record['jax_venv']['seconds']:.1f} s)")
    repeats = {k: args.cnn_repeats if SIZES[k]["net"] == "cnn" else args.repeats for k in args.sizes}
    record["startup"] = startup(args.startup_repeats)
    common.log("start-up measured")
    inductor = WORK / "inductor-cache"
    shutil.rmtree(inductor, ignore_errors=True)
    env_torch = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(inductor)}
    base = {"sizes": args.sizes, "repeats": repeats, "hvp_repeats": args.hvp_repeats, "convs": NATURE_CONVS,
            "path_budget_s": args.path_budget_s}
    record["torch"] = child("torch", {**base, "paths": ["eager", "flat", "compile"], "extras": True}, env_torch)
    common.log("torch done")
    # a fresh torch process: run-to-run determinism across processes, torch.compile with warm on-disk caches
    record["torch_again"] = child("torch", {**base, "sizes": ["mlp-4k"], "repeats": {"mlp-4k": 1},
                                            "paths": ["eager", "flat", "compile"], "extras": False, "save": False},
                                 env_torch)
    env_jax = {**os.environ, "XLA_FLAGS": XLA_FLAGS, "JAX_PLATFORMS": "cpu"}
    env_jax.pop("JAX_COMPILATION_CACHE_DIR", None)
    record["jax"] = child("jax", {**base, "extras": True}, env_jax)
    common.log("jax done")
    cache = WORK / "jax-cache"
    shutil.rmtree(cache, ignore_errors=True)
    for tag in ("jax_cache_cold", "jax_cache_warm"):  # two fresh processes sharing one persistent cache
        record[tag] = child("jax", {**base, "sizes": ["mlp-4k"], "aot": True, "cache_dir": str(cache)}, env_jax)
    record["jax_nocache_aot"] = child("jax", {**base, "sizes": ["mlp-4k"], "aot": True, "cache_dir": None}, env_jax)
    common.log("jax persistent cache measured")
    record["commit"] = common.git_commit()  # --reuse renders later, maybe on another commit and load
    record["loadavg_end"] = common.load_average()
    record["sizes_bytes"] = installed_sizes()
    record["ended"] = time.time()
    record["jax_python"] = subprocess.run([str(JAX_PYTHON), "-c", "import platform; print(platform.python_version())"],
                                          capture_output=True, text=True, check=True).stdout.strip()
    common.append_jsonl(RESULTS, record)
    return record


def measure_subset(args: argparse.Namespace, paths: list[str]) -> dict[str, Any]:
    """Only ``args.sizes`` and ``paths``: the update's timings and weights, none of the extras."""
    from minionsrl.function.numpy_policy import NATURE_CONVS

    record: dict[str, Any] = {"started": time.time(), "args": vars(args), "paths": paths,
                              "command": common.reproduce_command()}
    jax_paths = [p for p in paths if p.startswith("jax")]
    if jax_paths:
        record["jax_venv"] = ensure_jax_venv()
    repeats = {k: args.cnn_repeats if SIZES[k]["net"] == "cnn" else args.repeats for k in args.sizes}
    base = {"sizes": args.sizes, "repeats": repeats, "convs": NATURE_CONVS, "path_budget_s": args.path_budget_s}
    env_torch = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                 "TORCHINDUCTOR_CACHE_DIR": str(WORK / "inductor-cache-subset")}
    record["torch"] = child("torch", {**base, "paths": [p for p in paths if p in TORCH_PATHS], "extras": False},
                            env_torch)
    common.log("torch done")
    if jax_paths:
        env_jax = {**os.environ, "XLA_FLAGS": XLA_FLAGS, "JAX_PLATFORMS": "cpu"}
        env_jax.pop("JAX_COMPILATION_CACHE_DIR", None)
        record["jax"] = child("jax", {**base, "paths": jax_paths, "python_loop": args.python_loop}, env_jax,
                              timeout=3600)
        version = [str(JAX_PYTHON), "-c", "import platform; print(platform.python_version())"]
        record["jax_python"] = subprocess.run(version, capture_output=True, text=True, check=True).stdout.strip()
        common.log("jax done")
    record["commit"] = common.git_commit()
    record["loadavg_end"] = common.load_average()
    record["ended"] = time.time()
    common.append_jsonl(SUBSET_RESULTS, record)
    return record


def path_result(r: dict[str, Any], key: str, path: str) -> dict[str, Any] | None:
    """One path's figures for one size, torch's and JAX's alike: times, first call, hashes, difference to eager."""
    if path.startswith("jax"):
        js = r.get("jax", {}).get("sizes", {}).get(key, {}).get(path)
        if js is None:
            return None
        return {"times": js["times_s"], "first": js["first_s"], "hashes": [js["first_hash"], *js["hashes"]],
                "diff": js["max_diff_vs_eager"]}
    ts = r["torch"]["sizes"][key]
    if path not in ts["times_s"]:
        return None
    return {"times": ts["times_s"][path], "first": ts["first_s"][path],
            "hashes": [ts["first_hash"][path], *ts["hashes"][path]], "diff": ts["max_diff_vs_eager"][path]}


def render(r: dict[str, Any]) -> str:
    med = statistics.median
    t = r["torch"]["sizes"]
    rows = []
    speed: dict[str, dict[str, float]] = {}
    for key in r["args"]["sizes"]:
        eager = med(t[key]["times_s"]["eager"])
        steps = t[key]["steps"]
        speed[key] = {}
        for path in PATHS:
            pr = path_result(r, key, path)
            if pr is None:
                continue
            m = med(pr["times"])
            speed[key][path] = eager / m
            same = len(set(pr["hashes"])) == 1
            rows.append([SIZES[key]["label"] if path == "eager" else "", PATH_NAMES[path], m, m / steps * 1e3,
                         pr["first"], pr["first"] - m, m / eager, len(pr["times"]),
                         f"yes ({len(pr['hashes'])} runs)" if same else "**no**",
                         "—" if path == "eager" else f"{pr['diff']:.1e}"])
    table = common.markdown_table(
        ["size", "path", "s / update (median)", "ms / SGD step", "first call s", "first − median s", "× eager time",
         "timed runs", "same seed → same weights", "max \\|w − w_eager\\|"], rows, [0, 0, 3, 2, 2, 2, 2, 0, 0, 0])

    ta, ja = t["mlp-4k"], r["jax"]["sizes"]["mlp-4k"]["jax"]
    again = r["torch_again"]["sizes"]["mlp-4k"]
    cross_torch = {p: again["first_hash"][p] == ta["first_hash"][p] for p in ("eager", "flat", "compile")}
    cold, warm, noc = (r[k]["sizes"]["mlp-4k"]["jax"] for k in ("jax_cache_cold", "jax_cache_warm", "jax_nocache_aot"))
    cross_jax = len({ja["first_hash"], cold["aot_hash"], warm["aot_hash"], noc["aot_hash"]}) == 1
    hv_t, hv_j = ta["hvp"], ja["hvp"]
    su, sz = r["startup"], r["sizes_bytes"]
    mib = 1 / 2 ** 20
    torch_total = sum(sz["torch_dists"].values())
    torch_deps = ", ".join(d for d in sz["torch_dists"] if d != "torch")
    jax_total = sum(sz["jax_dists"].values())
    cnew = {k: ta[f"compile_new_n_{k}"] for k in NEW_N}
    ch = hv_t["compile"]
    if ch["ok"]:
        compile_hvp = f"yes, {ch['product_s'] * 1e3:.1f} ms a product"
    else:
        compile_hvp = f"**no**: double backward raises `{ch['error'].split('.')[0]}`"
        if ch.get("without_donated_buffers"):
            compile_hvp += (f" and, with `torch._functorch.config.donated_buffer = False`, "
                            f"`{ch['without_donated_buffers']}`")
    facts = common.markdown_table(
        ["fact", "torch", "JAX"],
        [["start-up: `import` in a fresh process", f"`import torch` {su['torch']['import_s']:.2f} s",
          f"`import jax` {su['jax']['import_s']:.2f} s, first op (backend start) {su['jax']['first_op_s']:.2f} s, "
          f"`import optax` {su['jax']['optax_import_s']:.2f} s"],
         ["start-up: first optimiser", f"first `torch.optim.Adam(..., fused=True)` {su['torch']['adam_first_s']:.2f} s "
          f"(it imports torch's compiler stack; the second takes {su['torch']['adam_second_s'] * 1e3:.2f} ms), first "
          f"`step()` {su['torch']['first_step_s'] * 1e3:.1f} ms",
          f"`optax.adam(...).init` {su['jax']['adam_init_s']:.2f} s (includes compiling its ops)"],
         ["start-up: whole child process (the lines above; bare interpreter)",
          f"{su['torch']['wall_s']:.2f} s ({su['python_torch_venv']['wall_s']:.2f} s)",
          f"{su['jax']['wall_s']:.2f} s ({su['python_jax_venv']['wall_s']:.2f} s)"],
         ["same seed → same final weights in two fresh processes (size a)",
          ", ".join(f"{p} {'yes' if ok else '**no**'}" for p, ok in cross_torch.items()),
          "yes (4 processes, with and without the persistent cache)" if cross_jax else "**no**"],
         ["a round with another batch size n (size a; the project's n changes when the scaler changes the "
          "number of actors)",
          f"eager and flat: nothing to compile. torch.compile: n={cnew['even']['n']:,} (minibatches of 64 again) "
          f"first update {cnew['even']['first_s']:.2f} s vs {cnew['even']['again_s']:.2f} s after: no recompile; "
          f"n={cnew['ragged']['n']:,} (minibatches of 64 and 65 rows) {cnew['ragged']['first_s']:.2f} s vs "
          f"{cnew['ragged']['again_s']:.2f} s after: recompiles for the new minibatch shape",
          f"n={ja['new_n']['n']:,}: first update {ja['new_n']['first_s']:.2f} s vs {ja['new_n']['again_s']:.3f} s "
          f"after: every distinct n is a new program to compile; back to n=4,096: {ja['new_n']['back_to_n_s']:.3f} s "
          "(kept in memory). A ragged split (n=4,100) does not fit one `scan` at all: it needs padding and masks"],
         ["compile in a fresh process with a persistent cache (size a)",
          f"Inductor's on-disk caches (`TORCHINDUCTOR_CACHE_DIR`) warm: first update {again['first_s']['compile']:.2f}"
          f" s vs {ta['first_s']['compile']:.2f} s cold",
          f"`jax_compilation_cache_dir`: XLA compile of n=4,096 {cold['aot']['n']['compile_s']:.2f} s cold → "
          f"{warm['aot']['n']['compile_s']:.2f} s warm (no cache {noc['aot']['n']['compile_s']:.2f} s), of n=4,160 "
          f"{cold['aot']['new_n']['compile_s']:.2f} → {warm['aot']['new_n']['compile_s']:.2f} s; tracing + lowering "
          f"({warm['aot']['n']['lower_s']:.2f} s a shape) is not cached; {warm['cache_files']} cache files, "
          f"{warm['cache_bytes'] * mib:.1f} MiB"],
         ["Hessian-vector product (curvature detector), MLP, PPO loss on all 4,096 samples",
          f"double backward, eager: gradient with `create_graph` {hv_t['eager']['setup_s'] * 1e3:.1f} ms once, then "
          f"{hv_t['eager']['product_s'] * 1e3:.1f} ms a product (plain gradient {hv_t['eager']['grad_s'] * 1e3:.1f} "
          f"ms). Flat buffer: {'yes' if hv_t['flat']['ok'] else '**no**'}, {hv_t['flat']['product_s'] * 1e3:.1f} ms a "
          f"product. torch.compile: {compile_hvp}",
          f"`jit(jvp(grad))`: {hv_j['hvp_s'] * 1e3:.1f} ms a product, forward and gradient included (plain gradient "
          f"{hv_j['grad_s'] * 1e3:.1f} ms), compile {hv_j['first_s']:.2f} s; same product as torch's to "
          f"{hv_j['max_diff_vs_torch']:.1e} (entries up to {hv_j['max_abs_torch']:.1f})"],
         ["installed size (`du` of site-packages dirs; numpy, needed by both, not counted)",
          f"torch/ {sz['du']['torch'] * mib:,.0f} MiB; with its dependencies ({torch_deps}) "
          f"{torch_total * mib:,.0f} MiB",
          f"jax/ {sz['du']['jax'] * mib:,.0f} MiB + jaxlib/ {sz['du']['jaxlib'] * mib:,.0f} MiB; with "
          f"{', '.join(d for d in sz['jax_dists'] if d not in ('jax', 'jaxlib'))} {jax_total * mib:,.0f} MiB"]],
        0)

    jv = r["jax"]
    js_cnn = r["jax"]["sizes"].get("cnn-1k", {})
    cnn_note = ""
    if "jax" in js_cnn and "jax_unroll" in js_cnn:
        rolled, unrolled = med(js_cnn["jax"]["times_s"]), med(js_cnn["jax_unroll"]["times_s"])
        cnn_note = (f"The CNN under `lax.scan` is the outlier: {rolled:.0f} s an update against "
                    f"{unrolled:.1f} s for the same program with the scans unrolled (`unroll=True`, 16 steps inlined). "
                    "XLA:CPU runs convolutions (here, the strided ones' gradients) far slower inside a loop body than "
                    "outside it, a known, still open XLA:CPU problem (jax-ml/jax issue 12868); the unrolled row is the "
                    "workaround, and it still takes "
                    f"{unrolled / med(t['cnn-1k']['times_s']['eager']):.1f}× torch eager's time. The slow path was "
                    f"timed {len(js_cnn['jax']['times_s'])} time(s) after its first call (`--path-budget-s`).")
    provenance = common.provenance(r["started"], r["ended"])
    provenance = re.sub(r"Reproduce: `[^`]*`", f"Reproduce: `{r.get('command', FULL_COMMAND)}`", provenance)
    if r.get("commit"):
        provenance = provenance.replace(f"commit {common.git_commit()}", f"commit {r['commit']}")
    if r.get("loadavg_end"):
        provenance = re.sub(r"at the end [^(]*\(", f"at the end {r['loadavg_end']} (", provenance, count=1)
    verdict = "**Speed relative to torch eager** (eager's time / the path's): " + "; ".join(
        f"{key}: " + ", ".join(f"{p} {v:.2f}×" for p, v in sp.items()) for key, sp in speed.items()) + "."
    return f"""## Learner update: torch eager vs flat+fused vs torch.compile vs JAX scan

The cost of one PPO learner update (issue 11), four ways, each doing the same work: CleanRL's update (clipped
surrogate, clipped value loss, entropy bonus 0.01, advantages normalised per minibatch, global grad-norm clip 0.5,
Adam lr 3e-4 eps 1e-5), `update_epochs` epochs of shuffled minibatches, on a batch built from random tensors of
the right shapes (actions drawn from the initial policy, so the first ratios are 1). The MLP is `ActorCritic` at
Hopper sizes (11 observations, 3-D Gaussian with a state-independent log-std, 64-64 tanh actor and critic); the
CNN is `CNNActorCritic` (Nature CNN on 4×84×84 uint8 frames scaled by 1/255, 6 actions).

- **torch eager**: the project's `minionsrl.learner.ppo.PPO` (fused `torch.optim.Adam`, `clip_grad_norm_`) with
  `make_policy`'s networks, unchanged.
- **torch flat + fused**: the same networks, loss (`ppo_loss`) and loop, with every parameter and gradient a view
  of one flat buffer and the clip + Adam step written as ten vector ops over it.
- **torch.compile(loss)**: the project's `PPO` with `loss=torch.compile(ppo_loss, dynamic=False)` (forward and
  backward compiled by Inductor; optimiser as in eager). Its first call includes the compile.
- **JAX**: the whole update, epochs × minibatches, as one `jax.jit` program: `lax.scan` over epochs of `lax.scan`
  over minibatches (as PureJaxRL and CleanRL's JAX PPO do), optax `clip_by_global_norm` + `adam`; the CNN in NHWC
  (frames stored transposed once). Its first call includes tracing and XLA compilation. For the CNN also with
  both scans unrolled (see below).

All paths start from the same initial weights (torch's, converted) and draw the same minibatches (the
permutations `PPO.update` draws from `np.random.default_rng({SEED})`), so their final weights are compared with
eager's (last column; the weights are O(0.1–1), and the CNN's differences are float32 rounding grown over 16
steps). Each path ran once to warm up ("first call"), then {r['args']['repeats']} times (CNN:
{r['args']['cnn_repeats']}), the paths rotated; the table gives the median. Every process was pinned to one core
(`taskset -c 0`), torch with `set_num_threads(1)`, XLA with `XLA_FLAGS="{XLA_FLAGS}"`. JAX {jv['jax']} and optax
{jv['optax']} ran in the script's own virtual environment (`bench/.venvs/jax`, made and pinned by the script,
Python {r['jax_python']}); nothing of JAX is installed in the project's environment.

{table}

{verdict} {cnn_note}

Other facts, from the same run (start-up: median of {r['args']['startup_repeats']} fresh pinned processes each):

{facts}

The machine is shared with other developers' work (their test runs overlapped this one), so absolute times are
noisy (a negative "first − median" is that noise): compare the rows of one size side by side. Raw results:
`bench/out/learner_update.jsonl`.

{provenance}
- JAX side: jax {jv['jax']}, jaxlib {jv['jax']}, optax {jv['optax']}, devices {jv['devices']}.
"""


def render_subset(r: dict[str, Any], full: dict[str, Any] | None = None) -> str:
    """The subsection of a ``--sizes``/``--paths`` run (the im2col question), below the full run's table."""
    med = statistics.median
    rows = []
    summary = []
    looped: dict[tuple[str, str], float] = {}
    for key in r["args"]["sizes"]:
        steps = r["torch"]["sizes"][key]["steps"]
        eager = med(r["torch"]["sizes"][key]["times_s"]["eager"])
        for path in PATHS:
            pr = path_result(r, key, path)
            if pr is None:
                continue
            m = med(pr["times"])
            same = len(set(pr["hashes"])) == 1
            rows.append([SIZES[key]["label"] if path == "eager" else "", PATH_NAMES[path], m, m / steps * 1e3,
                         pr["first"], pr["first"] - m, m / eager, len(pr["times"]),
                         f"yes ({len(pr['hashes'])} runs)" if same else "**no**",
                         "—" if path == "eager" else f"{pr['diff']:.1e}"])
            loop = r.get("jax", {}).get("sizes", {}).get(key, {}).get(path, {}).get("python_loop")
            kind = "im2col + matmul" if path.startswith("jax_im2col") else "`lax.conv_general_dilated`"
            if loop and (key, kind) not in looped:  # scan and unrolled scan share the step: one row a kind
                looped[(key, kind)] = lm = med(loop["times_s"])
                rows.append(["", f"JAX, {kind} convs: jit(one SGD step) called 16× from a Python loop", lm,
                             lm / steps * 1e3, loop["first_s"], loop["first_s"] - lm, lm / eager, len(loop["times_s"]),
                             "—", f"{loop['max_diff_vs_eager']:.1e}"])
            if path != "eager":
                summary.append((key, path, m, eager, pr["first"] - m, loop and med(loop["times_s"])))
    table = common.markdown_table(
        ["size", "path", "s / update (median)", "ms / SGD step", "first call s", "first − median s", "× eager time",
         "timed runs", "same seed → same weights", "max \\|w − w_eager\\|"], rows, [0, 0, 3, 1, 2, 2, 2, 0, 0, 0])
    lines = []
    for key, path, m, eager, compile_s, loop_m in summary:
        if not path.startswith("jax_im2col"):
            continue
        word = "slower" if m > eager else "faster"
        factor = m / eager if m > eager else eager / m
        line = (f"{PATH_NAMES[path]} ({key}): {m:.2f} s an update against torch eager's {eager:.2f} s, "
                f"**{factor:.2f}× {word}**; compile (first call − median) {compile_s:.1f} s")
        if loop_m and not path.endswith("_unroll"):
            verdict = ("the XLA loop costs nothing extra: the per-step gradient cost, not the loop, is the limit"
                       if m <= loop_m * 1.1 else f"the XLA loop adds {m / loop_m:.1f}× to the step's cost")
            line += f"; the same SGD step jitted alone and called 16 times from Python: {loop_m:.2f} s, so {verdict}"
        lines.append(line + ".")
    fs = (full or {}).get("jax", {}).get("sizes", {}).get("cnn-1k", {})
    if "jax" in fs and "cnn-1k" in r["args"]["sizes"] and "jax_im2col" in r.get("jax", {}).get("sizes", {}).get(
            "cnn-1k", {}):
        old = med(fs["jax"]["times_s"])
        new = med(r["jax"]["sizes"]["cnn-1k"]["jax_im2col"]["times_s"])
        lines.append(f"Against the full run's `lax.conv_general_dilated` under `lax.scan` ({old:.0f} s an update, "
                     f"{old / med(full['torch']['sizes']['cnn-1k']['times_s']['eager']):.0f}× eager), im2col + matmul "
                     f"is {old / new:.0f}× faster: the slow convolution-in-a-loop of issue 12868 is gone.")
    ims = [(m, eager) for key, path, m, eager, *_ in summary if path == "jax_im2col" and key == "cnn-1k"]
    if full and ims:
        ft = full["torch"]["sizes"]
        mlp = [med(ft[k]["times_s"]["eager"]) / med(full["jax"]["sizes"][k]["jax"]["times_s"])
               for k in ("mlp-4k", "mlp-32k") if k in ft]
        m, eager = ims[0]
        cnn = (f"takes {m / eager:.2f}× torch eager's time on the Nature CNN" if m > eager * 1.05 else
               f"runs the Nature CNN at {eager / m:.2f}× torch eager's speed")
        lines.append("For the learner framework, on one CPU core: JAX `jit(scan)` runs the MLP updates at "
                     + " and ".join(f"{x:.1f}×" for x in mlp) + f" torch eager's speed (table above) and, with "
                     f"im2col convolutions under `lax.scan`, {cnn}; no unrolling and no per-size workaround needed.")
    command = r.get("command", "").replace(" --no-write", "")
    provenance = common.provenance(r["started"], r["ended"], command)
    if r.get("commit"):
        provenance = provenance.replace(f"commit {common.git_commit()}", f"commit {r['commit']}")
    if r.get("loadavg_end"):
        provenance = re.sub(r"at the end [^(]*\(", f"at the end {r['loadavg_end']} (", provenance, count=1)
    lines.append(f"Load average at the end {r.get('loadavg_end', 'n/a')} on 2 cores: other work shared the pinned "
                 "core, so single runs vary by up to ±30 %; the ratios within this table are the result.")
    bullets = "\n".join(f"- {x}" for x in lines)
    return f"""### The Nature CNN in JAX with im2col + matmul convolutions

The same update, problem, initial weights, minibatches, pinning and flags as above, with the three convolutions
written as the NumPy rollout policy writes them (`minionsrl/function/numpy_policy.py`, `_conv_nhwc`): NHWC, the
k·k strided slices of the input stacked in (kh, kw, C) order and reshaped to one (B·Ho·Wo, k·k·C) matrix, then one
matmul with the HWIO kernel flattened to (k·k·C, out), + bias, ReLU; the frames' patches are gathered as uint8
and scaled by 1/255 after. No `lax.conv` is left in the program. Each JAX path also ran as one jitted SGD step
(loss, gradient, clip, Adam) called 16 times from Python on the same minibatches ("Python loop" rows; no XLA loop
at all), which separates the cost of a step from the cost of the loop around it. Torch eager ran again in this
run as the reference; the earlier rows above are from another run, so compare within this table.

{table}

{bullets}

{provenance}
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="timed updates per path for the MLP sizes")
    p.add_argument("--cnn-repeats", type=int, default=3, help="timed updates per path for the CNN")
    p.add_argument("--hvp-repeats", type=int, default=10)
    p.add_argument("--startup-repeats", type=int, default=5)
    p.add_argument("--path-budget-s", type=float, default=60.0,
                   help="stop repeating a JAX path once its timed updates add up to this (at least one)")
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--paths", default=",".join(PATHS),
                   help=f"comma-separated subset of {','.join(PATHS)} (eager is always run: the reference). "
                        "With --sizes or --paths narrowed, only the update is timed (no start-up, cache, HVP or "
                        "size facts) and the results go to a subsection, the full table is kept")
    p.add_argument("--python-loop", action=argparse.BooleanOptionalAction, default=True,
                   help="subset runs, CNN: also time each JAX path's jitted SGD step called from a Python loop")
    p.add_argument("--reuse", action="store_true", help="re-render the last results in bench/out instead of running")
    p.add_argument("--no-write", action="store_true", help="print the section without writing docs/BENCHMARKS.md")
    args = p.parse_args()
    paths = [q for q in args.paths.split(",") if q]
    if unknown := set(paths) - set(PATHS):
        p.error(f"unknown paths {sorted(unknown)}; choose from {','.join(PATHS)}")
    paths = ["eager", *[q for q in PATHS if q in paths and q != "eager"]]
    subset = set(args.sizes) != set(SIZES) or set(paths) != set(PATHS)
    full_records = common.load_jsonl(RESULTS)
    if args.reuse:
        if not full_records:
            sys.exit("no earlier results in " + str(RESULTS))
        record = full_records[-1]
        subset_records = common.load_jsonl(SUBSET_RESULTS)
        sub = subset_records[-1] if subset_records else None
    elif subset:
        sub = measure_subset(args, paths)
        if not full_records:  # nothing to keep the full table from: print the subset alone
            print(render_subset(sub))
            return
        record = full_records[-1]
    else:
        record, sub = measure(args), None
    text = render(record)
    if sub is not None:
        text = text.rstrip("\n") + "\n\n" + render_subset(sub, record)
    if not args.no_write:
        common.write_section("learner_update", text)
    print(text)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        fn = {"torch": torch_child, "jax": jax_child}[sys.argv[2]]
        print(json.dumps(fn(json.loads(sys.argv[3]))), flush=True)
    else:
        main()
