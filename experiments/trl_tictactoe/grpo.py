"""Tic-tac-toe against `random` with TRL's GRPOTrainer, through the game's OpenEnv environment.

    python experiments/trl_tictactoe/grpo.py --model tiny-llama --steps 40 --out runs/trl_tictactoe
    arena eval --agent "llm:runs/trl_tictactoe/model,constrained=true,prompt=state,system_prompt=Tic-tac-toe.,temperature=0" \
        --games tic_tac_toe --param board=relative --opponents random --matches 200

The environment is `server.openenv_env.create_app("tic_tac_toe", opponents="random")` served by
uvicorn in this process, and every game is played through OpenEnv's own client
(`openenv.core.GenericEnvClient`), exactly as a remote trainer would play `arena env-serve`.
Each reply is one of the observation's legal moves, sampled in proportion to the model's
probability of writing it (the arena's constrained decoding, as `configs/train_tictactoe_tiny.yaml`
plays); with `--free-text` the model writes what it likes and a reply the game cannot parse
forfeits the game (the game's illegal-move rule: -1), which a model from scratch always does.

GRPO over whole games: a dataset row is a match seed; its group of `--generations` games all
`reset(seed=...)` to that match, so they differ only by the policy's samples (the opponent's
replies are the same for the same moves). A game is one GRPO completion (`rollout_func`): the
policy's replies (trained, `env_mask` 1) with the environment's next observations between them
(not trained, `env_mask` 0); its reward is the policy's return (win 1, draw 0, loss -1).

Every game is also appended to `OUT/episodes.jsonl` as a match record, which `arena export`,
`arena web` and `arena tournament` read like any match; the final model is saved to `OUT/model`
(a Hugging Face folder: `llm:OUT/model` in any arena command, a tournament player included).
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import uvicorn
from datasets import Dataset
from openenv.core import GenericEnvClient
from trl import GRPOConfig, GRPOTrainer

from agents.models import load_model
from server.openenv_env import create_app

SYSTEM = "Tic-tac-toe."  # the arena's tic-tac-toe configs' system prompt
PARAMS = {"board": "relative"}  # as configs/train_tictactoe_tiny.yaml plays the game


@dataclass
class Game:
    """One game as a GRPO completion."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    reward: float = 0.0


def chat_ids(tok, text: str) -> list[int]:
    """The chat-templated prompt of one observation's state text: the messages the arena's LLM
    agent sends with `prompt: state`, `constrained: true` and `system_prompt: Tic-tac-toe.`, so
    `llm:OUT/model,prompt=state,constrained=true,system_prompt=Tic-tac-toe.` plays as trained."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
    return tok.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )


@torch.no_grad()
def legal_reply(model, tok, ids: list[int], moves: list[str]) -> tuple[list[int], list[float]]:
    """One of the legal `moves`, sampled in proportion to the model's probability of writing it
    (then end of turn), as the arena's constrained LLM agent samples: its tokens and their
    log-probabilities under the model (what the trainer's ratio compares against)."""
    cands = [tok(m, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for m in moves]
    width = max(map(len, cands))
    pad = tok.pad_token_id or tok.eos_token_id
    batch = torch.tensor([ids + c + [pad] * (width - len(c)) for c in cands], device=model.device)
    logp = torch.log_softmax(model(batch).logits[:, len(ids) - 1 : -1].float(), -1)
    per_token = [[logp[i, t, c[t]].item() for t in range(len(c))] for i, c in enumerate(cands)]
    totals = torch.tensor([sum(x) for x in per_token])
    pick = int(torch.multinomial(torch.softmax(totals, 0), 1))
    return cands[pick], per_token[pick]


@torch.no_grad()
def reply(model, tok, ids: list[int], max_new_tokens: int) -> tuple[list[int], list[float]]:
    """A sampled reply (temperature 1) and its tokens' log-probabilities."""
    out = model.generate(
        torch.tensor([ids], device=model.device),
        do_sample=True,
        temperature=1.0,
        top_k=0,
        max_new_tokens=max_new_tokens,
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=tok.pad_token_id or tok.eos_token_id,
    )
    new = out.sequences[0, len(ids) :].tolist()
    scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    return new, scores[0, : len(new)].float().tolist()


def play(client, model, tok, seed: int, max_new_tokens: int, constrained: bool) -> Game:
    """One game of match `seed` through the OpenEnv client (`constrained`: a legal move each
    turn, else free text up to `max_new_tokens`)."""
    result = client.reset(seed=seed)
    game = Game(prompt_ids=chat_ids(tok, result.observation["state"]))
    first = True
    while not result.done:
        if not first:  # the next observation: the environment's tokens, not trained
            obs = chat_ids(tok, result.observation["state"])
            game.completion_ids += obs
            game.logprobs += [0.0] * len(obs)
            game.env_mask += [0] * len(obs)
        ids = game.prompt_ids if first else game.prompt_ids + game.completion_ids
        if constrained:
            new, lps = legal_reply(model, tok, ids, result.observation["legal_moves"])
        else:
            new, lps = reply(model, tok, ids, max_new_tokens)
        game.completion_ids += new
        game.logprobs += lps
        game.env_mask += [1] * len(new)
        result = client.step({"reply": tok.decode(new, skip_special_tokens=True)})
        game.reward += result.reward or 0.0
        first = False
    return game


def make_rollout(url: str, max_new_tokens: int, constrained: bool):
    """TRL's `rollout_func`: each prompt ("match S") played as a game of match S."""

    def rollout_func(prompts: list, trainer) -> dict:
        model = trainer.accelerator.unwrap_model(trainer.model)
        tok = trainer.processing_class
        was_training = model.training
        model.eval()
        with GenericEnvClient(base_url=url).sync() as client:
            games = [
                play(client, model, tok, int(p.split()[-1]), max_new_tokens, constrained)
                for p in prompts
            ]
        model.train(was_training)
        return {
            "prompt_ids": [g.prompt_ids for g in games],
            "completion_ids": [g.completion_ids for g in games],
            "logprobs": [g.logprobs for g in games],
            "env_mask": [g.env_mask for g in games],
            "game_return": [g.reward for g in games],
        }

    return rollout_func


def game_return(completions, game_return, **_) -> list[float]:
    """The reward: the policy's return in the game (from the environment)."""
    return list(game_return)


def serve(app) -> str:
    """`app` on uvicorn in a thread on a free local port; its URL once it listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny-llama", help="tiny-llama[:...] or smollm2-135m")
    p.add_argument("--steps", type=int, default=40, help="GRPO steps")
    p.add_argument("--games", type=int, default=32, help="games per step")
    p.add_argument("--generations", type=int, default=8, help="games per match seed (a GRPO group)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--max-new-tokens", type=int, default=8, help="a free-text reply's length")
    p.add_argument(
        "--free-text",
        action="store_true",
        help="sample free text (a reply the game cannot parse forfeits) instead of a legal move",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/trl_tictactoe")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    model, tok = load_model(args.model, dtype="float32", device="cpu")
    tok.padding_side = "left"
    url = serve(
        create_app(
            "tic_tac_toe",
            opponents="random",
            on_bad_reply="forfeit",
            record=str(out / "episodes.jsonl"),
            player_name="trl",
            **PARAMS,
        )
    )
    matches = args.steps * args.games // args.generations
    seeds = [args.seed * 1_000_000 + m for m in range(matches)]
    data = Dataset.from_dict({"prompt": [f"match {s}" for s in seeds]})
    config = GRPOConfig(
        output_dir=str(out / "trl"),
        max_steps=args.steps,
        per_device_train_batch_size=args.games,
        num_generations=args.generations,
        learning_rate=args.lr,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=args.seed,
        max_completion_length=1024,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[game_return],
        args=config,
        train_dataset=data,
        processing_class=tok,
        rollout_func=make_rollout(url, args.max_new_tokens, not args.free_text),
    )
    start = time.perf_counter()
    trainer.train()
    print(f"trained {args.steps} steps in {(time.perf_counter() - start) / 60:.1f} min")
    trainer.save_model(str(out / "model"))
    tok.save_pretrained(str(out / "model"))
    print(f"model: {out / 'model'} (llm:{out / 'model'}); games: {out / 'episodes.jsonl'}")


if __name__ == "__main__":
    main()
