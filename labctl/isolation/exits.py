"""Why a clean room's worker is gone, from its exit status.

Said twice: in English for the record's detail, and as a message a person reads in
the chosen language.
"""

from __future__ import annotations

import signal

from labctl.i18n import Msg


def crash_reason(code: int | None, exc: Exception, printed: Msg | str) -> tuple[str, Msg]:
    """Why the worker is gone: English for the record's detail, a message for a person."""
    if code is not None and code < 0:
        signame = signal.Signals(-code).name
        if -code in (signal.SIGKILL, signal.SIGSEGV):
            return (
                f"the clean-room process died with {signame} (likely the memory limit)",
                Msg(
                    "the clean-room process died with {signal} (likely the memory limit){printed}",
                    signal=signame,
                    printed=printed,
                ),
            )
        return (
            f"the clean-room process died with {signame}",
            Msg(
                "the clean-room process died with {signal}{printed}",
                signal=signame,
                printed=printed,
            ),
        )
    if code is not None:
        return (
            f"the clean-room process exited with code {code}",
            Msg(
                "the clean-room process exited with code {code}{printed}",
                code=code,
                printed=printed,
            ),
        )
    return (
        f"the clean-room process stopped answering: {exc}",
        Msg(
            "the clean-room process stopped answering: {error}{printed}",
            error=str(exc),
            printed=printed,
        ),
    )
