"""Fleet: member clusters, their connections, health and live per-node GPU capacity.

Pure (plain values, no I/O): ``capacity`` (a member's live GPU capacity, updated
incrementally from Node and Pod events), ``nodes`` (the few Node and Pod fields it reads),
``nodeclasses`` (interchangeable nodes), ``rollups`` (read-only views it hands out),
``reservations`` (GPUs promised to dispatched workloads whose pods have not bound),
``snapshot`` (one member as placement sees it), ``health`` (what went wrong, since when),
``status`` (the MemberCluster status rendered from live state), ``topology`` (a member's
topology levels), ``members`` (a member's spec from a MemberCluster or a static member),
``settings`` (the fleet's part of the config), ``queueing`` (how a member queues batch
work, and the queue label a copy carries there), ``quota`` (a Kueue member's GPU quota: how
much of a workload its queues let start now), ``admission`` (what a member's Kueue says of
a copy: waiting, admitted, evicted), ``fleetfile`` (members described as node
pools), ``identity`` (the hub's identity on a member, as manifests), ``signals`` (who
changed, and how: one pulse per member and category).

Shell: ``runtime`` (the whole fleet as one object) with ``membership`` (one
``connection`` per member: client, Node/Pod watches fed through ``feed``, health, what it
``serving`` serves), ``hubwatch`` (the hub's MemberClusters and Secrets, watched),
``credentials`` and ``kubeconfigs`` (where a member's kubeconfig comes from, checked),
``rotation`` (reconnect when it changes), ``statuswriter`` (MemberCluster status at a
bounded rate), ``registration`` (the Secret and MemberCluster of ``clusters add``),
``minting`` and ``membernamespaces`` (the member identity set up on a member).
"""
