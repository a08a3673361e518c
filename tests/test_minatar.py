"""frost.rl.minatar: MinAtar's five games step for step beside the `minatar` package (1.0.15),
sticky actions on (MinAtar's 0.1), for 10,000 random-action steps each. Both sides make the same
random draws: the jnp game's (`Game.draw`), handed to minatar through a stand-in for its numpy
generator. The jnp side is one jitted lax.scan; minatar steps in Python beside it."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from minatar import Environment
from minatar.environments import breakout as minatar_breakout

from frost.rl import envs, minatar

STEPS = 10_000


class Replay:
    """A stand-in for MinAtar's numpy generator (each game's `self.random`, a RandomState): each
    call returns the draw the jnp game made for it. `values` maps each function of MinAtar that
    draws (the caller, found on the stack) to its draws in call order; it is set before each
    reset and each step. A draw is a number, or for a `randint(n)` whose n only MinAtar knows
    (Asterix's free rows) a function of n."""

    def __init__(self):
        self.values = {}

    def next(self, n=None):
        caller = sys._getframe(2).f_code.co_name
        value = self.values[caller].pop(0)
        return value(n) if callable(value) else value

    def rand(self, *size):
        return self.next()

    def randint(self, low, high=None, size=None):
        return self.next(low if high is None else high - low)


def floor_times(u):
    """MinAtar's randint(n) as Asterix draws it here: floor(u * n) in float32, as jnp computes."""
    return lambda n: int(np.floor(np.float32(u) * np.float32(n)))


def no_draws(draws, t):
    """The draws of a game that draws nothing there."""
    return {}


# Each game's draws at step t, as MinAtar's functions ask for them: {function: [draws]}.
START_DRAWS = {
    "breakout": lambda d, t: {"reset": [int(d[t])]},
    "freeway": lambda d, t: {
        "_randomize_cars": [d.speed[t].astype(np.int64), d.direction[t].astype(np.float64)]
    },
}
STEP_DRAWS = {
    "asterix": lambda d, t: {
        "_spawn_entity": [float(d.right[t]), float(d.gold[t]), floor_times(d.slot[t])]
    },
    "freeway": START_DRAWS["freeway"],
    "seaquest": lambda d, t: {
        "_spawn_enemy": [float(d.enemy_right[t]), float(d.enemy_sub[t]), int(d.enemy_row[t])],
        "_spawn_diver": [float(d.diver_right[t]), int(d.diver_row[t])],
    },
}


def jnp_rollout(env, key, steps):
    """`steps` random actions through `env.step`, one jitted lax.scan: the start draws, the first
    observation, then per step (the action chosen, the action taken, the step's draws, the
    observation after it, reward, done), as numpy."""

    def body(state, key):
        action_key, step_key = jax.random.split(key)
        action = jax.random.randint(action_key, (), 0, env.num_actions, jnp.int32)
        obs, state, reward, done, _ = env.step(step_key, state, action)
        taken = state.last_action
        return state, (action, taken, env.draw(step_key), obs.astype(bool), reward, done)

    start_key, run_key = jax.random.split(key)
    first, state = env.reset(start_key)
    run = jax.jit(lambda state, key: jax.lax.scan(body, state, jax.random.split(key, steps)))
    _, out = run(state, run_key)
    start = jax.tree.map(lambda x: np.asarray(x)[None], env.draw_start(start_key))
    return start, np.asarray(first, bool), jax.tree.map(np.asarray, out)


def first_difference(got, want) -> int | None:
    """The first step where two stacks differ, or None."""
    differs = (np.asarray(got) != np.asarray(want)).reshape(len(want), -1).any(1)
    return int(np.argmax(differs)) if differs.any() else None


@pytest.mark.parametrize("name", envs.MINATAR)
def test_game_steps_as_minatar(name):
    """Observation, reward and termination equal MinAtar's, step for step, sticky actions on."""
    env = envs.make(name)
    assert env.sticky == 0.1 and env.num_actions == len(env.actions)
    start, first, steps = jnp_rollout(env, jax.random.key(0), STEPS)
    actions, taken, draws, obs, rewards, dones = steps
    start_draws = START_DRAWS.get(name, no_draws)
    step_draws = STEP_DRAWS.get(name, no_draws)

    ref = Environment(name, sticky_action_prob=0.1)
    rng = Replay()
    ref.random = ref.env.random = rng
    rng.values = start_draws(start, 0)
    ref.reset()
    assert ref.minimal_action_set() == list(env.actions)
    seen = [ref.state()]  # MinAtar's observation after each step (a new episode's after its end)
    got = []  # and its (reward, done)
    for t in range(STEPS):
        rng.values = {"act": [float(draws.sticky[t])], **step_draws(draws.step, t)}
        reward, done = ref.act(env.actions[actions[t]])
        got.append((reward, done))
        if done:
            rng.values = start_draws(draws.start, t)
            ref.reset()
        seen.append(ref.state())
    seen = np.array(seen)
    got = np.array(got, np.float32)
    assert seen.shape[1:] == env.observation_shape
    np.testing.assert_array_equal(seen[0], first)
    for what, mine, theirs in (
        ("observation", obs, seen[1:]),
        ("reward", rewards, got[:, 0]),
        ("termination", dones, got[:, 1]),
    ):
        t = first_difference(mine, theirs)
        assert t is None, f"{name}: the {what} after step {t} differs from MinAtar's"
    # the test saw what it is for: sticky actions that changed the action, rewards, episode ends
    assert (taken != actions).sum() > 100
    assert (taken == actions)[draws.sticky >= 0.1].all()  # only a sticky draw changes it
    assert rewards.sum() > 0 and dones.sum() >= 3


def test_breakout_without_sticky_actions_follows_the_ball():
    """`sticky=0`: the deterministic Breakout of before sticky actions came. MinAtar's Breakout
    (actions no-op, left, right = MinAtar's 0, 1, 3), its start set from the jnp state's, gives
    the same observation, reward and termination every step, for a ball-following policy (long
    episodes: all bricks cleared and refilled, strikes in a row) and for random actions."""
    env = envs.make("breakout", sticky=0)

    def policy(s, key):
        k_eps, k_a = jax.random.split(key)
        aim = s.ball_x + jnp.array([-1, 1, 1, -1])[s.ball_dir]  # the ball's next column
        follow = jnp.where(aim < s.paddle, 1, jnp.where(aim > s.paddle, 2, 0)).astype(jnp.int32)
        random = jax.random.randint(k_a, (), 0, 3, jnp.int32)
        return jnp.where(jax.random.uniform(k_eps) < 0.05, random, follow)

    def play(key, steps, policy):
        def body(state, key):
            k_act, k_step = jax.random.split(key)
            action = policy(state, k_act)
            _, new, reward, done, _ = env.step(k_step, state, action)
            return new, (state, action, reward, done)

        _, state = env.reset(jax.random.fold_in(key, 1 << 30))
        run = jax.jit(lambda s, k: jax.lax.scan(body, s, jax.random.split(k, steps)))
        return jax.tree.map(np.asarray, run(state, key)[1])

    follow = play(jax.random.key(4), 4000, policy)
    rand = play(jax.random.key(5), 2000, lambda s, k: jax.random.randint(k, (), 0, 3))
    observe = jax.jit(jax.vmap(env.observe))
    ref = minatar_breakout.Env()
    for states, actions, rewards, dones in (follow, rand):
        seen, got = [], []  # MinAtar's observation before each step, and its (reward, done)
        for t in range(len(actions)):
            if t == 0 or dones[t - 1]:
                ref.reset()
                ref.ball_x = int(states.ball_x[t])
                ref.ball_dir = int(states.ball_dir[t])
                ref.last_x = int(states.last_x[t])
            seen.append(ref.state())
            got.append(ref.act((0, 1, 3)[int(actions[t])]))
        np.testing.assert_array_equal(np.array(seen), np.asarray(observe(states)))
        np.testing.assert_array_equal(np.array(got), np.stack([rewards, dones], 1))
    episodes = np.split(follow[2], np.flatnonzero(follow[3]) + 1)
    # an episode cleared all 30 bricks, so they were refilled
    assert max(e.sum() for e in episodes) > 30
    assert rand[3].sum() > 100


def test_sticky_actions_repeat_the_previous_action_and_carry_over():
    """With sticky=0.5, a step whose sticky draw is below 0.5 acts as the previous action did,
    across an episode's end too; the others act as chosen; sticky=0 never repeats."""
    env = envs.make("breakout", sticky=0.5)

    def body(state, key):
        action_key, step_key = jax.random.split(key)
        action = jax.random.randint(action_key, (), 0, 3, jnp.int32)
        _, new, _, done, _ = env.step(step_key, state, action)
        repeat = env.draw(step_key).sticky < 0.5
        return new, (state.last_action, action, repeat, new.last_action, done)

    _, state = env.reset(jax.random.key(0))
    run = jax.jit(lambda s, k: jax.lax.scan(body, s, jax.random.split(k, 2000)))
    before, chosen, repeat, taken, done = jax.tree.map(np.asarray, run(state, jax.random.key(1))[1])
    np.testing.assert_array_equal(taken, np.where(repeat, before, chosen))
    assert 900 < repeat.sum() < 1100
    assert (repeat[1:] & done[:-1] & (taken[1:] != chosen[1:])).sum() > 10  # into a new episode
    assert envs.make("breakout", sticky=0).draw(jax.random.key(0)).sticky is None


def test_make_and_the_old_import_path():
    assert envs.Breakout is minatar.Breakout
    from frost.rl.envs import Breakout, BreakoutState

    assert (Breakout, BreakoutState) == (minatar.Breakout, minatar.BreakoutState)
    assert set(envs.MINATAR) == set(minatar.GAMES)
    assert envs.make("seaquest", sticky=0.25).sticky == 0.25
    with pytest.raises(ValueError, match="cartpole has no sticky actions"):
        envs.make("cartpole", sticky=0.1)
    with pytest.raises(ValueError, match="a probability in"):
        envs.make("freeway", sticky=1.0)


# --- corners random play seldom reaches, from states set by hand ----------------------------------


def seaquest_into_minatar(state, game):
    """Set minatar's Seaquest `game` (a minatar.environments.seaquest.Env) to the jnp `state`."""
    s = jax.tree.map(lambda x: np.asarray(x).tolist(), state)
    game.sub_x, game.sub_y, game.sub_or = s.sub_x, s.sub_y, s.facing_right
    game.oxygen, game.diver_count, game.surface = s.oxygen, s.divers_held, s.surfaced
    game.shot_timer, game.ramp_index, game.move_speed = s.shot_timer, s.ramp_index, s.move_speed
    game.e_spawn_speed, game.e_spawn_timer = s.enemy_spawn_speed, s.enemy_spawn_timer
    game.d_spawn_timer = s.diver_spawn_timer
    b, e, d = s.bullets, s.enemies, s.divers

    def in_order(slots):  # the slots alive, in MinAtar's list order
        return sorted(
            (i for i in range(len(slots.x)) if slots.alive[i]), key=slots.came_in.__getitem__
        )

    game.f_bullets = [[b.x[i], b.y[i], b.right[i]] for i in in_order(b)]
    enemies = in_order(e)
    game.e_fish = [[e.x[i], e.y[i], e.right[i], e.move_timer[i]] for i in enemies if not e.sub[i]]
    game.e_subs = [
        [e.x[i], e.y[i], e.right[i], e.move_timer[i], e.shot_timer[i]] for i in enemies if e.sub[i]
    ]
    game.divers = [[d.x[i], d.y[i], d.right[i], d.timer[i]] for i in in_order(d)]
    game.e_bullets = [
        [x, y, right]
        for right, grid in ((True, s.enemy_bullets_right), (False, s.enemy_bullets_left))
        for y in range(10)
        for x in range(10)
        if grid[y][x]
    ]
    game.terminal = False


def space_invaders_into_minatar(state, game):
    """Set minatar's Space Invaders `game` to the jnp `state`."""
    s = jax.tree.map(np.asarray, state)
    game.pos, game.alien_dir, game.ramp_index = int(s.cannon_x), int(s.alien_dir), int(s.ramp_index)
    game.alien_map = s.aliens.astype(float)
    game.f_bullet_map = s.bullets.astype(float)
    game.e_bullet_map = s.alien_bullets.astype(float)
    game.enemy_move_interval, game.alien_move_timer = int(s.move_interval), int(s.move_timer)
    game.alien_shot_timer, game.shot_timer = int(s.alien_shot_timer), int(s.shot_timer)
    game.terminal = False


def slots(cls, capacity, *entries):
    """`cls` (Bullets, Enemies or Divers) with `entries` (tuples of its fields but `came_in` and
    `alive`), in this order, in its last slots (any slots will do)."""
    free = capacity - len(entries)
    columns = [jnp.array([c[0]] * free + list(c)) for c in zip(*entries)]
    came_in = jnp.arange(capacity) - free - 100  # before the first step
    return cls(*columns, came_in, jnp.arange(capacity) >= free)


def seaquest_scenarios(env):
    """(name, state, actions) for Seaquest's corners."""
    start = env.start(None)._replace(sub_x=jnp.int32(2), sub_y=jnp.int32(7))
    start = start._replace(surfaced=jnp.bool_(False))
    no_op, up, down, fire = 0, 2, 4, 5
    sub_then_fish = slots(
        minatar.Enemies,
        env.ENEMIES,
        (8, 4, False, True, 3, 9),  # x, y, right, sub, move_timer, shot_timer
        (8, 4, False, False, 3, 0),
    )
    two_subs = slots(
        minatar.Enemies, env.ENEMIES, (7, 4, False, True, 0, 5), (7, 4, False, True, 0, 7)
    )
    firing_sub = slots(minatar.Enemies, env.ENEMIES, (7, 4, False, True, 0, 0))
    fish = slots(minatar.Enemies, env.ENEMIES, (4, 4, False, False, 3, 0))
    bullet = slots(minatar.Bullets, env.BULLETS, (5, 4, True))
    crossing = slots(minatar.Bullets, env.BULLETS, (3, 4, True), (5, 4, False))
    two_divers = slots(minatar.Divers, env.DIVERS, (5, 4, True, 3), (5, 4, False, 2))
    return [
        # a bullet in a cell with a sub and a fish shoots the fish, though the sub came first
        (
            "fish first",
            start._replace(
                sub_x=jnp.int32(5),
                sub_y=jnp.int32(4),
                facing_right=jnp.bool_(True),
                enemies=sub_then_fish,
            ),
            [fire] + [no_op] * 5,
        ),
        # two subs move into a bullet's cell: the newer one is shot, the other fires 2 steps later
        ("newest sub", start._replace(enemies=two_subs, bullets=bullet), [no_op] * 12),
        # a sub shot as it fires still fires
        ("shot sub fires", start._replace(enemies=firing_sub, bullets=bullet), [no_op] * 4),
        # two bullets meet in a fish's cell: the newer one is spent, the older flies on
        ("newest bullet", start._replace(enemies=fish, bullets=crossing), [no_op] * 4),
        # two divers in the submarine's cell with 5 on board: the newer one is picked up
        (
            "sixth diver",
            start._replace(
                sub_x=jnp.int32(5), sub_y=jnp.int32(4), divers_held=jnp.int32(5), divers=two_divers
            ),
            [no_op] * 5 + [up] * 4,
        ),
        # surfacing with six divers: +1 a tenth of oxygen, then -1 divers on board, and each
        # surfacing after refills the oxygen
        (
            "six divers",
            start._replace(sub_y=jnp.int32(1), divers_held=jnp.int32(6), oxygen=jnp.int32(150)),
            [up, down, up, down, down, up, up, down, up],
        ),
    ]


def space_invaders_scenarios(env):
    """(name, state, actions) for Space Invaders: the last alien shot brings a faster wave."""
    aliens = jnp.zeros((10, 10), bool).at[2, 5].set(True)
    bullets = jnp.zeros((10, 10), bool).at[4, 5].set(True)
    state = env.start(None)._replace(aliens=aliens, bullets=bullets, move_timer=jnp.int32(5))
    return [("new wave", state, [0, 0, 0, 3] + [1] * 5 + [0] * 20)]  # fire, then out of reach


@pytest.mark.parametrize(
    "name, into_minatar, scenarios",
    [
        ("seaquest", seaquest_into_minatar, seaquest_scenarios),
        ("space_invaders", space_invaders_into_minatar, space_invaders_scenarios),
    ],
)
def test_corners_step_as_minatar(name, into_minatar, scenarios):
    """From states set by hand on both sides (no sticky actions, no spawns): the same
    observations, rewards and terminations, for the rules random play seldom reaches."""
    env = envs.make(name, sticky=0)
    step = jax.jit(env.step)
    key = jax.random.key(0)
    for scenario, state, actions in scenarios(env):
        game = Environment(name).env  # the game itself: no sticky draw
        game.random = Replay()  # nothing may be drawn here
        into_minatar(state, game)
        np.testing.assert_array_equal(game.state(), env.observe(state), err_msg=scenario)
        rewards = []
        for t, action in enumerate(actions):
            obs, state, reward, done, _ = step(key, state, jnp.int32(action))
            want_reward, want_done = game.act(env.actions[action])
            assert (float(reward), bool(done)) == (want_reward, want_done), (scenario, t)
            rewards.append(want_reward)
            if done:
                break
            np.testing.assert_array_equal(game.state(), obs, err_msg=f"{scenario}, step {t}")
        assert sum(rewards) > 0, scenario
