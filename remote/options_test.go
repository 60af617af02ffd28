package remote

import "testing"

func TestConfigFromOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts map[string]string
		want Config
	}{
		{
			name: "none",
			want: Config{Addr: "m:22"},
		},
		{
			name: "all",
			opts: map[string]string{OptUser: "u", OptKey: "/k", OptAgent: "/a", OptKnownHosts: "/kh", OptInsecure: "true", OptPort: "2222"},
			want: Config{Addr: "m:22", User: "u", KeyFile: "/k", AgentSocket: "/a", KnownHostsFile: "/kh", InsecureSkipHostKeyCheck: true},
		},
		{
			name: "insecure only when true",
			opts: map[string]string{OptInsecure: "yes"},
			want: Config{Addr: "m:22"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ConfigFromOptions(tc.opts, "m:22"); got != tc.want {
				t.Errorf("ConfigFromOptions = %+v; want %+v", got, tc.want)
			}
		})
	}
}
