package bench

import (
	"time"

	"github.com/hamaster/hamaster/workflows"
)

// ArmResult is one arm's measurements.
type ArmResult struct {
	Arm    string `json:"arm"`
	Total  int    `json:"total_requests"`
	Failed int    `json:"failed_requests"`
	// LongestFailRunMS is the longest run of consecutive failed requests,
	// from the start of its first to the end of its last.
	LongestFailRunMS float64 `json:"longest_failure_run_ms"`
	P50MS            float64 `json:"p50_ms"`
	P99MS            float64 `json:"p99_ms"`
	// FailedKeepAlive are the failed requests sent on kept-alive
	// connections (real control plane).
	FailedKeepAlive int `json:"failed_keepalive_requests"`
	// WriteStallMS is the longest stall any member writer saw while its
	// own replica was up, StallWriter that writer's replica and
	// StallAtMS when the stall began.
	WriteStallMS float64      `json:"longest_etcd_write_stall_ms"`
	StallWriter  string       `json:"stall_writer"`
	StallAtMS    float64      `json:"stall_at_ms"`
	WriterFails  int          `json:"etcd_failed_writes"`
	Writers      []writerView `json:"writers"`
	// Watches, WatchBreaks and WatchMissed: the watches on ConfigMaps
	// (real control plane), how often their streams ended under them, and
	// the creates they never saw.
	Watches      []watchStats      `json:"watches,omitempty"`
	WatchBreaks  int               `json:"watch_breaks"`
	WatchMissed  int               `json:"watch_missed"`
	ControlPlane string            `json:"control_plane"`
	WallMS       float64           `json:"upgrade_wall_ms"`
	Events       []workflows.Event `json:"events"`
	Markers      []Marker          `json:"markers"`
	Samples      []Sample          `json:"samples"`
	// start is when the arm's load started (the samples' time zero).
	start time.Time
}
