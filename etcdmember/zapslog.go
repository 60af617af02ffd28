package etcdmember

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog returns a zap logger that hands every line of the etcd client
// (which logs only through zap) to log at debug level, with the zap level
// as an attribute: retries and balancer chatter are for debugging, the
// errors that matter reach the caller as errors.
func zapToSlog(log *slog.Logger) *zap.Logger {
	if log == nil || !log.Enabled(context.Background(), slog.LevelDebug) {
		return zap.NewNop()
	}
	return zap.New(&slogCore{h: log.Handler().WithAttrs([]slog.Attr{slog.String("component", "etcd-client")})})
}

// slogCore is a zapcore.Core writing to a slog.Handler.
type slogCore struct{ h slog.Handler }

func (c *slogCore) Enabled(zapcore.Level) bool {
	return c.h.Enabled(context.Background(), slog.LevelDebug)
}

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{h: c.h.WithAttrs(zapAttrs(fs))}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	r := slog.NewRecord(e.Time, slog.LevelDebug, e.Message, 0)
	r.AddAttrs(slog.String("zap_level", e.Level.String()))
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	r.AddAttrs(zapAttrs(fs)...)
	return c.h.Handle(context.Background(), r)
}

func (c *slogCore) Sync() error { return nil }

// zapAttrs encodes zap fields with zap's own map encoder.
func zapAttrs(fs []zapcore.Field) []slog.Attr {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fs {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	return attrs
}
