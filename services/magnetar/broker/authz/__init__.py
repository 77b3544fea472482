"""Authorization for the broker: who may produce, consume, look up and administer what.

Pulsar's PulsarAuthorizationProvider with its AuthorizationService around it: ``store`` keeps the
grants in the namespace policies (cached, invalidated by a metadata watch), ``checks`` decides
(superusers, tenant admins, namespace and topic grants, subscription rules), ``binary`` applies it
to the binary protocol's lookup, partition metadata, producer and subscribe commands,
``recheck`` to the producers and consumers already open when a namespace's grants change, and
``rules`` + ``http`` to every admin REST route through one table. Off unless
``authorizationEnabled`` (which needs ``authenticationEnabled``).
"""
