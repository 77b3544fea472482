"""The processes: each module assembles the services of one ``magnetar`` command and its listeners.

``standalone`` (broker, in-process bookie, embedded metadata), ``broker`` (a cluster broker over
etcd and TCP bookies) and ``bookie`` (one bookie and its HTTP endpoint). A node builds the
services, binds the servers in front of them, tells the services their bound addresses, starts
them, and stops everything in reverse. ``listeners`` holds what the broker nodes share;
``ports`` the taken-port error every node raises; ``lifecycle`` the start that cleans up.
"""
