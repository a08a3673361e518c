"""frost.rl beside gymnax, gymnasium and a CleanRL-style PyTorch PPO, in one run.

    python benchmarks/rl.py                  # the four tables below, 5 seeds
    python benchmarks/rl.py --quick          # small counts, 1 seed, torch capped at 60k steps
    python benchmarks/rl.py --part envs      # one part: envs, solve, sebulba or minatar-envs

1. envs: CartPole-v1 env steps/s under a random policy with 1, 64 and 4096 envs: Frost's jnp
   CartPole and gymnax's, each a jitted lax.scan of the vmapped step, with each step's env keys
   split and random actions drawn inside the scan as a rollout does, and again with keys and
   actions precomputed (the step alone: JAX's CPU threefry, a rolled 5-round loop per call, is
   most of a rollout step's time); gymnasium's SyncVectorEnv, AsyncVectorEnv (one process per env,
   so not at 4096) and its numpy CartPoleVectorEnv, stepping precomputed random actions. Median of
   7 timed runs after a warm-up, the four jnp runs interleaved (3 runs for gymnasium).
2. solve: seconds until the greedy policy's mean return over 100 evaluation episodes reaches 475,
   for Frost's Anakin PPO (`frost rl ppo --env cartpole --seeds 5`: all seeds in one program,
   compilation included) and for the PPO of CleanRL's ppo.py written out below in PyTorch, on
   gymnasium's SyncVectorEnv, one seed after another, with the same hyper-parameters
   (frost.rl.ppo.Config: 4 envs x 128 steps, 4 epochs of 4 minibatches, Adam 2.5e-4 annealed, ...)
   and the same orthogonal initialisation; torch on 1 thread (its fastest here). Both evaluate
   every 16 updates (Frost: after each compiled chunk); the evaluation is not timed. Median over
   seeds, and Frost's wall time over its seed count (what each seed costs when trained together).
3. sebulba: PPO training env steps/s on gymnasium's own CartPole-v1, 8 envs: Frost Sebulba
   (2 actor processes) against the same torch PPO on AsyncVectorEnv(8) (and SyncVectorEnv), same
   hyper-parameters; whole run (start-up included) and steady state (after the first update).
4. minatar-envs: env steps/s of MinAtar's five games under a random policy with 1, 64 and 4096
   envs: Frost's jnp games with MinAtar's sticky actions (0.1, the default) and without
   (sticky=0: what using the key every step costs), gymnax's ports (no sticky actions), each a
   jitted lax.scan of the vmapped step drawing keys and actions inside (as part 1's "Frost jnp"),
   and the `minatar` package itself (Python, one env, sticky actions on, the observation made
   every step; its rate is the same for any count of envs stepped one after another). Median of
   7 timed runs (3 with --quick).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import sys
import tempfile
import time

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contextlib

from _common import header

from frost.rl import actors, anakin, envs, ppo
from frost.rl.run import evaluate
from frost.rl.spec import EnvSpec

# reset in the step that ends an episode, as frost.rl
SAME_STEP = gymnasium.vector.AutoresetMode.SAME_STEP


def median_rate(run, count, repeats=5):
    """Median of `repeats` timings of run() (after one untimed call), as count / seconds."""
    return median_rates({"": run}, count, repeats)[""]


def median_rates(runs: dict, count, repeats=7):
    """median_rate of each of `runs`, their timings interleaved, so that other work on the machine
    falls on all of them alike."""
    times = {name: [] for name in runs}
    for run in runs.values():
        run()
    for _ in range(repeats):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return {name: count / statistics.median(t) for name, t in times.items()}


def jnp_run(reset, step, n, steps, drawn_inside=True, num_actions=2):
    """A timed call: a jitted scan of `steps` vmapped steps of n envs, random actions among
    `num_actions`. drawn_inside: each step splits a key for the envs and draws random actions, as a
    rollout does; else the keys and actions are precomputed and the scan times the env step
    alone."""

    def body(state, x):
        if drawn_inside:
            k_act, k_step = jax.random.split(x)
            keys, actions = (
                jax.random.split(k_step, n),
                jax.random.randint(k_act, (n,), 0, num_actions, jnp.int32),
            )
        else:
            keys, actions = x
        out = jax.vmap(step)(keys, state, actions)
        return out[1], out[
            2
        ].sum()  # (obs, state, reward, ...): gymnax 1.0 returns terminated and truncated

    xs = jax.random.split(jax.random.key(1), steps)
    if not drawn_inside:
        xs = (
            jax.random.split(jax.random.key(2), (steps, n)),
            jax.random.randint(jax.random.key(3), (steps, n), 0, num_actions),
        )
    run = jax.jit(lambda state, xs: lax.scan(body, state, xs))
    state = jax.vmap(reset)(jax.random.split(jax.random.key(0), n))[1]
    return lambda: jax.block_until_ready(run(state, xs))


def gym_rate(vec, n, steps):
    actions = np.random.default_rng(0).integers(0, 2, (steps, n))
    vec.reset(seed=0)

    def run():
        for a in actions:
            vec.step(a)

    try:
        return median_rate(run, n * steps, repeats=3)
    finally:
        vec.close()


def part_envs(quick):
    import gymnax

    frost_env = envs.make("cartpole")
    gx, params = gymnax.make("CartPole-v1")
    make = functools.partial(gymnasium.make, "CartPole-v1")
    scale = 10 if quick else 1
    rows = []
    for n in (1, 64, 4096):
        steps = max(200_000 // n // scale, 20)  # jnp: scan length
        gsteps = max(20_000 // n // scale, 5)  # gymnasium: vector steps
        gx_reset, gx_step = (
            (lambda k: gx.reset(k, params)),
            (lambda k, s, a: gx.step(k, s, a, params)),
        )
        row = {
            "envs": n,
            **median_rates(
                {
                    "frost": jnp_run(frost_env.reset, frost_env.step, n, steps),
                    "gymnax": jnp_run(gx_reset, gx_step, n, steps),
                    "frost_step": jnp_run(
                        frost_env.reset, frost_env.step, n, steps, drawn_inside=False
                    ),
                    "gymnax_step": jnp_run(gx_reset, gx_step, n, steps, drawn_inside=False),
                },
                n * steps,
            ),
            "sync": gym_rate(
                gymnasium.vector.SyncVectorEnv([make] * n, autoreset_mode=SAME_STEP), n, gsteps
            ),
            "vector": gym_rate(
                gymnasium.make_vec("CartPole-v1", n, vectorization_mode="vector_entry_point"),
                n,
                gsteps,
            ),
        }
        if n <= (1 if quick else 64):
            row["async"] = gym_rate(
                gymnasium.vector.AsyncVectorEnv([make] * n, autoreset_mode=SAME_STEP),
                n,
                max(gsteps // 4, 5),
            )
        print(row, file=sys.stderr, flush=True)
        rows.append(row)
    out = [
        "| envs | Frost jnp | gymnax | frost/gymnax | Frost, step alone | gymnax, step alone | "
        "frost/gymnax, step alone | gymnasium Sync | gymnasium Async | gymnasium CartPoleVectorEnv "
        "| frost/Sync | frost/Async | frost/vector |",
        "|" + " ---: |" * 13,
    ]
    for r in rows:
        a = r.get("async")
        rate, ratio = ("n/a", "n/a") if a is None else (f"{a:,.0f}", f"{r['frost'] / a:.1f}")
        out.append(
            f"| {r['envs']} | {r['frost']:,.0f} | {r['gymnax']:,.0f} | "
            f"{r['frost'] / r['gymnax']:.2f} | "
            f"{r['frost_step']:,.0f} | {r['gymnax_step']:,.0f} | "
            f"{r['frost_step'] / r['gymnax_step']:.2f} | "
            f"{r['sync']:,.0f} | {rate} | {r['vector']:,.0f} | {r['frost'] / r['sync']:.1f} | "
            f"{ratio} | {r['frost'] / r['vector']:.1f} |"
        )
    return "env steps/s, random policy, CartPole-v1\n\n" + "\n".join(out)


# --- CleanRL's ppo.py, in PyTorch
# ------------------------------------------------------------------


def torch_ppo(vec, cfg: ppo.Config, seed: int, on_update):
    """CleanRL ppo.py (Huang et al. 2022) on a gymnasium vector env of cfg.num_envs envs; calls
    `on_update(u, steps, train_return, policy)` after each update (True from it stops the run)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    np.random.seed(seed)  # the minibatch order, as CleanRL seeds it
    # its fastest for 64-wide layers; 2 threads on 2 busy cores measured 5-8x slower
    torch.set_num_threads(1)

    def layer(n_in, n_out, std):
        lin = nn.Linear(n_in, n_out)
        nn.init.orthogonal_(lin.weight, std)
        nn.init.constant_(lin.bias, 0.0)
        return lin

    obs_dim, n_act = vec.single_observation_space.shape[0], vec.single_action_space.n
    actor = nn.Sequential(
        layer(obs_dim, cfg.hidden, 2**0.5),
        nn.Tanh(),
        layer(cfg.hidden, cfg.hidden, 2**0.5),
        nn.Tanh(),
        layer(cfg.hidden, n_act, 0.01),
    )
    critic = nn.Sequential(
        layer(obs_dim, cfg.hidden, 2**0.5),
        nn.Tanh(),
        layer(cfg.hidden, cfg.hidden, 2**0.5),
        nn.Tanh(),
        layer(cfg.hidden, 1, 1.0),
    )
    params = list(actor.parameters()) + list(critic.parameters())
    opt = torch.optim.Adam(params, lr=cfg.lr, eps=1e-5)
    T, N = cfg.num_steps, cfg.num_envs
    obs_b, act_b, logp_b, rew_b, done_b, val_b = (
        torch.zeros((T, N, obs_dim)),
        *(torch.zeros((T, N)) for _ in range(5)),
    )
    next_obs, next_done = torch.tensor(vec.reset(seed=seed)[0]), torch.zeros(N)
    running, finished = np.zeros(N), []

    def policy(obs):  # greedy, for evaluation
        with torch.no_grad():
            return actor(torch.as_tensor(obs)).argmax(-1).numpy()

    for u in range(cfg.updates):
        opt.param_groups[0]["lr"] = (1.0 - u / cfg.updates) * cfg.lr
        for t in range(T):
            obs_b[t], done_b[t] = next_obs, next_done
            with torch.no_grad():
                dist = torch.distributions.Categorical(logits=actor(next_obs))
                action = dist.sample()
                logp_b[t], val_b[t] = dist.log_prob(action), critic(next_obs)[:, 0]
            act_b[t] = action
            obs, reward, term, trunc, _ = vec.step(action.numpy())
            done = term | trunc
            running += reward
            finished += list(running[done])
            running[done] = 0.0
            rew_b[t], next_obs, next_done = (
                torch.tensor(reward),
                torch.tensor(obs),
                torch.tensor(done, dtype=torch.float32),
            )
        # GAE, CleanRL's indexing: done_b[t] marks obs_b[t] as an episode's first
        with torch.no_grad():
            next_value, adv, last = critic(next_obs)[:, 0], torch.zeros((T, N)), 0.0
            for t in reversed(range(T)):
                live, nv = (
                    (1.0 - next_done, next_value)
                    if t == T - 1
                    else (1.0 - done_b[t + 1], val_b[t + 1])
                )
                delta = rew_b[t] + cfg.gamma * nv * live - val_b[t]
                adv[t] = last = delta + cfg.gamma * cfg.gae_lambda * live * last
            ret = adv + val_b
        b = [x.reshape(T * N, *x.shape[2:]) for x in (obs_b, act_b, logp_b, adv, ret, val_b)]
        size = T * N // cfg.minibatches
        for _ in range(cfg.epochs):
            order = np.random.permutation(T * N)
            for start in range(0, T * N, size):
                i = order[start : start + size]
                o, a, lp, ad, rt, v = (x[i] for x in b)
                dist = torch.distributions.Categorical(logits=actor(o))
                ratio = (dist.log_prob(a.long()) - lp).exp()
                ad = (ad - ad.mean()) / (ad.std() + 1e-8)
                pg = torch.max(
                    -ad * ratio, -ad * ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps)
                ).mean()
                value = critic(o)[:, 0]
                clipped = v + (value - v).clamp(-cfg.clip_eps, cfg.clip_eps)
                v_loss = 0.5 * torch.max((value - rt) ** 2, (clipped - rt) ** 2).mean()
                loss = pg - cfg.ent_coef * dist.entropy().mean() + cfg.vf_coef * v_loss
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                opt.step()
        recent = float(np.mean(finished[-20:])) if finished else 0.0
        if on_update(u, (u + 1) * T * N, recent, policy):
            break
    vec.close()


class Solved(Exception):
    pass


EVAL_EVERY, GOAL = 16, 475.0


def host_return(policy, seed):
    returns, _ = actors.evaluate(
        functools.partial(gymnasium.make, "CartPole-v1"), policy, seed=seed
    )
    return float(returns.mean())


def frost_solve(seeds, cfg):
    """{seed: (seconds, steps) when its evaluation first reached GOAL, or None}: all seeds in one
    Anakin program, the clock started before compiling; stops once every seed has solved."""
    env, per_update = envs.make("cartpole"), cfg.num_envs * cfg.num_steps
    solved, paused, t0 = {}, 0.0, time.perf_counter()
    spec = EnvSpec.parse("cartpole")  # frost.rl.run.evaluate compiles once, at its first call

    def on_chunk(runner, metrics, done):
        nonlocal paused
        jax.block_until_ready(metrics)
        now = time.perf_counter() - t0 - paused
        e0 = time.perf_counter()
        returns = evaluate("ppo", spec, runner.model, seeds)[0].mean(1)  # (seeds,)
        paused += time.perf_counter() - e0
        for s, r in zip(seeds, returns):
            if r >= GOAL and s not in solved:
                solved[s] = (now, done * per_update)
        if len(solved) == len(seeds):
            raise Solved

    init, iteration = ppo.anakin(env, cfg)
    with contextlib.suppress(Solved):
        anakin.run(init, iteration, seeds, cfg.updates, on_chunk, chunk=EVAL_EVERY)
    return {s: solved.get(s) for s in seeds}


def part_solve(seeds, torch_cap):
    cfg = ppo.Config()
    # Frost cold (nothing compiled yet), then warm: a second run that finds its programs in JAX's
    # persistent compilation cache, as a second `JAX_COMPILATION_CACHE_DIR=... frost rl ppo` would.
    with tempfile.TemporaryDirectory() as cache:
        for name, value in (
            ("jax_compilation_cache_dir", cache),
            ("jax_persistent_cache_min_compile_time_secs", 0),
            ("jax_persistent_cache_min_entry_size_bytes", 0),
        ):
            jax.config.update(name, value)
        frost = {"cold": frost_solve(seeds, cfg), "warm": frost_solve(seeds, cfg)}
        jax.config.update("jax_compilation_cache_dir", None)
    print("frost", frost, file=sys.stderr, flush=True)
    # torch: one seed after another, evaluated at the same update counts
    torch_rows = {}
    for s in seeds:
        state = {"paused": 0.0, "t0": time.perf_counter(), "solved": None}

        def on_update(u, steps, train_return, policy, state=state, s=s):
            if (u + 1) % EVAL_EVERY:
                return steps >= torch_cap
            now = time.perf_counter() - state["t0"] - state["paused"]
            e0 = time.perf_counter()
            r = host_return(policy, s)
            state["paused"] += time.perf_counter() - e0
            if r >= GOAL:
                state["solved"] = (now, steps)
            return state["solved"] is not None or steps >= torch_cap

        vec = gymnasium.vector.SyncVectorEnv(
            [functools.partial(gymnasium.make, "CartPole-v1")] * cfg.num_envs,
            autoreset_mode=SAME_STEP,
        )
        torch_ppo(vec, cfg, s, on_update)
        torch_rows[s] = state["solved"]
        print("torch", s, state["solved"], file=sys.stderr, flush=True)

    def cell(x):
        return "not solved" if x is None else f"{x[0]:.1f} s ({x[1] // 1000}k steps)"

    def ratio(t, f):
        return f"{t[0] / f[0]:.1f}" if t and f else "n/a"

    n = len(seeds)
    out = [
        f"| seed | Frost Anakin PPO, cold ({n} seeds in one program) | Frost, warm compile cache | "
        "torch PPO + SyncVectorEnv | torch/frost cold | torch/frost warm |",
        "| ---: |" + " ---: |" * 5,
    ]
    for s in seeds:
        c, w, t = frost["cold"][s], frost["warm"][s], torch_rows[s]
        out.append(f"| {s} | {cell(c)} | {cell(w)} | {cell(t)} | {ratio(t, c)} | {ratio(t, w)} |")
    med = {
        k: statistics.median([x[0] for x in d.values() if x]) if any(d.values()) else math.nan
        for k, d in (("cold", frost["cold"]), ("warm", frost["warm"]), ("torch", torch_rows))
    }
    out.append(
        f"| median | {med['cold']:.1f} s | {med['warm']:.1f} s | {med['torch']:.1f} s | "
        f"{med['torch'] / med['cold']:.1f} | {med['torch'] / med['warm']:.1f} |"
    )
    last = {
        k: max((x[0] for x in frost[k].values() if x), default=math.nan) for k in ("cold", "warm")
    }
    out.append(
        f"| all {n} solved, per seed | {last['cold'] / n:.1f} s | {last['warm'] / n:.1f} s | "
        f"{med['torch']:.1f} s (median) | {med['torch'] * n / last['cold']:.1f} | "
        f"{med['torch'] * n / last['warm']:.1f} |"
    )
    return (
        f"seconds to a mean evaluation return >= {GOAL:g} (100 greedy episodes), CartPole-v1; "
        f"torch capped at {torch_cap // 1000}k steps\n\n" + "\n".join(out)
    )


def part_sebulba(steps):
    cfg = ppo.Config(num_envs=8, total_steps=steps)
    make = functools.partial(gymnasium.make, "CartPole-v1")
    rows = []

    def timed(name, train):
        marks = []
        t0 = time.perf_counter()
        train(lambda: marks.append(time.perf_counter()))
        total = time.perf_counter() - t0
        done = cfg.updates * cfg.num_envs * cfg.num_steps
        steady = (done - cfg.num_envs * cfg.num_steps) / (marks[-1] - marks[0])
        rows.append((name, done / total, steady))
        print(rows[-1], file=sys.stderr, flush=True)

    for deterministic in (False, True):
        timed(
            f"Frost Sebulba, 2 actors{', deterministic' if deterministic else ''}",
            lambda mark, d=deterministic: ppo.sebulba(
                make, cfg, 0, 2, d, on_update=lambda u, m: mark()
            ),
        )
    for name, vec in (
        ("AsyncVectorEnv", gymnasium.vector.AsyncVectorEnv),
        ("SyncVectorEnv", gymnasium.vector.SyncVectorEnv),
    ):
        timed(
            f"torch PPO + {name}",
            lambda mark, vec=vec: torch_ppo(
                vec([make] * 8, autoreset_mode=SAME_STEP), cfg, 0, lambda *a: mark()
            ),
        )
    base = {r[0]: r for r in rows}["torch PPO + AsyncVectorEnv"]
    out = [
        "| PPO on gymnasium CartPole-v1, 8 envs | steps/s, whole run | steps/s, steady | "
        "frost/Async whole | frost/Async steady |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, whole, steady in rows:
        out.append(
            f"| {name} | {whole:,.0f} | {steady:,.0f} | {whole / base[1]:.2f} | "
            f"{steady / base[2]:.2f} |"
        )
    return f"training env steps/s, {steps // 1000}k steps\n\n" + "\n".join(out)


GYMNAX_MINATAR = {
    "breakout": "Breakout-MinAtar",
    "asterix": "Asterix-MinAtar",
    "freeway": "Freeway-MinAtar",
    "seaquest": "Seaquest-MinAtar",
    "space_invaders": "SpaceInvaders-MinAtar",
}


def minatar_rate(name, steps, repeats):
    """Env steps/s of the `minatar` package's game `name`: one env, random minimal actions,
    sticky actions on (its default 0.1), reset when an episode ends, and the observation
    (`state()`) after each step, as an agent needs it and as the jnp step returns it."""
    from minatar import Environment

    env = Environment(name)
    env.seed(0)
    actions = np.random.default_rng(0).choice(env.minimal_action_set(), steps)

    def run():
        env.reset()
        for action in actions:
            _, done = env.act(action)
            if done:
                env.reset()
            env.state()

    return median_rate(run, steps, repeats)


def part_minatar_envs(quick):
    import gymnax

    scale = 10 if quick else 1
    repeats = 3 if quick else 7
    rows = []
    for name in envs.MINATAR:
        sticky = envs.make(name)  # MinAtar's sticky actions, 0.1
        plain = envs.make(name, sticky=0)
        gx, params = gymnax.make(GYMNAX_MINATAR[name])

        def gx_reset(key, gx=gx, params=params):
            return gx.reset(key, params)

        def gx_step(key, state, action, gx=gx, params=params):
            return gx.step(key, state, action, params)

        python = minatar_rate(name, 20_000 // scale, repeats)
        for n in (1, 64, 4096):
            steps = max(200_000 // n // scale, 10)  # the scan's length
            runs = {
                "sticky": jnp_run(
                    sticky.reset, sticky.step, n, steps, num_actions=sticky.num_actions
                ),
                "plain": jnp_run(plain.reset, plain.step, n, steps, num_actions=plain.num_actions),
                "gymnax": jnp_run(gx_reset, gx_step, n, steps, num_actions=gx.num_actions),
            }
            row = {"game": name, "envs": n, **median_rates(runs, n * steps, repeats)}
            row["minatar"] = python
            print(row, file=sys.stderr, flush=True)
            rows.append(row)
    out = [
        "| game | envs | Frost, sticky 0.1 | Frost, sticky 0 | sticky cost | gymnax (no sticky) | "
        "frost (sticky 0)/gymnax | minatar (Python, 1 env, sticky 0.1) | frost/minatar |",
        "| --- |" + " ---: |" * 8,
    ]
    for r in rows:
        out.append(
            f"| {r['game']} | {r['envs']} | {r['sticky']:,.0f} | {r['plain']:,.0f} | "
            f"{r['sticky'] / r['plain']:.2f} | {r['gymnax']:,.0f} | "
            f"{r['plain'] / r['gymnax']:.2f} | "
            f"{r['minatar']:,.0f} | {r['sticky'] / r['minatar']:.1f} |"
        )
    return (
        "env steps/s, random policy, MinAtar's five games (sticky cost: steps/s with sticky "
        "actions over steps/s without)\n\n" + "\n".join(out)
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="small counts, 1 seed: checks that everything runs"
    )
    p.add_argument(
        "--part",
        choices=("envs", "solve", "sebulba", "minatar-envs"),
        action="append",
        help="run only these parts",
    )
    args = p.parse_args()
    parts = args.part or ["envs", "solve", "sebulba", "minatar-envs"]
    seeds = [0] if args.quick else [0, 1, 2, 3, 4]
    report = [
        header(
            "frost.rl: environments, Anakin PPO, Sebulba PPO, MinAtar's games",
            libraries=("jax", "gymnax", "gymnasium", "torch", "minatar"),
        )
    ]
    if "envs" in parts:
        report.append(part_envs(args.quick))
    if "solve" in parts:
        report.append(part_solve(seeds, 60_000 if args.quick else 500_000))
    if "sebulba" in parts:
        report.append(part_sebulba(16_384 if args.quick else 102_400))
    if "minatar-envs" in parts:
        report.append(part_minatar_envs(args.quick))
    print("\n\n".join(report))


if __name__ == "__main__":
    main()
