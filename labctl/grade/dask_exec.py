"""Grading on a Dask cluster: one task per learner, observed as a local worker would.

Each Dask worker process keeps one grading worker of its own
(`labctl.grade.pool.LocalPool` with one process), so a learner's hang or crash
ends that learner's task with the same named failure as on one machine, and
the facts that come back are the ones a local run produces: the points are
given in the batch's process from them, so a Dask run and a serial run agree.
When the batch ends its grading workers are closed on every Dask worker (each
held a few hundred MB, idle, until the Dask worker itself ended); another
batch's, keyed by its own reference key, are left running.
Needs the optional extra `labctl[dask]`.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import uuid
from collections.abc import Callable, Iterable

from labctl.errors import UsageError
from labctl.grade.pool import LocalPool, Outcome
from labctl.i18n import N_, Msg, _

# How long the scheduler has to answer: a cluster starting up takes seconds, and a
# mistyped address is refused only once it runs out.
CONNECT_TIMEOUT_S = 30.0
_LOCK = threading.Lock()
_POOLS: dict[tuple, LocalPool] = {}


def _key(learner_timeout_s: float, env: dict[str, str]) -> tuple:
    return (learner_timeout_s, tuple(sorted(env.items())))


def _pool(learner_timeout_s: float, env: dict[str, str]) -> LocalPool:
    key = _key(learner_timeout_s, env)
    if key not in _POOLS:
        _POOLS[key] = LocalPool(1, learner_timeout_s, env)
        atexit.register(_POOLS[key].close)
    return _POOLS[key]


def close_pool(learner_timeout_s: float, env: dict[str, str]) -> int:
    """Run on every Dask worker when a batch ends: close that batch's grading worker here.
    Returns how many grading pools this Dask worker still holds (other batches')."""
    with _LOCK:
        pool = _POOLS.pop(_key(learner_timeout_s, env), None)
        if pool is not None:
            atexit.unregister(pool.close)
            pool.close()
        return len(_POOLS)


def observe_on_worker(job: dict, learner_timeout_s: float, env: dict[str, str]) -> dict:
    """The Dask task: observe one learner in this Dask worker's own grading worker."""
    found: list[Outcome] = []
    with _LOCK:
        _pool(learner_timeout_s, env).run([("learner", job)], lambda _, o: found.append(o))
    outcome = found[0]
    return {
        "status": outcome.status,
        "facts": outcome.facts,
        "message": outcome.message,
        "isolation": outcome.isolation,
    }


def run_on_dask(
    address: str,
    jobs: Iterable[tuple[str, dict]],
    done: Callable[[str, Outcome], None],
    learner_timeout_s: float,
    env: dict[str, str],
) -> None:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UsageError(
            N_("--scheduler needs Dask: pip install 'labctl[dask]' (dask and distributed)")
        ) from None
    try:
        client = Client(address, timeout=f"{CONNECT_TIMEOUT_S:g}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(
            Msg(
                "cannot reach the Dask scheduler at {address}: {why}", address=address, why=str(exc)
            )
        ) from None
    batch = uuid.uuid4().hex[:12]  # a key of its own: never another batch's cached result
    try:
        futures = {
            client.submit(
                observe_on_worker,
                job,
                learner_timeout_s,
                env,
                key=f"labctl-grade-{key}-{batch}",
                pure=False,
            ): (key, job)
            for key, job in jobs
        }
        for future in as_completed(futures):
            key, job = futures[future]
            try:
                result = future.result()
            except UsageError:
                raise
            except Exception as exc:  # the task or its Dask worker died
                # Nothing came back, not even the level the worker resolved: a level asked for by
                # name is the one it ran under (or refused); what `auto` gave there is unknown.
                asked = job["isolation"] if job["isolation"] != "auto" else None
                message = _(
                    Msg(
                        "the Dask task failed: {error}: {why}",
                        error=type(exc).__name__,
                        why=str(exc),
                    )
                )
                done(key, Outcome("crash", message=message, isolation=asked))
                continue
            done(
                key,
                Outcome(result["status"], result["facts"], result["message"], result["isolation"]),
            )
    finally:
        with contextlib.suppress(Exception):  # a worker gone already holds no pool
            client.run(close_pool, learner_timeout_s, env)
        client.close()
