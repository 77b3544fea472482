"""The admin REST API, one module per resource (``add_<resource>_routes``), and its server."""
