package gcefake

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/dataplane/lbproxy"
	"github.com/hamaster/hamaster/dataplane/vm"
)

// APIServerPort is the port the data plane's masters serve the apiserver
// on: kube-up's (cluster/gce/gci/configure-kubeapiserver.sh
// start-kube-apiserver: --secure-port=443).
const APIServerPort = 443

type nodeProc struct {
	*vm.Process
	dir    string
	status string
	addr   string
	caFile string // the CA that signed its apiserver's certificate
}

type lbProc struct {
	*vm.Process
	cfgPath, status string
	bs              string          // backend service rel path
	cfg             lbproxy.Config  // last written
	names           map[string]bool // targets by instance rel path
}

// pollUntil calls f every 20 ms until it is done or fails, or d passes.
func (s *Server) pollUntil(d time.Duration, what string, f func() (bool, error)) *apiError {
	ctx, cancel := context.WithTimeout(s.closeCtx, d)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := f()
		if err != nil {
			return errf(500, "internalError", "%s: %v", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return errf(500, "internalError", "timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

func (s *Server) instDir(key string) string {
	return filepath.Join(s.o.Dir, "instances", strings.ReplaceAll(relOf(key), "/", "_"))
}

// bootNode boots the instance as a kube-up master in the VPC (bootVM);
// without a data plane nothing boots.
func (s *Server) bootNode(key string) *apiError {
	if s.o.NodeBinary == "" {
		return nil
	}
	return s.bootVM(key)
}

func (s *Server) stopNode(key string) {
	s.mu.Lock()
	n := s.nodes[key]
	delete(s.nodes, key)
	s.mu.Unlock()
	if n != nil {
		n.Stop()
	}
	if s.o.VPC != nil {
		s.stopVM(key)
	}
}

// bindNAT moves the instance's external address to its access config's
// natIP in the VPC.
func (s *Server) bindNAT(key string) *apiError {
	if s.o.VPC == nil {
		return nil
	}
	s.mu.Lock()
	in := s.findByLink(key)
	nat := ""
	if in != nil {
		for _, ac := range list(obj(list(in, "networkInterfaces")[0]), "accessConfigs") {
			nat = str(obj(ac), "natIP")
		}
	}
	s.mu.Unlock()
	return s.vpcBindNAT(key, nat)
}

// syncLBs makes each forwarding rule's hamaster-node lb process match its
// backend service: targets are the members of the backends' instance
// groups; an instance removed from a group keeps draining (no new
// connections) until it is added again or deleted.
func (s *Server) syncLBs() *apiError {
	if s.o.NodeBinary == "" {
		return nil
	}
	type want struct {
		key, bs string
		cfg     lbproxy.Config
		names   map[string]bool
	}
	var wants []want
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	for collKey, c := range s.res {
		if !strings.HasSuffix(collKey, "/forwardingRules") {
			continue
		}
		for name, fr := range c {
			key := collKey + "/" + name
			bs := s.findByLink(str(fr, "backendService"))
			if bs == nil {
				continue
			}
			port := str(fr, "portRange")
			if ps := list(fr, "ports"); len(ps) > 0 {
				port, _ = ps[0].(string)
			}
			port, _, _ = strings.Cut(port, "-")
			if port == "" {
				port = strconv.Itoa(APIServerPort)
			}
			cfg := lbproxy.Config{Listen: net.JoinHostPort(str(fr, "IPAddress"), port)}
			dir := filepath.Join(s.o.Dir, "lb", strings.ReplaceAll(key, "/", "_"))
			cfg.StatusFile = filepath.Join(dir, "status.json")
			cfg.PIDFile = filepath.Join(dir, "lb.pid")
			cfg.Health = lbproxy.HealthConfig{Path: "/", Interval: lbproxy.Duration{Duration: s.o.HealthInterval}, Timeout: lbproxy.Duration{Duration: time.Second}, HealthyThreshold: 1, UnhealthyThreshold: 2}
			if s.o.VPC != nil {
				// MASTER_CERT names kubernetes.*, the static IP and
				// MASTER_NAME, not a master's internal address.
				cfg.Health.ServerName = "kubernetes"
			}
			if hcs := list(bs, "healthChecks"); len(hcs) > 0 {
				if hc := s.findByLink(hcs[0].(string)); hc != nil {
					if p := str(obj(hc["httpsHealthCheck"]), "requestPath"); p != "" {
						cfg.Health.Path = p
					}
					if v, ok := hc["healthyThreshold"].(float64); ok && v > 0 {
						cfg.Health.HealthyThreshold = int(v)
					}
					if v, ok := hc["unhealthyThreshold"].(float64); ok && v > 0 {
						cfg.Health.UnhealthyThreshold = int(v)
					}
				}
			}
			hcPort := APIServerPort
			if hcs := list(bs, "healthChecks"); len(hcs) > 0 {
				if hc := s.findByLink(hcs[0].(string)); hc != nil {
					if v, ok := obj(hc["httpsHealthCheck"])["port"].(float64); ok && v > 0 {
						hcPort = int(v)
					}
				}
			}
			names := map[string]bool{}
			if s.draining[key] == nil {
				s.draining[key] = map[string]string{}
			}
			for _, b := range list(bs, "backends") {
				g := s.findByLink(str(obj(b), "group"))
				for _, m := range list(g, "_members") {
					in := s.findByLink(m.(string))
					if in == nil {
						continue
					}
					ip := str(obj(list(in, "networkInterfaces")[0]), "networkIP")
					// A passthrough Network Load Balancer keeps the
					// packet's destination port: the backends serve the
					// forwarding rule's port (443 on kube-up's masters,
					// 6443 on kubeadm's).
					cfg.Targets = append(cfg.Targets, lbproxy.Target{Name: m.(string), Address: net.JoinHostPort(ip, port), ProbeBlocked: s.probeBlocked(in, hcPort)})
					names[m.(string)] = true
					delete(s.draining[key], m.(string))
					if n := s.nodes[m.(string)]; n != nil && cfg.Health.CAFile == "" {
						cfg.Health.CAFile = n.caFile
					}
					if x := s.vms[m.(string)]; x != nil && x.kubeadm != "" && cfg.Health.CAFile == "" {
						// kubeadm's cluster CA, in the VM's own
						// /etc/kubernetes/pki once kubeadm made it.
						if ca := x.kubeadmCA(); ca != "" {
							cfg.Health.CAFile = ca
						}
					}
				}
			}
			if old := s.lbs[key]; old != nil {
				for _, t := range old.cfg.Targets {
					if !names[t.Name] && s.findByLink(t.Name) != nil {
						s.draining[key][t.Name] = t.Address
					}
				}
				if cfg.Health.CAFile == "" {
					cfg.Health.CAFile = old.cfg.Health.CAFile
				}
			}
			for n, addr := range s.draining[key] {
				cfg.Targets = append(cfg.Targets, lbproxy.Target{Name: n, Address: addr, Draining: true})
			}
			sort.Slice(cfg.Targets, func(i, j int) bool { return cfg.Targets[i].Name < cfg.Targets[j].Name })
			if cfg.Health.CAFile == "" {
				for _, n := range s.nodes {
					cfg.Health.CAFile = n.caFile
					break
				}
			}
			wants = append(wants, want{key: key, bs: relOf(str(bs, "selfLink")), cfg: cfg, names: names})
		}
	}
	s.mu.Unlock()
	for _, w := range wants {
		if aerr := s.applyLB(w.key, w.bs, w.cfg, w.names); aerr != nil {
			return aerr
		}
	}
	return nil
}

func (s *Server) applyLB(key, bs string, cfg lbproxy.Config, names map[string]bool) *apiError {
	s.mu.Lock()
	l := s.lbs[key]
	s.mu.Unlock()
	dir := filepath.Dir(cfg.StatusFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return errf(500, "internalError", "%v", err)
	}
	cfgPath := filepath.Join(dir, "config.json")
	if cfg.Health.CAFile == "" {
		return nil // no instance booted yet: nothing to check with
	}
	if err := lbproxy.WriteConfig(cfgPath, cfg); err != nil {
		return errf(500, "internalError", "%v", err)
	}
	if l != nil && l.Running() {
		s.mu.Lock()
		l.cfg, l.names = cfg, names
		s.mu.Unlock()
		l.Signal(syscall.SIGHUP)
		return nil
	}
	_ = os.Remove(cfg.StatusFile)
	var p *vm.Process
	if s.o.VPC != nil {
		// The forwarding rule's address is the router's; the LB runs
		// there and reaches the masters' internal addresses.
		host, _, _ := net.SplitHostPort(cfg.Listen)
		a, err := netip.ParseAddr(host)
		if err != nil || !s.o.VPC.Net.ExternalUsable(a) {
			return errf(500, "internalError", "forwarding rule address %s is not in the VPC's external range", host)
		}
		if err := s.o.VPC.Net.SetExternal(s.closeCtx, a, ""); err != nil {
			return errf(500, "internalError", "%v", err)
		}
		s.setExtOwner(a, "lb:"+key)
		var aerr *apiError
		if p, aerr = s.startIn("", s.o.NodeBinary, []string{"lb", "--config", cfgPath}, filepath.Join(dir, "lb.log")); aerr != nil {
			return aerr
		}
	} else {
		var err error
		if p, err = vm.Start(s.o.NodeBinary, []string{"lb", "--config", cfgPath}, filepath.Join(dir, "lb.log")); err != nil {
			return errf(500, "internalError", "%v", err)
		}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		p.Stop()
		return nil
	}
	s.lbs[key] = &lbProc{Process: p, cfgPath: cfgPath, status: cfg.StatusFile, bs: bs, cfg: cfg, names: names}
	s.mu.Unlock()
	return s.pollUntil(30*time.Second, "the forwarding rule to serve "+cfg.Listen, func() (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("hamaster-node lb exited: %v\n%s", p.ExitReason(), p.Tail(10))
		}
		st, err := lbproxy.ReadStatus(cfg.StatusFile)
		return err == nil && st.Serving, nil
	})
}

func (s *Server) stopLB(key string) {
	s.mu.Lock()
	l := s.lbs[key]
	delete(s.lbs, key)
	delete(s.draining, key)
	s.mu.Unlock()
	if l != nil {
		l.Stop()
	}
	if s.o.VPC != nil && l != nil {
		host, _, _ := net.SplitHostPort(l.cfg.Listen)
		if a, err := netip.ParseAddr(host); err == nil && s.extOwner(a) == "lb:"+key {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = s.o.VPC.Net.ClearExternal(ctx, a)
			s.setExtOwner(a, "")
		}
	}
}

// lbHealth is the health the LB processes in front of backend service bs
// report, by instance rel path. Called with s.mu held.
func (s *Server) lbHealth(bs string) map[string]bool {
	out := map[string]bool{}
	for _, l := range s.lbs {
		if l.bs != bs || !l.Running() {
			continue
		}
		st, err := lbproxy.ReadStatus(l.status)
		if err != nil {
			continue
		}
		for _, t := range st.Targets {
			if l.names[t.Name] && t.Healthy && !t.Draining {
				out[t.Name] = true
			}
		}
	}
	return out
}
