// Package kubeadm is the flavor of masters built by kubeadm (issue 23):
// stacked etcd, static pods under /etc/kubernetes/manifests, the cluster
// CA and its keys under /etc/kubernetes/pki, the cluster's configuration
// in kube-system/kubeadm-config. hamaster drives the real kubeadm on the
// masters over SSH, as an operator would, and does itself only what
// kubeadm leaves to the operator:
//   - a new master joins with `kubeadm join --control-plane` (Join): a
//     bootstrap token and certificate key hamaster makes (NewToken,
//     NewCertificateKey) and gives to `kubeadm token create` and `kubeadm
//     init phase upload-certs --certificate-key` on a healthy master, and
//     the CA pinned by its hash (CACertHash);
//   - converting a single master to HA (kubeadm#1955: kubeadm has no
//     command to change controlPlaneEndpoint): kubeadm-config's
//     ClusterConfiguration rewritten (SetControlPlaneEndpoint), each
//     master's apiserver certificate reissued by `kubeadm init phase
//     certs apiserver` from it after the old pair is moved aside (kubeadm
//     keeps an existing certificate as it is), and the kubeconfigs that
//     point at the endpoint moved (EndpointKubeconfigs,
//     SetKubeconfigServer).
//   - upgrading a master in place (UpgradeMaster: kubeadm upgrade apply
//     on the first master, kubeadm upgrade node on the others) with a
//     backup saved first and restored whole by RollbackMaster, and kubeadm
//     stopped within seconds when the new kube-apiserver cannot start,
//     where kubeadm itself waits 5 minutes and reverts one component
//     (kubeadm#2927, #2061).
//
// What is here so far is the format's pure part, each piece checked
// against the real kubeadm of every pinned version (testdata/README.md,
// realkubeadm_test.go); the flavor itself (flavors.Flavor, registered in
// flavors/registry) is built on it with the test bed's kubeadm masters.
package kubeadm
