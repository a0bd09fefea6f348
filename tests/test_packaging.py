"""How minionsrl declares its dependencies: ranges in ``pyproject.toml``, the tested versions pinned in
``constraints.txt`` (which ``make`` installs with), heavy parts as extras, and one clear line naming the extra
when a feature needs one that is not installed."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from minionsrl.errors import ConfigError
from minionsrl.function import envs, extras

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DEPENDENCIES = [Requirement(r) for r in PROJECT["dependencies"]]
EXTRAS = {name: [Requirement(r) for r in reqs] for name, reqs in PROJECT["optional-dependencies"].items()}
# the heavy parts: none of them in the core install
HEAVY = {"tensorboard", "moviepy", "pygame", "pygame-ce", "mujoco", "box2d", "ray", "lithops", "wandb", "ale-py",
         "torch", "stable-baselines3", "opencv-python-headless", "envpool"}


def _constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (ROOT / "constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)", line)
        assert match, f"constraints.txt: {raw!r} is not an exact pin (name==version)"
        name = canonicalize_name(match.group(1))
        assert name not in pins, f"constraints.txt pins {name} twice"
        pins[name] = match.group(2)
    return pins


def _third_party(reqs: list[Requirement]) -> list[Requirement]:
    return [r for r in reqs if canonicalize_name(r.name) != "minionsrl"]


def _closure(extra: str) -> set[str]:
    """The extras ``extra`` pulls in through ``minionsrl[...]``, itself included."""
    seen, todo = set(), [extra]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [e for r in EXTRAS[name] if canonicalize_name(r.name) == "minionsrl" for e in r.extras]
    return seen


def test_core_dependencies_are_ranges_not_pins():
    pinned = [str(r) for r in DEPENDENCIES if any(s.operator in ("==", "===") for s in r.specifier)]
    assert not pinned, f"pin these in constraints.txt, give pyproject.toml a range: {pinned}"
    assert all(r.specifier for r in DEPENDENCIES), "every core dependency has a lower bound"


def test_every_requirement_has_a_tested_pin_inside_its_range():
    pins = _constraints()
    groups = {"dependencies": DEPENDENCIES, **{f"[{k}]": v for k, v in EXTRAS.items()}}
    for group, reqs in groups.items():
        for req in _third_party(reqs):
            name = canonicalize_name(req.name)
            assert name in pins, f"{group}: {req} has no exact pin in constraints.txt"
            assert req.specifier.contains(pins[name], prereleases=True), \
                f"{group}: constraints.txt pins {name}=={pins[name]}, outside {req}"


def test_no_pygame_and_pygame_ce_together():
    """Both install ``pygame/``; Gymnasium 1.x's extras use pygame-ce, so only pygame-ce may appear."""
    declared = {canonicalize_name(r.name) for reqs in [DEPENDENCIES, *EXTRAS.values()] for r in reqs}
    assert "pygame" not in declared and "pygame" not in _constraints()
    assert "pygame-ce" in declared
    installed = set()
    for dist in ("pygame", "pygame-ce"):
        try:
            importlib.metadata.distribution(dist)
            installed.add(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    assert installed != {"pygame", "pygame-ce"}, "this environment has both pygame and pygame-ce installed"


def test_torch_only_in_bench():
    for group, reqs in {"dependencies": DEPENDENCIES, **EXTRAS}.items():
        names = {canonicalize_name(r.name) for r in reqs}
        if group != "bench":
            assert not names & {"torch", "stable-baselines3"}, f"{group} pulls torch"
    assert [str(r) for r in EXTRAS["bench"] if r.name == "torch"] == ["torch==2.13.0"]
    assert "bench" not in _closure("all") and "cuda" not in _closure("all")


def test_heavy_parts_are_extras_and_all_has_them():
    core = {canonicalize_name(r.name) for r in DEPENDENCIES}
    assert not core & HEAVY, f"heavy in the core install: {core & HEAVY}"
    assert {"mujoco", "video", "tb", "box2d", "ray", "lithops", "aws", "atari", "cuda", "wandb", "bench", "dev",
            "all"} <= set(EXTRAS)
    # EnvPool (~740 MB) serves the bench's peer only, so far: outside [all] until a function steps it
    assert _closure("all") == set(EXTRAS) - {"cuda", "bench", "envpool"}, "[all] is what the test suite needs"
    mujoco = [r for reqs in [DEPENDENCIES, *EXTRAS.values()] for r in reqs if canonicalize_name(r.name) == "mujoco"]
    assert len(mujoco) == 1, "MuJoCo is declared in one place: the mujoco extra"


def test_make_installs_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"pip install[^\n]*-c constraints\.txt", makefile)
    assert '-e ".[all]"' in makefile


# -- one line naming the extra --------------------------------------------------------------------


def _without(monkeypatch, *modules: str) -> None:
    """Make ``modules`` look not installed to the extras checks."""
    def fake(module: str) -> bool:
        return module not in modules and extras.importlib.util.find_spec(module) is not None

    monkeypatch.setattr(extras, "installed", fake)
    monkeypatch.setattr(envs, "installed", fake)


@pytest.mark.parametrize(("env_id", "module", "extra"), [("Hopper-v5", "mujoco", "mujoco"),
                                                         ("LunarLander-v3", "Box2D", "box2d"),
                                                         ("ALE/Pong-v5", "ale_py", "atari")])
def test_env_without_its_extra_is_one_line_naming_it(monkeypatch, env_id, module, extra):
    _without(monkeypatch, module)
    with pytest.raises(ConfigError) as info:
        envs.check_env_id(env_id)
    assert str(info.value) == f"env_id {env_id!r} needs the {extra} extra: {extras.install_hint(extra)}"


def test_capture_video_without_the_video_extra_is_one_line(monkeypatch, tmp_path):
    from minionsrl.experiments.evaluate import evaluate_run

    (tmp_path / "config.yaml").write_text("env_id: CartPole-v1\n")
    _without(monkeypatch, "moviepy")
    hint = re.escape(extras.install_hint("video"))
    with pytest.raises(ConfigError, match=f"^--capture-video needs the video extra: {hint}$"):
        evaluate_run(tmp_path, capture_video=True)


def test_tensorboard_without_tensorboardx_is_one_line(monkeypatch):
    from minionsrl.config import TrainConfig
    from minionsrl.loop import tracking

    _without(monkeypatch, "tensorboardX")
    with pytest.raises(ConfigError, match=f"^--tensorboard needs the tb extra: {re.escape(extras.install_hint('tb'))} "
                                          r"\(or pass --no-tensorboard\)$"):
        tracking.check(TrainConfig(env_id="CartPole-v1"))
    tracking.check(TrainConfig(env_id="CartPole-v1", tensorboard=False))  # no error


@pytest.mark.parametrize("backend", ["ray", "lithops"])
def test_a_backend_without_its_extra_is_one_line_naming_it(monkeypatch, backend):
    from minionsrl.config import TrainConfig, validate

    _without(monkeypatch, backend)
    with pytest.raises(ConfigError, match=f"^--backend {backend} needs the {backend} extra: "
                                          f"{re.escape(extras.install_hint(backend))}$"):
        validate(TrainConfig(env_id="CartPole-v1", backend=backend, max_rounds=1))


CORE_ONLY = """
import sys, tempfile
BLOCKED = {BLOCKED!r}
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Blocker())
from minionsrl import cli
run = tempfile.mkdtemp() + '/run'
rc = cli.main(['train', '--env-id', 'CartPole-v1', '--actors', '2', '--max-rounds', '2', '--fragment-length', '32',
               '--eval-episodes', '1', '--hidden-sizes', '8', '--no-progress', '--run-dir', run])
print('CARTPOLE', rc, flush=True)
rc = cli.main(['train', '--env-id', 'Hopper-v5', '--max-rounds', '1', '--run-dir', tempfile.mkdtemp() + '/run'])
print('HOPPER', rc, flush=True)
print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in BLOCKED))
"""


@pytest.mark.integration
def test_the_core_install_trains_cartpole_and_names_the_mujoco_extra(subprocess_env):
    """With every extra's modules unimportable (as in ``pip install minionsrl``): CartPole trains (TensorBoard
    event files and plots included), and Hopper-v5 stops with one line naming the mujoco extra."""
    blocked = ["mujoco", "moviepy", "pygame", "tensorboard", "Box2D", "ale_py", "cv2", "ray", "lithops", "wandb",
               "torch"]
    out = subprocess.run([sys.executable, "-c", CORE_ONLY.format(BLOCKED=blocked)], capture_output=True, text=True,
                         timeout=400, env=subprocess_env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "CARTPOLE 0" in lines and "HOPPER 2" in lines and "LOADED []" in lines, out.stdout[-2000:]
    errors = [line for line in out.stderr.splitlines() if "Hopper-v5" in line]
    hint = extras.install_hint("mujoco")
    assert errors == [f"minionsrl: error: env_id 'Hopper-v5' needs the mujoco extra: {hint}"], \
        out.stderr[-2000:]


def test_make_run_installs_the_core_and_make_test_everything():
    """``make run`` (the CartPole demo) needs the core only; ``make test`` every extra. Separate stamps, so
    ``make run`` then ``make test`` on one venv adds the extras, and ``make test`` alone works on a fresh clone."""
    rules = dict(re.findall(r"^([\w$()-]+):[^\n=]*\n((?:\t[^\n]*\n)+)", (ROOT / "Makefile").read_text(), re.M))
    assert "$(PIP_INSTALL) -e .\n" in rules["$(CORE)"]
    assert '-e ".[all]"' in rules["$(ALL)"] and "$(CORE)" in rules["$(ALL)"].splitlines()[-1]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^run: \$\(CORE\)$", makefile, re.M) and re.search(r"^test: \$\(ALL\)$", makefile, re.M)
