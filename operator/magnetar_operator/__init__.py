"""Magnetar's Kubernetes operator: Tenant, Namespace, Topic and BookieEnsemble resources.

Importing the package registers every kopf handler, which is what `kopf run -m magnetar_operator`
relies on; `magnetar-operator` (magnetar_operator.main) does the same and then runs kopf itself.
"""

from . import bookie_ensembles, identity_sync, namespaces, runtime, spark_resources, tenants, topics

__all__ = ["bookie_ensembles", "identity_sync", "namespaces", "runtime", "spark_resources", "tenants", "topics"]
