"""The parts of a training config that the loop's pieces take, where one piece needs fields
from several places of `training.config.TrainConfig`.

`PolicyModel`: what the policy is and how it runs (the model, its device and rollout backend,
the learner's LoRA and precision, the agent's sampling). `Matches`: how a step's matches are
played (the games, how many matches, concurrency and turn cap). The loop builds both once
(`of(cfg)`) and hands each function only what it uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.llm_agent import LLMAgentConfig
from training.config import TrainConfig, TrainingGame, seat_roles
from training.learner_config import LearnerConfig


@dataclass(frozen=True)
class PolicyModel:
    """The policy's model and how it runs: `model`, `device`, `backend` (+ `backend_kwargs`),
    the `learner` section (LoRA, precision, micro-batches), the `agent` section (prompts, sampling)
    and, for per-role policies, `seat_roles` (seat -> role: the LoRA adapter that plays the seat)."""

    model: str
    device: str
    backend: str
    backend_kwargs: dict
    learner: LearnerConfig
    agent: LLMAgentConfig
    seat_roles: dict[str, str] = field(default_factory=dict)

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles, one LoRA adapter each, in the config's order (empty: one policy)."""
        return tuple(dict.fromkeys(self.seat_roles.values()))

    @classmethod
    def of(cls, cfg: TrainConfig) -> PolicyModel:
        """The policy part of a run's config."""
        return cls(
            cfg.model,
            cfg.device,
            cfg.backend,
            cfg.backend_kwargs,
            cfg.learner,
            cfg.agent,
            seat_roles(cfg.roles),
        )


@dataclass(frozen=True)
class Matches:
    """How a step's matches are played: the training `games`, `matches_per_step`, `concurrency`,
    `max_turns` and `prompt_cache`."""

    games: list[TrainingGame]
    matches_per_step: int
    concurrency: int
    max_turns: int
    prompt_cache: bool = False

    @classmethod
    def of(cls, cfg: TrainConfig) -> Matches:
        """The match part of a run's config."""
        return cls(
            cfg.games, cfg.matches_per_step, cfg.concurrency, cfg.max_turns, cfg.prompt_cache
        )
