package bench

// ArmResult is one arm's measurements.
type ArmResult struct {
	Arm    string `json:"arm"`
	Total  int    `json:"total_requests"`
	Failed int    `json:"failed_requests"`
	// LongestFailRunMS is the longest run of consecutive failed requests,
	// from the start of its first to the end of its last.
	LongestFailRunMS float64  `json:"longest_failure_run_ms"`
	P50MS            float64  `json:"p50_ms"`
	P99MS            float64  `json:"p99_ms"`
	WriteStallMS     float64  `json:"longest_etcd_write_stall_ms"`
	WriterFails      int      `json:"etcd_writer_failed_writes"`
	WallMS           float64  `json:"upgrade_wall_ms"`
	Markers          []Marker `json:"markers"`
	Samples          []Sample `json:"samples"`
}
