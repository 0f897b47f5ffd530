"""Self-play RL: advantage estimators, policy loss, the shared learner, checkpoints, leagues."""
