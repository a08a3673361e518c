"""Proximal policy optimisation (Schulman et al. 2017, arXiv 1707.06347), as CleanRL's ppo.py and
PureJaxRL: GAE advantages, the clipped surrogate objective, a clipped value loss, an entropy
bonus, several epochs of minibatches per rollout, Adam with a linearly annealed learning rate.

Two ways to get rollouts, one update (`update`) for both:
- Anakin (`anakin(env, cfg)` + `frost.rl.anakin.run`): jnp environments vmapped; rollout and
  update are one `lax.scan` iteration, and the seeds one vmapped program.
- Sebulba (`sebulba(make_env, cfg, ...)`): host environments in actor processes
  (frost.rl.actors); the learner trains on their rollouts as they arrive.

A rollout is a `Rollout` of (T, B) arrays: obs (T + 1, B, *obs_shape) (the last one to bootstrap
from), action, logp (of the acting policy), reward, done (the episode ended at this step).
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from frost import nn, optim
from frost.rl.actors import Actors
from frost.rl.anakin import AgentConfig, episode_metrics, gradient_step, jit, mlp, start, step_envs


@dataclasses.dataclass(frozen=True)
class Config(AgentConfig):
    """CleanRL ppo.py's defaults for CartPole-v1 (gamma and hidden as AgentConfig's)."""

    num_envs: int = 4
    num_steps: int = 128  # T, steps per rollout
    total_steps: int = 500_000
    epochs: int = 4
    minibatches: int = 4
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    lr: float = 2.5e-4


class ActorCritic(nn.Module):
    actor: nn.Sequential
    critic: nn.Sequential

    def __init__(self, obs_shape, num_actions: int, hidden: int = 64, *, key):
        k_actor, k_critic = jax.random.split(key)
        self.actor = mlp(obs_shape, num_actions, hidden, nn.Tanh(), 0.01, key=k_actor)
        self.critic = mlp(obs_shape, 1, hidden, nn.Tanh(), 1.0, key=k_critic)

    def __call__(self, obs):  # (N, *obs_shape) -> logits (N, A), values (N,)
        return self.actor(obs), self.critic(obs)[:, 0]


network = ActorCritic  # (obs_shape, num_actions, hidden, key=), as every agent's


def optimizer(cfg: Config) -> optim.GradientTransformation:
    """Adam (eps 1e-5) after clipping the gradient norm; the learning rate falls linearly to 0,
    one step per update (all of an update's minibatches use the same rate), as CleanRL."""
    per_update = cfg.epochs * cfg.minibatches

    def lr(count):
        return cfg.lr * (1.0 - (jnp.asarray(count) // per_update).astype(jnp.float32) / cfg.updates)

    return optim.chain(optim.clip_by_global_norm(cfg.max_grad_norm), optim.adam(lr, eps=1e-5))


def act(policy_net, obs, keys) -> tuple[jax.Array, jax.Array]:
    """Sample actions from the actor network: obs (N, ...), keys (N,) -> action (N,) int32, logp
    (N,)."""
    logits = policy_net(obs)  # (N, A)
    action = jax.vmap(jax.random.categorical)(keys, logits).astype(jnp.int32)
    return action, jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], 1)[:, 0]


def greedy(model) -> Callable[[jax.Array], jax.Array]:
    return lambda obs: jnp.argmax(model.actor(obs), -1).astype(jnp.int32)


def gae(
    values, rewards, dones, last_value, gamma: float, lam: float
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation (Schulman et al. 2016, arXiv 1506.02438), (T, B) arrays:

        delta_t = r_t + gamma (1 - d_t) V(s_t+1) - V(s_t);   A_t = delta_t + gamma lam (1 - d_t)
        A_t+1

    Returns (advantages, value targets A + V)."""

    def back(carry, x):
        next_adv, next_value = carry
        value, reward, done = x
        live = 1.0 - done.astype(jnp.float32)
        adv = reward + gamma * live * next_value - value + gamma * lam * live * next_adv
        return (adv, value), adv

    _, adv = lax.scan(
        back, (jnp.zeros_like(last_value), last_value), (values, rewards, dones), reverse=True
    )
    return adv, adv + values


class Rollout(NamedTuple):
    """T steps of B envs, as acted (PureJaxRL's `Transition`, stacked over time)."""

    obs: jax.Array  # (T + 1, B, *obs_shape): the last one bootstraps the value
    action: jax.Array  # (T, B) int32
    logp: jax.Array  # (T, B) log-probability of the action when it was taken
    reward: jax.Array  # (T, B)
    done: jax.Array  # (T, B) bool: an episode ended at this step


class Minibatch(NamedTuple):
    """Rows of a rollout with their advantages, as the loss sees them."""

    obs: jax.Array  # (N, *obs_shape)
    action: jax.Array  # (N,)
    logp: jax.Array  # (N,) at acting time
    value: jax.Array  # (N,) the value before the update
    adv: jax.Array  # (N,) GAE advantage
    ret: jax.Array  # (N,) the value target, adv + value


def loss(model, batch: Minibatch, cfg: Config) -> tuple[jax.Array, dict]:
    """The PPO loss of a minibatch."""
    logits, value = model(batch.obs)  # (N, A), (N,)
    logp_all = jax.nn.log_softmax(logits)
    ratio = jnp.exp(jnp.take_along_axis(logp_all, batch.action[:, None], 1)[:, 0] - batch.logp)
    adv = (batch.adv - batch.adv.mean()) / (batch.adv.std() + 1e-8)
    policy = -jnp.minimum(
        ratio * adv, jnp.clip(ratio, 1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv
    ).mean()
    clipped = batch.value + jnp.clip(value - batch.value, -cfg.clip_eps, cfg.clip_eps)
    value_loss = 0.5 * jnp.maximum((value - batch.ret) ** 2, (clipped - batch.ret) ** 2).mean()
    entropy = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
    total = policy + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
    return total, dict(loss=total, policy_loss=policy, value_loss=value_loss, entropy=entropy)


def update(model, opt_state, rollout: Rollout, key, cfg: Config, opt) -> tuple[Any, Any, dict]:
    """Advantages from the current value function, then `epochs` passes of shuffled minibatches."""
    T, B = rollout.action.shape
    obs = rollout.obs  # (T + 1, B, *obs_shape)
    values = model.critic(obs.reshape((T + 1) * B, *obs.shape[2:]))[:, 0].reshape(T + 1, B)
    adv, ret = gae(values[:-1], rollout.reward, rollout.done, values[-1], cfg.gamma, cfg.gae_lambda)
    data = Minibatch(obs[:-1], rollout.action, rollout.logp, values[:-1], adv, ret)  # (T, B, ...)
    data = jax.tree.map(lambda x: x.reshape(T * B, *x.shape[2:]), data)  # (T B, ...)

    def minibatch(carry, batch):
        model, opt_state = carry
        return gradient_step(opt, loss, model, opt_state, batch, cfg)

    def epoch(carry, key):
        order = jax.random.permutation(key, T * B)
        batches = jax.tree.map(lambda x: x[order].reshape(cfg.minibatches, -1, *x.shape[1:]), data)
        return lax.scan(minibatch, carry, batches)

    (model, opt_state), metrics = lax.scan(
        epoch, (model, opt_state), jax.random.split(key, cfg.epochs)
    )
    return model, opt_state, jax.tree.map(jnp.mean, metrics)


class Runner(NamedTuple):
    model: ActorCritic
    opt_state: tuple
    obs: jax.Array  # (B, *obs_shape)
    env_state: tuple
    running: jax.Array  # (B,) return of each env's current episode
    last_return: jax.Array
    key: jax.Array


def anakin(env, cfg: Config) -> tuple[Callable, Callable]:
    """(init, iteration) for frost.rl.anakin.run: one iteration is a rollout of T steps of B envs
    and one update; `cfg.updates` iterations make the run."""
    opt = optimizer(cfg)
    B = cfg.num_envs

    def init(key):
        model, obs, state, key = start(env, ActorCritic, cfg, key)
        return Runner(
            model=model,
            opt_state=opt.init(model),
            obs=obs,
            env_state=state,
            running=jnp.zeros(B),
            last_return=jnp.zeros(()),
            key=key,
        )

    def env_step(r: Runner, _):
        key, k_act, k_env = jax.random.split(r.key, 3)
        action, logp = act(r.model.actor, r.obs, jax.random.split(k_act, B))
        obs, state, reward, done = step_envs(env, k_env, r.env_state, action)
        return r._replace(obs=obs, env_state=state, key=key), (r.obs, action, logp, reward, done)

    def iteration(r: Runner, _):
        r, (obs, action, logp, reward, done) = lax.scan(env_step, r, None, cfg.num_steps)
        rollout = Rollout(jnp.concatenate([obs, r.obs[None]]), action, logp, reward, done)
        key, k_update = jax.random.split(r.key)
        model, opt_state, metrics = update(r.model, r.opt_state, rollout, k_update, cfg, opt)
        running, last, episodes = episode_metrics(reward, done, r)
        r = r._replace(model=model, opt_state=opt_state, running=running, last_return=last, key=key)
        return r, dict(metrics, **{"return": last, "episodes": episodes})

    return init, iteration


@functools.lru_cache
def _learner(cfg: Config):
    """The jitted update of Sebulba's learner (compiled once per config, not once per run)."""
    return jit(functools.partial(update, cfg=cfg, opt=optimizer(cfg)))


def sebulba(
    make_env, cfg: Config, seed: int = 0, actors: int = 2, deterministic: bool = True, *, on_update
) -> ActorCritic:
    """Train on host environments `make_env()` stepped by `actors` processes, `cfg.num_envs` in all.

    With `deterministic`, update u trains on rollout u of every actor (in actor order) and
    rollout u + 2 is acted with version u + 1 (Cleanba's ordering, Huang et al. 2023, arXiv
    2310.00036: actors act with v while the learner trains on data from v - 1), so the losses
    depend on neither timing nor the actor count. Otherwise each update takes the first rollouts
    to arrive. `on_update(u, metrics)` after each update; the policy lag is in the metrics.
    Returns the trained ActorCritic."""
    opt = optimizer(cfg)
    step = _learner(cfg)
    key = jax.random.key(seed)
    last = 0.0  # the mean return of the latest episodes to end
    with Actors(make_env, act, cfg.num_envs, cfg.num_steps, actors, seed, deterministic) as pool:

        def fresh(key):  # jitted: built op by op, eagerly, the model takes seconds of compiling
            model = ActorCritic(pool.observation_shape, pool.num_actions, cfg.hidden, key=key)
            return model, opt.init(model)

        model, opt_state = jit(fresh)(key)
        pool.submit(model.actor, 0)
        for u in range(cfg.updates):
            arrays, versions = pool.collect()  # the Rollout's fields, and "ret" (T, B)
            episodes = int(arrays["done"].sum())
            last = float(arrays["ret"].sum()) / episodes if episodes else last
            rollout = Rollout(*(arrays[k] for k in Rollout._fields))
            model, opt_state, metrics = step(model, opt_state, rollout, jax.random.fold_in(key, u))
            if u + pool.depth < cfg.updates:
                pool.submit(model.actor, u + 1)
            lag = u - versions
            metrics.update(episodes=episodes, lag_mean=float(lag.mean()), lag_max=int(lag.max()))
            on_update(u, dict(metrics, **{"return": last}))
    return model
