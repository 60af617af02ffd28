package remote

// The SSH option keys (providers.Settings.Options) of the providers that
// reach their masters' etcd over SSH, gce and aws: the same keys in each,
// so that one set of hamaster's flags (--ssh-user, --ssh-key, ...)
// serves them.
const (
	// OptUser is the login name on the masters. With the aws provider it
	// turns the SSH path on (etcd reached through an SSH tunnel to a
	// master, never by routing to its private address); the gce provider
	// requires it.
	OptUser       = "ssh-user"
	OptKey        = "ssh-key"
	OptKnownHosts = "ssh-known-hosts"
	OptInsecure   = "ssh-insecure-skip-host-key-check"
	// OptPort is the masters' sshd port (default 22).
	OptPort = "ssh-port"
	// OptAgent is the SSH agent socket used when no key file is given.
	OptAgent = "ssh-agent-socket"
)

// ConfigFromOptions is the Config of addr from the SSH options in opts
// (OptUser, OptKey, OptAgent, OptKnownHosts, and OptInsecure "true"); the
// caller adds the rest (Logger, Via).
func ConfigFromOptions(opts map[string]string, addr string) Config {
	return Config{
		Addr: addr, User: opts[OptUser], KeyFile: opts[OptKey], AgentSocket: opts[OptAgent],
		KnownHostsFile: opts[OptKnownHosts], InsecureSkipHostKeyCheck: opts[OptInsecure] == "true",
	}
}
