"""The TLS family — ``ReconfigureTLS``: add and remove TLS, change the issuer or certificate fields, rotate the
certificates (hot reload, CA rollover, the rescues of expired certificates), hand user-provided Secrets over to
cert-manager. One type, several plans, chosen by what the request asks (:class:`plans.TLSChange`) and, for a
rotate, by what the engine observed when it started (:class:`plans.RotateVariant`).

- :mod:`.plans`: the plans, pure (the ``pure`` import contract);
- :mod:`.observe`: what chooses a rotate's variant, and the expiry the queue's rescue rule asks about;
- :mod:`.operation`: the type as the engine sees it (:data:`operation.OPERATION`) and its write-back.
"""
