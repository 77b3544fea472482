"""The two kinds of topic a client connection serves, as one type each for topics and
subscriptions.

``PersistentTopic`` (a managed ledger) and ``NonPersistentTopic`` (nothing stored) offer the same
methods to the connection for producing, subscribing, flow, acks and closing, so the connection
handles both alike; where they differ (reader start positions, seek, last message id) it narrows
with ``isinstance``.
"""

from __future__ import annotations

from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.broker.topics.non_persistent import NonPersistentSubscription, NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic

AnyTopic = PersistentTopic | NonPersistentTopic
AnySubscription = Subscription | NonPersistentSubscription

__all__ = ["AnySubscription", "AnyTopic"]
