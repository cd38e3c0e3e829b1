"""The e2e tier's harness: a throwaway Kubernetes cluster built from upstream sources, on
one machine, each node in network and mount namespaces of its own (docs/e2e.md)."""
