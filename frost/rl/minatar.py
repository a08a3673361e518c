"""MinAtar's five games in jax.numpy (Young & Tian 2019, "MinAtar: An Atari-Inspired Testbed for
Thorough and Reproducible Reinforcement Learning", arXiv 1903.03176): Asterix, Breakout, Freeway,
Seaquest and Space Invaders, each step for step as the `minatar` package (1.0.15): its minimal
action set, its observation channels (10 x 10 x channels, NHWC), its difficulty ramping and its
sticky actions.

```python
from frost.rl import envs

env = envs.make("seaquest")                   # sticky=0.1, MinAtar's default; sticky=0: none
obs, state = env.reset(key)                   # obs (10, 10, 10) float32
obs, state, reward, done, info = env.step(key, state, action)
```

Sticky actions: as `minatar.Environment.act`, with probability `sticky` the game is given the
previous action instead of the one chosen, in training and in evaluation alike. The previous
action carries over into the next episode, as MinAtar's `last_action` does.

Randomness: every draw MinAtar makes from numpy is made here from `step`'s key. `Game.draw(key)`
makes all the draws a step may need before the step, as a `Draws`: the sticky draw, the game's
draws for its transition (Asterix's and Seaquest's spawns, Freeway's car speeds after a
crossing) and the draws of the episode that starts if this one ends (Breakout's ball, Freeway's
cars). MinAtar's `rand() < p` is `uniform < p` here, `randint(low, high)` is
`jax.random.randint(key, (), low, high)`, and Asterix's `randint` over its free rows, a count
known only inside the step, is `floor(uniform * count)`. tests/test_minatar.py hands the same
draws to `minatar` (through a stand-in for its numpy generator) and checks observations, rewards
and terminations for 10,000 random-action steps of each game.

Using the key every step costs speed most where nothing else is drawn: with sticky actions,
Breakout and Space Invaders stepped 0.57-0.86x as fast as without, Asterix, Freeway and
Seaquest (which draw every step anyway) 0.66-1.0x, over 1 to 4096 envs (`python
benchmarks/rl.py --quick --part minatar-envs`, a shared 2-core CPU, 2026-12-07). Without sticky
actions a game that draws nothing in its transition (Breakout, Space Invaders) gives its key to
the next episode's start untouched, so `sticky=0` repeats Breakout's runs from before sticky
actions came, bit for bit.

Fixed-size state: MinAtar keeps Seaquest's fish, subs, divers and bullets in Python lists. Here
each list is an array of slots, each entry with `came_in`, the step it was added: MinAtar's
list order is the order of `came_in`, so "the first fish in this cell" and "the subs, newest
first" mean what they mean in MinAtar, and a new entry takes any free slot (keeping the slots
in list order instead, sorting them every step, made Seaquest's step 2-3x slower). Each
capacity is the most entries MinAtar can hold at once (see `Seaquest`), so nothing is ever
dropped. Everything else is fixed-size already (Asterix's eight rows, Freeway's eight cars,
Breakout's and Space Invaders' 10 x 10 maps).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from frost.rl.envs import Env
from frost.tree import PyTree, where

i32, f32 = jnp.int32, jnp.float32
NEVER = jnp.iinfo(jnp.int32).max  # later than any step (and -NEVER earlier)


class Draws(NamedTuple):
    """The random draws of one step (see the module docstring).

    Attributes:
        sticky: () float32 uniform in [0, 1): the action repeats the previous one where it is
            below `Game.sticky`; None when the game has no sticky actions (`sticky=0`).
        step: the game's draws for its transition (a NamedTuple), or None if it draws nothing.
        start: the draws of the episode that starts if this one ends, or None.
    """

    sticky: jax.Array | None
    step: Any
    start: Any


class Game(Env):
    """A MinAtar game with sticky actions; `step` is built here from what a game defines:

        draw_start(key) -> draws       # a new episode's draws (None: it draws nothing)
        start(draws) -> state          # a new episode's state (its last_action 0, no-op)
        draw_step(key) -> draws        # one transition's draws (None: it draws nothing)
        transition(state, action, draws) -> (state, reward, terminated)
        observe(state) -> obs          # (10, 10, channels) float32, MinAtar's `state()`

    Each game's state is a NamedTuple with a `last_action` field. MinAtar has no time limit
    (only Freeway ends, after 2500 steps), so `truncated` is always False; evaluation stops after
    `eval_steps` steps.

    Arguments:
        sticky: the probability that a step repeats the previous action instead of the one
            chosen (MinAtar's `sticky_action_prob`, 0.1 by default); 0 turns sticky actions off.

    Attributes:
        actions: MinAtar's index of each action: action i here is MinAtar's `actions[i]`
            (its minimal action set; MinAtar's full set is no-op, left, up, right, down, fire).
        draws_each_step: whether `transition` draws random numbers.
    """

    actions: tuple[int, ...]
    draws_each_step: bool
    eval_steps = 1000

    def __init__(self, sticky: float = 0.1):
        if not 0 <= sticky < 1:
            raise ValueError(f"sticky={sticky}: a probability in [0, 1)")
        self.sticky = sticky

    def init(self, key):
        return self.start(self.draw_start(key))

    def draw(self, key: jax.Array) -> Draws:
        """All the random draws one step may need, made before the step.

        Arguments:
            key: a PRNG key (`jax.random.key`): `step`'s key.

        Returns:
            The `Draws`. Where the step draws nothing but a new episode's start (no sticky
            actions, no random transitions), the start draws take `key` itself.
        """
        if self.sticky == 0 and not self.draws_each_step:
            return Draws(None, None, self.draw_start(key))
        sticky_key, step_key, start_key = jax.random.split(key, 3)
        sticky = jax.random.uniform(sticky_key) if self.sticky > 0 else None
        return Draws(sticky, self.draw_step(step_key), self.draw_start(start_key))

    def step(
        self, key: jax.Array, state: PyTree, action: jax.Array
    ) -> tuple[jax.Array, PyTree, jax.Array, jax.Array, dict]:
        """One step with sticky actions, resetting by itself (as `Env.step`).

        Arguments:
            key: a PRNG key (`jax.random.key`), for all of the step's draws (`draw`).
            state: the game's state (its state NamedTuple).
            action: () int32, the action chosen, in 0 .. num_actions - 1.

        Returns:
            (obs, state, reward, done, info), as `Env.step`: the observation (10, 10, channels)
            float32, the state, the reward () float32, done () bool and info {"terminated",
            "truncated"}.
        """
        draws = self.draw(key)
        if self.sticky > 0:  # minatar.Environment.act: the previous action, with probability sticky
            action = jnp.where(draws.sticky < self.sticky, state.last_action, action)
        action = jnp.asarray(action, i32)
        state, reward, terminated = self.transition(state, action, draws.step)
        state = state._replace(last_action=action)
        start = self.start(draws.start)._replace(last_action=action)
        state = where(terminated, start, state)
        info = {"terminated": terminated, "truncated": jnp.zeros((), bool)}
        return self.observe(state), state, reward.astype(f32), terminated, info

    def draw_step(self, key):
        """One transition's draws; None for a game whose transitions are deterministic."""
        return None

    def draw_start(self, key):
        """A new episode's draws; None for a game whose start is always the same."""
        return None


def _paint(
    obs: jax.Array, y: jax.Array, x: jax.Array, channel: int | jax.Array, mask: jax.Array
) -> jax.Array:
    """`obs` with 1 at (y, x, channel) of each entity where `mask` holds.

    Arguments:
        obs: (10, 10, C) float32, the observation so far.
        y: (N,) int32 rows.
        x: (N,) int32 columns; where `mask` is False, any value (off the board too).
        channel: an int or (N,) int32, each entity's channel.
        mask: (N,) bool, the entities to paint.

    Returns:
        (10, 10, C) float32. The entities left out add nothing: they are painted with 0 under a
        maximum (an index -1 reads as 9, one of 10 is dropped; either way 0 changes nothing).
    """
    return obs.at[y, x, channel].max(mask.astype(f32))


def _count_down(timer: jax.Array) -> jax.Array:
    """MinAtar's `timer -= timer > 0`: one step less, down to 0.

    Arguments:
        timer: an int32 array of steps.

    Returns:
        `timer` less 1 where it is above 0, else 0.
    """
    return jnp.maximum(timer - 1, 0)


# --- Breakout ------------------------------------------------------------------------------------


class BreakoutState(NamedTuple):
    """Breakout's state, each field a () array but `bricks`.

    Attributes:
        ball_x: the ball's column, int32.
        ball_y: the ball's row, 0 at the top, int32.
        ball_dir: the ball's direction, int32: 0 up-left, 1 up-right, 2 down-right, 3 down-left.
        last_x: the ball's column on the previous step (the observation's trail).
        last_y: its row on the previous step.
        paddle: the paddle's column on the bottom row, int32.
        bricks: (10, 10) bool, True where a brick stands.
        strike: bool, the ball broke a brick on the previous step.
        last_action: int32, the action taken on the previous step (sticky actions repeat it).
    """

    ball_x: jax.Array
    ball_y: jax.Array
    ball_dir: jax.Array  # 0 up-left, 1 up-right, 2 down-right, 3 down-left
    last_x: jax.Array
    last_y: jax.Array
    paddle: jax.Array
    bricks: jax.Array  # (10, 10) bool
    strike: jax.Array  # the ball hit a brick on the previous step
    last_action: jax.Array


class Breakout(Game):
    """MinAtar's Breakout (Young & Tian 2019), step for step as `minatar.environments.breakout`,
    with its minimal action set: no-op (0), left (1), right (2). A ball moves diagonally on a
    10 x 10 grid under three rows of bricks (+1 each, refilled when all are gone); the episode
    ends when the paddle misses it. The ball starts in row 3, at column 0 going down-right or
    at column 9 going down-left. Observation (10, 10, 4), channels paddle, ball, trail (the
    ball's last cell), brick. Evaluation stops at 1000 steps.

    Arguments:
        sticky: the probability of repeating the previous action (see `Game`).
    """

    actions = (0, 1, 3)  # MinAtar's no-op, left, right
    draws_each_step = False
    observation_shape = (10, 10, 4)
    num_actions = 3
    # the new direction per old one: off a side wall, off the top (or a brick, or the paddle's
    # centre), off the paddle's edge
    FLIP_X = (1, 0, 3, 2)
    FLIP_Y = (3, 2, 1, 0)
    PADDLE_EDGE = (2, 3, 0, 1)

    def draw_start(self, key):
        return jax.random.randint(key, (), 0, 2, i32)  # MinAtar's ball_start = randint(2)

    def start(self, ball_start):
        # ball_start 0: at (3, 0) going down-right; 1: at (3, 9) going down-left
        x = 9 * ball_start
        y = i32(3)
        return BreakoutState(
            x, y, 2 + ball_start, x, y, i32(4), self.wall(), jnp.zeros((), bool), i32(0)
        )

    def wall(self):
        """A new episode's bricks, and the refill when all are gone: rows 1 to 3."""
        return jnp.zeros((10, 10), bool).at[1:4].set(True)

    def transition(self, state, action, draws):
        flip_x = jnp.array(self.FLIP_X, i32)
        flip_y = jnp.array(self.FLIP_Y, i32)
        edge = jnp.array(self.PADDLE_EDGE, i32)
        move = jnp.where(action == 1, -1, jnp.where(action == 2, 1, 0))
        paddle = jnp.clip(state.paddle + move, 0, 9)
        x = state.ball_x + jnp.array([-1, 1, 1, -1], i32)[state.ball_dir]
        y = state.ball_y + jnp.array([-1, -1, 1, 1], i32)[state.ball_dir]
        # the new direction, off a side wall
        direction = jnp.where((x < 0) | (x > 9), flip_x[state.ball_dir], state.ball_dir)
        x = jnp.clip(x, 0, 9)
        top = y < 0
        y = jnp.maximum(y, 0)
        brick = ~top & state.bricks[y, x]
        gain = brick & ~state.strike  # a brick breaks only if the last step broke none
        bottom = ~top & ~brick & (y == 9)
        bricks = state.bricks.at[y, x].set(state.bricks[y, x] & ~gain)
        bricks = jnp.where(bottom & ~bricks.any(), self.wall(), bricks)
        centre = bottom & (state.ball_x == paddle)  # straight back up
        side = bottom & ~centre & (x == paddle)  # off the paddle's edge
        bounce = jnp.where(side, edge[direction], direction)
        direction = jnp.where(top | gain | centre, flip_y[direction], bounce)
        y = jnp.where(gain | centre | side, state.ball_y, y)
        new = BreakoutState(
            x, y, direction, state.ball_x, state.ball_y, paddle, bricks, brick, state.last_action
        )
        return new, gain.astype(f32), bottom & ~centre & ~side

    def observe(self, state):
        obs = jnp.zeros((10, 10, 4), f32)  # channels paddle, ball, trail, brick
        obs = obs.at[9, state.paddle, 0].set(1.0)
        obs = obs.at[state.ball_y, state.ball_x, 1].set(1.0)
        obs = obs.at[state.last_y, state.last_x, 2].set(1.0)
        return obs.at[:, :, 3].set(state.bricks.astype(f32))


# --- Asterix -------------------------------------------------------------------------------------


class AsterixState(NamedTuple):
    """Asterix's state. The entity of row r (1 to 8) is entry r - 1 of the (8,) arrays.

    Attributes:
        player_x: () int32, the player's column.
        player_y: () int32, the player's row (1 to 8).
        entity_x: (8,) int32, each row's entity's column.
        alive: (8,) bool, whether the row holds an entity.
        right: (8,) bool, the entity moves right (it came in on the left; MinAtar's `lr`).
        gold: (8,) bool, the entity is treasure (+1 when picked up), else an enemy.
        spawn_speed: () int32, the steps between spawns.
        spawn_timer: () int32, the steps until the next spawn.
        move_speed: () int32, the steps between the entities' moves, less one.
        move_timer: () int32, the steps until they move.
        ramp_timer: () int32, the steps until the difficulty ramps up.
        ramp_index: () int32, how often it has.
        last_action: () int32, the action taken on the previous step.
    """

    player_x: jax.Array
    player_y: jax.Array
    entity_x: jax.Array  # (8,)
    alive: jax.Array  # (8,) bool
    right: jax.Array  # (8,) bool
    gold: jax.Array  # (8,) bool
    spawn_speed: jax.Array
    spawn_timer: jax.Array
    move_speed: jax.Array
    move_timer: jax.Array
    ramp_timer: jax.Array
    ramp_index: jax.Array
    last_action: jax.Array


class AsterixDraws(NamedTuple):
    """One Asterix step's draws, each a () float32 uniform (MinAtar's `_spawn_entity`).

    Attributes:
        right: below 1/2, a new entity comes in on the left, moving right.
        gold: below 1/3, it is treasure.
        slot: floor(slot * free rows) picks its row among the free ones.
    """

    right: jax.Array
    gold: jax.Array
    slot: jax.Array


class Asterix(Game):
    """MinAtar's Asterix (Young & Tian 2019), step for step as `minatar.environments.asterix`,
    with its minimal action set: no-op (0), left (1), up (2), right (3), down (4). The player
    moves on rows 1 to 8; enemies and treasure come in from the sides, one row each, and cross
    the board. Treasure picked up gives +1; touching an enemy ends the episode. Every 100 steps
    they come faster and more often (MinAtar's difficulty ramping, on by default). Observation
    (10, 10, 4), channels player, enemy, trail (each entity's last cell), gold.

    Arguments:
        sticky: the probability of repeating the previous action (see `Game`).
    """

    actions = (0, 1, 2, 3, 4)  # MinAtar's no-op, left, up, right, down
    draws_each_step = True
    observation_shape = (10, 10, 4)
    num_actions = 5
    DX = (0, -1, 0, 1, 0)  # the player's move per action
    DY = (0, 0, -1, 0, 1)
    # minatar.environments.asterix's constants
    ramp_interval = 100
    init_spawn_speed = 10
    init_move_interval = 5

    def draw_step(self, key):
        return AsterixDraws(*jax.random.uniform(key, (3,)))

    def start(self, draws):
        no = jnp.zeros(8, bool)
        return AsterixState(
            player_x=i32(5),
            player_y=i32(5),
            entity_x=jnp.zeros(8, i32),
            alive=no,
            right=no,
            gold=no,
            spawn_speed=i32(self.init_spawn_speed),
            spawn_timer=i32(self.init_spawn_speed),
            move_speed=i32(self.init_move_interval),
            move_timer=i32(self.init_move_interval),
            ramp_timer=i32(self.ramp_interval),
            ramp_index=i32(0),
            last_action=i32(0),
        )

    def transition(self, state, action, draws):
        rows = jnp.arange(1, 9)  # each entity's row
        # --- a new entity when the spawn timer is up, in a free row drawn at random
        spawn = state.spawn_timer == 0
        free = ~state.alive
        count = free.sum()
        # MinAtar's randint(len(slot_options)): the k-th free row
        k = jnp.floor(draws.slot * count.astype(f32)).astype(i32)
        slot = jnp.argmax(free & (jnp.cumsum(free) == k + 1))
        new = spawn & (count > 0)
        right = draws.right < 1 / 2
        entity_x = state.entity_x.at[slot].set(
            jnp.where(new, jnp.where(right, 0, 9), state.entity_x[slot])
        )
        alive = state.alive.at[slot].set(state.alive[slot] | new)
        moving_right = state.right.at[slot].set(jnp.where(new, right, state.right[slot]))
        gold = state.gold.at[slot].set(jnp.where(new, draws.gold < 1 / 3, state.gold[slot]))
        spawn_timer = jnp.where(spawn, state.spawn_speed, state.spawn_timer)

        # --- the player moves
        x = jnp.clip(state.player_x + jnp.array(self.DX, i32)[action], 0, 9)
        y = jnp.clip(state.player_y + jnp.array(self.DY, i32)[action], 1, 8)

        # --- an entity in the player's cell: treasure is picked up (+1), an enemy ends the game
        here = alive & (entity_x == x) & (rows == y)
        reward = (here & gold).sum()
        terminated = (here & ~gold).any()
        alive = alive & ~(here & gold)

        # --- every move_speed + 1 steps the entities move one cell; off the board, they are gone
        move = state.move_timer == 0
        entity_x = jnp.where(move & alive, entity_x + jnp.where(moving_right, 1, -1), entity_x)
        alive = alive & (entity_x >= 0) & (entity_x <= 9)
        here = move & alive & (entity_x == x) & (rows == y)
        reward = reward + (here & gold).sum()
        terminated = terminated | (here & ~gold).any()
        alive = alive & ~(here & gold)
        move_timer = jnp.where(move, state.move_speed, state.move_timer)

        # --- timers, and the difficulty ramping up every ramp_interval steps
        spawn_timer = spawn_timer - 1
        move_timer = move_timer - 1
        ramping = (state.spawn_speed > 1) | (state.move_speed > 1)
        waiting = state.ramp_timer >= 0
        ramp = ramping & ~waiting
        ramp_timer = jnp.where(ramp, self.ramp_interval, state.ramp_timer)
        ramp_timer = jnp.where(ramping & waiting, ramp_timer - 1, ramp_timer)
        odd = state.ramp_index % 2 == 1
        faster = ramp & (state.move_speed > 1) & odd
        move_speed = jnp.where(faster, state.move_speed - 1, state.move_speed)
        sooner = ramp & (state.spawn_speed > 1)
        spawn_speed = jnp.where(sooner, state.spawn_speed - 1, state.spawn_speed)
        ramp_index = jnp.where(ramp, state.ramp_index + 1, state.ramp_index)

        new_state = AsterixState(
            player_x=x,
            player_y=y,
            entity_x=entity_x,
            alive=alive,
            right=moving_right,
            gold=gold,
            spawn_speed=spawn_speed,
            spawn_timer=spawn_timer,
            move_speed=move_speed,
            move_timer=move_timer,
            ramp_timer=ramp_timer,
            ramp_index=ramp_index,
            last_action=state.last_action,
        )
        return new_state, reward.astype(f32), terminated

    def observe(self, state):
        rows = jnp.arange(1, 9)
        obs = jnp.zeros((10, 10, 4), f32)  # channels player, enemy, trail, gold
        obs = obs.at[state.player_y, state.player_x, 0].set(1.0)
        obs = _paint(obs, rows, state.entity_x, jnp.where(state.gold, 3, 1), state.alive)
        back = state.entity_x - jnp.where(state.right, 1, -1)  # the cell it came from
        return _paint(obs, rows, back, 2, state.alive & (back >= 0) & (back <= 9))


# --- Freeway -------------------------------------------------------------------------------------


class FreewayState(NamedTuple):
    """Freeway's state. Car i drives on row i + 1.

    Attributes:
        chicken_y: () int32, the chicken's row (it stays in column 4); 9 at the bottom.
        car_x: (8,) int32, each car's column.
        car_timer: (8,) int32, the steps until each car moves.
        car_speed: (8,) int32, signed: a car moves a cell when its timer is 0 and sets the
            timer to |speed| (so it moves every |speed| + 1 steps); right if speed > 0.
        move_timer: () int32, the steps until the chicken may move again.
        time_left: () int32, the steps until the episode ends (MinAtar's terminate_timer).
        last_action: () int32, the action taken on the previous step.
    """

    chicken_y: jax.Array
    car_x: jax.Array  # (8,)
    car_timer: jax.Array  # (8,)
    car_speed: jax.Array  # (8,) signed
    move_timer: jax.Array
    time_left: jax.Array
    last_action: jax.Array


class FreewayDraws(NamedTuple):
    """New car speeds, at the start and after each crossing (MinAtar's `_randomize_cars`).

    Attributes:
        speed: (8,) int32 in 1 .. 5 (`randint(1, 6, 8)`).
        direction: (8,) float32 uniform: below 1/2 the car drives left, else right.
    """

    speed: jax.Array
    direction: jax.Array


class Freeway(Game):
    """MinAtar's Freeway (Young & Tian 2019), step for step as `minatar.environments.freeway`,
    with its minimal action set: no-op (0), up (1), down (2). A chicken crosses eight lanes of
    cars, moving at most once every 3 steps; reaching the top gives +1, puts it back at the
    bottom and draws new car speeds; a car hitting it sends it back to the bottom. The episode
    ends after 2500 steps (2501 transitions, as MinAtar counts). Observation (10, 10, 7),
    channels chicken, car, and five trail channels, one per car speed (the trail's side gives
    the direction).

    MinAtar sets a car's direction to `sign(u - 1/2)` for a uniform u, so u = 1/2 exactly
    (probability 2^-23 here) would stop a car and leave its trail channel undefined; here that
    car drives right.

    Arguments:
        sticky: the probability of repeating the previous action (see `Game`).
    """

    actions = (0, 2, 4)  # MinAtar's no-op, up, down
    draws_each_step = True
    observation_shape = (10, 10, 7)
    num_actions = 3
    eval_steps = 2501  # the whole episode
    player_speed = 3  # minatar.environments.freeway's constants
    time_limit = 2500

    def draw_start(self, key):
        speed_key, direction_key = jax.random.split(key)
        return FreewayDraws(
            jax.random.randint(speed_key, (8,), 1, 6, i32), jax.random.uniform(direction_key, (8,))
        )

    def draw_step(self, key):
        return self.draw_start(key)  # the speeds after a crossing are drawn as the first ones

    def speeds(self, draws: FreewayDraws) -> jax.Array:
        """(8,) int32 signed car speeds from their draws."""
        return draws.speed * jnp.where(draws.direction < 1 / 2, -1, 1)

    def start(self, draws):
        speed = self.speeds(draws)
        return FreewayState(
            chicken_y=i32(9),
            car_x=jnp.zeros(8, i32),
            car_timer=jnp.abs(speed),
            car_speed=speed,
            move_timer=i32(self.player_speed),
            time_left=i32(self.time_limit),
            last_action=i32(0),
        )

    def transition(self, state, action, draws):
        rows = jnp.arange(1, 9)  # each car's row
        # --- the chicken moves up or down, at most once every player_speed steps
        ready = state.move_timer == 0
        up = (action == 1) & ready
        down = (action == 2) & ready
        y = jnp.clip(state.chicken_y + jnp.where(up, -1, jnp.where(down, 1, 0)), 0, 9)
        move_timer = jnp.where(up | down, self.player_speed, state.move_timer)

        # --- at the top: +1, back to the bottom, new car speeds
        crossed = y == 0
        speed = jnp.where(crossed, self.speeds(draws), state.car_speed)
        timer = jnp.where(crossed, jnp.abs(speed), state.car_timer)
        y = jnp.where(crossed, 9, y)

        # --- the cars: one in the chicken's cell, before or after moving, sends it to the bottom
        hit = (state.car_x == 4) & (rows == y)
        moves = timer == 0
        car_x = jnp.where(moves, (state.car_x + jnp.sign(speed)) % 10, state.car_x)  # wrapping
        hit = hit | (moves & (car_x == 4) & (rows == y))
        timer = jnp.where(moves, jnp.abs(speed), timer - 1)
        y = jnp.where(hit.any(), 9, y)

        # --- timers; the episode ends after time_limit steps
        move_timer = _count_down(move_timer)
        time_left = state.time_left - 1
        new_state = FreewayState(y, car_x, timer, speed, move_timer, time_left, state.last_action)
        return new_state, crossed.astype(f32), time_left < 0

    def observe(self, state):
        rows = jnp.arange(1, 9)
        obs = jnp.zeros((10, 10, 7), f32)  # channels chicken, car, speed 1 .. speed 5 trails
        obs = obs.at[state.chicken_y, 4, 0].set(1.0)
        obs = obs.at[rows, state.car_x, 1].set(1.0)
        back = (state.car_x - jnp.sign(state.car_speed)) % 10  # the cell it came from
        return obs.at[rows, back, 1 + jnp.abs(state.car_speed)].set(1.0)


# --- Space Invaders ------------------------------------------------------------------------------


class SpaceInvadersState(NamedTuple):
    """Space Invaders' state.

    Attributes:
        cannon_x: () int32, the cannon's column on the bottom row.
        aliens: (10, 10) bool, True where an alien is.
        alien_dir: () int32, -1 moving left, +1 moving right.
        bullets: (10, 10) bool, the cannon's bullets (they move up).
        alien_bullets: (10, 10) bool, the aliens' bullets (they move down).
        move_interval: () int32, the most steps between the aliens' moves (MinAtar's
            enemy_move_interval; it falls by 1 with each wave cleared, down to 6).
        move_timer: () int32, the steps until the aliens move.
        alien_shot_timer: () int32, the steps until an alien fires.
        shot_timer: () int32, the steps until the cannon may fire.
        ramp_index: () int32, the waves that made the aliens faster.
        last_action: () int32, the action taken on the previous step.
    """

    cannon_x: jax.Array
    aliens: jax.Array  # (10, 10) bool
    alien_dir: jax.Array
    bullets: jax.Array  # (10, 10) bool
    alien_bullets: jax.Array  # (10, 10) bool
    move_interval: jax.Array
    move_timer: jax.Array
    alien_shot_timer: jax.Array
    shot_timer: jax.Array
    ramp_index: jax.Array
    last_action: jax.Array


class SpaceInvaders(Game):
    """MinAtar's Space Invaders (Young & Tian 2019), step for step as
    `minatar.environments.space_invaders`, with its minimal action set: no-op (0), left (1),
    right (2), fire (3). A cannon on the bottom row shoots (at most every 5 steps) at a block of
    aliens that moves sideways, and down a row at each edge; the alien nearest the cannon fires
    every 10 steps. Each alien shot gives +1; the episode ends when an alien or its bullet
    reaches the cannon. A cleared wave is followed by a faster one. Observation (10, 10, 6),
    channels cannon, alien, alien moving left, alien moving right, cannon bullet, alien bullet.
    Nothing here is random but the sticky actions.

    Arguments:
        sticky: the probability of repeating the previous action (see `Game`).
    """

    actions = (0, 1, 3, 5)  # MinAtar's no-op, left, right, fire
    draws_each_step = False
    observation_shape = (10, 10, 6)
    num_actions = 4
    DX = (0, -1, 1, 0)  # the cannon's move per action
    FIRE = 3
    # minatar.environments.space_invaders' constants
    shot_cool_down = 5
    enemy_move_interval = 12
    enemy_shot_interval = 10

    def wave(self):
        """A new wave: aliens in rows 0 to 3, columns 2 to 7."""
        return jnp.zeros((10, 10), bool).at[0:4, 2:8].set(True)

    def start(self, draws):
        empty = jnp.zeros((10, 10), bool)
        return SpaceInvadersState(
            cannon_x=i32(5),
            aliens=self.wave(),
            alien_dir=i32(-1),
            bullets=empty,
            alien_bullets=empty,
            move_interval=i32(self.enemy_move_interval),
            move_timer=i32(self.enemy_move_interval),
            alien_shot_timer=i32(self.enemy_shot_interval),
            shot_timer=i32(0),
            ramp_index=i32(0),
            last_action=i32(0),
        )

    def transition(self, state, action, draws):
        columns = jnp.arange(10)
        no_row = jnp.zeros((1, 10), bool)
        # --- the cannon fires (when ready) or moves
        fire = (action == self.FIRE) & (state.shot_timer == 0)
        x = state.cannon_x
        bullets = state.bullets.at[9, x].set(state.bullets[9, x] | fire)
        shot_timer = jnp.where(fire, self.shot_cool_down, state.shot_timer)
        x = jnp.clip(x + jnp.array(self.DX, i32)[action], 0, 9)

        # --- bullets move one row: the cannon's up, the aliens' down; off the board, gone
        bullets = jnp.concatenate([bullets[1:], no_row])
        alien_bullets = jnp.concatenate([no_row, state.alien_bullets[:-1]])
        terminated = alien_bullets[9, x] | state.aliens[9, x]

        # --- the aliens move when their timer is up: sideways, or at an edge down a row and
        # turning (np.roll, as MinAtar: a row leaving the bottom would come back at the top)
        aliens = state.aliens
        move = state.move_timer == 0
        move_timer = jnp.where(
            move, jnp.minimum(aliens.sum(), state.move_interval), state.move_timer
        )
        at_edge = jnp.where(state.alien_dir < 0, aliens[:, 0].any(), aliens[:, 9].any())
        turn = move & at_edge
        terminated = terminated | (turn & aliens[9].any())
        sideways = jnp.where(state.alien_dir < 0, jnp.roll(aliens, -1, 1), jnp.roll(aliens, 1, 1))
        aliens = jnp.where(turn, jnp.roll(aliens, 1, 0), jnp.where(move, sideways, aliens))
        alien_dir = jnp.where(turn, -state.alien_dir, state.alien_dir)
        terminated = terminated | (move & aliens[9, x])

        # --- the alien nearest the cannon fires when the timer is up: the lowest alien of the
        # nearest column with any, the left one of two as near (MinAtar's _nearest_alien)
        shoot = state.alien_shot_timer == 0
        alien_shot_timer = jnp.where(shoot, self.enemy_shot_interval, state.alien_shot_timer)
        distance = jnp.abs(columns - x) * 10 + columns  # ties broken by the column
        column = jnp.argmin(jnp.where(aliens.any(0), distance, 1000))
        row = 9 - jnp.argmax(aliens[::-1, column])  # the lowest alien in it
        alien_bullets = alien_bullets.at[row, column].set(alien_bullets[row, column] | shoot)

        # --- an alien and a bullet in one cell: both gone, +1
        killed = aliens & bullets
        reward = killed.sum()
        aliens = aliens & ~killed
        bullets = bullets & ~killed

        # --- timers; a cleared wave: a new one, moving faster (down to every 6 steps)
        shot_timer = _count_down(shot_timer)
        move_timer = move_timer - 1
        alien_shot_timer = alien_shot_timer - 1
        cleared = ~aliens.any()
        faster = cleared & (state.move_interval > 6)
        new_state = SpaceInvadersState(
            cannon_x=x,
            aliens=jnp.where(cleared, self.wave(), aliens),
            alien_dir=alien_dir,
            bullets=bullets,
            alien_bullets=alien_bullets,
            move_interval=jnp.where(faster, state.move_interval - 1, state.move_interval),
            move_timer=move_timer,
            alien_shot_timer=alien_shot_timer,
            shot_timer=shot_timer,
            ramp_index=jnp.where(faster, state.ramp_index + 1, state.ramp_index),
            last_action=state.last_action,
        )
        return new_state, reward.astype(f32), terminated

    def observe(self, state):
        aliens = state.aliens.astype(f32)
        left = state.alien_dir < 0
        obs = jnp.zeros((10, 10, 6), f32)  # channels cannon, alien, left, right, bullets x 2
        obs = obs.at[9, state.cannon_x, 0].set(1.0)
        obs = obs.at[:, :, 1].set(aliens)
        obs = obs.at[:, :, 2].set(jnp.where(left, aliens, 0.0))
        obs = obs.at[:, :, 3].set(jnp.where(left, 0.0, aliens))
        obs = obs.at[:, :, 4].set(state.bullets.astype(f32))
        return obs.at[:, :, 5].set(state.alien_bullets.astype(f32))


# --- Seaquest ------------------------------------------------------------------------------------


class Bullets(NamedTuple):
    """The submarine's bullets (MinAtar's `f_bullets`); each field (2,).

    Attributes:
        x: int32 columns.
        y: int32 rows.
        right: bool, moving right.
        came_in: int32, the step it was fired (MinAtar's list order).
        alive: bool, the slot holds a bullet.
    """

    x: jax.Array
    y: jax.Array
    right: jax.Array
    came_in: jax.Array
    alive: jax.Array


class Enemies(NamedTuple):
    """MinAtar's `e_fish` and `e_subs` in one array of slots; each field (60,).

    Attributes:
        x: int32 columns.
        y: int32 rows (1 to 8).
        right: bool, moving right (it came in on the left).
        sub: bool, an enemy submarine (it fires), else a fish.
        move_timer: int32, the steps until it moves.
        shot_timer: int32, the steps until a sub fires.
        came_in: int32, the step it came in (the order of MinAtar's `e_fish` and `e_subs`).
        alive: bool, the slot holds an enemy.
    """

    x: jax.Array
    y: jax.Array
    right: jax.Array
    sub: jax.Array
    move_timer: jax.Array
    shot_timer: jax.Array
    came_in: jax.Array
    alive: jax.Array


class Divers(NamedTuple):
    """The divers to rescue (MinAtar's `divers`); each field (2,).

    Attributes:
        x: int32 columns.
        y: int32 rows (1 to 8).
        right: bool, moving right.
        timer: int32, the steps until it moves.
        came_in: int32, the step it came in (MinAtar's list order).
        alive: bool, the slot holds a diver.
    """

    x: jax.Array
    y: jax.Array
    right: jax.Array
    timer: jax.Array
    came_in: jax.Array
    alive: jax.Array


class SeaquestState(NamedTuple):
    """Seaquest's state.

    Attributes:
        sub_x: () int32, the submarine's column (its front).
        sub_y: () int32, its row, 0 at the surface.
        facing_right: () bool, it faces right (its back is to the left of its front).
        oxygen: () int32, 200 when full.
        divers_held: () int32, the divers on board (MinAtar's diver_count; it can go below 0,
            see `Seaquest`).
        surfaced: () bool, it has surfaced and not dived since (MinAtar's `surface`).
        shot_timer: () int32, the steps until it may fire.
        enemy_spawn_speed: () int32, the steps between enemies coming in.
        enemy_spawn_timer: () int32, the steps until the next.
        diver_spawn_timer: () int32, the steps until the next diver.
        move_speed: () int32, the steps between the enemies' moves, less one.
        ramp_index: () int32, how often the difficulty ramped up.
        steps: () int32, the steps taken in this episode (what `came_in` records).
        bullets: the submarine's bullets (`Bullets`).
        enemies: the fish and enemy subs (`Enemies`).
        divers: the divers (`Divers`).
        enemy_bullets_right: (10, 10) bool, the enemy subs' bullets moving right.
        enemy_bullets_left: (10, 10) bool, those moving left.
        last_action: () int32, the action taken on the previous step.
    """

    sub_x: jax.Array
    sub_y: jax.Array
    facing_right: jax.Array
    oxygen: jax.Array
    divers_held: jax.Array
    surfaced: jax.Array
    shot_timer: jax.Array
    enemy_spawn_speed: jax.Array
    enemy_spawn_timer: jax.Array
    diver_spawn_timer: jax.Array
    move_speed: jax.Array
    ramp_index: jax.Array
    steps: jax.Array
    bullets: Bullets
    enemies: Enemies
    divers: Divers
    enemy_bullets_right: jax.Array  # (10, 10) bool
    enemy_bullets_left: jax.Array  # (10, 10) bool
    last_action: jax.Array


class SeaquestDraws(NamedTuple):
    """One Seaquest step's draws (MinAtar's `_spawn_enemy` and `_spawn_diver`).

    Attributes:
        enemy_right: () float32 uniform: below 1/2 a new enemy comes in on the left.
        enemy_sub: () float32 uniform: below 1/3 it is a sub, else a fish.
        enemy_row: () int32 in 1 .. 8, its row.
        diver_right: () float32 uniform: below 1/2 a new diver comes in on the left.
        diver_row: () int32 in 1 .. 8, its row.
    """

    enemy_right: jax.Array
    enemy_sub: jax.Array
    enemy_row: jax.Array
    diver_right: jax.Array
    diver_row: jax.Array


def _append(slots: PyTree, entry: PyTree, when: jax.Array) -> PyTree:
    """`slots` with `entry` added where `when` holds (MinAtar's list `+=`).

    Arguments:
        slots: a NamedTuple of (N,) arrays with an `alive` field.
        entry: the same NamedTuple of () values, `alive` True (and `came_in` the step).
        when: () bool.

    Returns:
        The slots, `entry` in the first free one. A full `slots` is left as it is (the
        capacities are chosen so that this never happens).
    """
    first_free = jnp.argmin(slots.alive)
    write = when & ~slots.alive[first_free]
    return jax.tree.map(
        lambda column, value: column.at[first_free].set(
            jnp.where(write, value, column[first_free])
        ),
        slots,
        entry,
    )


class Seaquest(Game):
    """MinAtar's Seaquest (Young & Tian 2019), step for step as `minatar.environments.seaquest`,
    with its (full) action set: no-op (0), left (1), up (2), right (3), down (4), fire (5). The
    player's submarine shoots fish and enemy subs (+1 each), which come in from the sides; enemy
    subs fire too. It picks up divers (6 at most) and must surface before its oxygen (200 steps)
    runs out: surfacing with divers refills the oxygen and drops one diver, with all six it gives
    +1 for each tenth of oxygen left and drops them all; surfacing with none ends the episode, as
    does touching an enemy or its bullet. Each surfacing makes enemies come faster and more
    often. Observation (10, 10, 10), channels sub front, sub back, bullet, trail, enemy bullet,
    fish, enemy sub, oxygen gauge, diver gauge, diver.

    As in MinAtar, surfacing with six divers leaves -1 on board (`_surface` sets the count to 0
    and then takes one off); from there every surfacing refills the oxygen and takes one more.

    Capacities, the most entries MinAtar's lists hold at once: 2 bullets (one fired every 5
    steps at most, each gone within 10 steps), 2 divers (one every 30 steps, each gone within
    60) and 60 fish and subs together (one enemy a step at most, each gone within 10 moves of
    at most 6 steps). Enemy bullets are two maps, one per direction: they only move and end the
    episode, so two in one cell act as one.

    Arguments:
        sticky: the probability of repeating the previous action (see `Game`).
    """

    actions = (0, 1, 2, 3, 4, 5)  # MinAtar's no-op, left, up, right, down, fire
    draws_each_step = True
    observation_shape = (10, 10, 10)
    num_actions = 6
    DX = (0, -1, 0, 1, 0, 0)  # the submarine's move per action
    DY = (0, 0, -1, 0, 1, 0)
    LEFT = 1
    RIGHT = 3
    FIRE = 5
    BULLETS = 2  # capacities
    ENEMIES = 60
    DIVERS = 2
    # minatar.environments.seaquest's constants
    max_oxygen = 200
    init_spawn_speed = 20
    diver_spawn_speed = 30
    init_move_interval = 5
    shot_cool_down = 5
    enemy_shot_interval = 10
    diver_move_interval = 5

    def draw_step(self, key):
        uniform_key, row_key = jax.random.split(key)
        enemy_right, enemy_sub, diver_right = jax.random.uniform(uniform_key, (3,))
        enemy_row, diver_row = jax.random.randint(row_key, (2,), 1, 9, i32)
        return SeaquestDraws(enemy_right, enemy_sub, enemy_row, diver_right, diver_row)

    def start(self, draws):
        no = jnp.zeros((10, 10), bool)
        return SeaquestState(
            sub_x=i32(5),
            sub_y=i32(0),
            facing_right=jnp.zeros((), bool),
            oxygen=i32(self.max_oxygen),
            divers_held=i32(0),
            surfaced=jnp.ones((), bool),
            shot_timer=i32(0),
            enemy_spawn_speed=i32(self.init_spawn_speed),
            enemy_spawn_timer=i32(self.init_spawn_speed),
            diver_spawn_timer=i32(self.diver_spawn_speed),
            move_speed=i32(self.init_move_interval),
            ramp_index=i32(0),
            steps=i32(0),
            bullets=Bullets(
                x=jnp.zeros(self.BULLETS, i32),
                y=jnp.zeros(self.BULLETS, i32),
                right=jnp.zeros(self.BULLETS, bool),
                came_in=jnp.zeros(self.BULLETS, i32),
                alive=jnp.zeros(self.BULLETS, bool),
            ),
            enemies=Enemies(
                x=jnp.zeros(self.ENEMIES, i32),
                y=jnp.zeros(self.ENEMIES, i32),
                right=jnp.zeros(self.ENEMIES, bool),
                sub=jnp.zeros(self.ENEMIES, bool),
                move_timer=jnp.zeros(self.ENEMIES, i32),
                shot_timer=jnp.zeros(self.ENEMIES, i32),
                came_in=jnp.zeros(self.ENEMIES, i32),
                alive=jnp.zeros(self.ENEMIES, bool),
            ),
            divers=Divers(
                x=jnp.zeros(self.DIVERS, i32),
                y=jnp.zeros(self.DIVERS, i32),
                right=jnp.zeros(self.DIVERS, bool),
                timer=jnp.zeros(self.DIVERS, i32),
                came_in=jnp.zeros(self.DIVERS, i32),
                alive=jnp.zeros(self.DIVERS, bool),
            ),
            enemy_bullets_right=no,
            enemy_bullets_left=no,
            last_action=i32(0),
        )

    def transition(self, state, action, draws):
        reward = jnp.zeros((), i32)
        enemies = state.enemies
        divers = state.divers

        # --- an enemy comes in when its timer is up, unless one moves the other way in its row;
        # a diver when its timer is up
        spawn = state.enemy_spawn_timer == 0
        right = draws.enemy_right < 1 / 2
        row = draws.enemy_row
        blocked = (enemies.alive & (enemies.y == row) & (enemies.right != right)).any()
        enemy = Enemies(
            x=jnp.where(right, 0, 9),
            y=row,
            right=right,
            sub=draws.enemy_sub < 1 / 3,
            move_timer=state.move_speed,
            shot_timer=i32(self.enemy_shot_interval),
            came_in=state.steps,
            alive=jnp.ones((), bool),
        )
        enemies = _append(enemies, enemy, spawn & ~blocked)
        enemy_spawn_timer = jnp.where(spawn, state.enemy_spawn_speed, state.enemy_spawn_timer)
        diver_spawn = state.diver_spawn_timer == 0
        right = draws.diver_right < 1 / 2
        diver = Divers(
            x=jnp.where(right, 0, 9),
            y=draws.diver_row,
            right=right,
            timer=i32(self.diver_move_interval),
            came_in=state.steps,
            alive=jnp.ones((), bool),
        )
        divers = _append(divers, diver, diver_spawn)
        diver_spawn_timer = jnp.where(diver_spawn, self.diver_spawn_speed, state.diver_spawn_timer)

        # --- the submarine fires (when ready) or moves; moving sideways turns it
        fire = (action == self.FIRE) & (state.shot_timer == 0)
        bullet = Bullets(
            state.sub_x, state.sub_y, state.facing_right, state.steps, jnp.ones((), bool)
        )
        bullets = _append(state.bullets, bullet, fire)
        shot_timer = jnp.where(fire, self.shot_cool_down, state.shot_timer)
        x = jnp.clip(state.sub_x + jnp.array(self.DX, i32)[action], 0, 9)
        y = jnp.clip(state.sub_y + jnp.array(self.DY, i32)[action], 0, 8)
        facing_right = jnp.where(action == self.LEFT, False, state.facing_right)
        facing_right = jnp.where(action == self.RIGHT, True, facing_right)

        # --- its bullets, newest first, move a cell: off the board they are gone; else the first
        # fish in their cell, or if none the first sub, is shot (+1) and the bullet spent
        bullet_x = bullets.x + jnp.where(bullets.right, 1, -1)
        bullet_alive = bullets.alive & (bullet_x >= 0) & (bullet_x <= 9)
        oldest_first = jnp.argsort(bullets.came_in)  # MinAtar's order (free slots anywhere)
        enemy_alive = enemies.alive
        for i in oldest_first[::-1]:
            here = enemy_alive & (enemies.x == bullet_x[i]) & (enemies.y == bullets.y[i])
            here = here & bullet_alive[i]
            fish = here & ~enemies.sub
            target = jnp.where(fish.any(), fish, here)  # a fish first, else a sub
            first = jnp.argmin(jnp.where(target, enemies.came_in, NEVER))
            hit = target.any()
            enemy_alive = enemy_alive.at[first].set(enemy_alive[first] & ~hit)
            bullet_alive = bullet_alive.at[i].set(bullet_alive[i] & ~hit)
            reward = reward + hit.astype(i32)

        # --- divers, newest first: one in the submarine's cell, before or after its move, is
        # picked up while fewer than 6 are on board; the others move a cell every 6 steps
        diver_moves = divers.timer == 0
        diver_x = jnp.where(diver_moves, divers.x + jnp.where(divers.right, 1, -1), divers.x)
        gone = diver_moves & ((diver_x < 0) | (diver_x > 9))
        meets = (divers.x == x) | (diver_moves & ~gone & (diver_x == x))
        meets = divers.alive & meets & (divers.y == y)
        # how many divers later in the list (stepped before it) meet the submarine
        later = divers.came_in[None, :] > divers.came_in[:, None]  # (diver, other)
        met_before = (later & meets[None, :]).sum(1)
        picked = meets & (met_before < 6 - state.divers_held)
        divers_held = state.divers_held + picked.sum()
        divers = Divers(
            x=diver_x,
            y=divers.y,
            right=divers.right,
            timer=jnp.where(diver_moves, self.diver_move_interval, divers.timer - 1),
            came_in=divers.came_in,
            alive=divers.alive & ~picked & ~gone,
        )

        # --- the enemies, newest first (MinAtar steps the subs, then the enemy bullets, then the
        # fish): one in the submarine's cell, before or after its move, ends the game; they move
        # a cell every move_speed + 1 steps, off the board they are gone, and a bullet in the
        # cell they move to shoots them (+1; MinAtar: the first bullet in its list). Subs fire
        # every 11 steps, from where they moved to.
        moves = enemies.move_timer == 0
        enemy_x = jnp.where(moves, enemies.x + jnp.where(enemies.right, 1, -1), enemies.x)
        off = moves & ((enemy_x < 0) | (enemy_x > 9))
        touch_before = (enemies.x == x) & (enemies.y == y)
        touch_after = moves & ~off & (enemy_x == x) & (enemies.y == y)
        terminated = (enemy_alive & (touch_before | touch_after)).any()
        exposed = enemy_alive & moves & ~off & ~touch_after
        shot = jnp.zeros(self.ENEMIES, bool)
        for kind in (enemies.sub, ~enemies.sub):
            for i in oldest_first:  # each bullet shoots the first enemy to reach it, the newest
                here = exposed & kind & ~shot & (enemy_x == bullet_x[i])
                here = here & (enemies.y == bullets.y[i]) & bullet_alive[i]
                newest = jnp.argmax(jnp.where(here, enemies.came_in, -NEVER))
                hit = here.any()
                shot = shot.at[newest].set(shot[newest] | hit)
                bullet_alive = bullet_alive.at[i].set(bullet_alive[i] & ~hit)
                reward = reward + hit.astype(i32)
        fires = enemy_alive & enemies.sub & (enemies.shot_timer == 0)
        firing = fires & ~off  # a shot from off the board would leave it at once
        enemies = Enemies(
            x=enemy_x,
            y=enemies.y,
            right=enemies.right,
            sub=enemies.sub,
            move_timer=jnp.where(moves, state.move_speed, enemies.move_timer - 1),
            shot_timer=jnp.where(fires, self.enemy_shot_interval, enemies.shot_timer - 1),
            came_in=enemies.came_in,
            alive=enemy_alive & ~off & ~shot,
        )

        # --- enemy bullets move a cell; one in the submarine's cell, before or after, ends the game
        no = jnp.zeros((10, 10), bool)
        fired_right = no.at[enemies.y, enemy_x].max(firing & enemies.right)
        fired_left = no.at[enemies.y, enemy_x].max(firing & ~enemies.right)
        going_right = state.enemy_bullets_right | fired_right
        going_left = state.enemy_bullets_left | fired_left
        terminated = terminated | going_right[y, x] | going_left[y, x]
        no_column = jnp.zeros((10, 1), bool)
        going_right = jnp.concatenate([no_column, going_right[:, :-1]], 1)
        going_left = jnp.concatenate([going_left[:, 1:], no_column], 1)
        terminated = terminated | going_right[y, x] | going_left[y, x]

        # --- timers; oxygen runs down below the surface; surfacing (after a dive) with divers
        # refills it (MinAtar's _surface), with none it ends the game
        enemy_spawn_timer = _count_down(enemy_spawn_timer)
        diver_spawn_timer = _count_down(diver_spawn_timer)
        shot_timer = _count_down(shot_timer)
        terminated = terminated | (state.oxygen <= 0)
        below = y > 0
        oxygen = jnp.where(below, state.oxygen - 1, state.oxygen)
        surfacing = ~below & ~state.surfaced
        terminated = terminated | (surfacing & (divers_held == 0))
        rescue = surfacing & (divers_held != 0)
        six = rescue & (divers_held == 6)  # all six: +1 a tenth of oxygen left, and none kept
        reward = reward + jnp.where(six, oxygen * 10 // self.max_oxygen, 0)
        divers_held = jnp.where(six, 0, divers_held)
        divers_held = jnp.where(rescue, divers_held - 1, divers_held)
        oxygen = jnp.where(rescue, self.max_oxygen, oxygen)
        surfaced = (state.surfaced | rescue) & ~below

        # --- each rescue ramps the difficulty up: enemies more often, and faster every second
        ramp = rescue & ((state.enemy_spawn_speed > 1) | (state.move_speed > 2))
        odd = state.ramp_index % 2 == 1
        faster = ramp & (state.move_speed > 2) & odd
        move_speed = jnp.where(faster, state.move_speed - 1, state.move_speed)
        sooner = ramp & (state.enemy_spawn_speed > 1)
        enemy_spawn_speed = jnp.where(sooner, state.enemy_spawn_speed - 1, state.enemy_spawn_speed)

        new_state = SeaquestState(
            sub_x=x,
            sub_y=y,
            facing_right=facing_right,
            oxygen=oxygen,
            divers_held=divers_held,
            surfaced=surfaced,
            shot_timer=shot_timer,
            enemy_spawn_speed=enemy_spawn_speed,
            enemy_spawn_timer=enemy_spawn_timer,
            diver_spawn_timer=diver_spawn_timer,
            move_speed=move_speed,
            ramp_index=jnp.where(ramp, state.ramp_index + 1, state.ramp_index),
            steps=state.steps + 1,
            bullets=bullets._replace(x=bullet_x, alive=bullet_alive),
            enemies=enemies,
            divers=divers,
            enemy_bullets_right=going_right,
            enemy_bullets_left=going_left,
            last_action=state.last_action,
        )
        return new_state, reward.astype(f32), terminated

    def observe(self, state):
        columns = jnp.arange(10)
        enemies = state.enemies
        divers = state.divers
        # channels: sub front, sub back, bullet, trail, enemy bullet, fish, enemy sub, oxygen
        # gauge, diver gauge, diver
        obs = jnp.zeros((10, 10, 10), f32)
        obs = obs.at[state.sub_y, state.sub_x, 0].set(1.0)
        back = state.sub_x - jnp.where(state.facing_right, 1, -1)
        obs = obs.at[state.sub_y, back, 1].set(1.0)
        bullets = state.bullets
        obs = _paint(obs, bullets.y, bullets.x, 2, bullets.alive)
        enemy_bullets = state.enemy_bullets_right | state.enemy_bullets_left
        obs = obs.at[:, :, 4].set(enemy_bullets.astype(f32))
        obs = _paint(obs, enemies.y, enemies.x, jnp.where(enemies.sub, 6, 5), enemies.alive)
        obs = _paint(obs, divers.y, divers.x, 9, divers.alive)
        for slots in (enemies, divers):  # the cell each came from
            back = slots.x - jnp.where(slots.right, 1, -1)
            obs = _paint(obs, slots.y, back, 3, slots.alive & (back >= 0) & (back <= 9))
        oxygen = columns < jnp.maximum(state.oxygen, 0) * 10 // self.max_oxygen
        obs = obs.at[9, :, 7].set(oxygen.astype(f32))
        held = (columns >= 9 - state.divers_held) & (columns < 9)
        return obs.at[9, :, 8].set(held.astype(f32))


GAMES = {
    "breakout": Breakout,
    "asterix": Asterix,
    "freeway": Freeway,
    "seaquest": Seaquest,
    "space_invaders": SpaceInvaders,
}
