"""The DRA face's Kubernetes API calls, through lightkube (docs/dra.md: why lightkube).

Imported only when a resource is served through DRA: lightkube is the optional extra
``devicehost[dra]``. One ``AsyncClient`` per host, its field manager ``devicehost``, its
credentials the pod's service account, or a kubeconfig file (``dra.kubeconfig``) outside
a cluster. Every failure becomes ``ApiProblem`` (retried by the publisher) or
``ClaimProblem`` (the claim's prepare fails, and the kubelet asks again), naming the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devicehost.kubelet.dra.claims import ClaimProblem
from devicehost.kubelet.dra.publisher import ApiProblem

FIELD_MANAGER = "devicehost"


class MissingClient(RuntimeError):
    """lightkube is not installed, or its configuration cannot be loaded."""


def _problem(call: str, exc: Exception) -> str:
    from lightkube import ApiError

    if isinstance(exc, ApiError):
        status = exc.status
        return f"{call}: the API server answered {status.code} {status.reason}: {status.message}"
    return f"{call}: {type(exc).__name__}: {exc}"


class LightkubeApi:
    """ResourceSlices published, the Node read, ResourceClaims read."""

    def __init__(self, kubeconfig: Path | None = None) -> None:
        """Credentials from ``kubeconfig``, else the pod's service account, else the usual
        kubeconfig (``KUBECONFIG``, ``~/.kube/config``)."""
        try:
            from lightkube import AsyncClient, KubeConfig
            from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice
        except ImportError as exc:
            raise MissingClient(
                f"serving through DRA needs the Kubernetes client lightkube ({exc}): "
                "install devicehost[dra]"
            ) from None
        try:
            if kubeconfig is not None:
                config = KubeConfig.from_file(kubeconfig)
            else:
                config = KubeConfig.from_env()
        except Exception as exc:  # lightkube raises its own ConfigError, or OSError
            where = kubeconfig or "the service account or KUBECONFIG"
            raise MissingClient(
                f"cannot load the API server's configuration from {where}: {exc}"
            ) from None
        self._slice = ResourceSlice
        self._claim = ResourceClaim
        # lightkube's own default bounds each call to 10 s: the publisher retries, and a
        # claim's read has its own bound. Proxies from the environment are not used.
        self.client = AsyncClient(config, field_manager=FIELD_MANAGER, trust_env=False)

    async def _node(self, node: str) -> Any:
        from lightkube.resources.core_v1 import Node

        try:
            return await self.client.get(Node, node)
        except Exception as exc:
            raise ApiProblem(_problem(f"reading Node {node}", exc)) from None

    async def node_uid(self, node: str) -> str:
        found = await self._node(node)
        uid = found.metadata.uid if found.metadata else None
        if not uid:
            raise ApiProblem(f"reading Node {node}: it has no UID")
        return str(uid)

    async def node_labels(self, node: str) -> dict[str, str]:
        """The Node's labels (what a profile's ``match.nodeLabels`` compares)."""
        found = await self._node(node)
        labels = found.metadata.labels if found.metadata else None
        return {str(k): str(v) for k, v in (labels or {}).items()}

    async def list_slices(self, node: str, driver: str) -> list[dict[str, Any]]:
        fields: dict[str, Any] = {"spec.nodeName": node, "spec.driver": driver}
        try:
            return [s.to_dict() async for s in self.client.list(self._slice, fields=fields)]
        except Exception as exc:
            raise ApiProblem(_problem(f"listing the ResourceSlices of {driver}", exc)) from None

    async def apply_slice(self, document: dict[str, Any]) -> None:
        name = document["metadata"]["name"]
        try:
            resource: Any = self._slice.from_dict(document)
            await self.client.apply(resource, force=True)
        except Exception as exc:
            raise ApiProblem(_problem(f"applying ResourceSlice {name}", exc)) from None

    async def delete_slice(self, name: str) -> None:
        from lightkube import ApiError

        try:
            await self.client.delete(self._slice, name)
        except ApiError as exc:
            if exc.status.code != 404:  # gone already is what was wanted
                raise ApiProblem(_problem(f"deleting ResourceSlice {name}", exc)) from None
        except Exception as exc:
            raise ApiProblem(_problem(f"deleting ResourceSlice {name}", exc)) from None

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        """A ``ClaimSource``: the ResourceClaim as resource.k8s.io/v1 JSON."""
        from lightkube import ApiError

        try:
            claim = await self.client.get(self._claim, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                raise ClaimProblem(f"claim {namespace}/{name} does not exist") from None
            raise ClaimProblem(_problem(f"reading claim {namespace}/{name}", exc)) from None
        except Exception as exc:
            raise ClaimProblem(_problem(f"reading claim {namespace}/{name}", exc)) from None
        result: Mapping[str, Any] = claim.to_dict()
        return result

    async def close(self) -> None:
        await self.client.close()
