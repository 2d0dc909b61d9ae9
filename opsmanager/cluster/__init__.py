"""What a cluster looks like and how to reach it: every name, port and path (:mod:`.naming`), the objects an Etcd
renders to (:mod:`.render`: StatefulSet, Services, PDB, Certificates, trust bundle), its members and endpoints
(:mod:`.members`) and the health verdict (:mod:`.health`). Imports no ops engine, provisioner or lifecycle code."""
