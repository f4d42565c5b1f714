"""Episodes that advance together: each round of their model calls is one batched generation.

A local model generates a batch of prompts for little more than the price of one (decoding is
memory-bound), so the held-out episodes of an evaluation, or the continuations of a GRPO step,
are played side by side. Every episode runs the ordinary core loop (`run_episode`) in a thread of
its own with a *seat*: a `Policy` whose `complete` waits until every episode still running has
asked for its next reply, then one ``complete_batch`` call answers them all. Episodes that end
drop out of the next round. At temperature 0 the traces equal those of playing the episodes one
after another.

    results = Lockstep(policy).play([lambda seat, s=s: run_episode(make_env(), seat, None, cfg(s)) for s in seeds])
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ..policy import ChatMessage

__all__ = ["Lockstep", "Seat"]

T = TypeVar("T")
Request = tuple[list[ChatMessage], list[dict[str, Any]]]


class Seat:
    """One episode's view of a `Lockstep`: a `Policy` whose replies come from the shared batch."""

    def __init__(self, lockstep: "Lockstep[Any]") -> None:
        self._lockstep = lockstep
        self.calls = 0

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage:
        self.calls += 1
        return self._lockstep._ask(self, (messages, tools))

    def count_prompt_tokens(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> int | None:
        count = getattr(self._lockstep.policy, "count_prompt_tokens", None)
        if count is None:
            return None
        with self._lockstep._tokenizer_lock:  # fast tokenizers are not safe to share across threads
            return count(messages, tools)


class Lockstep(Generic[T]):
    """Plays jobs side by side, batching their model calls round by round.

    `policy` answers a round with ``complete_batch(requests)`` (one reply per ``(messages,
    tools)``) when it has one, else with one ``complete`` per request. `max_batch` splits a large
    round into batches of at most that many prompts. `on_round(size, seconds)` is called after
    each batch (for progress lines); `rounds`, `batched` and `seconds` count what was generated.
    """

    def __init__(self, policy: Any, *, max_batch: int | None = None, on_round: Callable[[int], None] | None = None) -> None:
        self.policy = policy
        self.max_batch = max_batch
        self.on_round = on_round
        self.rounds = 0
        self.batched: list[int] = []
        self.seconds: list[float] = []
        self._cond = threading.Condition()
        self._tokenizer_lock = threading.Lock()
        self._pending: dict[Seat, Request] = {}
        self._answers: dict[Seat, ChatMessage | BaseException] = {}
        self._active = 0
        self._busy = False

    def play(self, jobs: Sequence[Callable[[Seat], T]]) -> list[T]:
        """Run every ``job(seat)`` to its end; their results in order. The first error is raised
        once all jobs have stopped (a job that fails drops out; the others play on)."""
        results: list[Any] = [None] * len(jobs)
        errors: list[BaseException | None] = [None] * len(jobs)
        with self._cond:
            self._active = len(jobs)

        def run(index: int, job: Callable[[Seat], T]) -> None:
            try:
                results[index] = job(Seat(self))
            except BaseException as exc:  # noqa: BLE001 - re-raised by play
                errors[index] = exc
            finally:
                with self._cond:
                    self._active -= 1
                    self._cond.notify_all()
                self._serve()

        threads = [threading.Thread(target=run, args=(i, job), daemon=True) for i, job in enumerate(jobs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return results

    def _ask(self, seat: Seat, request: Request) -> ChatMessage:
        with self._cond:
            self._pending[seat] = request
            self._cond.notify_all()
        self._serve()
        with self._cond:
            while seat not in self._answers:
                self._cond.wait()
            answer = self._answers.pop(seat)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _serve(self) -> None:
        """Answer the round when every running episode is waiting (by whichever thread sees it)."""
        with self._cond:
            if self._busy or not self._pending or len(self._pending) < self._active:
                return
            self._busy = True
            round_ = list(self._pending.items())
            self._pending.clear()
        try:
            self.rounds += 1
            size = self.max_batch or len(round_)
            for start in range(0, len(round_), size):
                chunk = round_[start : start + size]
                self.batched.append(len(chunk))
                began = time.perf_counter()
                try:
                    replies = self._complete([request for _, request in chunk])
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting episodes
                    replies = [exc] * len(chunk)
                self.seconds.append(time.perf_counter() - began)
                if self.on_round is not None:
                    self.on_round(len(chunk), self.seconds[-1])
                with self._cond:
                    for (seat, _), reply in zip(chunk, replies, strict=True):
                        self._answers[seat] = reply
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
        self._serve()  # episodes may all have asked again while this round was generated

    def _complete(self, requests: list[Request]) -> list[ChatMessage]:
        batch = getattr(self.policy, "complete_batch", None)
        if batch is not None:
            with self._tokenizer_lock:
                return list(batch(requests))
        return [self.policy.complete(messages, tools) for messages, tools in requests]
