"""The assembly layer: a validated ``Config`` turned into running parts.

``app`` runs the controller process (clients, fleet, leader election, metrics server,
signals); ``live`` builds the live view ``dispatcher explain`` reads from a running hub.
They sit above ``control`` because they read the config file's ``Config``, which itself is
built from the settings of ``control`` and ``fleet``; nothing below imports them.
"""
