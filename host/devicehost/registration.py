"""Register one resource with the kubelet, retrying with capped exponential back-off.

A kubelet that is not listening yet (UNAVAILABLE) is waited for with a fast back-off
(jittered, ``initial_backoff`` doubling up to ``max_backoff``). A kubelet that answers but
rejects the request (bad version, invalid or taken resource name) is logged with its
reason and retried slowly (``rejected_backoff``): the operator has to act, and the other
resources are unaffected. Every attempt is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import grpc
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type
from tenacity.wait import wait_exponential_jitter

from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
REGISTER_TIMEOUT_SECONDS = 5.0


def rejected(exc: BaseException | None) -> bool:
    """True when the kubelet answered and said no (as opposed to not answering at all)."""
    return isinstance(exc, grpc.aio.AioRpcError) and exc.code() not in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    )


class _Wait:
    """Fast jittered back-off while the kubelet is away; a slow fixed one after a rejection."""

    def __init__(self, initial: float, maximum: float, after_rejection: float) -> None:
        self.fast = wait_exponential_jitter(multiplier=initial, max=maximum, jitter=initial)
        self.after_rejection = after_rejection

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return self.after_rejection if rejected(exc) else self.fast(state)


async def register(
    kubelet_socket: Path,
    resource: str,
    endpoint: str,
    options: pb.DevicePluginOptions,
    *,
    initial_backoff: float = 0.1,
    max_backoff: float = 10.0,
    rejected_backoff: float = 60.0,
    on_attempt: Callable[[str, BaseException | None], None] | None = None,
) -> int:
    """Register until the kubelet accepts; return the number of attempts it took.

    ``on_attempt(resource, error)`` is called after every attempt (error None on success),
    for metrics and spans. Cancel the coroutine to give up (e.g. the kubelet restarted).
    """
    request = pb.RegisterRequest(
        version=API_VERSION, endpoint=endpoint, resource_name=resource, options=options
    )

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        delay = state.upcoming_sleep
        if rejected(exc):
            assert isinstance(exc, grpc.aio.AioRpcError)
            log.error(
                "kubelet rejected resource %r (attempt %d): %s; retrying in %.1f s",
                resource,
                state.attempt_number,
                exc.details(),
                delay,
            )
        else:
            log.warning(
                "kubelet at %s not reachable for resource %r (attempt %d): %s; retrying in %.2f s",
                kubelet_socket,
                resource,
                state.attempt_number,
                exc.details() if isinstance(exc, grpc.aio.AioRpcError) else exc,
                delay,
            )

    retrying = AsyncRetrying(
        wait=_Wait(initial_backoff, max_backoff, rejected_backoff),
        retry=retry_if_exception_type(grpc.aio.AioRpcError),
        before_sleep=before_sleep,
        reraise=True,
    )
    attempts = 0
    async for attempt in retrying:
        with attempt:
            attempts += 1
            try:
                async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
                    await pb_grpc.RegistrationStub(channel).Register(
                        request, timeout=REGISTER_TIMEOUT_SECONDS
                    )
            except grpc.aio.AioRpcError as exc:
                if on_attempt:
                    on_attempt(resource, exc)
                raise
            if on_attempt:
                on_attempt(resource, None)
    log.info(
        "registered resource %r with the kubelet as %s (attempt %d)", resource, endpoint, attempts
    )
    return attempts
