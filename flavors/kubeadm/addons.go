package kubeadm

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// The addons of an upgrade. kubeadm rewrites, after the control
// plane's static pods and the cluster configuration, the addons:
// CoreDNS's Deployment and ConfigMap (its Corefile migrated) and
// kube-proxy's DaemonSet and ConfigMap, at the new version
// (phases/addons/dns EnsureDNSAddon, phases/addons/proxy
// EnsureProxyAddon). It does so in the addon phase of `kubeadm upgrade
// apply` and of `kubeadm upgrade node` alike, but only on the master
// that finds every other control plane upgraded already
// (cmd/kubeadm/app/cmd/phases/upgrade/{apply,node}/addons.go,
// shouldUpgradeAddons: upgrade.UnupgradedControlPlaneInstances): the
// last one upgraded, or a sole master. kubeadm's own rollback reverts
// only the static pod that failed (phases/upgrade/staticpods.go
// rollbackOldManifests), so a failure after that phase (the new
// kubelet's package, its restart, hamaster's health gate) would leave
// a kube-proxy newer than the apiserver it is rolled back to, which the
// version skew policy forbids. So UpgradeMaster's backup, on every
// master, saves the four objects (RenewCerts' does not: kubeadm certs
// renew changes none of them), and RollbackMaster puts back each one
// that changed since (on a master whose upgrade did not reach the
// phase, none did).

// upgradeAddons are the objects saved and restored, kind/name in
// kube-system; the backup names each kind-name.json (empty when the
// cluster had none: kube-proxy skipped, a CNI's own in its place).
const upgradeAddons = "daemonset/kube-proxy configmap/kube-proxy deployment/coredns configmap/coredns"

// controllerAnnotations are set by controllers, not by kubeadm: they are
// neither compared nor restored (the controller sets them again).
var controllerAnnotations = []string{
	"deployment.kubernetes.io/revision",
	"deprecated.daemonset.template.generation",
}

// AddonRestore is what puts the saved object back (both as `kubectl get
// -o json` prints them; current empty when the object is gone): the
// saved object less what the apiserver and the controllers set
// (resourceVersion, uid, timestamps, generation, managedFields, status,
// controllerAnnotations), to be replaced (or created) unconditionally;
// same when current already matches it, when nothing is to be done.
func AddonRestore(saved, current []byte) (want []byte, same bool, err error) {
	s, err := restorable(saved)
	if err != nil {
		return nil, false, fmt.Errorf("saved object: %w", err)
	}
	if len(bytes.TrimSpace(current)) > 0 {
		c, err := restorable(current)
		if err != nil {
			return nil, false, fmt.Errorf("current object: %w", err)
		}
		if reflect.DeepEqual(s, c) {
			return nil, true, nil
		}
	}
	want, err = json.Marshal(s)
	return want, false, err
}

// restorable is doc without what the apiserver and the controllers set.
func restorable(doc []byte) (map[string]any, error) {
	var o map[string]any
	if err := json.Unmarshal(doc, &o); err != nil {
		return nil, err
	}
	if o["kind"] == nil || o["metadata"] == nil {
		return nil, fmt.Errorf("not a Kubernetes object: no kind or metadata")
	}
	delete(o, "status")
	md, _ := o["metadata"].(map[string]any)
	for _, k := range []string{"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink"} {
		delete(md, k)
	}
	if a, _ := md["annotations"].(map[string]any); a != nil {
		for _, k := range controllerAnnotations {
			delete(a, k)
		}
		if len(a) == 0 {
			delete(md, "annotations")
		}
	}
	return o, nil
}

// addonsRead prints, for each of upgradeAddons in turn, two lines: the
// object as the backup ($1) holds it and as the cluster has it now, each
// base64 (an empty line for none), in one session. An object the backup
// does not hold is not read from the cluster: a backup without addons (a
// certificate renewal's, one of an earlier release) needs no API, whose
// admin.conf may be the expired one being renewed.
const addonsRead = `set -e
for o in ` + upgradeAddons + `; do
  f="$1/addons/${o%%/*}-${o#*/}.json"
  if [ -s "$f" ]; then
    base64 -w0 "$f"; echo
    c=$(` + adminKubectl + `-n kube-system get "$o" --ignore-not-found -o json)
    printf %s "$c" | base64 -w0; echo
  else
    echo; echo
  fi
done
`

// restoreAddons puts back, through master m's admin.conf, each of
// upgradeAddons that the backup on m holds and that changed since: a
// backup of an earlier release (no addons in it) restores none.
func (f *Flavor) restoreAddons(ctx context.Context, m string) error {
	out, stderr, err := f.m.RunOnMachine(providers.ReadOnly(ctx), m, "sh -c "+remote.ShellQuote(addonsRead)+" addons "+UpgradeBackupDir)
	if err != nil {
		return fmt.Errorf("read the addons on %s and in its upgrade backup: %w (stderr: %s)", m, err, tail(stderr))
	}
	objs := strings.Fields(upgradeAddons)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 2*len(objs) {
		return fmt.Errorf("read the addons on %s: %d lines, want %d", m, len(lines), 2*len(objs))
	}
	for i, o := range objs {
		saved, err1 := base64.StdEncoding.DecodeString(lines[2*i])
		cur, err2 := base64.StdEncoding.DecodeString(lines[2*i+1])
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("read kube-system/%s on %s: %w", o, m, err)
		}
		if len(bytes.TrimSpace(saved)) == 0 {
			continue // none when saved, or a backup of an earlier release
		}
		want, same, err := AddonRestore(saved, cur)
		if err != nil {
			return fmt.Errorf("restore kube-system/%s on %s: %w", o, m, err)
		}
		if same {
			continue
		}
		verb := "replace"
		if len(bytes.TrimSpace(cur)) == 0 {
			verb = "create"
		}
		kind, name, _ := strings.Cut(o, "/")
		tmp := "/var/lib/hamaster/restore-" + kind + "-" + name + ".json"
		if err := f.write(ctx, m, tmp, want, 0o600); err != nil {
			return err
		}
		if _, stderr, err := f.m.RunOnMachine(ctx, m, adminKubectl+verb+" -f "+tmp+"; rc=$?; rm -f "+tmp+"; exit $rc"); err != nil {
			return fmt.Errorf("restore kube-system/%s on %s: %w (stderr: %s)", o, m, err, tail(stderr))
		}
		f.log.Info("addon restored as it was before the upgrade", "object", "kube-system/"+o, "machine", m, "how", verb)
	}
	return nil
}
