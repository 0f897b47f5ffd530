"""Model names nothing can load fail in seconds with one line; the hub is asked only when it answers.

The hub is a local stand-in: HF_ENDPOINT / `huggingface_hub.constants.ENDPOINT` points at a
closed port (an offline machine) or at a local server answering 404 (a hub without the model).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from huggingface_hub import constants

from agents import models


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


class _NotFound(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _404(self):
        self.server.asked.append(self.path)
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _404


@contextlib.contextmanager
def hub(monkeypatch, url: str | None = None):
    """Point huggingface_hub at `url` (default: a local server answering 404 to everything)."""
    server = None
    if url is None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
        server.daemon_threads, server.asked = True, []
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    models.hub_reachable.cache_clear()
    try:
        yield server
    finally:
        models.hub_reachable.cache_clear()
        if server is not None:
            server.shutdown()
            server.server_close()


def test_cli_typo_offline_fails_in_seconds_with_one_line_and_a_did_you_mean(tmp_path):
    env = {**os.environ, "HF_ENDPOINT": closed_port_url(), "HF_HUB_CACHE": str(tmp_path)}
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "play",
            "tic_tac_toe",
            "--agents",
            "llm:smolm2",
            "random",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # one line, no retry messages
    assert "unknown model 'smolm2'" in proc.stderr and "did you mean smollm2-135m?" in proc.stderr
    assert "unreachable" in proc.stderr
    assert elapsed < 15, (
        elapsed
    )  # the interpreter's imports included; it took ~50 s of hub retries before


def test_offline_env_skips_the_probe(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    models.hub_reachable.cache_clear()
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="HF_HUB_OFFLINE is set.*did you mean tiny-llama"):
        models.load_model("tiny-lama")
    models.hub_reachable.cache_clear()
    assert time.monotonic() - t0 < 1


def test_a_reachable_hub_is_asked_and_its_404_is_one_line(monkeypatch):
    from transformers import AutoModelForCausalLM  # noqa: F401 - imported before the clock starts

    with hub(monkeypatch) as server:
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match="hub does not serve it.*did you mean smollm2-135m"):
            models.load_model("smollm2-13m")
        assert time.monotonic() - t0 < 5
        assert any(
            "smollm2-13m" in path for path in server.asked
        )  # the name was looked up on the hub
        models.check_name("xyzzy")  # a reachable hub may have any name: left to from_pretrained
    with hub(monkeypatch, closed_port_url()):
        with pytest.raises(
            RuntimeError, match=r"unknown model 'xyzzy'.*\(built in: smollm2-135m, tiny-llama\)"
        ):
            models.check_name("xyzzy")


def test_a_cached_hub_model_loads_offline(monkeypatch, tmp_path):
    model, tok = models.tiny_llama(hidden=32, heads=2, layers=1)
    snapshot = tmp_path / "models--someone--tiny" / "snapshots" / "abc123"
    model.save_pretrained(snapshot)
    tok.save_pretrained(snapshot)
    (tmp_path / "models--someone--tiny" / "refs").mkdir()
    (tmp_path / "models--someone--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with hub(monkeypatch, closed_port_url()):
        t0 = time.monotonic()
        loaded, _ = models.load_model("someone/tiny")
        assert time.monotonic() - t0 < 10
    assert loaded.config.hidden_size == 32
    with hub(monkeypatch, closed_port_url()):
        with pytest.raises(RuntimeError, match="unknown model 'someone/other'.*unreachable"):
            models.load_model("someone/other")


def test_seeded_gives_a_tiny_llama_without_a_seed_the_runs_seed_and_keeps_any_other_name():
    assert models.seeded("tiny-llama", 2) == "tiny-llama:seed=2"
    assert (
        models.seeded("tiny-llama:hidden=128:heads=8", 7) == "tiny-llama:seed=7:hidden=128:heads=8"
    )
    assert (
        models.seeded("tiny-llama:hidden=128:heads=8", 0) == "tiny-llama:hidden=128:heads=8"
    )  # seed 0: today's weights
    assert (
        models.seeded("tiny-llama:hidden=32:seed=5", 1) == "tiny-llama:hidden=32:seed=5"
    )  # its own seed wins
    assert models.seeded("tiny-llama:5", 1) == "tiny-llama:5"
    assert models.seeded("smollm2-135m", 3) == "smollm2-135m"
    assert models.tiny_llama_args(models.seeded("tiny-llama:hidden=32:heads=2", 9)) == {
        "seed": 9,
        "hidden": 32,
        "heads": 2,
    }


def test_loading_a_model_draws_no_transformers_progress_bar(tmp_path):
    """`arena play` with a model folder: stderr has no "Loading weights" bar beside ours."""
    model, tok = models.tiny_llama(hidden=32, heads=2, layers=1)
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    argv = ["play", "tic_tac_toe", "--agents", f"llm:{tmp_path / 'tiny'},constrained=true"]
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *argv, "random", "--matches", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Loading weights" not in proc.stderr and "1 matches in" in proc.stdout, proc.stderr
