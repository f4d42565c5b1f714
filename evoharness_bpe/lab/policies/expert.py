"""Scripted experts: policies that solve every seed of the built-in environments.

An expert reads the conversation like any other policy: each call it takes the last assistant
tool call and the tool results after it, updates what it knows, and answers with the next tool
call. It never sees the environment's hidden state (the ALFWorld and TextWorld experts follow the
game's own expert plan / walkthrough, as ALFWorld's handcoded expert does). When the meta-actions
are offered it uses them the way a good agent would: recall before starting, track what it
learns (the rate limit, the rule book's threshold), commit each unit of work, note a pitfall
after a rejection. Works through any framework, since it only needs messages and tools.

``ExpertPolicy(env, skip_rate=p)`` is a *sparse* expert: each meta-action it could do without
(a recall, a note; in the CRM migration a track too) it leaves out with probability `p`, drawn
per episode from `seed`, the environment's seed and the task. Its traces hold both the consulting
and the cheaper path at the same kinds of state: data for a policy that must learn when
consulting pays. ``ExpertPolicy(env, lean_rate=q)`` instead plays a share `q` of its episodes
*lean*, each whole episode without any meta-action it can do without, and the rest in full: every
trace is consistent with itself, and the consulting and the lean way of the same task sit side by
side.

``ExpertPolicy(env, note_before_commit=True)`` writes a CRM lesson as soon as the batch that
taught it is reported, before that batch's ``commit`` (by default the batch is committed first).
The episode's last meta-action is then a commit: every ``finish`` follows the commit that leaves
nothing to do, and no note is directly followed by ``finish``.

``ExpertPolicy(env, track_queue=True)`` keeps the CRM migration's unsent ids in Belief: after each
batch that leaves ids of a fetched page unsent, it first tracks them (``records.next``, a range
such as ``R0026..R0050`` when they run in order), while the page it read is still among the recent
messages. A policy that imitates it finds the next batch's ids on the dashboard once that page
has left its window.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

from ...exceptions import UserError
from ..envs.crm import PAGE_SIZE  # public: the fetch_page tool says a page holds 50 ids
from ..policy import ChatMessage

__all__ = ["ExpertPolicy", "EXPERTS"]

META = frozenset({"track", "commit", "recall", "note"})
Action = tuple[str, dict[str, Any]]
QUEUE_KEY = "records.next"
"""The Belief key under which ``track_queue`` keeps the CRM migration's unsent ids."""


def id_range(ids: list[str]) -> str:
    """`ids` as ``first..last`` when they are consecutive numbers under one prefix (``R0026..R0050``),
    else joined by commas."""
    parts = [re.fullmatch(r"(\D*)(\d+)", i) for i in ids]
    if len(ids) > 1 and all(parts):
        prefixes = {m.group(1) for m in parts if m}
        numbers = [int(m.group(2)) for m in parts if m]
        if len(prefixes) == 1 and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return f"{ids[0]}..{ids[-1]}"
    return ", ".join(ids)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _is_error(text: str) -> bool:
    return text.startswith("Error") or text.startswith("Nothing happens")


class _Brain:
    """What an expert knows about one episode; `observe` updates it, `decide` never mutates it."""

    def __init__(self, task: str, env: Any) -> None:
        self.task = task
        self.env = env
        self.recalled = False
        self.pending_note: str | None = None
        self.noted: set[str] = set()
        self.note_before_commit = False
        self.track_queue = False

    def observe(self, name: str, args: dict[str, Any] | None, result: str) -> None:
        if name not in META:
            self.on_env_call()
        if args is None or result.startswith("Error: unknown tool"):
            self._pitfall("malformed-call", "Send tool arguments as one JSON object with the documented fields; malformed calls are rejected and waste a step.")
        elif name == "recall":
            self.recalled = self.recalled or not _is_error(result)
        elif name == "note":
            if self.pending_note and not _is_error(result):
                self.noted.add(self.pending_note)
                self.pending_note = None
        else:
            self.on_result(name, args, result)

    def on_env_call(self) -> None:
        """An environment tool was called (well-formed or not)."""

    def _pitfall(self, kind: str, text: str) -> None:
        if kind not in self.noted:
            self.pending_note = kind
            self.note_text = text

    def on_result(self, name: str, args: dict[str, Any], result: str) -> None:
        raise NotImplementedError

    def meta_first(self, meta: frozenset[str], query: str) -> Action | None:
        if "recall" in meta and not self.recalled:
            return "recall", {"query": query, "k": 3}
        if "note" in meta and self.pending_note:
            return self.pitfall_note()
        return None

    def pitfall_note(self) -> Action:
        """The note of the pending pitfall."""
        return "note", {"text": self.note_text, "kind": "pitfall", "tags": [self.env.name]}

    def decide(self, meta: frozenset[str]) -> Action:
        raise NotImplementedError

    def skip(self, action: Action) -> bool:
        """Leave `action` out as if it were done, when it is a meta-action the episode can do without."""
        name = action[0]
        if name == "recall":
            self.recalled = True
        elif name == "note" and self.pending_note:
            self.noted.add(self.pending_note)
            self.pending_note = None
        else:
            return False
        return True


class _CRMBrain(_Brain):
    RECALL_QUERY = "crm migration batches rate limit rejected records"

    def __init__(self, task: str, env: Any) -> None:
        super().__init__(task, env)
        self.pages = int(re.search(r"\((\d+) page", task).group(1))  # type: ignore[union-attr]
        self.batch_size = int(re.search(r"at most (\d+) (?:record )?ids", task).group(1))  # type: ignore[union-attr]
        self.n_records = int(re.search(r"Migrate (?:all )?(\d+)", task).group(1))  # type: ignore[union-attr]
        self.planned = 0  # batches committed as todo subgoals so far
        self.next_page = 1
        self.queue: list[str] = []
        self.batch_id = 1
        self.t = 0
        self.last_submit: int | None = None
        self.interval: int | None = None
        self.interval_tracked = False
        self.wait_needed = 0
        self.to_report: list[tuple[list[str], str]] = []
        self.to_commit: list[str] = []
        self.queue_tracked = True  # whether Belief holds the unsent ids (nothing unsent yet)

    def on_env_call(self) -> None:
        self.t += 1

    def on_result(self, name: str, args: dict[str, Any], result: str) -> None:
        body = _json(result)
        if isinstance(body, dict) and isinstance(body.get("t"), int):
            self.t = body["t"]
        if name == "track" and args.get("key") == QUEUE_KEY:
            self.queue_tracked = True
        elif name == "track":
            self.interval_tracked = True
        elif name == "commit" and not _is_error(result):
            if args.get("status") == "todo":
                self.planned += 1
            elif self.to_commit:
                self.to_commit.pop(0)
        elif name == "wait" and isinstance(body, dict):
            self.wait_needed = 0
        elif name == "fetch_page" and isinstance(body, dict) and body.get("page") == self.next_page:
            self.queue.extend(body["ids"] if "ids" in body else (r["id"] for r in body["records"]))
            self.next_page += 1
        elif name == "report_invalid" and isinstance(body, dict) and self.to_report:
            self.to_report.pop(0)
        elif name == "submit_batch" and isinstance(body, dict):
            status = body.get("status")
            if status == 200:
                sent = list(args.get("record_ids", []))
                self.queue = [r for r in self.queue if r not in set(sent)]
                self.queue_tracked = not self.queue
                self.to_commit.append(f"batch {self.batch_id}")
                self.batch_id += 1
                self.last_submit = self.t
                rejected = body.get("rejected") or {}  # id -> reason, or (compact) a list of ids beside "reasons"
                if rejected:  # one report per batch: every rejected id, the reasons joined
                    reasons = sorted(set(rejected.values())) if isinstance(rejected, dict) else list(body.get("reasons", []))
                    self.to_report.append((list(rejected), ", ".join(reasons)))
                    for reason in reasons:
                        self._pitfall(reason, f"The CRM target API rejects records with a {reason}: report them with report_invalid instead of resending.")
            elif status == 429:
                match = re.search(r"every (\d+)s", body.get("error", ""))
                if match:
                    self.interval = int(match.group(1))
                self.wait_needed = int(body.get("retry_after", 1))
                self._pitfall("rate-limit", "The CRM target API rate-limits batches: track the interval and wait before each submit_batch.")
            elif status == 503:
                self.last_submit = self.t
            elif status == 409:
                match = re.search(r"next batch is (\d+)", body.get("error", ""))
                if match:
                    self.batch_id = int(match.group(1))
        elif _is_error(result):
            self._pitfall(f"rejected-{name}", f"{name} was rejected: {result[:160]}")

    def decide(self, meta: frozenset[str]) -> Action:
        # Rejected ids are reported, and the batch committed, while the API's answer is still among
        # the recent messages; lessons are noted after that (or, `note_before_commit`, before the commit).
        if "recall" in meta and not self.recalled:
            return self.meta_first(meta, self.RECALL_QUERY)  # type: ignore[return-value]
        if self.track_queue and "track" in meta and not self.queue_tracked:
            return "track", {"key": QUEUE_KEY, "value": id_range(self.queue), "source": "fetch_page"}
        if self.to_report:
            ids, reason = self.to_report[0]
            return "report_invalid", {"record_ids": ids, "reason": reason}
        if self.note_before_commit and "note" in meta and self.pending_note:
            return self.pitfall_note()
        if "commit" in meta and self.to_commit:
            return "commit", {"subgoal": self.to_commit[0], "status": "done", "note": "applied"}
        first = self.meta_first(meta, self.RECALL_QUERY)
        if first:
            return first
        if "track" in meta and self.interval is not None and not self.interval_tracked:
            return "track", {"key": "api.min_interval_s", "value": str(self.interval), "source": "submit_batch"}
        if self.wait_needed > 0:
            return "wait", {"seconds": self.wait_needed}
        all_fetched = self.next_page > self.pages
        if self.queue and (len(self.queue) >= self.batch_size or all_fetched):
            if self.interval is not None and self.last_submit is not None:
                gap = self.interval - (self.t + 1 - self.last_submit)
                if gap > 0:
                    return "wait", {"seconds": gap}
            return "submit_batch", {"batch_id": self.batch_id, "record_ids": self.queue[: self.batch_size]}
        if not all_fetched:
            due = self.batch_to_plan()
            if "commit" in meta and due:
                return "commit", {"subgoal": due, "status": "todo"}
            return "fetch_page", {"page": self.next_page}
        return "finish", {}

    def skip(self, action: Action) -> bool:
        # Every commit stays: the dashboard's NEXT lists the batches not yet committed, and a policy
        # that reads it finishes when NEXT is empty. Without the last commit, the traces would
        # teach finishing while NEXT still lists a batch.
        if action[0] == "track" and action[1].get("key") == QUEUE_KEY:
            self.queue_tracked = True
            return True
        if action[0] == "track":
            self.interval_tracked = True
            return True
        return super().skip(action)

    def batch_to_plan(self) -> str | None:
        """The next batch of the page about to be read, before it is read (so the plan is in Progress).

        The dashboard then lists the batches still to send (NEXT), and an empty list says the
        migration can finish: the decision is read off the workspace, not counted from the task.
        """
        through = min(self.n_records, self.next_page * PAGE_SIZE)
        due = -(-through // self.batch_size)
        return f"batch {self.planned + 1}" if self.planned < due else None


class _ComplianceBrain(_Brain):
    def __init__(self, task: str, env: Any) -> None:
        super().__init__(task, env)
        self.pages = int(re.search(r"\((\d+) page", task).group(1))  # type: ignore[union-attr]
        self.threshold = int(re.search(r"amount >= (\d+)", task).group(1))  # type: ignore[union-attr]
        self.threshold_tracked = False
        self.next_page = 1
        self.queue: list[str] = []
        self.details: dict[str, dict[str, Any]] = {}
        self.sanctioned: dict[str, bool] = {}
        self.decided: dict[str, tuple[str, str | None]] = {}
        self.to_escalate: list[tuple[str, str]] = []
        self.to_commit: list[tuple[str, str]] = []

    def rule(self, tx: dict[str, Any]) -> tuple[str, str | None, str]:
        if self.sanctioned[tx["counterparty"]]:
            return "flag", "sanctions", "rule 1: sanctioned counterparty"
        if tx["amount"] >= self.threshold and "kyc" not in tx["documents"]:
            return "flag", "aml", "rule 2: over threshold without kyc"
        if "invoice" not in tx["documents"]:
            return "flag", None, "rule 3: no invoice"
        return "clear", None, "rule 4: compliant"

    def on_result(self, name: str, args: dict[str, Any], result: str) -> None:
        body = _json(result)
        if _is_error(result):
            self._pitfall(f"rejected-{name}", f"compliance-review {name} was rejected: {result[:160]}")
            return
        if name == "track":
            self.threshold_tracked = True
        elif name == "commit" and self.to_commit:
            self.to_commit.pop(0)
        elif name == "list_transactions" and isinstance(body, dict) and body.get("page") == self.next_page:
            self.queue.extend(t["id"] for t in body["transactions"])
            self.next_page += 1
        elif name == "get_transaction" and isinstance(body, dict):
            self.details[body["id"]] = body
        elif name == "check_sanctions" and isinstance(body, dict):
            self.sanctioned[body["counterparty"]] = bool(body["sanctioned"])
        elif name == "decide":
            tid = args["transaction_id"]
            decision, team, _ = self.rule(self.details[tid])
            self.decided[tid] = (decision, team)
            if tid in self.queue:
                self.queue.remove(tid)
            if team:
                self.to_escalate.append((tid, team))
            self.to_commit.append((tid, decision))
        elif name == "escalate" and self.to_escalate:
            self.to_escalate.pop(0)

    def decide(self, meta: frozenset[str]) -> Action:
        first = self.meta_first(meta, "compliance review escalation rules sanctions")
        if first:
            return first
        if "track" in meta and not self.threshold_tracked:
            return "track", {"key": "rules.threshold_eur", "value": str(self.threshold), "source": "rule book"}
        if self.to_escalate:
            tid, team = self.to_escalate[0]
            return "escalate", {"transaction_id": tid, "team": team}
        if "commit" in meta and self.to_commit:
            tid, decision = self.to_commit[0]
            return "commit", {"subgoal": tid, "status": "done", "note": decision}
        if not self.queue and self.next_page <= self.pages:
            return "list_transactions", {"page": self.next_page}
        if self.queue:
            tid = self.queue[0]
            tx = self.details.get(tid)
            if tx is None:
                return "get_transaction", {"transaction_id": tid}
            if tx["counterparty"] not in self.sanctioned:
                return "check_sanctions", {"counterparty": tx["counterparty"]}
            decision, _, reason = self.rule(tx)
            return "decide", {"transaction_id": tid, "decision": decision, "reason": reason}
        return "finish", {}


class _PlanBrain(_Brain):
    """Follows a command list (ALFWorld's expert plan, TextWorld's walkthrough) through ``act``."""

    def __init__(self, task: str, env: Any) -> None:
        super().__init__(task, env)
        self.plan = list(env.plan if env.name == "alfworld" else env.walkthrough)
        self.i = 0
        self.to_commit: list[str] = []

    def on_result(self, name: str, args: dict[str, Any], result: str) -> None:
        if name == "commit" and self.to_commit:
            self.to_commit.pop(0)
        elif name == "act":
            command = " ".join(str(args.get("command", "")).split())
            if _is_error(result):
                self._pitfall("inadmissible", f"In {self.env.name}, only admissible commands work; check the exact object and receptacle names first.")
            elif self.i < len(self.plan) and command.lower() == self.plan[self.i].lower():
                self.i += 1
                verb = command.split(" ", 1)[0]
                if verb in ("take", "heat", "cool", "clean", "use"):
                    self.to_commit.append(command)

    def decide(self, meta: frozenset[str]) -> Action:
        first = self.meta_first(meta, f"{self.env.name} {self.task[:80]}")
        if first:
            return first
        if "commit" in meta and self.to_commit:
            return "commit", {"subgoal": self.to_commit[0], "status": "done"}
        if self.i < len(self.plan):
            return "act", {"command": self.plan[self.i]}
        return "act", {"command": "look"}


EXPERTS: dict[str, Callable[[str, Any], _Brain]] = {
    "crm-migration": _CRMBrain,
    "compliance-review": _ComplianceBrain,
    "alfworld": _PlanBrain,
    "textworld": _PlanBrain,
}


class ExpertPolicy:
    """The scripted expert for a built-in environment (`env` is the environment it plays)."""

    def __init__(self, env: Any, *, skip_rate: float = 0.0, lean_rate: float = 0.0, seed: int = 0,
                 note_before_commit: bool = False, track_queue: bool = False) -> None:
        if getattr(env, "name", None) not in EXPERTS:
            raise UserError(f"no expert for environment {getattr(env, 'name', env)!r}; experts exist for {', '.join(EXPERTS)}")
        if not 0.0 <= skip_rate < 1.0:
            raise UserError(f"skip_rate is a probability below 1, got {skip_rate}")
        if not 0.0 <= lean_rate <= 1.0:
            raise UserError(f"lean_rate is a probability, got {lean_rate}")
        self.env = env
        self.skip_rate = skip_rate
        self.lean_rate = lean_rate
        self.seed = seed
        self.note_before_commit = note_before_commit
        self.track_queue = track_queue
        self._rng: random.Random  # drawn per episode, when its first call arrives (`_ingest`)
        self.lean = False  # whether the current episode is played lean
        self._brain: _Brain | None = None
        self._seen: str | None = None
        self._calls = 0

    def _ingest(self, messages: list[ChatMessage]) -> None:
        task = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
        if last is None or self._brain is None:
            self._brain, self._seen = EXPERTS[self.env.name](task, self.env), None
            self._brain.note_before_commit = self.note_before_commit
            self._brain.track_queue = self.track_queue
            episode = f"{self.seed}:{getattr(self.env, 'seed', '')}:{task}"
            self._rng = random.Random(episode)  # the episode's own draws
            self.lean = random.Random(f"lean:{episode}").random() < self.lean_rate
            if last is None:
                return
        assistant = messages[last]
        calls = assistant.get("tool_calls") or []
        key = json.dumps([assistant.get("content"), calls], sort_keys=True, default=str) + str(len(messages))
        if key == self._seen:
            return
        self._seen = key
        results = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages[last + 1 :] if m.get("role") == "tool"}
        for n, call in enumerate(calls):
            fn = call.get("function", {})
            args = _json(fn.get("arguments")) if isinstance(fn.get("arguments"), str) else fn.get("arguments")
            result = results.get(call.get("id"), next(iter(results.values()), "") if n == 0 else "")
            self._brain.observe(str(fn.get("name")), args if isinstance(args, dict) else None, result)

    def next_action(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> Action:
        """Read the conversation's newest results and choose the next ``(tool, arguments)``."""
        self._ingest(messages)
        assert self._brain is not None
        meta = frozenset({t["function"]["name"] for t in tools} & META)
        action = self._brain.decide(meta)
        while action[0] in META and self._skips() and self._brain.skip(action):
            action = self._brain.decide(meta)
        return action

    def _skips(self) -> bool:
        return self.lean or (bool(self.skip_rate) and self._rng.random() < self.skip_rate)

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage:
        name, args = self.next_action(messages, tools)
        self._calls += 1
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{self._calls}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
