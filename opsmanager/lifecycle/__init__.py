"""Certificate lifecycle (issue 11): what each etcd member serves, its expiry, metrics and alerts."""
