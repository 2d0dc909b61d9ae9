module opsmanager.dev/tools/etcdstop

go 1.26.0
