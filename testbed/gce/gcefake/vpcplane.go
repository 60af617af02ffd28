package gcefake

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/hamaster/hamaster/dataplane/vm"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/testbed/kubeadmhost"
	"github.com/hamaster/hamaster/testbed/vpc"
)

// VPCOptions put the fake's instances in a network-namespace VPC
// (testbed/vpc) as kube-up masters: each instance is a VM namespace on
// the VPC's subnet running sshd on port 22 and, when its metadata holds a
// kube-env, `hamaster-node kube-up-master` booted from the metadata items
// kube-env and kube-master-certs as configure-helper.sh boots a master.
// External addresses (access configs, the static IP) are the VPC's
// external range: the only addresses the operator's namespace reaches.
type VPCOptions struct {
	// Net is the VPC; the caller makes it and closes it after the fake.
	Net *vpc.VPC
	// SSHD is OpenSSH's server (default /usr/sbin/sshd).
	SSHD string
	// KnownHosts is the known_hosts file the fake keeps: every VM's
	// current external address with its host key, rewritten whenever an
	// access config changes (default Options.Dir/known_hosts).
	KnownHosts string
	// EtcdUnsafeNoFsync boots the masters' etcd without fsync (speed; a
	// crash of the machine loses their data).
	EtcdUnsafeNoFsync bool
	// ResolveTimeout bounds a master's lookup of its own hostname
	// (default 20s; configure-helper.sh waits 300s).
	ResolveTimeout time.Duration
	// Kubeadm, when set, makes VMs booted from its images kubeadm hosts
	// (KubeadmOptions) instead of kube-up masters.
	Kubeadm *KubeadmOptions
}

// SSHPort is the port the VMs' sshd listens on.
const SSHPort = 22

// MetadataSSHKeys is the metadata key (project or instance) holding SSH
// public keys in GCE's format, one per line: "USER:ssh-ed25519 AAAA... comment".
const MetadataSSHKeys = "ssh-keys"

// MetadataBlockProjectSSHKeys on an instance ("true") ignores the
// project's ssh-keys.
const MetadataBlockProjectSSHKeys = "block-project-ssh-keys"

// vpcVM is an instance's namespace and its processes.
type vpcVM struct {
	name, ns string
	dir      string
	hostKey  ssh.PublicKey
	sshd     *vm.Process
	node     *vm.Process
	external netip.Addr // bound now
	// kubeadm is the version of the kubeadm image the VM boots from
	// (KubeadmOptions), "" for none; kubelet its kubelet service.
	kubeadm string
	kubelet *kubeadmhost.Service
}

// KnownHostsFile is the known_hosts file the fake keeps (VPC mode).
func (s *Server) KnownHostsFile() string {
	if s.o.VPC == nil {
		return ""
	}
	return s.o.VPC.KnownHosts
}

// vpcAllocIP returns the lowest free address of the subnet (internal) or
// the external range. GCE keeps the subnet's network, gateway and last
// two addresses. Called with s.mu held.
func (s *Server) vpcAllocIP(internal bool) (string, *apiError) {
	v := s.o.VPC.Net
	p := v.External()
	if internal {
		p = v.Subnet()
	}
	for a := p.Addr().Next(); p.Contains(a); a = a.Next() {
		if internal && (a == v.Gateway() || !p.Contains(a.Next()) || !p.Contains(a.Next().Next())) {
			continue
		}
		if !internal && !v.ExternalUsable(a) {
			continue
		}
		ip := a.String()
		if len(s.addressesWithIP(ip)) == 0 && len(s.addressUsers(ip)) == 0 {
			return ip, nil
		}
	}
	return "", errf(403, "IP_SPACE_EXHAUSTED", "no free address left in %v", p)
}

// checkInternal refuses an INTERNAL address outside the subnetwork's
// range ("internal addresses reserved from the subnetwork's range").
func (s *Server) checkInternal(ip string) *apiError {
	if s.o.VPC == nil {
		return nil
	}
	a, err := netip.ParseAddr(ip)
	if err != nil || !s.o.VPC.Net.Subnet().Contains(a) || a == s.o.VPC.Net.Gateway() {
		return errf(400, "invalid", "Invalid value for field 'resource.address': '%s'. Requested internal IP is outside the subnetwork CIDR range %v.", ip, s.o.VPC.Net.Subnet())
	}
	return nil
}

// checkExternal refuses an EXTERNAL address the VPC cannot route (GCE
// refuses to reserve an address it does not own for the project).
func (s *Server) checkExternal(ip string) *apiError {
	if s.o.VPC == nil {
		return nil
	}
	if a, err := netip.ParseAddr(ip); err != nil || !s.o.VPC.Net.ExternalUsable(a) {
		return errf(400, "invalid", "Invalid value for field 'resource.address': '%s'. Specified IP address is not available to the project (the fake's external range is %v).", ip, s.o.VPC.Net.External())
	}
	return nil
}

// bootVM boots an instance in VPC mode: its namespace, sshd, its external
// address, then the kube-up master when its metadata has a kube-env. The
// instance is RUNNING once its processes started, as GCE reports a VM
// RUNNING while its startup script still runs: a master that cannot boot
// shows it in its serial port output, not in the insert operation.
func (s *Server) bootVM(key string) *apiError {
	s.mu.Lock()
	in := s.findByLink(key)
	if in == nil || s.closed {
		s.mu.Unlock()
		return nil
	}
	name := str(in, "name")
	items := metadataItems(in)
	kubeadmVersion := s.kubeadmVersion(in)
	nic := obj(list(in, "networkInterfaces")[0])
	internal := str(nic, "networkIP")
	disk := ""
	for _, d := range list(in, "disks") {
		if str(obj(d), "deviceName") == "master-pd" {
			disk = relOf(str(obj(d), "source"))
		}
	}
	s.mu.Unlock()
	s.stopNode(key)
	addr, err := netip.ParseAddr(internal)
	if err != nil {
		return errf(500, "internalError", "instance %s: networkIP %q: %v", name, internal, err)
	}
	v := s.o.VPC.Net
	dir := s.instDir(key)
	if err := os.MkdirAll(filepath.Join(dir, "ssh"), 0o700); err != nil {
		return errf(500, "internalError", "%v", err)
	}
	hostKey, err := vpc.HostKey(filepath.Join(dir, "ssh", "ssh_host_ed25519_key"), "gcefake host key")
	if err != nil {
		return errf(500, "internalError", "instance %s: %v", name, err)
	}
	vmh, err := v.AddVM(s.closeCtx, name, addr)
	if err != nil {
		return errf(500, "internalError", "instance %s: %v", name, err)
	}
	x := &vpcVM{name: name, ns: vmh.NS, dir: dir, hostKey: hostKey, kubeadm: kubeadmVersion}
	s.mu.Lock()
	s.vms[key] = x
	s.mu.Unlock()
	if err := s.writeSSHAccess(key); err != nil {
		return errf(500, "internalError", "instance %s: %v", name, err)
	}
	if x.kubeadm != "" {
		// From the mount points' check to the sshd's mounts over them, no
		// other test bed removes one.
		unlock, err := kubeadmhost.LockMounts(s.closeCtx)
		if err != nil {
			return errf(500, "internalError", "instance %s: %v", name, err)
		}
		_, err = kubeadmhost.EnsureMountPoints(kubeadmhost.Mounts())
		if err != nil {
			unlock()
			return errf(500, "internalError", "instance %s: %v", name, err)
		}
		aerr := s.startSSHD(x)
		unlock()
		if aerr != nil {
			return aerr
		}
		if aerr := s.installKubeadm(x); aerr != nil {
			return aerr
		}
	} else if aerr := s.startSSHD(x); aerr != nil {
		return aerr
	}
	if env, ok := items[kubeenv.KeyEnv]; ok {
		if aerr := s.startKubeUpMaster(key, x, env, items[kubeenv.KeyCerts], disk); aerr != nil {
			return aerr
		}
	}
	return s.bindNAT(key)
}

// startSSHD starts the VM's sshd (in its namespace, on port 22) and waits
// until it listens.
func (s *Server) startSSHD(x *vpcVM) *apiError {
	sshDir := filepath.Join(x.dir, "ssh")
	// The guest agent writes each ssh-keys user's keys into that user's
	// authorized_keys: WriteSSHDConfig names one file per user.
	cfg, err := vpc.WriteSSHDConfig(sshDir, SSHPort)
	if err != nil {
		return errf(500, "internalError", "%v", err)
	}
	logPath := filepath.Join(sshDir, "sshd.log")
	_ = os.Remove(logPath)
	bin, args, aerr := s.sshdCommand(x, cfg)
	if aerr != nil {
		return aerr
	}
	p, aerr := s.startIn(x.name, bin, args, logPath)
	if aerr != nil {
		return aerr
	}
	s.mu.Lock()
	x.sshd = p
	s.mu.Unlock()
	return s.pollUntil(30*time.Second, "sshd of "+x.name+" to listen", func() (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("sshd exited: %v\n%s", p.ExitReason(), p.Tail(10))
		}
		b, _ := os.ReadFile(logPath)
		return bytes.Contains(b, []byte("Server listening on")), nil
	})
}

func (s *Server) sshd() string {
	if s.o.VPC.SSHD != "" {
		return s.o.VPC.SSHD
	}
	return "/usr/sbin/sshd"
}

// startIn starts bin inside holder's namespace ("" = the router) as a
// vm.Process logging to logPath.
func (s *Server) startIn(holder, bin string, args []string, logPath string) (*vm.Process, *apiError) {
	cmd, err := s.o.VPC.Net.Command(s.closeCtx, holder, bin, args...)
	if err != nil {
		return nil, errf(500, "internalError", "%v", err)
	}
	p, err := vm.StartTied(cmd.Path, cmd.Args[1:], logPath)
	if err != nil {
		return nil, errf(500, "internalError", "%v", err)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		p.Stop()
		return nil, errf(503, "backendError", "the fake is closing")
	}
	return p, nil
}

// startKubeUpMaster writes the metadata items where the boot reads them
// and starts `hamaster-node kube-up-master` in the VM; its output is the
// instance's serial port output.
func (s *Server) startKubeUpMaster(key string, x *vpcVM, env, masterCerts, disk string) *apiError {
	md := filepath.Join(x.dir, "metadata")
	if err := os.MkdirAll(md, 0o700); err != nil {
		return errf(500, "internalError", "%v", err)
	}
	for f, v := range map[string]string{"kube-env": env, "kube-master-certs": masterCerts} {
		if err := os.WriteFile(filepath.Join(md, f), []byte(v), 0o600); err != nil {
			return errf(500, "internalError", "%v", err)
		}
	}
	// mount-master-pd: the data disk (device master-pd) at
	// /mnt/disks/master-pd; without one the master keeps its state on
	// the boot disk.
	diskDir := filepath.Join(x.dir, "boot-disk")
	if disk != "" {
		diskDir = filepath.Join(s.o.Dir, "disks", strings.ReplaceAll(disk, "/", "_"))
	}
	rt := s.o.VPC.ResolveTimeout
	if rt == 0 {
		rt = 20 * time.Second
	}
	status := filepath.Join(x.dir, "status.json")
	_ = os.Remove(status)
	args := []string{"kube-up-master", "--kube-env", filepath.Join(md, "kube-env"), "--kube-master-certs", filepath.Join(md, "kube-master-certs"),
		"--disk", diskDir, "--hostname", x.name, "--status-file", status, "--pid-file", filepath.Join(x.dir, "node.pid"),
		"--resolve-timeout", rt.String()}
	if s.o.VPC.EtcdUnsafeNoFsync {
		args = append(args, "--etcd-unsafe-no-fsync")
	}
	// configure.sh downloads the release tarballs kube-env names: those
	// in the fake's storage are downloadable (see storagePath).
	if kv, err := kubeenv.Parse(env); err == nil {
		for _, k := range []string{kubeenv.ServerBinaryTarURL, kubeenv.KubeManifestsTarURL} {
			if f, ok := s.downloadFile(kv[k]); ok {
				args = append(args, "--download", kv[k]+"="+f)
			}
		}
	}
	serial := filepath.Join(x.dir, "serial.log")
	p, aerr := s.startIn(x.name, s.o.NodeBinary, args, serial)
	if aerr != nil {
		return aerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	x.node = p
	s.nodes[key] = &nodeProc{Process: p, dir: x.dir, status: status, addr: "", caFile: filepath.Join(diskDir, "srv", "kubernetes", "pki", "ca.crt")}
	return nil
}

// SerialPortOutput is what instances.getSerialPortOutput answers: the
// master's boot log, and, once its boot process has exited, the line
// GCE's metadata script runner writes for a failed startup script.
func (s *Server) SerialPortOutput(zone, instance string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.res["zones/"+zone+"/instances"][instance]
	if in == nil {
		return ""
	}
	return s.serialOutput("zones/"+zone, in)
}

// vpcBindNAT gives the VM exactly its access config's address and
// rewrites known_hosts.
func (s *Server) vpcBindNAT(key, nat string) *apiError {
	s.mu.Lock()
	x := s.vms[key]
	s.mu.Unlock()
	if x == nil {
		return nil
	}
	v := s.o.VPC.Net
	var want netip.Addr
	if nat != "" {
		a, err := netip.ParseAddr(nat)
		if err != nil || !v.ExternalUsable(a) {
			return errf(500, "internalError", "instance %s: natIP %q is not in the VPC's external range %v", x.name, nat, v.External())
		}
		want = a
	}
	if x.external != want {
		if x.external.IsValid() && s.extOwner(x.external) == key {
			if err := v.ClearExternal(s.closeCtx, x.external); err != nil {
				return errf(500, "internalError", "%v", err)
			}
			s.setExtOwner(x.external, "")
		}
		if want.IsValid() {
			if err := v.SetExternal(s.closeCtx, want, x.name); err != nil {
				return errf(500, "internalError", "%v", err)
			}
			s.setExtOwner(want, key)
		}
		s.mu.Lock()
		x.external = want
		s.mu.Unlock()
	}
	if err := s.writeKnownHosts(); err != nil {
		return errf(500, "internalError", "%v", err)
	}
	return nil
}

func (s *Server) extOwner(a netip.Addr) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.extOwners[a]
}

func (s *Server) setExtOwner(a netip.Addr, owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if owner == "" {
		delete(s.extOwners, a)
	} else {
		s.extOwners[a] = owner
	}
}

// stopVM stops the VM's processes (sshd's per-connection children too)
// and deletes its namespace and external address.
func (s *Server) stopVM(key string) {
	s.mu.Lock()
	x := s.vms[key]
	delete(s.vms, key)
	s.mu.Unlock()
	if x == nil {
		return
	}
	if x.kubeadm != "" {
		s.stopKubeadmVM(x)
	}
	vpc.StopProcesses(x.node, x.sshd)
	if x.kubeadm != "" {
		killNamespace(x.ns)
		defer s.releaseMountPoints()
	}
	// Not s.closeCtx: Close cancels it before stopping the VMs.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if x.external.IsValid() && s.extOwner(x.external) == key {
		_ = s.o.VPC.Net.ClearExternal(ctx, x.external)
		s.setExtOwner(x.external, "")
	}
	if err := s.o.VPC.Net.RemoveVM(ctx, x.name); err != nil {
		s.o.Logger.Warn("gcefake: remove VM", "vm", x.name, "err", err)
	}
	if err := s.writeKnownHosts(); err != nil {
		s.o.Logger.Warn("gcefake: known_hosts", "err", err)
	}
}

// writeKnownHosts writes every VM's external address with its host key
// (atomically: a reader sees the old or the new file).
func (s *Server) writeKnownHosts() error {
	s.mu.Lock()
	var lines []string
	for _, x := range s.vms {
		if x.external.IsValid() {
			lines = append(lines, knownhosts.Line([]string{knownhosts.Normalize(x.external.String() + ":" + strconv.Itoa(SSHPort))}, x.hostKey))
		}
	}
	path := s.o.VPC.KnownHosts
	s.mu.Unlock()
	sort.Strings(lines)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("known_hosts: %w", err)
	}
	return os.Rename(tmp, path)
}

// writeSSHAccess does what GCE's guest agent does with ssh-keys: the
// project's keys (unless the instance blocks them) and the instance's,
// each user's in their own authorized_keys; a user the machine lacks is
// added to the VM's passwd (/etc/netns/<ns>/passwd, which `ip netns
// exec` mounts over /etc/passwd) as a sudoer would be, with uid 0 since
// the fake has no sudo.
func (s *Server) writeSSHAccess(key string) error {
	s.mu.Lock()
	x := s.vms[key]
	in := s.findByLink(key)
	if x == nil || in == nil {
		s.mu.Unlock()
		return nil
	}
	items := metadataItems(in)
	text := items[MetadataSSHKeys]
	if !strings.EqualFold(strings.TrimSpace(items[MetadataBlockProjectSSHKeys]), "true") {
		for _, it := range list(s.projectMD, "items") {
			if str(obj(it), "key") == MetadataSSHKeys {
				text = str(obj(it), "value") + "\n" + text
			}
		}
	}
	s.mu.Unlock()
	keys := ParseSSHKeys(text)
	dir := filepath.Join(x.dir, "ssh", "authorized_keys")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var users []string
	for u, ks := range keys {
		users = append(users, u)
		if err := os.WriteFile(filepath.Join(dir, u), []byte(strings.Join(ks, "\n")+"\n"), 0o600); err != nil {
			return err
		}
	}
	sort.Strings(users)
	host, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return err
	}
	have := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(host))
	for sc.Scan() {
		u, _, _ := strings.Cut(sc.Text(), ":")
		have[u] = true
	}
	pw := string(host)
	if !strings.HasSuffix(pw, "\n") {
		pw += "\n"
	}
	for _, u := range users {
		if !have[u] {
			pw += u + ":x:0:0:" + u + " (ssh-keys):/root:/bin/sh\n"
		}
	}
	etc := filepath.Join("/etc/netns", x.ns)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	// In place: a running sshd's mount sees the new content.
	f, err := os.OpenFile(filepath.Join(etc, "passwd"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(pw)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ParseSSHKeys reads GCE's ssh-keys metadata: "USER:KEY" per line (KEY
// is an authorized_keys line); blank and malformed lines are skipped.
func ParseSSHKeys(text string) map[string][]string {
	out := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		u, k, ok := strings.Cut(line, ":")
		if !ok || u == "" || strings.ContainsAny(u, " /") {
			continue
		}
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil {
			continue
		}
		out[u] = append(out[u], strings.TrimSpace(k))
	}
	return out
}

// metadataItems are an instance's metadata items by key. Called with s.mu
// held.
func metadataItems(in map[string]any) map[string]string {
	items := map[string]string{}
	for _, it := range list(obj(in["metadata"]), "items") {
		items[str(obj(it), "key")] = str(obj(it), "value")
	}
	return items
}

// serialOutput is SerialPortOutput for an instance resource. Called with
// s.mu held.
func (s *Server) serialOutput(scope string, in map[string]any) string {
	x := s.vms[scope+"/instances/"+str(in, "name")]
	if x == nil {
		return ""
	}
	b, _ := os.ReadFile(filepath.Join(x.dir, "serial.log"))
	if x.node != nil && !x.node.Running() {
		b = append(b, fmt.Sprintf("google_metadata_script_runner: startup-script exit status: %s\n", x.node.ExitReason())...)
	}
	return string(b)
}

// project serves projects.get and projects.setCommonInstanceMetadata
// (where `gcloud compute ssh` puts the operator's key). Called with s.mu
// held.
func (s *Server) project(r *request, verb string) (any, *apiError) {
	switch verb {
	case "get":
		return map[string]any{"kind": "compute#project", "name": s.o.Project, "id": "1000",
			"commonInstanceMetadata": deepCopy(s.projectMD), "selfLink": s.link("")}, nil
	case "setCommonInstanceMetadata":
		if fp := str(r.body, "fingerprint"); fp != "" && fp != str(s.projectMD, "fingerprint") {
			return nil, errf(412, "conditionNotMet", "Supplied fingerprint does not match current metadata fingerprint.")
		}
		items := deepCopy(list(r.body, "items"))
		return s.newOp(r, "global", "", "setMetadata", func() *apiError {
			s.mu.Lock()
			s.projectMD = map[string]any{"kind": "compute#metadata", "fingerprint": randHex(8), "items": items}
			var keys []string
			for k := range s.vms {
				keys = append(keys, k)
			}
			s.mu.Unlock()
			for _, k := range keys {
				if err := s.writeSSHAccess(k); err != nil {
					return errf(500, "internalError", "ssh-keys: %v", err)
				}
			}
			return nil
		}), nil
	}
	return nil, errf(501, "notImplemented", "compute.projects.%s is not implemented by the fake", verb)
}
