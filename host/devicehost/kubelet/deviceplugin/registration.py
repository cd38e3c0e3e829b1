"""Register one resource with the kubelet, retrying with capped exponential back-off.

A kubelet that is not listening yet (UNAVAILABLE) is waited for with a fast back-off
(jittered, ``initial_backoff`` doubling up to ``max_backoff``). A kubelet that answers but
rejects the request (bad version, invalid or taken resource name) is logged with its
reason and retried slowly (``rejected_backoff``): the operator has to act, and the other
resources are unaffected. Every attempt is logged and is a CLIENT span.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from devicehost.telemetry.tracing import (
    ATTEMPT,
    REGISTRATION_SERVICE,
    RESOURCE,
    SERVER_ADDRESS,
    Tracing,
    fail,
    rpc_attributes,
    set_rpc_status,
)

if TYPE_CHECKING:
    from tenacity import RetryCallState

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
REGISTER_TIMEOUT_SECONDS = 5.0
AttemptCallback = Callable[[str, str], None]
#: Each attempt connects on its own. By default gRPC shares one connection per address
#: among all channels, and one that failed (kubelet.sock not there yet) fails every
#: channel's calls at once until its own reconnect back-off (~1 s, growing) has passed:
#: after a kubelet restart, re-registration sometimes took 1.7 s instead of milliseconds.
FRESH_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)


def rejected(exc: BaseException | None) -> bool:
    """True when the kubelet answered and said no (as opposed to not answering at all)."""
    return isinstance(exc, grpc.aio.AioRpcError) and exc.code() not in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    )


class _Wait:
    """Fast jittered back-off while the kubelet is away; a slow fixed one after a rejection."""

    def __init__(self, initial: float, maximum: float, after_rejection: float) -> None:
        from tenacity.wait import wait_exponential_jitter

        self.fast = wait_exponential_jitter(multiplier=initial, max=maximum, jitter=initial)
        self.after_rejection = after_rejection

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return self.after_rejection if rejected(exc) else self.fast(state)


#: kubelet.sock paths already reported missing: one line per process, not per resource
#: and attempt; forgotten once a registration there succeeds.
_MISSING_KUBELET_REPORTED: set[Path] = set()


def _report_missing_kubelet(kubelet_socket: Path) -> bool:
    """Log once that ``kubelet_socket`` does not exist and what that usually means; return
    True when it is missing (reported now or before)."""
    if kubelet_socket.exists():
        return False
    if kubelet_socket not in _MISSING_KUBELET_REPORTED:
        _MISSING_KUBELET_REPORTED.add(kubelet_socket)
        log.warning(
            "%s does not exist: the kubelet is not running (yet), or --plugin-dir is not "
            "the kubelet's device-plugin directory (usually /var/lib/kubelet/device-plugins); "
            "every resource registers as soon as it appears",
            kubelet_socket,
        )
    return True


def _log_retry(kubelet_socket: Path, resource: str) -> Callable[[RetryCallState], None]:
    last: list[str] = []  # the cause last logged at WARNING for this resource

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else exc
        if rejected(exc):
            log.error(
                "kubelet rejected resource %r (attempt %d): %s; retrying in %.1f s",
                resource,
                state.attempt_number,
                detail,
                state.upcoming_sleep,
            )
            return
        # The same cause again is not news: one WARNING, then DEBUG until it changes.
        cause = "missing" if _report_missing_kubelet(kubelet_socket) else str(detail)
        level = logging.DEBUG if cause in last else logging.WARNING
        if cause == "missing":
            level = logging.DEBUG
        last[:] = [cause]
        log.log(
            level,
            "kubelet at %s not reachable for resource %r (attempt %d): %s; retrying in %.2f s",
            kubelet_socket,
            resource,
            state.attempt_number,
            detail,
            state.upcoming_sleep,
        )

    return before_sleep


async def register(
    kubelet_socket: Path,
    resource: str,
    endpoint: str,
    options: pb.DevicePluginOptions,
    *,
    initial_backoff: float = 0.1,
    max_backoff: float = 10.0,
    rejected_backoff: float = 60.0,
    on_attempt: AttemptCallback | None = None,
    tracing: Tracing | None = None,
) -> int:
    """Register until the kubelet accepts; return the number of attempts it took.

    ``on_attempt(resource, result)`` is called after every attempt, with ``ok``,
    ``rejected`` or ``unreachable``.
    Cancel the coroutine to give up (e.g. the kubelet restarted).
    """
    request = pb.RegisterRequest(
        version=API_VERSION, endpoint=endpoint, resource_name=resource, options=options
    )
    attempt = functools.partial(
        _attempt, request, kubelet_socket, tracing or Tracing(None), on_attempt
    )
    try:
        await attempt(1)
        attempts = 1
    except grpc.aio.AioRpcError as failure:
        wait = _Wait(initial_backoff, max_backoff, rejected_backoff)
        attempts = await _retry(attempt, failure, wait, _log_retry(kubelet_socket, resource))
    _MISSING_KUBELET_REPORTED.discard(kubelet_socket)
    log.info(
        "registered resource %r with the kubelet as %s (attempt %d)", resource, endpoint, attempts
    )
    return attempts


async def _retry(
    attempt: Callable[[int], Awaitable[None]],
    failure: grpc.aio.AioRpcError,
    wait: _Wait,
    before_sleep: Callable[[RetryCallState], None],
) -> int:
    """The first attempt failed: go on with tenacity's back-off, which sees that failure
    as its own first attempt. Imported only now: most registrations need no retry, and
    tenacity costs every start ~8 ms to import."""
    from tenacity import AsyncRetrying, retry_if_exception_type

    retrying = AsyncRetrying(
        wait=wait,
        retry=retry_if_exception_type(grpc.aio.AioRpcError),
        before_sleep=before_sleep,
        reraise=True,
    )
    pending: grpc.aio.AioRpcError | None = failure
    number = 1
    async for state in retrying:
        with state:
            number = state.retry_state.attempt_number
            if pending is not None:
                failed, pending = pending, None
                raise failed
            await attempt(number)
    return number


async def _attempt(
    request: pb.RegisterRequest,
    kubelet_socket: Path,
    tracing: Tracing,
    on_attempt: AttemptCallback | None,
    number: int,
) -> None:
    """One Register call on a connection of its own; a CLIENT span; ``AioRpcError`` when
    the kubelet is not reachable or says no."""
    resource = request.resource_name
    attributes = {
        **rpc_attributes(REGISTRATION_SERVICE, "Register"),
        SERVER_ADDRESS: str(kubelet_socket),
        RESOURCE: resource,
        ATTEMPT: number,
    }
    with tracing.client_span(f"{REGISTRATION_SERVICE}/Register", attributes) as span:
        try:
            async with grpc.aio.insecure_channel(
                f"unix://{kubelet_socket}", options=FRESH_CONNECTION
            ) as channel:
                await pb_grpc.RegistrationStub(channel).Register(
                    request, timeout=REGISTER_TIMEOUT_SECONDS
                )
        except grpc.aio.AioRpcError as exc:
            set_rpc_status(span, exc.code().name)
            fail(span, exc, exc.details())
            if on_attempt:
                on_attempt(resource, "rejected" if rejected(exc) else "unreachable")
            raise
        set_rpc_status(span, grpc.StatusCode.OK.name)
    if on_attempt:
        on_attempt(resource, "ok")
