"""PySpark jobs (topic export, retention sweep) and the ``magnetar`` Spark data source.

Empty until the Spark issue lands; the package exists so the layer contract names it.
"""
