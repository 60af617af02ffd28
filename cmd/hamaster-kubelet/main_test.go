package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
)

func TestRunVersionAndUsage(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "version flag", args: []string{"--version", "--hamaster-version=v1.33.13", "--container-runtime-endpoint=unix:///x"}, wantCode: errkind.ExitOK, wantStdout: "Kubernetes v1.33.13\n"},
		{name: "version from env", args: []string{"--version"}, env: map[string]string{"HAMASTER_KUBELET_VERSION": "v1.34.4"}, wantCode: errkind.ExitOK, wantStdout: "Kubernetes v1.34.4\n"},
		{name: "no version", args: []string{"--version"}, wantCode: errkind.ExitUsage, wantStderr: "no version"},
		{name: "positional", args: []string{"serve"}, wantCode: errkind.ExitUsage, wantStderr: "unexpected argument"},
		{name: "bad log level", args: []string{"--hamaster-log-level=loud"}, wantCode: errkind.ExitUsage, wantStderr: "--hamaster-log-level"},
		{name: "no config", args: []string{"--hamaster-version=v1.33.13", "--kubeconfig=/k"}, wantCode: errkind.ExitUsage, wantStderr: "--config is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), tc.args, func(k string) string { return tc.env[k] }, &out, &errb)
			if code != tc.wantCode || out.String() != tc.wantStdout || !strings.Contains(errb.String(), tc.wantStderr) {
				t.Errorf("run(%q) = %d, stdout %q, stderr %q; want %d, %q, stderr containing %q", tc.args, code, out.String(), errb.String(), tc.wantCode, tc.wantStdout, tc.wantStderr)
			}
		})
	}
}
