"""Fixtures of the chart tests: the operator tests' real Kubernetes 1.20 control plane and real
standalone broker (tests/operator/conftest.py), reused rather than copied. Imported here they are
this package's own session fixtures: the chart tests get a control plane of their own, so that a
Helm release's cluster-wide objects never meet the operator tests' state.
"""

from tests.operator.conftest import broker, control_plane

__all__ = ["broker", "control_plane"]
