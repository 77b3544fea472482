"""Authentication for the broker: JWT tokens on the binary protocol and the admin REST API.

``keys`` reads and makes token keys (Pulsar's key URLs and file formats), ``tokens`` signs and
verifies JWTs with PyJWT, ``providers`` turns credentials into a role (Pulsar's
AuthenticationService with its token provider), ``session`` authenticates one binary connection
and re-challenges it when its token expires, ``http`` is the admin API's middleware and
``broker_credentials`` the credentials brokers send each other. Everything is off unless
``authenticationEnabled`` is set. What a role may do is decided by ``broker/authz`` (off unless
``authorizationEnabled``).
"""
