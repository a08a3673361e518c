"""frost.rl: reinforcement learning, all in Python.

    envs.py     environments in jax.numpy (CartPole-v1, bsuite Catch) and make(), the name table
    minatar.py  the five MinAtar games in jax.numpy, sticky actions on (Young & Tian 2019)
    search.py   MuZero and Gumbel MuZero tree search with mctx's interface
    anakin.py   the Anakin driver: seeds vmapped and sharded, the whole agent one compiled program
    ppo.py      PPO, Anakin (jnp envs) and Sebulba (host envs) sharing one update
    dqn.py      DQN with double-Q targets and a replay buffer in device arrays (Anakin)
    muzero.py   a MuZero agent acting by Gumbel MuZero search, all in one program (Anakin)
    actors.py   Sebulba's actor processes for host envs (gymnasium's API), on frost.data's workers
    run.py      training and evaluation of every agent; cli.py: `frost rl ppo|dqn|muzero|eval`

Nothing is imported here, so actor processes and `frost --help` load only what they use.
"""
