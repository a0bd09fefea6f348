"""The package's structure: imports point one way, and the function side stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "minionsrl"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in the file, lazy imports included)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import mod` imports the submodule pkg.mod when it is one
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "minionsrl.loop.trainer" in graph and graph["minionsrl.build"]  # the graph is really read
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


# Each layer may import only the layers before it (DESIGN, "Layers and import direction").
LAYERS = [
    ("minionsrl.errors", "minionsrl.files", "minionsrl.numbers", "minionsrl.redact", "minionsrl.deployments",
     "minionsrl.words", "minionsrl.function"),
    ("minionsrl.config",),
    ("minionsrl.backends",),
    ("minionsrl.cost", "minionsrl.forecast", "minionsrl.stats"),
    ("minionsrl.learner",),
    ("minionsrl.scaling",),
    ("minionsrl.loop",),
    ("minionsrl.prepare",),
    ("minionsrl.build",),
    ("minionsrl.experiments", "minionsrl.progress"),
    ("minionsrl.cli", "minionsrl.__main__"),
]


def _layer(module: str) -> int:
    for i, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return -1  # the package root


def test_imports_point_one_way():
    wrong = [f"{a} -> {b}" for a, edges in import_graph().items() for b in edges if _layer(b) > _layer(a)]
    assert not wrong, wrong


# Inside the learner, one job a module, each importing only those before it: the networks, the batch (and the
# boundary rule every return estimator shares), PPO (GAE, the loss and its hyper-parameters), the update's budget and
# compiled program (generic in its loss), then V-trace's algorithms, the detectors and the learners.
LEARNER_MODULES = ["runtime", "networks", "batch", "ppo", "engine", "impala", "detectors", "learners"]


def test_the_learner_modules_import_one_way():
    graph = import_graph()
    listed = [f"minionsrl.learner.{m}" for m in LEARNER_MODULES]
    assert sorted(listed) == sorted(m for m in graph if m.startswith("minionsrl.learner.")), "list every module"
    wrong = [f"{a} -> {b}" for a in listed for b in graph[a] if b in listed and listed.index(b) > listed.index(a)]
    assert not wrong, wrong


@pytest.mark.parametrize("module", ["minionsrl.function.rollout", "minionsrl.function.faults",
                                    "minionsrl.function.fragment", "minionsrl.backends.local_worker"])
def test_function_side_imports_no_framework_nor_config_nor_backends(module):
    """What a rollout function imports, in a fresh interpreter: NumPy, Gymnasium and the function side."""
    code = (f"import sys, {module}; print(sorted(m for m in sys.modules if m in ('torch', 'jax') or m.startswith("
            "('torch.', 'jax.', 'minionsrl.config', 'minionsrl.backends.base', 'minionsrl.loop', "
            "'minionsrl.learner'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.integration
def test_training_needs_no_torch():
    """The learner is JAX: a whole run (PPO with the detectors, a checkpoint, TensorBoard) works with torch made
    unimportable (libraries that use torch only when present, like tensorboardX, fall back)."""
    code = ("import sys, tempfile\n"
            "class NoTorch:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ImportError('torch is blocked')\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "from minionsrl.build import make_trainer\n"
            "from minionsrl.config import TrainConfig\n"
            "cfg = TrainConfig(env_id='CartPole-v1', actors=2, fragment_length=32, max_rounds=2, eval_episodes=1, "
            "detectors='on', progress=False, run_dir=tempfile.mkdtemp() + '/run')\n"
            "print(make_trainer(cfg).run()['rounds'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "2"


# Where a one-line ConfigError may come from: the config's own rules live in minionsrl/config/ (a field's with the
# field, the rules between fields in config/rules.py); every other module that raises one checks something outside
# the config, named here.
CONFIG_ERRORS_OUTSIDE_CONFIG = {
    "minionsrl.prepare": "the config against the world: the machine, the price catalogue, the env's facts",
    "minionsrl.function.envs": "the env an env_id names: importable, its spaces in scope",
    "minionsrl.function.extras": "an extra that is not installed",
    "minionsrl.backends.ray_backend": "the Ray cluster: reachable, authenticated",
    "minionsrl.backends.lithops_backend": "Lithops' config file and the functions' key",
    "minionsrl.cost": "a price catalogue file (--prices)",
    "minionsrl.files": "a file a run reads or writes",
    "minionsrl.redact": "a secret written into a config",
    "minionsrl.loop.checkpoint": "a checkpoint file",
    "minionsrl.loop.metrics": "metrics.csv",
    "minionsrl.loop.session": "the run directory: in use, writable, another run's",
    "minionsrl.loop.sampler": "a checkpoint's pipelined wave",
    "minionsrl.loop.state": "a checkpoint's learning-rate schedule",
    "minionsrl.loop.trainer": "a checkpoint that does not fit the run",
    "minionsrl.loop.tracking": "Weights & Biases starting a run",
    "minionsrl.scaling.minions": "a scheduler file",
    "minionsrl.experiments.training": "train()'s callback argument",
    "minionsrl.experiments.compare": "compare's arms and spec file",
    "minionsrl.experiments.evaluate": "the policy or env given to evaluate",
    "minionsrl.experiments.motivate": "motivate's arguments",
    "minionsrl.experiments.plan": "plan's arguments",
    "minionsrl.experiments.policy": "a run directory or checkpoint given to load_policy",
    "minionsrl.cli": "the command line",
}


def test_config_errors_outside_the_config_check_the_world_not_the_config():
    """A rule between config fields belongs in minionsrl/config/ (one home, as RLlib's validate); a module outside it
    raises ConfigError only for what it alone can see, listed above with what that is."""
    def raises(path: Path) -> bool:
        return any(isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
                   == "ConfigError" for node in ast.walk(ast.parse(path.read_text())))

    raising = {_module_name(p) for p in PACKAGE.rglob("*.py") if raises(p)}
    raising -= {m for m in raising if m.startswith("minionsrl.config") or m == "minionsrl.errors"}
    listed = set(CONFIG_ERRORS_OUTSIDE_CONFIG)
    assert raising == listed, f"not listed: {sorted(raising - listed)}; listed, raise none: {sorted(listed - raising)}"
