"""MuZero (Schrittwieser et al. 2020, arXiv 1911.08265) acting with Gumbel MuZero's search and
learning its improved policy (Danihelka et al. 2022), with two of EfficientZero's additions (Ye
et al. 2021, arXiv 2111.00210), Anakin style: acting, search, the replay buffer and learning are
one compiled program (frost.rl.anakin.run), EfficientZero's tree without Cython.

The model: a representation h(obs) -> s, dynamics g(s, a) -> (s', r) and prediction f(s) ->
(policy logits, value); latent states are min-max scaled to [0, 1] as MuZero's. One iteration
steps B vmapped environments T times, each step a `frost.rl.search.gumbel_muzero_policy` over the
B roots, and appends the steps to a ring of the last L steps of every environment on the device;
then it takes gradient steps on batches of positions sampled from the ring, unrolled K steps:

    loss = sum_k CE(pi_k, p_k) + 0.25 (z_k - v_k)^2 + (u_k - r_k)^2
                 + c (1 - cos(Q(P(s_k)), P(h(o_k))))

pi_k the search's improved policy, z_k the n-step return r_k + ... + gamma^n v(o_{k+n}), cut at
the episode's end, u_k the reward. Built from EfficientZero: the self-supervised consistency loss
(the last term, SimSiam's: P a projection, Q a prediction head on the unrolled side only,
P(h(o_k)) under stop-gradient) and value reanalyse (v(o_{k+n})
recomputed by the current network at learning time, not stored at acting time). Not built: the
value prefix (an LSTM over rewards; Catch and Breakout's rewards are sparse enough without it)
and policy reanalyse (a second search at learning time). Rewards and values are scalars.
"""

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from frost import nn, optim
from frost.rl import search
from frost.rl.anakin import AgentConfig, episode_metrics, gradient_step, mlp, start, step_envs
from frost.tree import where

SIMULATIONS = 4  # Gumbel MuZero learns with few (Danihelka et al. train with 2)
GAMMA = 0.97


@dataclasses.dataclass(frozen=True)
class Config(AgentConfig):
    num_envs: int = 16
    num_steps: int = 8  # T, steps of every env an iteration
    total_steps: int = 40_000
    lr: float = 3e-3
    unroll: int = 5  # K
    td_steps: int = 5  # n
    buffer_steps: int = 256  # L, per env
    batch_size: int = 128
    learn_steps: int = 2  # gradient steps an iteration
    consistency: float = 1.0  # c


class MuZeroNet(nn.Module):
    represent: nn.Sequential  # obs (N, ...) -> s (N, H)
    dynamics: nn.Sequential  # [s, one_hot(a)] (N, H + A) -> [s', r] (N, H + 1)
    predict: nn.Sequential  # s (N, H) -> [logits, v] (N, A + 1)
    project: nn.Sequential  # s (N, H) -> (N, H), for the consistency loss
    head: nn.Sequential  # (N, H) -> (N, H): its online side's prediction head (SimSiam)
    num_actions: int = nn.static()

    def __init__(self, obs_shape, num_actions: int, hidden: int, *, key):
        keys = jax.random.split(key, 5)
        self.represent = mlp(obs_shape, hidden, hidden, nn.ReLU(), 1.0, key=keys[0])
        self.dynamics = mlp(
            (hidden + num_actions,), hidden + 1, hidden, nn.ReLU(), 1.0, key=keys[1]
        )
        self.predict = mlp((hidden,), num_actions + 1, hidden, nn.ReLU(), 0.01, key=keys[2])
        self.project = mlp((hidden,), hidden, hidden, nn.ReLU(), 1.0, key=keys[3])
        self.head = mlp((hidden,), hidden, hidden, nn.ReLU(), 1.0, key=keys[4])
        self.num_actions = num_actions

    def initial(self, obs) -> jax.Array:
        """h: the latent states (N, H) of observations (N, ...)."""
        return _scale(self.represent(obs))

    def step(self, latent, action) -> tuple[jax.Array, jax.Array]:
        """g: the next latent states (N, H) and rewards (N,) after actions (N,)."""
        one_hot = jax.nn.one_hot(action, self.num_actions)
        out = self.dynamics(jnp.concatenate([latent, one_hot], -1))
        return _scale(out[:, :-1]), out[:, -1]

    def heads(self, latent) -> tuple[jax.Array, jax.Array]:
        """f: the policy logits (N, A) and values (N,) of latent states (N, H)."""
        out = self.predict(latent)  # (N, A + 1)
        return out[:, :-1], out[:, -1]


def _scale(latent):
    """Min-max scale each latent state to [0, 1] (MuZero, appendix G)."""
    low = latent.min(-1, keepdims=True)
    high = latent.max(-1, keepdims=True)
    return (latent - low) / jnp.maximum(high - low, 1e-5)


def recurrent_fn(model: MuZeroNet, key, action, latent):
    """The search's model step (frost.rl.search's `recurrent_fn`): g, then f, discount GAMMA."""
    latent, reward = model.step(latent, action)
    logits, value = model.heads(latent)
    discount = jnp.full_like(reward, GAMMA)
    return search.RecurrentFnOutput(reward, discount, logits, value), latent


def plan(model: MuZeroNet, obs, key, gumbel_scale: float = 1.0) -> search.PolicyOutput:
    """Gumbel MuZero's search from the roots obs (N, ...)."""
    latent = model.initial(obs)
    logits, value = model.heads(latent)
    root = search.RootFnOutput(logits, value, latent)
    return search.gumbel_muzero_policy(
        model, key, root, recurrent_fn, SIMULATIONS, gumbel_scale=gumbel_scale
    )


network = MuZeroNet  # (obs_shape, num_actions, hidden, key=), as every agent's


def greedy(model) -> Callable[[jax.Array], jax.Array]:
    """The search's choice without Gumbel noise."""
    return lambda obs: plan(model, obs, jax.random.key(0), gumbel_scale=0.0).action


class Trajectory(NamedTuple):
    """Steps of B envs; the replay ring is one of (L, B, ...) arrays, the oldest step first."""

    obs: jax.Array  # (*obs_shape,) before the action
    action: jax.Array  # () int32
    reward: jax.Array  # ()
    done: jax.Array  # () bool: the episode ended with this action
    policy: jax.Array  # (A,) the search's improved policy, the policy target


def value_targets(reward, done, boot, K: int, n: int) -> tuple[jax.Array, jax.Array]:
    """(z, valid) over windows of K + n + 1 steps: z_k = r_k + ... + gamma^(n-1) r_(k+n-1) +
    gamma^n boot_k, cut at the episode's end (N, K + 1), 0 where step k is past the end of the
    episode of step 0 (valid 0). reward, done (N, K + n + 1); boot (N, K + 1) v(o_(k+n))."""
    not_done = 1.0 - done.astype(jnp.float32)  # (N, K + n + 1)
    # step k is in the episode of step 0: no episode ended in 0..k-1
    ones = jnp.ones_like(not_done[:, :1])
    valid = jnp.concatenate([ones, jnp.cumprod(not_done[:, :K], -1)], -1)  # (N, K + 1)
    window = jnp.arange(K + 1)[:, None] + jnp.arange(n)[None, :]  # (K + 1, n)
    alive = jnp.cumprod(not_done[:, window], -1)  # (N, K + 1, n): no end in k..k+j
    before = jnp.concatenate([jnp.ones_like(alive[..., :1]), alive[..., :-1]], -1)
    discounts = GAMMA ** jnp.arange(n, dtype=jnp.float32)[None, None, :]  # (1, 1, n)
    z = (reward[:, window] * before * discounts).sum(-1) + GAMMA**n * alive[..., -1] * boot
    return z * valid, valid


def loss(model: MuZeroNet, windows: Trajectory, cfg: Config) -> tuple[jax.Array, dict]:
    """The MuZero + consistency loss over windows of K + n + 1 steps (N, K + n + 1, ...)."""
    K = cfg.unroll
    n = cfg.td_steps
    obs = windows.obs  # (N, K + n + 1, *obs_shape)
    boot_obs = obs[:, n : n + K + 1].reshape(-1, *obs.shape[2:])
    boot = model.heads(model.initial(boot_obs))[1].reshape(-1, K + 1)  # reanalysed v(o_{k+n})
    z, valid = jax.lax.stop_gradient(value_targets(windows.reward, windows.done, boot, K, n))
    later = obs[:, 1 : K + 1].reshape(-1, *obs.shape[2:])  # o_1 .. o_K
    targets = jax.lax.stop_gradient(model.project(model.initial(later)))  # P(h(o_k)) (N K, H)
    targets = targets.reshape(-1, K, targets.shape[-1])  # (N, K, H)

    latent = model.initial(obs[:, 0])  # s_0 (N, H)
    terms = {"policy": 0.0, "value": 0.0, "reward": 0.0, "consistency": 0.0}
    for k in range(K + 1):
        logits, value = model.heads(latent)
        ce = -(windows.policy[:, k] * jax.nn.log_softmax(logits)).sum(-1)
        terms["policy"] += (ce * valid[:, k]).mean()
        terms["value"] += 0.25 * ((value - z[:, k]) ** 2).mean()
        if k < K:
            latent, reward = model.step(latent, windows.action[:, k])  # s_(k+1), u_k
            terms["reward"] += ((reward - windows.reward[:, k] * valid[:, k]) ** 2).mean()
            predicted = model.head(model.project(latent))  # Q(P(s_(k+1)))
            target = targets[:, k]  # P(h(o_(k+1)))
            norms = jnp.linalg.norm(predicted, axis=-1) * jnp.linalg.norm(target, axis=-1)
            cos = (predicted * target).sum(-1) / norms
            terms["consistency"] += ((1.0 - cos) * valid[:, k + 1]).mean()
    terms = {name: term / (K + 1) for name, term in terms.items()}
    total = terms["policy"] + terms["value"] + terms["reward"]
    total = total + cfg.consistency * terms["consistency"]
    return total, dict(terms, loss=total)


class Runner(NamedTuple):
    model: MuZeroNet
    opt_state: tuple
    ring: Trajectory  # (L, B, ...)
    filled: jax.Array  # steps of the ring holding data
    obs: jax.Array  # (B, *obs_shape)
    env_state: tuple
    running: jax.Array
    last_return: jax.Array
    key: jax.Array


class Learner(NamedTuple):
    """The carry of an iteration's gradient steps: what they update, and the ring they sample."""

    model: MuZeroNet
    opt_state: tuple
    ring: Trajectory  # (L, B, ...), read only
    filled: jax.Array  # steps of the ring holding data, read only


def anakin(env, cfg: Config) -> tuple[Callable, Callable]:
    """(init, iteration) for frost.rl.anakin.run; `cfg.updates` iterations make the run."""
    opt = optim.chain(optim.clip_by_global_norm(5.0), optim.adam(cfg.lr))
    B = cfg.num_envs
    L = cfg.buffer_steps
    span = cfg.unroll + cfg.td_steps + 1  # the steps of a window the loss reads

    def init(key):
        model, obs, state, key = start(env, network, cfg, key)
        policy = jnp.zeros(env.num_actions)
        row = Trajectory(obs[0], jnp.int32(0), jnp.float32(0), jnp.bool_(False), policy)
        ring = jax.tree.map(lambda x: jnp.zeros((L, B, *x.shape), x.dtype), row)
        return Runner(
            model=model,
            opt_state=opt.init(model),
            ring=ring,
            filled=jnp.int32(0),
            obs=obs,
            env_state=state,
            running=jnp.zeros(B),
            last_return=jnp.zeros(()),
            key=key,
        )

    def env_step(r: Runner, key):
        plan_key, env_key = jax.random.split(key)
        out = plan(r.model, r.obs, plan_key)
        obs, state, reward, done = step_envs(env, env_key, r.env_state, out.action)
        step = Trajectory(r.obs, out.action, reward, done, out.action_weights)
        return r._replace(obs=obs, env_state=state), step

    def learn(learner: Learner, key):
        start_key, env_key = jax.random.split(key)
        # each window's first step in the ring (among those holding data), and its env
        starts = jax.random.randint(start_key, (cfg.batch_size,), L - learner.filled, L - span + 1)
        envs = jax.random.randint(env_key, (cfg.batch_size,), 0, B)
        index = starts[:, None] + jnp.arange(span)[None, :]  # (N, span)
        windows = jax.tree.map(lambda x: x[index, envs[:, None]], learner.ring)
        stepped, metrics = gradient_step(opt, loss, learner.model, learner.opt_state, windows, cfg)
        ready = learner.filled >= span
        model, opt_state = where(ready, stepped, (learner.model, learner.opt_state))
        return learner._replace(model=model, opt_state=opt_state), metrics

    def append(old, new):  # the ring's oldest T steps out, the new ones in
        return jnp.concatenate([old[cfg.num_steps :], new])

    def iteration(r: Runner, _):
        # COLLECT: T steps of B envs, a search at every step
        key, steps_key, learn_key = jax.random.split(r.key, 3)
        r, steps = jax.lax.scan(env_step, r, jax.random.split(steps_key, cfg.num_steps))
        ring = jax.tree.map(append, r.ring, steps)
        filled = jnp.minimum(r.filled + cfg.num_steps, L)
        # LEARN: gradient steps on windows sampled from the ring
        learner = Learner(model=r.model, opt_state=r.opt_state, ring=ring, filled=filled)
        learner, metrics = jax.lax.scan(
            learn, learner, jax.random.split(learn_key, cfg.learn_steps)
        )
        running, last, episodes = episode_metrics(steps.reward, steps.done, r)
        r = Runner(
            model=learner.model,
            opt_state=learner.opt_state,
            ring=ring,
            filled=filled,
            obs=r.obs,
            env_state=r.env_state,
            running=running,
            last_return=last,
            key=key,
        )
        metrics = jax.tree.map(lambda m: m[-1], metrics)
        return r, dict(metrics, **{"return": last, "episodes": episodes})

    return init, iteration
