"""Certificate material and trust: the gate a source Secret must pass (:mod:`.gate`, :mod:`.material`), the one
writer of the Secrets members mount and of the trust bundle (:mod:`.release`), never adopting what is not ours
(:mod:`.ownership`), CA rollover's detection (:mod:`.rollover`), the bundle and CA probes (:mod:`.trust`), the
serials each port must serve (:mod:`.serials`) and the operator's own TLS identity (:mod:`.identity`). Built on
:mod:`opsmanager.cluster`; imports no ops engine, provisioner or lifecycle code."""
