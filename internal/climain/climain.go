// Package climain is the main function every command of the project
// shares: its body runs with a context that ends at SIGINT or SIGTERM,
// and the process exits with the code the body returns.
package climain

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Run runs body with a context that ends at SIGINT or SIGTERM, stops
// listening for them once body returns, and exits the process with
// body's code. Only a main function calls it.
func Run(body func(ctx context.Context) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := body(ctx)
	stop()
	os.Exit(code)
}
