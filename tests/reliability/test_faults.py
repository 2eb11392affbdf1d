"""Faults under mixed load: SIGKILL, power cuts, SIGSTOP/SIGCONT, clean restarts, dropped
connections, partitions added, with writers of every kind and committing consumers.

The default run stops after 10 server kills (kill -9 and power cuts); `make soak` after
1,000 (WEIR_SOAK_KILLS). The seed is random, printed, and replayed with WEIR_CHAOS_SEED.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.reliability.chaos import ChaosResult, ChaosSettings, run_chaos

# a directory for the proxy's connection log and the clients' log of each run (a sub-
# directory per test), to see afterwards who waited for what; none by default
LOG_DIR = os.environ.get("WEIR_CHAOS_LOG_DIR")


def log_dir(name: str) -> Path | None:
    return Path(LOG_DIR) / name if LOG_DIR else None


def assert_kept_every_promise(result: ChaosResult, kills: int) -> None:
    rep = result.report
    why = f"seed {result.seed} (replay: WEIR_CHAOS_SEED={result.seed}): {rep.summary()}"
    assert rep.ok, why
    assert not result.errors, f"unexpected client errors, {why}: {result.errors[:10]}"
    assert result.kills >= kills, why
    assert result.faults["kill9"] and result.faults["powercut"], result.faults
    # the load really ran across the faults: acks, deliveries checked against the
    # final contents, commits acknowledged and then checked after every restart
    assert rep.acknowledged and rep.delivered and rep.commits_acked, why
    restarts = result.kills + result.faults["restart"]
    assert rep.commit_checks >= restarts, why


# the run ends after its kills, not after a time (ChaosSettings.max_seconds = 600 bounds it)
@pytest.mark.timeout(900)
def test_mixed_load_under_faults_keeps_every_promise(
    tmp_path: Path, chaos_seed: int, record_chaos: Callable[[str, ChaosResult], None]
) -> None:
    result = run_chaos(
        tmp_path, ChaosSettings(kills=10, seed=chaos_seed, log_dir=log_dir("make-test"))
    )
    record_chaos("make test", result)
    assert_kept_every_promise(result, 10)


@pytest.mark.timeout(900)
def test_writer_given_a_partition_resends_without_duplicates(
    tmp_path: Path, chaos_seed: int, record_chaos: Callable[[str, ChaosResult], None]
) -> None:
    """Issue 14 item 2: a writer pinned to a partition and given no producer id must still
    be deduplicated (the SDK gives it a producer id), so its resends after SIGKILLs are
    never stored twice."""
    settings = ChaosSettings(
        kills=4,
        faults={"kill9": 1},
        writers=(("partition", 0), ("partition", 0)),
        consumers=0,
        retained_topic=False,
        message_size=1000,
        seed=chaos_seed,
        log_dir=log_dir("partition-writers"),
    )
    result = run_chaos(tmp_path, settings)
    record_chaos("partition writers", result)
    rep = result.report
    why = f"seed {result.seed} (replay: WEIR_CHAOS_SEED={result.seed}): {rep.summary()}"
    assert result.faults["kill9"] == 4
    assert not rep.duplicated, why
    assert rep.ok, why
    assert not result.errors, f"{why}: {result.errors[:10]}"


@pytest.mark.slow
@pytest.mark.timeout(6 * 3600)
def test_soak(
    tmp_path: Path, chaos_seed: int, record_chaos: Callable[[str, ChaosResult], None]
) -> None:
    kills = int(os.environ.get("WEIR_SOAK_KILLS", "1000"))
    result = run_chaos(
        tmp_path,
        ChaosSettings(
            kills=kills,
            max_seconds=float(os.environ.get("WEIR_SOAK_MAX_SECONDS", "14400")),
            consumers=3,
            partitions=4,
            max_partitions=8,
            seed=chaos_seed,
            log_dir=log_dir("soak"),
        ),
    )
    record_chaos("make soak", result)
    assert_kept_every_promise(result, kills)


def _journal_settings(seed: int, kills: int) -> ChaosSettings:
    return ChaosSettings(
        kills=kills,
        faults={"kill9": 1, "powercut": 1},
        writers=(("pid", 0), ("partition", 0), ("anonymous", 0)),
        consumers=1,
        seed=seed,
        log_dir=log_dir("journal"),
    )


@pytest.mark.timeout(900)
def test_journal_under_kills_and_power_cuts_keeps_every_promise(
    tmp_path: Path, chaos_seed: int, record_chaos: Callable[[str, ChaosResult], None]
) -> None:
    """storage.journal = true: acks after the journal's fdatasync, LMDB applied behind it.
    kill -9 and power cuts land between a journal append, the overlay, the applier's
    LMDB commit and the segment deletes; every promise still holds after the replay."""
    result = run_chaos(
        tmp_path, _journal_settings(chaos_seed, 4), env={"WEIR_STORAGE_JOURNAL": "true"}
    )
    record_chaos("journal", result)
    rep = result.report
    why = f"seed {result.seed} (replay: WEIR_CHAOS_SEED={result.seed}): {rep.summary()}"
    assert rep.ok, why
    assert not result.errors, f"unexpected client errors, {why}: {result.errors[:10]}"
    assert result.faults["kill9"] and result.faults["powercut"], result.faults
    assert rep.acknowledged and rep.delivered, why


@pytest.mark.slow
@pytest.mark.timeout(6 * 3600)
def test_journal_soak(
    tmp_path: Path, chaos_seed: int, record_chaos: Callable[[str, ChaosResult], None]
) -> None:
    kills = int(os.environ.get("WEIR_SOAK_KILLS", "200"))
    result = run_chaos(
        tmp_path, _journal_settings(chaos_seed, kills), env={"WEIR_STORAGE_JOURNAL": "true"}
    )
    record_chaos("journal soak", result)
    rep = result.report
    assert rep.ok, f"seed {result.seed}: {rep.summary()}"
    assert not result.errors, result.errors[:10]
