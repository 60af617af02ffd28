// Package bench holds hamaster's benchmarks (make bench). The availability
// benchmark compares, on identical fresh 3-replica local clusters, a
// hamaster rolling-upgrade (recreate and surge: drain, leader last,
// health-gated) against a naive kube-up-style in-place restart of each
// replica in name order, under the clients a cluster has: requests
// through the static IP (on the apiserver stand-in, or with
// HAMASTER_BENCH_CONTROL_PLANE=real on the real kube-apiserver: creates
// and reads on new and kept-alive connections, and watches), and an etcd
// writer through each replica's own member, as its apiserver writes,
// counted while its replica is up. It also splits each operation's wall
// time into the cloud's critical path, grace periods, the replica's own
// stop/start and hamaster's own time, from the workflows' step durations.
package bench
