"""End-to-end scenarios, the demo and the benchmarks."""
