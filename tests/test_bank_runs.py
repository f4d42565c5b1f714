"""`evoharness run` with a frozen or an evolving bank, fingerprinted resume, infrastructure retries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.experience import consolidate_note
from evoharness_bpe.lab.cli import main
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.runner.suite import RunConfig, run_suite
from evoharness_bpe.stores.frozen import content_hash
from evoharness_bpe.stores.sqlite import SQLiteExperienceStore
from evoharness_bpe.testing.openai_server import QuirkyServer
from evoharness_bpe.trace import read_traces

NS = ("evoharness", "crm-migration", "expert")


def _traces(out: Path) -> list[Any]:
    return list(read_traces(out / "traces.jsonl"))


def _recalls(trace: Any) -> list[str]:
    return [e.content for e in trace.meta_actions if e.name == "recall"]


# -- fingerprints and resume -------------------------------------------------------------------
def test_every_episode_carries_a_fingerprint_of_what_its_policy_saw(tmp_path: Path) -> None:
    data = run_suite(RunConfig(envs=["crm-migration"], policies=["expert", "noisy"], harnesses=["bpe"], episodes=2,
                               out=tmp_path / "run"))
    stamps = [t.metadata["fingerprint"] for t in _traces(tmp_path / "run")]
    assert len(stamps) == len(set(stamps)) == 4  # seed, policy: each episode its own
    assert all(t.metadata["bank"] == "live" for t in _traces(tmp_path / "run"))
    assert data["infrastructure_errors"] == [] and data["consolidation"] == []


def test_a_resumed_run_skips_exactly_the_matching_episodes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = dict(envs=["crm-migration"], policies=["expert", "noisy"], harnesses=["none", "bpe"], episodes=2, out=out)
    run_suite(RunConfig(**config))
    first = {(t.metadata["policy"], t.harness, t.metadata["seed"]): t.metadata["fingerprint"] for t in _traces(out)}
    again = run_suite(RunConfig(**config, mode="resume"))
    assert len(_traces(out)) == 8 and again["finished"] == 8  # nothing ran twice
    # the noisy expert's mistake rate changes what its episodes see; the expert's stay as they were
    changed = run_suite(RunConfig(**{**config, "epsilon": 0.3}, mode="resume"))
    traces = _traces(out)
    rerun = traces[8:]
    assert sorted((t.metadata["policy"], t.harness, t.metadata["seed"]) for t in rerun) == [
        ("noisy", "bpe", 0), ("noisy", "bpe", 1), ("noisy", "none", 0), ("noisy", "none", 1)]
    assert all(t.metadata["fingerprint"] != first[(t.metadata["policy"], t.harness, t.metadata["seed"])] for t in rerun)
    # the figures hold each episode once: the expert's finished ones and the noisy reruns
    assert changed["finished"] == 8
    counted = {e["episode_id"] for e in changed["episodes"]}
    assert counted == {t.episode_id for t in traces[:8] if t.metadata["policy"] == "expert"} | {t.episode_id for t in rerun}
    # the window is an option of every episode: all eight are played again
    run_suite(RunConfig(**{**config, "epsilon": 0.3, "window": 6}, mode="resume"))
    assert len(_traces(out)) == 20


def test_traces_without_a_fingerprint_are_played_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = dict(envs=["crm-migration"], policies=["expert"], harnesses=["none"], out=out)
    run_suite(RunConfig(**config))
    (trace,) = _traces(out)
    trace.metadata.pop("fingerprint")
    (out / "traces.jsonl").write_text(trace.model_dump_json() + "\n", "utf-8")
    again = run_suite(RunConfig(**config, mode="resume"))
    assert len(_traces(out)) == 2 and again["finished"] == 1


# -- a frozen bank -------------------------------------------------------------------------------
def _seed_bank(path: Path) -> str:
    store = SQLiteExperienceStore(path)
    consolidate_note(store, NS, "The CRM target API rejects records with a missing email: report them", kind="pitfall")
    digest = content_hash(store, NS)
    store.close()
    return digest


def test_a_frozen_bank_is_read_never_written_and_its_hash_is_in_the_fingerprint(tmp_path: Path) -> None:
    bank = tmp_path / "bank.db"
    digest = _seed_bank(bank)
    out = tmp_path / "run"
    config = dict(envs=["crm-migration"], policies=["expert"], harnesses=["bpe"], episodes=2, out=out,
                  store=str(bank), bank="frozen")
    run_suite(RunConfig(**config))
    traces = _traces(out)
    assert all(any("note" == e.name and e.ok for e in t.meta_actions) for t in traces)  # the expert wrote notes ...
    store = SQLiteExperienceStore(bank)
    assert content_hash(store, NS) == digest and store.count(NS) == 1  # ... and the bank did not change
    assert all("missing email" in " ".join(_recalls(t)) for t in traces)  # both episodes saw the seed entry
    run_suite(RunConfig(**config, mode="resume"))
    assert len(_traces(out)) == 2
    consolidate_note(store, NS, "Batches above fifty records are refused by the target API")
    store.close()
    run_suite(RunConfig(**config, mode="resume"))  # another bank: every episode is played again
    assert len(_traces(out)) == 4


def test_an_episode_bank_gives_each_episode_an_empty_store_that_reads_back_its_own_notes(tmp_path: Path) -> None:
    bank = tmp_path / "bank.db"
    digest = _seed_bank(bank)
    out = tmp_path / "run"
    run_suite(RunConfig(envs=["crm-migration"], policies=["expert"], harnesses=["bpe"], episodes=2, out=out,
                        store=str(bank), bank="episode"))
    traces = _traces(out)
    for trace in traces:
        assert "no experience matches" in trace.meta_actions[0].content  # the seed bank is not seen ...
        noted = [e for e in trace.meta_actions if e.name == "note" and e.ok]
        assert noted and "HINTS" in trace.model_calls[-1].messages[0]["content"]  # ... the episode's own notes are
    store = SQLiteExperienceStore(bank)
    assert content_hash(store, NS) == digest and store.count(NS) == 1  # and nothing reached the run's store
    store.close()


# -- an evolving bank ------------------------------------------------------------------------------
def test_an_evolving_run_is_frozen_inside_a_window_and_consolidated_after_it(tmp_path: Path) -> None:
    bank = tmp_path / "seed.db"
    digest = _seed_bank(bank)
    out = tmp_path / "run"
    data = run_suite(RunConfig(envs=["crm-migration"], policies=["expert"], harnesses=["bpe"], episodes=4, out=out,
                               store=str(bank), bank="evolving", consolidate_every=2, max_per_kind=2))
    windows = data["consolidation"]
    assert [(w["window"], w["episodes"]) for w in windows] == [(0, 2), (1, 2)]
    assert windows[0]["add"] >= 1 and windows[0]["notes"] >= 2
    assert all(w["size"] <= 2 * 3 for w in windows)  # at most two entries of each of the three kinds
    traces = _traces(out)
    # inside the first window both episodes recall the seed bank alone; after it, what the window added
    seed_only = [set(_recalls(t)) for t in traces[:2]]
    assert seed_only[0] == seed_only[1]
    assert _recalls(traces[2]) != _recalls(traces[0])
    store = SQLiteExperienceStore(bank)
    assert content_hash(store, NS) == digest  # the seed bank is never written
    store.close()
    rows = [json.loads(line) for line in (out / "evolved-bank.jsonl").read_text("utf-8").splitlines()]
    assert rows and {r["harness"] for r in rows} == {"bpe"} and len(rows) == windows[-1]["size"]
    report = (out / "report.md").read_text("utf-8")
    assert "## Bank consolidation" in report and "| crm-migration | expert | bpe | core | 2 | 2 |" in report
    assert (out / "consolidation_edits.png").exists()


def test_an_evolving_run_refuses_to_resume_and_bad_bank_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot be resumed"):
        RunConfig(bank="evolving", mode="resume")
    with pytest.raises(UserError, match="--bank"):
        RunConfig(bank="thawed")
    with pytest.raises(UserError, match="--consolidate-every"):
        RunConfig(bank="evolving", consolidate_every=0)
    with pytest.raises(UserError, match="--teacher"):
        run_suite(RunConfig(bank="evolving", consolidator="model", harnesses=["none"], out=tmp_path / "r"))
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_an_evolving_run_with_the_model_consolidator(tmp_path: Path) -> None:
    from evoharness_bpe.consolidator.testing import ScriptedTeacher, distil

    teacher = ScriptedTeacher(distil)
    data = run_suite(RunConfig(envs=["crm-migration"], policies=["expert"], harnesses=["bpe"], episodes=2, out=tmp_path / "r",
                               bank="evolving", consolidate_every=1), teacher=teacher)
    assert len(teacher.requests) == 2 and all(teacher.requests)
    first = data["consolidation"][0]
    assert first["fallback"] is None and first["add"] == 2 * first["notes"]  # each note, and its distilled procedure


# -- infrastructure failures -------------------------------------------------------------------------
def _expert_server(env: str = "compliance-review", server: type[QuirkyServer] = QuirkyServer, **kwargs: Any) -> QuirkyServer:
    """A scripted OpenAI-compatible server whose replies are the expert's for `env`."""
    expert = ExpertPolicy(make_env(env, 1))

    def turn(body: dict[str, Any]) -> Any:
        reply = expert.complete(body["messages"], body["tools"])
        calls = reply.get("tool_calls") or []
        return [(c["function"]["name"], json.loads(c["function"]["arguments"] or "{}")) for c in calls] or str(reply.get("content"))

    return server(turn, refuse_null_content=False, grammar_limit=False, **kwargs)


def test_a_server_error_is_retried_and_the_episode_counts_once(tmp_path: Path) -> None:
    with _expert_server(fail_first=3) as srv:  # the SDK's own two retries fail too: the episode is played again
        data = run_suite(RunConfig(envs=["compliance-review"], policies=["openai"], harnesses=["none"], model="m",
                                   base_url=srv.url, out=tmp_path / "r", retry_backoff=0))
    assert data["infrastructure_errors"] == [] and data["finished"] == 1
    (trace,) = _traces(tmp_path / "r")
    assert trace.metadata["attempts"] == 2 and trace.outcome.success


def test_episodes_the_server_keeps_failing_are_reported_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    with _expert_server(fail_first=10**6) as srv:
        code = main(["run", "--env", "compliance-review", "--policy", "openai", "--model", "m", "--base-url", srv.url,
                     "--harness", "none", "--episodes", "2", "--retries", "1", "--out", str(out)])
    assert code == 1
    data = json.loads((out / "metrics.json").read_text("utf-8"))
    assert data["episodes"] == [] and data["summary"] == []  # no task failure was counted
    assert [(e["seed"], e["attempts"]) for e in data["infrastructure_errors"]] == [(0, 2), (1, 2)]
    assert "503" in data["infrastructure_errors"][0]["error"]
    assert "## Infrastructure errors" in (out / "report.md").read_text("utf-8")
    assert "not counted as task failures" in capsys.readouterr().err
    with _expert_server() as srv:  # the server is back: --resume plays exactly the failed episodes
        again = run_suite(RunConfig(envs=["compliance-review"], policies=["openai"], harnesses=["none"], model="m",
                                    base_url=srv.url, episodes=2, out=out, mode="resume"))
    assert again["finished"] == 2 and again["infrastructure_errors"] == []


def test_a_client_error_still_stops_the_run(tmp_path: Path) -> None:
    from evoharness_bpe.lab.policies.openai import PolicyError

    class Refusing(QuirkyServer):
        def _answer(self, body: dict[str, Any]) -> tuple[int, Any]:
            return 401, {"error": {"message": "bad key"}}

    with Refusing([]) as srv, pytest.raises(PolicyError, match="401"):
        run_suite(RunConfig(envs=["compliance-review"], policies=["openai"], harnesses=["none"], model="m",
                            base_url=srv.url, out=tmp_path / "r", retry_backoff=0))


def test_a_live_store_loses_what_a_failed_attempt_wrote(tmp_path: Path) -> None:
    class FailsAfterANote(QuirkyServer):
        """503, more times than the SDK retries, on the first request after it answered with a note."""

        failures, armed = 0, False

        def _answer(self, body: dict[str, Any]) -> tuple[int, Any]:
            if self.armed and self.failures < 3:
                self.failures += 1
                return 503, {"error": {"message": "overloaded"}}
            status, payload = super()._answer(body)
            calls = payload["choices"][0]["message"].get("tool_calls") or [] if isinstance(payload, dict) else []
            self.armed = self.armed or any(c["function"]["name"] == "note" for c in calls)
            return status, payload

    def run(server: QuirkyServer, out: Path) -> list[Any]:
        with server as srv:
            run_suite(RunConfig(envs=["crm-migration"], policies=["openai"], harnesses=["bpe"], model="m",
                                base_url=srv.url, out=out, retry_backoff=0))
        store = SQLiteExperienceStore(out / "experience.db")
        entries = sorted((e.text, e.evidence, e.uses) for e in store.list(("evoharness", "crm-migration", "openai")))
        store.close()
        return entries

    failing = _expert_server("crm-migration", FailsAfterANote)
    after_retry = run(failing, tmp_path / "retried")
    assert failing.failures == 3 and _traces(tmp_path / "retried")[0].metadata["attempts"] == 2
    clean = run(_expert_server("crm-migration"), tmp_path / "clean")
    assert after_retry == clean and clean  # the failed attempt's notes were dropped, none written twice
