"""Self-play RL: advantage estimators, policy loss, the shared learner, checkpoints, leagues.

The loop and what it is handed:

    selfplay.py          `train(cfg)`: set up, then each step collect -> update -> after the step
    config.py            the training YAML (`TrainConfig` and its sections), every check before a model loads
    sections.py          `PolicyModel`, `Matches`: the parts of the config a piece needs from several sections
    setup.py             seeding, the rollout backend, weight sync
    rollouts.py          opponents, a step's match plans and its matches (`Opponents`, `plan_step`, `play_step`)
    ray_rollouts.py      the same matches on Ray workers, one policy version behind at most
    league.py            the opponent pool (bots, past snapshots) and PFSP
    league_tournament.py a checkpoint tournament during training; its ratings set PFSP's weights
    exploiter.py         a league opponent that best-responds to the policy, rebuilt every N steps
    restarts.py          positions the policy lost from, restarted as self-play openings
    symmetry.py          each learning turn also trained as a rotated/mirrored board
    full_width.py        full-width self-play: Magnetic Mirror Descent's target at every state, no matches
    periodic_eval.py     the evaluation points (built on `evaluation`'s row builders)
    run_folder.py        the run folder, resume, `best/`
    step_metrics.py      what a step's matches say (reward, results, invalid moves, lengths)
    console_lines.py     what a step and a run print
    plots.py             evaluation curves: eval.png and `arena plot`
    memory_plan.py       `arena train --plan`: what a run holds in memory, by part

The update:

    advantages.py        the estimators (`ESTIMATORS`), each stating its formula
    loss.py              the PPO policy loss (`LossConfig`, `policy_loss`)
    learner_config.py    `LearnerConfig`: optimizer, micro-batches, precision, LoRA
    learner.py           the `Learner`: a step is forward -> loss -> optimizer step
    sequences.py         `TrainingSequence`s from a step's turns, prompts, micro-batches, shared-prefix rules
    logprobs.py          a micro-batch's log-probabilities (padded rows or a prefix tree), the magnet's KL
    prefix_tree.py       the prefix tree that computes each shared token once
    precision.py         bf16 weights over fp32 masters: rounding, the learner's attention
"""
