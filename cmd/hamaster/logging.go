package main

import (
	"io"
	"log/slog"
)

// newLogger is the CLI's logger: always on stderr (stdout carries only the
// command's output, JSON in --output json), text or JSON lines. The same
// logger reaches the workflows (Deps.Logger), the providers
// (providers.Settings.Logger: cloud SDK requests at debug) and the etcd
// client (its zap lines at debug).
func newLogger(stderr io.Writer, level slog.Level, format string) *slog.Logger {
	o := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(stderr, o))
	}
	return slog.New(slog.NewTextHandler(stderr, o))
}
