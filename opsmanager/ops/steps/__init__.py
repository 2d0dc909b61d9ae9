"""One module per step of the EtcdOpsRequest state machine, each named after the condition it owns.

Every step module exposes ``async def run(ctx, step) -> context.StepResult``; the engine's step table
(:data:`opsmanager.ops.engine.STEPS`) maps each :class:`opsmanager.ops.plan.StepKind` to one of them.

=====================  ==============================================================  ============================
module                 condition(s) it owns                                            StepKind
=====================  ==============================================================  ============================
``pause``              ``Running`` (and the ``Paused`` contract on the Etcd)           PAUSE
``issue``              ``IssueCertificatesSucceeded``                                   ISSUE
``sync_certificates``  ``CertificateSynced``                                            SYNC_CERTIFICATES
``update_statefulset`` ``UpdateStatefulSet``                                            APPLY_STATEFULSET
``roll``               ``RestartPods`` (+ per-pod ``EvictPod``/``CheckPodReady``/…)     ROLL
``roll_pass``          ``TLSListenersAdded``, ``PlaintextListenersAdded``,              ROLL_PASS
                       ``TrustBundleWidened``, ``TrustBundleNarrowed``, and Restart's
                       ``RestartPods``
``update_peer_urls``   ``PeerURLsUpdated`` (+ per-pod ``UpdatePeerURL``)                UPDATE_PEER_URLS
``move_leader``        ``EtcdLeaderMoved``                                              MOVE_LEADER
``verify_served``      ``ServedCertificatesVerified`` (+ per-pod                        VERIFY_SERVED
                       ``VerifyServedCertificate``); rotate's ``RestartPods`` (+ per-pod
                       ``EvictPod``/``CheckPodReady``/…) only when a member still serves
                       its previous leaf after the delivery bound
``update_database``    ``UpdateDatabase``                                               UPDATE_DATABASE
=====================  ==============================================================  ============================

Split of the rolling restart: ``roll`` is the member-by-member restart itself (the only code that evicts a pod;
``verify_served`` calls its ``restart``/``finish_eviction``/``post_checks``/``move_leader`` to restart one stale
member during a zero-restart rotation);
``update_statefulset`` re-renders the template; ``roll_pass`` is an intermediate pass that composes the two with
the trust bundle the pass needs, as one step. Helpers shared by several certificate steps (material checks,
ownership, the trust bundle, CA probes, the serials each TLS port must serve) are in
:mod:`opsmanager.ops.certificates`, which is not a step.
"""
