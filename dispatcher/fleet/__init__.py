"""Fleet: member clusters, their connections, health and live per-node GPU capacity.

The capacity model and reservations are pure; connections and watches are the I/O shell.
"""
