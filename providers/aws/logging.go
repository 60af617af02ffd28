package aws

import (
	"context"
	"log/slog"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// requestLogging logs every SDK call at debug: service, operation, how long
// it took (retries included) and its error. Bodies and headers are not
// logged (the SDK's own ClientLogMode would print signed headers).
func requestLogging(log *slog.Logger) []func(*middleware.Stack) error {
	return []func(*middleware.Stack) error{func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("hamaster-request-log",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				start := time.Now()
				out, md, err := next.HandleInitialize(ctx, in)
				attrs := []any{"service", awsmiddleware.GetServiceID(ctx), "operation", awsmiddleware.GetOperationName(ctx), "duration", time.Since(start)}
				if err != nil {
					attrs = append(attrs, "error", err)
				}
				log.DebugContext(ctx, "aws request", attrs...)
				return out, md, err
			}), middleware.After)
	}}
}
