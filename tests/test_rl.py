"""frost.rl: jnp environments step for step beside gymnasium and bsuite's Catch (MinAtar's games
are in tests/test_minatar.py); PPO and DQN pieces against hand-computed values; Anakin and
Sebulba runs through the CLI; Sebulba's determinism across actor counts and its error paths."""

import argparse
import functools
import json
import multiprocessing as mp
import os
import pathlib
import signal
import time

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from frost import stats
from frost.config import UsageError
from frost.data import WorkerError
from frost.rl import actors, anakin, dqn, envs, muzero, ppo
from frost.rl.cli import add_commands
from frost.rl.run import presets
from frost.rl.spec import JNP_ENVS, EnvSpec


def frost_rl(*argv):
    """`frost rl ...` through the commands frost/rl/cli.py registers (as frost/cli.py will)."""
    parser = argparse.ArgumentParser(prog="frost")
    add_commands(parser.add_subparsers())
    args = parser.parse_args(["rl", *argv])
    return args.run(args)


def play(env, key, steps, policy):
    """A jitted rollout of one env under `policy(state, key) -> action`: (states before each step,
    actions, rewards, dones, info) stacked, as numpy."""

    def body(state, key):
        k_act, k_step = jax.random.split(key)
        action = policy(state, k_act)
        _, new, reward, done, info = env.step(k_step, state, action)
        return new, (state, action, reward, done, info)

    _, state = env.reset(jax.random.fold_in(key, 1 << 30))
    _, out = anakin.jit(lambda s, k: jax.lax.scan(body, s, jax.random.split(k, steps)))(state, key)
    return jax.tree.map(np.asarray, out)


# --- environments beside their references --------------------------------------------------------


def test_cartpole_steps_as_gymnasium():
    """The same state and action into gymnasium's CartPole-v1 (TimeLimit included): the same next
    state, reward, termination and truncation, over 2000 steps of a balancing policy (episodes run
    into the 500-step limit) and 1000 of random actions (episodes fall)."""
    env = envs.make("cartpole")

    def balance(s, key):
        k_eps, k_a = jax.random.split(key)
        push = (s.theta + 0.5 * s.theta_dot + 0.01 * s.x + 0.1 * s.x_dot > 0).astype(jnp.int32)
        return jnp.where(
            jax.random.uniform(k_eps) < 0.1, jax.random.randint(k_a, (), 0, 2, jnp.int32), push
        )

    ref = gymnasium.make("CartPole-v1")
    ref.reset(seed=0)
    ends = np.zeros(2, int)
    for key, steps, policy in (
        (1, 2000, balance),
        (2, 1000, lambda s, k: jax.random.randint(k, (), 0, 2)),
    ):
        states, actions, rewards, dones, info = play(env, jax.random.key(key), steps, policy)
        vec = np.stack([states.x, states.x_dot, states.theta, states.theta_dot], 1)  # (N, 4)
        got = []  # gymnasium's (next obs, reward, terminated, truncated) of each step
        for t in range(steps):
            if t == 0 or dones[t - 1]:
                ref.reset()
            ref.unwrapped.state = vec[t].astype(np.float64)
            got.append(ref.step(int(actions[t]))[:4])
        obs, reward, term, trunc = (np.array(x) for x in zip(*got))
        np.testing.assert_array_equal(reward, rewards)
        np.testing.assert_array_equal(term, info["terminated"])
        np.testing.assert_array_equal(trunc, info["truncated"])
        going = ~dones[:-1]  # the next state is the same episode's
        np.testing.assert_allclose(obs[:-1][going], vec[1:][going], atol=2e-6)
        np.testing.assert_array_equal(states.t[1:][going], states.t[:-1][going] + 1)
        assert (states.t[1:][~going] == 0).all()
        ends += info["truncated"].sum(), info["terminated"].sum()
    assert ends[0] >= 3 and ends[1] >= 30  # both ways an episode ends are exercised


class BsuiteCatch:
    """bsuite/environments/catch.py (Osband et al. 2020), written out: bsuite itself does not
    install on this Python. Actions (-1, 0, +1); the ball's column is given at reset."""

    def __init__(self, rows=10, columns=5):
        self.rows, self.columns = rows, columns

    def reset(self, ball_x):
        self.ball_x, self.ball_y, self.paddle_x, self.paddle_y = (
            ball_x,
            0,
            self.columns // 2,
            self.rows - 1,
        )
        return self.observation()

    def step(self, action):
        self.paddle_x = int(np.clip(self.paddle_x + (-1, 0, 1)[action], 0, self.columns - 1))
        self.ball_y += 1
        if self.ball_y == self.paddle_y:
            return self.observation(), (1.0 if self.paddle_x == self.ball_x else -1.0), True
        return self.observation(), 0.0, False

    def observation(self):
        board = np.zeros((self.rows, self.columns), np.float32)
        board[self.ball_y, self.ball_x] = board[self.paddle_y, self.paddle_x] = 1.0
        return board


def test_catch_steps_as_bsuite():
    env = envs.make("catch")
    states, actions, rewards, dones, _ = play(
        env, jax.random.key(3), 3000, lambda s, k: jax.random.randint(k, (), 0, 3)
    )
    observe = jax.jit(jax.vmap(env.observe))
    obs = np.asarray(observe(states))
    ref = BsuiteCatch()
    for t in range(len(actions)):
        if t == 0 or dones[t - 1]:
            np.testing.assert_array_equal(ref.reset(int(states.ball_x[t])), obs[t])
        ref_obs, reward, done = ref.step(int(actions[t]))
        assert (reward, done) == (rewards[t], dones[t]), t
        if not done and t + 1 < len(actions):
            np.testing.assert_array_equal(ref_obs, obs[t + 1], err_msg=f"step {t}")
    assert set(np.unique(rewards[dones])) == {-1.0, 1.0}


# --- loss pieces by hand ------------------------------------------------------------------------


def test_gae_on_a_written_out_trajectory():
    # gamma = lam = 0.5; V = 1, 2, 3, then 4 to bootstrap from; rewards 1; the episode ends at t =
    # 1.   t=2: delta = 1 + 0.5*4 - 3 = 0,  A = 0
    #   t=1: delta = 1 - 2 = -1 (done: no bootstrap, no carry),  A = -1
    #   t=0: delta = 1 + 0.5*2 - 1 = 1,  A = 1 + 0.25*(-1) = 0.75
    adv, ret = ppo.gae(
        jnp.array([[1.0], [2.0], [3.0]]),
        jnp.ones((3, 1)),
        jnp.array([[False], [True], [False]]),
        jnp.array([4.0]),
        0.5,
        0.5,
    )
    np.testing.assert_allclose(adv[:, 0], [0.75, -1.0, 0.0])
    np.testing.assert_allclose(ret[:, 0], [1.75, 1.0, 3.0])


def test_ppo_loss_pieces():
    """Two rows: ratio 2 (clipped to 1.2) with advantage +1, ratio 0.5 (clipped to 0.8) with -1."""
    logits = jnp.array([[0.0, 0.0], [np.log(3.0), 0.0]])  # probabilities (.5, .5) and (.75, .25)
    value = jnp.array([1.5, 0.0])

    def model(obs):
        return logits, value

    batch = ppo.Minibatch(
        obs=jnp.zeros((2, 1)),
        action=jnp.array([0, 1]),
        logp=jnp.log(jnp.array([0.25, 0.5])),
        value=jnp.array([1.0, 0.1]),
        adv=jnp.array([3.0, 1.0]),  # normalised to +1, -1
        ret=jnp.array([2.0, -1.0]),
    )
    cfg = ppo.Config()
    _, m = ppo.loss(model, batch, cfg)
    np.testing.assert_allclose(m["policy_loss"], -(1.2 * 1 + 0.8 * -1) / 2, rtol=1e-6)
    # values clipped to old +- 0.2: (1.2, 0.0); max of squared errors: (0.64, 1.0)
    np.testing.assert_allclose(m["value_loss"], 0.5 * (0.64 + 1.0) / 2, rtol=1e-6)
    entropy = (np.log(2) - (0.75 * np.log(0.75) + 0.25 * np.log(0.25))) / 2
    np.testing.assert_allclose(m["entropy"], entropy, rtol=1e-6)
    np.testing.assert_allclose(
        m["loss"], m["policy_loss"] + 0.5 * m["value_loss"] - 0.01 * entropy, rtol=1e-6
    )


def test_dqn_targets_and_epsilon():
    online = jnp.array([[1.0, 3.0], [2.0, 0.0], [0.0, 1.0]])
    target = jnp.array([[10.0, 20.0], [30.0, 40.0], [5.0, 6.0]])
    reward, done = jnp.array([1.0, 2.0, 3.0]), jnp.array([False, False, True])
    # double: the online net picks (1, 0, 1), the target net values them: 20, 30, (done)
    np.testing.assert_allclose(
        dqn.targets(online, target, reward, done, 0.9, double=True), [19.0, 29.0, 3.0]
    )
    # DQN: the target net picks and values: 20, 40
    np.testing.assert_allclose(
        dqn.targets(online, target, reward, done, 0.9, double=False), [19.0, 38.0, 3.0]
    )
    cfg = dqn.Config(total_steps=1000, eps_fraction=0.5)
    np.testing.assert_allclose(
        [dqn.epsilon(s, cfg) for s in (0, 250, 500, 900)], [1.0, 0.525, 0.05, 0.05], rtol=1e-6
    )


def test_muzero_value_targets_against_a_loop():
    """z_k = sum_j<n gamma^j r_(k+j) + gamma^n v(o_(k+n)), cut at the first episode end at or
    after k; 0 (and not valid) once an episode ended before k: against a plain loop."""
    K, n, N, g = 3, 2, 64, muzero.GAMMA
    rng = np.random.default_rng(0)
    reward = rng.normal(size=(N, K + n + 1)).astype(np.float32)
    done = rng.random((N, K + n + 1)) < 0.3
    boot = rng.normal(size=(N, K + 1)).astype(np.float32)
    z, valid = muzero.value_targets(jnp.asarray(reward), jnp.asarray(done), jnp.asarray(boot), K, n)
    want_z, want_valid = np.zeros((N, K + 1)), np.zeros((N, K + 1))
    for i in range(N):
        for k in range(K + 1):
            if done[i, :k].any():
                continue  # past the end of step 0's episode
            want_valid[i, k], total = 1.0, 0.0
            for j in range(n):
                total += g**j * reward[i, k + j]
                if done[i, k + j]:
                    break
            else:
                total += g**n * boot[i, k]
            want_z[i, k] = total
    np.testing.assert_array_equal(valid, want_valid)
    np.testing.assert_allclose(z, want_z, rtol=1e-5, atol=1e-6)


# --- Anakin through the CLI -----------------------------------------------------------------------


def test_cli_anakin_ppo_end_to_end(tmp_path, capsys):
    """`frost rl ppo --env cartpole --seeds 2`: both seeds' returns rise; the run dir holds
    metrics.jsonl, results.json in its contract form, returns.png and a checkpoint `rl eval`
    runs."""
    out = tmp_path / "run"
    frost_rl("ppo", "--env", "cartpole", "--seeds", "2", "--steps", "40960", "--out", str(out))
    results = json.loads((out / "results.json").read_text())
    assert list(results) == ["seeds", "summary"] and [r["seed"] for r in results["seeds"]] == [0, 1]
    for row in results["seeds"]:
        assert list(row) == [
            *("seed", "final_return", "online_return", "episodes", "cut", "steps", "seconds")
        ]
        assert row["steps"] == 40960 and row["episodes"] == 100 and 0 <= row["cut"] <= 100
    # the seeds' final returns aggregated as rliable does (tests/test_stats.py checks frost.stats)
    finals = [row["final_return"] for row in results["seeds"]]
    assert results["summary"] == stats.summary(finals, episodes=100)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for seed in (0, 1):
        returns = [m["return"] for m in metrics if m["seed"] == seed]
        assert returns[-1] > 3 * returns[0] and returns[-1] > 80, returns
    assert min(r["final_return"] for r in results["seeds"]) > 80
    assert (out / "returns.png").read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    frost_rl("eval", str(out))
    printed = capsys.readouterr().out.splitlines()
    for line, row in zip(printed, results["seeds"]):  # the same evaluation, from the checkpoint
        assert line.startswith(f"seed {row['seed']}: mean return {row['final_return']:.1f}")
    summary = results["summary"]
    assert printed[2].startswith(f"IQM {summary['iqm']:.2f} [{summary['iqm_low']:.2f}, ")


def test_cli_anakin_muzero_learns_catch(tmp_path, capsys):
    """`frost rl muzero --env catch`: Gumbel MuZero's search acts and its improved policy is
    learnt; from a random policy's return (< 0) to catching most balls, and `rl eval` agrees."""
    out = tmp_path / "run"
    frost_rl("muzero", "--env", "catch", "--steps", "32000", "--out", str(out))
    (row,) = json.loads((out / "results.json").read_text())["seeds"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    returns = [m["return"] for m in metrics]
    assert returns[0] < 0 and row["final_return"] > 0.5, (returns, row)
    capsys.readouterr()
    frost_rl("eval", str(out))
    assert capsys.readouterr().out.startswith(f"seed 0: mean return {row['final_return']:.1f}")


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["ppo", "--env", "pong"],
            "--env 'pong': choose cartpole, catch, breakout, asterix, freeway, seaquest, "
            "space_invaders or gym:ID",
        ),
        (
            ["ppo", "--env", "cartpole", "--sticky", "0.1"],
            "--sticky 0.1: only MinAtar's games (breakout, asterix, freeway, seaquest, "
            "space_invaders) have sticky actions",
        ),
        (["ppo", "--env", "breakout", "--sticky", "1"], "--sticky 1.0: must be >= 0 and < 1"),
        (["ppo", "--env", "gym:NoSuchEnv-v9"], "gymnasium cannot make 'NoSuchEnv-v9'"),
        (["ppo", "--env", "gym:Pendulum-v1"], "PPO here needs discrete actions, not Box"),
        (
            ["ppo", "--env", "cartpole", "--actors", "2"],
            "--actors 2: actor processes exist only in --mode sebulba",
        ),
        (["ppo", "--env", "gym:CartPole-v1", "--mode", "anakin"], "use --mode sebulba"),
        (["ppo", "--env", "catch", "--mode", "sebulba"], "--mode sebulba steps host envs"),
        (["dqn", "--env", "gym:CartPole-v1"], "only ppo trains in sebulba mode"),
        (["muzero", "--env", "gym:CartPole-v1"], "sebulba mode; muzero runs in anakin mode"),
        (["ppo", "--seeds", "0"], "--seeds 0: must be a whole number >= 1"),
        (
            ["ppo", "--env", "gym:CartPole-v1", "--actors", "3"],
            "--actors 3: must divide the 8 environments",
        ),
    ],
)
def test_cli_usage_errors(tmp_path, argv, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        frost_rl(*argv, "--out", str(tmp_path / "new"))


def test_cli_refuses_another_runs_folder(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "results.json").write_text("{}")
    with pytest.raises(
        UsageError, match="already holds files from another run; choose a new or empty --out"
    ):
        frost_rl("ppo", "--out", str(tmp_path / "old"))
    with pytest.raises(UsageError, match="no checkpoint"):
        frost_rl("eval", str(tmp_path / "old"))


# --- Sebulba --------------------------------------------------------------------------------------


def our_children():
    return [p for p in mp.active_children() if p.name.startswith("frost-data")]


def frost_segments():
    return sorted(p.name for p in pathlib.Path("/dev/shm").glob(f"frost_{os.getpid()}_*"))


def test_sebulba_trains_and_is_deterministic_across_actor_counts(tmp_path, capsys):
    """gymnasium's CartPole-v1 in 2 actor processes through the CLI (--deterministic), then in 1
    actor through the library: the same losses to the bit, update for update; the policy lag is 1
    after the first rollout; returns rise; nothing is left running."""
    out = tmp_path / "sebulba"
    frost_rl(
        "ppo",
        "--env",
        "gym:CartPole-v1",
        "--actors",
        "2",
        "--deterministic",
        "--steps",
        "12288",
        "--out",
        str(out),
    )
    two = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["lag_max"] for m in two] == [0] + [1] * 11
    assert two[-1]["return"] > 1.5 * two[0]["return"]
    assert our_children() == [] and frost_segments() == []
    capsys.readouterr()
    frost_rl("eval", str(out))
    assert capsys.readouterr().out.startswith("seed 0: mean return")
    one = []
    ppo.sebulba(
        functools.partial(gymnasium.make, "CartPole-v1"),
        presets("ppo", EnvSpec.parse("gym:CartPole-v1"), 12288),
        seed=0,
        actors=1,
        deterministic=True,
        on_update=lambda u, m: one.append(float(m["loss"])),
    )
    assert one == [m["loss"] for m in two]


class FailingEnv:
    """CartPole that raises in its 30th step."""

    def __init__(self):
        self.env, self.steps = gymnasium.make("CartPole-v1"), 0
        self.action_space = self.env.action_space

    def reset(self, seed=None):
        return self.env.reset(seed=seed)

    def step(self, action):
        self.steps += 1
        if self.steps == 30:
            raise RuntimeError("the simulator broke")
        return self.env.step(action)


def policy_net():
    return anakin.jit(lambda key: ppo.ActorCritic((4,), 2, key=key).actor)(jax.random.key(0))


def test_sebulba_env_exception_reaches_the_learner():
    with actors.Actors(FailingEnv, ppo.act, num_envs=2, steps=50, actors=1) as pool:
        pool.submit(policy_net(), 0)
        with pytest.raises(WorkerError, match="actor 0 failed") as err:
            pool.collect()
    assert (
        "RuntimeError: the simulator broke" in err.value.traceback
        and "in step" in err.value.traceback
    )
    assert our_children() == [] and frost_segments() == []


def test_sebulba_killed_actor_is_raised_at_once():
    with actors.Actors(
        functools.partial(gymnasium.make, "CartPole-v1"), ppo.act, num_envs=2, steps=20, actors=1
    ) as pool:
        pool.submit(policy_net(), 0)
        pool.collect()  # the actor is up and acting
        os.kill(pool.pids[0], signal.SIGKILL)
        t0 = time.perf_counter()
        with pytest.raises(WorkerError, match="killed by SIGKILL"):
            pool.collect()  # its second rollout never comes
        assert time.perf_counter() - t0 < 3
    assert our_children() == [] and frost_segments() == []


def test_anakin_shards_seeds_over_devices():
    """Four seeds on two (forced) CPU devices: each device holds two seeds' runners, and every
    seed's numbers are what it computes alone."""
    import subprocess
    import sys

    code = """if True:
        import jax, jax.numpy as jnp, numpy as np
        from frost.rl import anakin
        def init(key):
            x = jax.random.key_data(key).astype(jnp.float32)
            return {"x": x, "n": jnp.zeros((), jnp.int32)}
        def iteration(r, _):
            return {"x": r["x"] * 0.5 + 1.0, "n": r["n"] + 1}, r["x"].sum()
        r = anakin.run(init, iteration, [0, 1, 2, 3], 6, chunk=3)
        alone = [np.float32([0, s]) for s in range(4)]  # a threefry key's data is (0, seed)
        for _ in range(6):
            alone = [x * 0.5 + 1.0 for x in alone]
        np.testing.assert_allclose(r["x"], np.stack(alone), rtol=1e-6)
        print(len(r["x"].sharding.device_set), r["x"].sharding.spec, r["n"].tolist())
    """
    env = dict(
        os.environ,
        XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2",
        JAX_PLATFORMS="cpu",
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["2", "P('data',)", "[6,", "6,", "6,", "6]"]


def on_two_cores(code, *args, timeout):
    """Run Python `code` (with `args` as sys.argv[1:]) in a fresh interpreter pinned to (at most)
    two cores before JAX starts, so XLA's intra-op thread pool has two threads whatever the
    machine; give up after `timeout` seconds, so a deadlock fails the test instead of hanging."""
    import subprocess
    import sys

    pin = "import os; os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])\n"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    argv = [sys.executable, "-c", pin + code, *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def test_vmapped_networks_build_on_two_cores():
    """Fifteen orthogonal layers built for three seeds at once, vmapped (each a batched QR, which
    jaxlib 0.10's LAPACK kernels split over the thread pool and wait for): built without a
    deadlock, and each seed's layers are those it builds alone, bit for bit."""
    code = """if True:
        import jax, jax.numpy as jnp, numpy as np
        from frost import nn
        from frost.rl.anakin import mlp
        def init(key):
            return [mlp((50,), 64, 64, nn.ReLU(), 1.0, key=k) for k in jax.random.split(key, 5)]
        keys = jax.random.split(jax.random.key(0), 3)
        together = jax.jit(jax.vmap(init))(keys)
        for i in range(3):
            alone = jax.jit(init)(keys[i])
            for a, b in zip(jax.tree.leaves(together), jax.tree.leaves(alone)):
                np.testing.assert_array_equal(a[i], b)
        print("built")
    """
    out = on_two_cores(code, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["built"], out.stderr[-2000:]


@pytest.mark.slow  # 14 s; test_vmapped_networks_build_on_two_cores covers the deadlock's cause
def test_cli_anakin_muzero_two_seeds_on_two_cores(tmp_path):
    """`frost rl muzero --env catch --seeds 2` for one iteration: MuZero's five networks, built for
    two seeds in one program, hung there (every thread of the pool waiting) before `orthogonal`
    looped its QR."""
    out = tmp_path / "run"
    argv = ["muzero", "--env", "catch", "--seeds", "2", "--steps", "128", "--out", str(out)]
    code = "import sys; from frost.cli import main; sys.exit(main(sys.argv[1:]))"
    done = on_two_cores(code, "rl", *argv, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((out / "results.json").read_text())["seeds"]
    assert [row["seed"] for row in rows] == [0, 1]


def test_env_spec_is_parsed_once_and_names_what_is_allowed():
    assert (*envs.ENVS, *envs.MINATAR) == JNP_ENVS
    gym = EnvSpec.parse("gym:CartPole-v1")
    assert gym.host and gym.preset == "gym" and gym.signature() == ((4,), 2)
    assert EnvSpec.parse("catch").signature() == (tuple(envs.make("catch").observation_shape), 3)
    for bad in ("pong", "gym:"):
        with pytest.raises(UsageError, match=f"--env {bad}: choose cartpole, catch, breakout"):
            EnvSpec.parse(bad)
