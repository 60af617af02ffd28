package gcetest_test

import (
	"os"
	"testing"

	"github.com/hamaster/hamaster/testbed/local/localtest"
)

// TestMain removes the binaries localtest built for these tests.
func TestMain(m *testing.M) { os.Exit(localtest.Main(m)) }
