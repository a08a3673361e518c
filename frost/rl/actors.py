"""Sebulba (Hessel et al. 2021, arXiv 2104.06272; Cleanba, Huang et al. 2023, arXiv 2310.00036):
host environments (gymnasium's, or any object with gymnasium's `reset(seed=)` / `step(action)`)
stepped by actor processes that feed a jitted learner.

    make_env = functools.partial(gymnasium.make, "CartPole-v1")
    with Actors(make_env, ppo.act, num_envs=8, steps=128, actors=2) as pool:
        pool.submit(policy_net, version=0)    # each actor acts one rollout with these parameters
        rollout, versions = pool.collect()    # (T, B) arrays of all actors' envs, in actor order

How it works
- frost.data.workers' process pool (spawned processes, shared-memory slots, small messages on
  pipes, process sentinels; the loader's data workers run on it too) runs `_act` in each actor
  process. Of the B envs, actor w steps envs w*b .. (w+1)*b - 1 (b = B / actors); it owns
  `depth` slots, each one rollout of shared memory.
- `submit` sends each actor a task (slot, rollout index, version, parameters). The actor acts T
  steps, its policy inference batched over its envs on the host CPU, writes the rollout into the
  slot and answers (slot, version, traceback). Only `depth` tasks per actor are in flight: the
  slots are the bounded queue between actors and learner.
- Env i is seeded `seed + i` and its action keys derive from (seed, rollout, step, i), so a
  rollout is the same whichever actor steps env i: the data do not depend on the actor count.
- `collect` waits for the next rollout of every actor in order (deterministic) or takes the first
  `actors` to arrive, copies them out and frees their slots. An exception in an env reaches it
  as a WorkerError carrying the actor's traceback; a killed actor is seen at once through its
  process sentinel and raised; `close` stops and joins every actor.
"""

import collections
import os
import pickle
import traceback

import numpy as np

from frost.data.workers import Layout, Processes, WorkerError

# A rollout's fields: obs (T + 1, B, *obs_shape) float32, then these (T, B) arrays and their dtypes;
# `ret` holds an episode's return at the step it ended.
DTYPES = {
    "action": np.int32,
    "logp": np.float32,
    "reward": np.float32,
    "done": bool,
    "ret": np.float32,
}
FIELDS = ("obs", *DTYPES)


def _reset(envs, seed: int) -> np.ndarray:
    """The first observations of host envs, the i-th seeded `seed + i`, stacked as float32."""
    return np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]).astype(np.float32)


def _act(recv, send, slots, blob):
    """An actor process's loop (run by frost.data.workers' process pool)."""
    os.environ["JAX_PLATFORMS"] = "cpu"  # actors infer on the host; an accelerator is the learner's
    import jax

    from frost.rl.anakin import jit

    # after the line above: imports JAX
    make_env, act, num_envs, per_actor, steps, seed, deterministic = pickle.loads(blob)

    @jit
    def policy(net, obs, rollout, t, ids):  # the keys of (seed, rollout, step t, env i)
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), rollout), t)
        return act(net, obs, jax.vmap(jax.random.fold_in, (None, 0))(key, ids))

    envs = None
    while (task := recv()) is not None:
        actor, slot, rollout, version, net = task
        try:
            if envs is None:
                mine = slice(actor * per_actor, (actor + 1) * per_actor)
                # Deterministic: the policy sees all num_envs rows (its own filled), so that each
                # row's numbers are the same for any actor count (XLA's CPU dot rounds by batch
                # size). own: this actor's rows of the policy's batch; ids: the envs of the batch's
                # rows.
                own = mine
                ids = np.arange(num_envs)
                if not deterministic:
                    own = slice(None)
                    ids = ids[mine]
                envs = [make_env() for _ in range(per_actor)]
                obs = _reset(envs, seed + actor * per_actor)
                rows = np.zeros((len(ids), *obs.shape[1:]), np.float32)
                running = np.zeros(per_actor, np.float32)
            out = dict(zip(FIELDS, (x[0] for x in slots[slot])))
            for t in range(steps):
                rows[own] = obs
                action, logp = (np.asarray(x)[own] for x in policy(net, rows, rollout, t, ids))
                out["obs"][t] = obs
                out["action"][t] = action
                out["logp"][t] = logp
                for i, env in enumerate(envs):
                    next_obs, reward, terminated, truncated, _ = env.step(int(action[i]))
                    done = terminated or truncated
                    running[i] += reward
                    out["reward"][t, i] = reward
                    out["done"][t, i] = done
                    out["ret"][t, i] = running[i]
                    if done:
                        next_obs = env.reset()[0]
                        running[i] = 0.0
                    obs[i] = next_obs
            out["ret"] *= out["done"]
            out["obs"][steps] = obs
            send((slot, version, None))
        except Exception:
            send((slot, version, traceback.format_exc()))


class Actors:
    """`actors` processes stepping `num_envs` host envs `make_env()` (a picklable callable) in all,
    acting with `act(policy_net, obs (b, ...), keys (b,)) -> (action (b,), logp (b,))`, a
    module-level function (pickled by name; frost.rl.ppo.act for PPO)."""

    def __init__(
        self,
        make_env,
        act,
        num_envs: int,
        steps: int,
        actors: int = 2,
        seed: int = 0,
        deterministic: bool = True,
        depth: int = 2,
    ):
        if actors < 1 or num_envs % actors:
            raise ValueError(f"num_envs {num_envs} must be a positive multiple of actors {actors}")
        probe = make_env()
        obs = np.asarray(probe.reset(seed=seed)[0])
        self.observation_shape, self.num_actions = obs.shape, int(probe.action_space.n)
        getattr(probe, "close", lambda: None)()
        per_actor = num_envs // actors  # b, the envs each actor steps
        try:
            blob = pickle.dumps((make_env, act, num_envs, per_actor, steps, seed, deterministic))
        except Exception as e:
            e.add_note(
                "frost.rl: the env factory is pickled for the actor processes: use a module-level "
                "function or functools.partial, not a lambda"
            )
            raise
        # the slot of one rollout of an actor's envs
        arrays = {"obs": np.zeros((steps + 1, per_actor, *obs.shape), np.float32)}
        arrays.update({k: np.zeros((steps, per_actor), dtype) for k, dtype in DTYPES.items()})
        self.layout = Layout(arrays, 1)
        self.actors = actors
        self.depth = depth
        self.deterministic = deterministic
        self.pool = Processes(
            actors, _act, (blob,), self.layout, actors * depth, None, role="actor"
        )
        # each actor's free slots
        self.free = [
            collections.deque(range(actor * depth, (actor + 1) * depth)) for actor in range(actors)
        ]
        self.sent = [0] * actors  # rollouts asked of each actor
        # (actor, slot, version) of rollouts ready, in arrival order
        self.arrived = collections.deque()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.pool.procs]

    def submit(self, policy_net, version: int) -> None:
        """Hand every free slot to its actor for a rollout acted with `policy_net` (parameters
        `version`)."""
        import jax

        net = jax.tree.map(np.asarray, policy_net)
        for actor, free in enumerate(self.free):
            while free:
                self.pool.submit(actor, (actor, free.popleft(), self.sent[actor], version, net))
                self.sent[actor] += 1

    def _picked(self):
        if not self.deterministic:
            return list(self.arrived)[: self.actors] if len(self.arrived) >= self.actors else None
        # each actor's oldest ready rollout (written last)
        first = {ready[0]: ready for ready in reversed(self.arrived)}
        return [first[actor] for actor in range(self.actors)] if len(first) == self.actors else None

    def collect(self):
        """The next rollout of every actor (deterministic) or the first `actors` to arrive, joined
        along the env axis: (dict of (T, B) arrays, acting versions (actors,))."""
        while (picked := self._picked()) is None:
            for actor, (slot, version, trace) in self.pool.wait():
                if trace is not None:
                    raise WorkerError(
                        f"actor {actor} failed; its traceback:\n{trace}", traceback=trace
                    )
                self.arrived.append((actor, slot, version))
        parts = [self.layout.pack([x[0] for x in self.pool.slots[slot]]) for _, slot, _ in picked]
        # copies out of the slots
        rollout = {k: np.concatenate([part[k] for part in parts], axis=1) for k in FIELDS}
        for actor, slot, version in picked:
            self.arrived.remove((actor, slot, version))
            self.free[actor].append(slot)
        return rollout, np.array([version for _, _, version in picked])

    def close(self):
        self.pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def evaluate(
    make_env, policy, episodes: int = 100, seed: int = 0, max_steps: int = 100_000
) -> tuple[np.ndarray, np.ndarray]:
    """The return of the first episode of each of `episodes` host envs under `policy(obs (N, ...))
    -> actions (N,)`, batched over the envs (seeded from `seed + 10**6`, apart from training's),
    cut at `max_steps`: (returns (episodes,), cut (episodes,) bool, still running at the cut)."""
    envs = [make_env() for _ in range(episodes)]
    obs = _reset(envs, seed + 10**6)
    total = np.zeros(episodes)
    alive = np.ones(episodes, bool)
    for _ in range(max_steps):
        if not alive.any():
            break
        action = np.asarray(policy(obs))
        for i in np.flatnonzero(alive):
            obs[i], reward, terminated, truncated, _ = envs[i].step(int(action[i]))
            total[i] += reward
            alive[i] = not (terminated or truncated)
    return total, alive
