"""Kafka's classic consumer group protocol: the coordinator's rebalance state machine.

One `Coordinator` per server holds every group's membership: JoinGroup gathers the
members into a generation (the first member to join is the leader and gets every
member's subscription), SyncGroup hands out the assignment the leader computed (the
assignors run in the clients), Heartbeat keeps a member alive and tells it when a
rebalance starts, LeaveGroup and a missed session timeout remove it. Generations
fence stale members: a call with an old generation gets ILLEGAL_GENERATION.

Group state (members, generations) lives in memory, as in Kafka it lives in the
coordinator: after a restart every member rejoins. Committed offsets do not live
here: they are weir consumer offsets (the front commits them through the broker).
Nothing here touches the network or the broker.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from weir.protocols.kafka.errors import ErrorCode, KafkaError


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]  # (member id, instance id, metadata)


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    deadline: float = 0.0  # monotonic time its session ends without a heartbeat
    join: asyncio.Future[JoinResult] | None = None
    sync: asyncio.Future[bytes] | None = None

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    pending_ids: set[str] = field(default_factory=set)  # handed out, awaiting the rejoin
    join_timer: asyncio.TimerHandle | None = None
    delaying: bool = False  # an empty group's first join waits for others joining too

    def describe_state(self) -> str:
        return self.state.value


class Coordinator:
    """Every consumer group of the server; see the module docstring."""

    def __init__(
        self,
        *,
        initial_rebalance_delay_ms: int = 300,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 300_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.groups: dict[str, Group] = {}
        self.initial_delay = initial_rebalance_delay_ms / 1000
        self.min_session_ms = min_session_timeout_ms
        self.max_session_ms = max_session_timeout_ms
        self.clock = clock
        self._reaper: asyncio.Task[None] | None = None
        self._ids = itertools.count()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for g in self.groups.values():
            self._fail_waiters(g, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if g.join_timer is not None:
                g.join_timer.cancel()

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            now = self.clock()
            for g in list(self.groups.values()):
                expired = [
                    m.member_id for m in g.members.values() if m.join is None and m.deadline < now
                ]
                for mid in expired:
                    self._remove(g, mid)

    def group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        return g

    # ------------------------------------------------------------------ join

    async def join(
        self,
        group_id: str,
        member_id: str,
        *,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinResult:
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "group id must not be empty")
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            raise KafkaError(
                ErrorCode.INVALID_SESSION_TIMEOUT,
                f"session timeout must be within {self.min_session_ms}..{self.max_session_ms} ms",
            )
        if not protocols or not protocol_type:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "no protocols")
        g = self.group(group_id)
        if g.members and g.protocol_type not in (None, protocol_type):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "protocol type differs")
        if g.members and not self._common(g, {n for n, _ in protocols}):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "no protocol in common")
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member_id:
                g.pending_ids.add(member_id)
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, -1, None, None, "", member_id, [])
        elif member_id not in g.members and member_id not in g.pending_ids:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {member_id!r}")
        g.pending_ids.discard(member_id)
        m = g.members.get(member_id)
        if m is None:
            m = Member(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                max(rebalance_timeout_ms, session_timeout_ms),
                protocol_type,
                protocols,
            )
            g.members[member_id] = m
            changed = True
        else:
            changed = m.protocols != protocols
            m.protocols = protocols
            m.session_timeout_ms = session_timeout_ms
            m.rebalance_timeout_ms = max(rebalance_timeout_ms, session_timeout_ms)
        if m.join is not None and not m.join.done():
            m.join.set_result(self._error(g, ErrorCode.REBALANCE_IN_PROGRESS, member_id))
        m.join = asyncio.get_running_loop().create_future()
        m.deadline = self.clock() + m.session_timeout_ms / 1000
        g.protocol_type = protocol_type
        if g.state == GroupState.STABLE and not changed and member_id != g.leader:
            # a follower rejoining with what it had: Kafka answers at once, same generation
            fut = m.join
            m.join = None
            fut.set_result(self._result(g, m))
            return await fut
        fut = m.join  # completing the join clears m.join: keep this member's answer
        self._prepare(g, delay=g.state == GroupState.EMPTY)
        self._maybe_complete_join(g)
        return await fut

    def _common(self, g: Group, names: set[str]) -> set[str]:
        common = set(names)
        for m in g.members.values():
            common &= {n for n, _ in m.protocols}
        return common

    def _prepare(self, g: Group, *, delay: bool = False) -> None:
        """Start a rebalance (if one is not running): members must rejoin."""
        if g.state == GroupState.PREPARING:
            return
        if g.state == GroupState.COMPLETING:
            for m in g.members.values():
                if m.sync is not None and not m.sync.done():
                    m.sync.set_exception(KafkaError(ErrorCode.REBALANCE_IN_PROGRESS))
                m.sync = None
        g.state = GroupState.PREPARING
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000
        loop = asyncio.get_running_loop()
        if g.join_timer is not None:
            g.join_timer.cancel()
        g.join_timer = loop.call_later(timeout, self._join_deadline, g)
        if delay and self.initial_delay > 0:
            g.join_timer.cancel()
            g.delaying = True
            g.join_timer = loop.call_later(self.initial_delay, self._initial_delay_over, g, timeout)

    def _initial_delay_over(self, g: Group, timeout: float) -> None:
        g.delaying = False
        g.join_timer = asyncio.get_running_loop().call_later(timeout, self._join_deadline, g)
        self._maybe_complete_join(g, initial_over=True)

    def _join_deadline(self, g: Group) -> None:
        """The rebalance timeout passed: members that did not rejoin are out."""
        g.join_timer = None
        if g.state != GroupState.PREPARING:
            return
        for mid in [mid for mid, m in g.members.items() if m.join is None]:
            del g.members[mid]
        self._maybe_complete_join(g, initial_over=True, force=True)

    def _maybe_complete_join(
        self, g: Group, *, initial_over: bool = False, force: bool = False
    ) -> None:
        if g.state != GroupState.PREPARING:
            return
        if not initial_over and g.delaying:
            # an empty group's first join waits for the initial delay: others may be joining
            return
        if not force and any(m.join is None for m in g.members.values()):
            return
        if g.join_timer is not None:
            g.join_timer.cancel()
            g.join_timer = None
        g.delaying = False
        if not g.members:
            self._to_empty(g)
            return
        g.generation += 1
        g.protocol_name = self._choose(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = GroupState.COMPLETING
        now = self.clock()
        for m in g.members.values():
            fut, m.join = m.join, None
            m.deadline = now + m.session_timeout_ms / 1000
            m.assignment = b""
            if fut is not None and not fut.done():
                fut.set_result(self._result(g, m))

    def _choose(self, g: Group) -> str:
        """The protocol every member supports that most members prefer (Kafka's vote)."""
        common = self._common(g, {n for n, _ in next(iter(g.members.values())).protocols})
        votes: dict[str, int] = {}
        for m in g.members.values():
            for name, _ in m.protocols:
                if name in common:
                    votes[name] = votes.get(name, 0) + 1
                    break
        if not votes:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        return max(votes, key=lambda n: votes[n])

    def _result(self, g: Group, m: Member) -> JoinResult:
        members = []
        if m.member_id == g.leader:
            members = [
                (x.member_id, x.group_instance_id, x.metadata(g.protocol_name or ""))
                for x in g.members.values()
            ]
        return JoinResult(
            ErrorCode.NONE,
            g.generation,
            g.protocol_type,
            g.protocol_name,
            g.leader,
            m.member_id,
            members,
        )

    def _error(self, g: Group, code: ErrorCode, member_id: str) -> JoinResult:
        return JoinResult(
            code, g.generation, g.protocol_type, g.protocol_name, g.leader, member_id, []
        )

    # ------------------------------------------------------------------ sync

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes],
    ) -> bytes:
        g = self._member_group(group_id, member_id, generation)
        m = g.members[member_id]
        if g.state == GroupState.PREPARING:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
        if g.state == GroupState.STABLE:
            return m.assignment
        if member_id == g.leader:
            for mid, member in g.members.items():
                member.assignment = assignments.get(mid, b"")
            g.state = GroupState.STABLE
            for member in g.members.values():
                if member.sync is not None and not member.sync.done():
                    member.sync.set_result(member.assignment)
                member.sync = None
            return m.assignment
        m.sync = asyncio.get_running_loop().create_future()
        return await m.sync

    # ------------------------------------------------------------------ heartbeat, leave

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> None:
        g = self._member_group(group_id, member_id, generation)
        m = g.members[member_id]
        m.deadline = self.clock() + m.session_timeout_ms / 1000
        if g.state == GroupState.PREPARING:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)

    def leave(self, group_id: str, member_ids: list[str]) -> dict[str, ErrorCode]:
        g = self.groups.get(group_id)
        out = {}
        for mid in member_ids:
            if g is None or mid not in g.members:
                out[mid] = ErrorCode.UNKNOWN_MEMBER_ID
                continue
            self._remove(g, mid)
            out[mid] = ErrorCode.NONE
        return out

    def check_commit(self, group_id: str, generation: int, member_id: str) -> None:
        """Whether an offset commit of this member and generation may go ahead."""
        g = self.groups.get(group_id)
        if generation < 0 and not member_id:
            if g is not None and g.members:
                raise KafkaError(
                    ErrorCode.UNKNOWN_MEMBER_ID, "the group has members: commit as one of them"
                )
            return
        g = self._member_group(group_id, member_id, generation)
        if g.state != GroupState.STABLE:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
        m = g.members[member_id]
        m.deadline = self.clock() + m.session_timeout_ms / 1000

    def delete(self, group_id: str) -> None:
        g = self.groups.get(group_id)
        if g is not None and g.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has members")
        self.groups.pop(group_id, None)

    # ------------------------------------------------------------------ internals

    def _member_group(self, group_id: str, member_id: str, generation: int) -> Group:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {member_id!r}")
        if generation != g.generation:
            raise KafkaError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's ({g.generation})",
            )
        return g

    def _remove(self, g: Group, member_id: str) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        if m.join is not None and not m.join.done():
            m.join.set_result(self._error(g, ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        if m.sync is not None and not m.sync.done():
            m.sync.set_exception(KafkaError(ErrorCode.UNKNOWN_MEMBER_ID))
        if not g.members:
            self._to_empty(g)
            return
        if g.state == GroupState.PREPARING:
            self._maybe_complete_join(g, initial_over=True)
        else:
            self._prepare(g)

    def _to_empty(self, g: Group) -> None:
        g.delaying = False
        if g.join_timer is not None:
            g.join_timer.cancel()
            g.join_timer = None
        g.state = GroupState.EMPTY
        g.leader = ""
        g.protocol_name = None

    def _fail_waiters(self, g: Group, code: ErrorCode) -> None:
        for m in g.members.values():
            if m.join is not None and not m.join.done():
                m.join.set_result(self._error(g, code, m.member_id))
            if m.sync is not None and not m.sync.done():
                m.sync.set_exception(KafkaError(code))
