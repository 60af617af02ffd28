// Package bench holds hamaster's benchmarks (make bench). The availability
// benchmark compares, on identical fresh 3-replica local clusters, a
// hamaster rolling-upgrade (drain, leader last, health-gated) against a
// naive kube-up-style in-place restart of each replica in name order,
// while a load generator drives requests through the static IP and a
// second client writes to etcd continuously.
package bench
