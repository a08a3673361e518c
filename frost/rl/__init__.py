"""frost.rl: reinforcement learning, all in Python.

    envs.py     environments in jax.numpy (CartPole-v1, bsuite Catch, MinAtar Breakout)
    anakin.py   the Anakin driver: seeds vmapped and sharded, the whole agent one compiled program
    ppo.py      PPO, Anakin (jnp envs) and Sebulba (host envs) sharing one update
    dqn.py      DQN with double-Q targets and a replay buffer in device arrays (Anakin)
    actors.py   Sebulba's actor processes for host envs (gymnasium's API), on frost.data's workers
    cli.py      `frost rl ppo|dqn|eval`

Nothing is imported here, so actor processes and `frost --help` load only what they use.
"""
